"""An engine that fails mid-reply: which one it was, and what the agent says instead.

A kiosk must not go silent for good because one model request or one synthesis broke. The
Responder tags an engine's exception with its stage where it calls the engine (`tagged`), so a
reply that fails is reported by stage (`ReplyFailed`); `FALLBACK_LINE` is said in place of the
rest of the reply.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")

FALLBACK_LINE = "Sorry, something went wrong. Could you say that again?"
"""Said when a reply fails. A constant, not a setting: it must work when nothing else does."""


class EngineFailure(Exception):
    """An engine's exception inside a reply, with the stage it came from."""

    def __init__(self, stage: str, error: Exception) -> None:
        super().__init__(f"{stage}: {describe(error)}")
        self.stage = stage
        """"llm", "tts" or "tool"."""
        self.error = error
        """What the engine raised."""


async def tagged(stage: str, work: Awaitable[T]) -> T:
    """`await work`, its exception (not a cancellation) tagged with `stage`."""
    try:
        return await work
    except EngineFailure:
        raise
    except Exception as error:
        raise EngineFailure(stage, error) from error


def failure_of(error: BaseException) -> tuple[str, str]:
    """(stage, "Type: message") of an error that ended a reply: the engine's own error when
    an engine failed ("reply" when no engine did: the reply's own work broke). A task group
    wraps its tasks' errors; one engine failure among them is what ended the reply."""
    leaves = _leaves(error)
    for leaf in leaves:
        if isinstance(leaf, EngineFailure):
            return leaf.stage, describe(leaf.error)
    return "reply", describe(leaves[0] if leaves else error)


def describe(error: BaseException) -> str:
    text = str(error)
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def _leaves(error: BaseException) -> list[BaseException]:
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in _leaves(inner)]
    return [error]
