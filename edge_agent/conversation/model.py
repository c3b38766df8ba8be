"""The language model as the conversation uses it: one owner thread, streamed requests, and
the stable part of the next prompt evaluated ahead of time.

Whenever history has changed and the model is idle, the stable part of the next prompt is
evaluated in the background (`prewarm`), so the next request only evaluates the user's new
words; with a prefix-state directory, the stable prefix (the system message) is saved once
and loaded at the next start instead of being evaluated again.

Background work never keeps a reply waiting: a request sets `wanted` before it queues on the
model's thread, and a prewarm (or the prefix save) in progress ends after its current chunk
(~0.1 s), keeping what it evaluated; a summary in progress ends at its next token (the
memory's `stop_background`). Measured on a 2-core PC with SmolLM2-135M, a 581-token request
asked 0.1 s into a prewarm of a stale 1680-token prompt (the window moved): first token 3.4 s
(median of 4), as without the prewarm (3.6 s); before, it waited for the whole prewarm
(~13 s more).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncGenerator, Callable, Iterator
from pathlib import Path
from typing import TypeVar

from edge_agent.conversation.failures import EngineFailure
from edge_agent.conversation.tools import Toolbox
from edge_agent.engines.base import (
    ChatMessage,
    LanguageModel,
    PrefixStateStore,
    ToolCall,
    ToolSpec,
)
from edge_agent.memory.conversation_memory import ConversationMemory
from edge_agent.owner import Owner

T = TypeVar("T")


class Model:
    """Requests, prewarms and background work, in order on the model's thread."""

    def __init__(self, llm: LanguageModel, thread: Owner, memory: ConversationMemory,
                 tools: Toolbox, prefix_state_dir: Path | None) -> None:
        self._llm = llm
        self._thread = thread
        self._memory = memory
        self._tools = tools
        self._prefix_state_dir = prefix_state_dir
        self._prewarm: asyncio.Task[bool] | None = None
        self._prewarmed: list[ChatMessage] | None = None
        self._state_saved_for: list[ChatMessage] | None = None
        self._latest_reached_model = False
        self._wanted = threading.Event()
        """Set when a request wants the model: a prewarm in progress stops (read on the
        model's thread)."""

    async def stream(self, messages: list[ChatMessage],
                     failures: list[EngineFailure] | None = None
                     ) -> AsyncGenerator[str | ToolCall, None]:
        """Every request: sent once every turn before it is on disk, so what the model saw is
        always on record first (a speculative request's own user turn is not a turn yet: it
        is committed when the turn ends, before its answer plays). The model's failure is
        tagged "llm" (and noted in `failures`, for a preparation)."""
        llm, tools = self._llm, self._tools.specs()
        self._latest_reached_model = False
        self._wanted.set()
        self._memory.stop_background.set()

        def generate() -> Iterator[str | ToolCall]:
            self._latest_reached_model = True
            return llm.stream(messages, tools)

        await self._memory.flushed()
        # Closed with this generator (a cancelled preparation), so the model stops at once.
        async with contextlib.aclosing(self._thread.stream(generate)) as pieces:
            try:
                async for piece in pieces:
                    yield piece
            except Exception as error:
                failure = EngineFailure("llm", error)
                if failures is not None:
                    failures.append(failure)
                raise failure from error

    async def withdraw(self) -> None:
        """The latest request was speculative and will not be used. One stopped before the
        model saw it took nothing to give back (a script would otherwise hand its previous
        reply out again)."""
        await self._thread.call(self._withdraw_if_reached)

    def _withdraw_if_reached(self) -> None:
        """On the model's thread, after the request's own work there: whether it reached the
        model is settled by then."""
        if self._latest_reached_model:
            self._llm.withdraw()

    async def run(self, fn: Callable[..., T], *args: object) -> T:
        """Background work on the model's thread (a summary), queued after a reply's."""
        return await self._thread.call(fn, *args)

    @property
    def warming(self) -> bool:
        """A prewarm is using the model."""
        return self._prewarm is not None and not self._prewarm.done()

    def prewarm(self) -> None:
        """Have the model evaluate the stable part of the next prompt (everything but the next
        user turn) in the background, if it changed; never awaited by a reply."""
        if self.warming:
            return
        if self._prewarm is not None and not _completed(self._prewarm):
            self._prewarmed = None  # a request stopped it (or it failed): owed again
        messages = self._memory.messages()
        if messages == self._prewarmed:
            return
        self._prewarmed = messages
        stable = self._memory.context.stable_messages()
        # Cleared here, on the loop: a request made after this line stops this prewarm.
        self._wanted.clear()
        self._prewarm = asyncio.create_task(
            self._thread.call(self._warm, messages, stable, self._tools.specs()),
            name="prewarm")
        self._prewarm.add_done_callback(_completed)

    def close(self) -> None:
        self._thread.close()

    def _warm(self, messages: list[ChatMessage], stable: list[ChatMessage],
              tools: list[ToolSpec]) -> bool:
        """On the model's thread: the stable prefix from its saved state (or evaluated and
        saved, for the next start), then the rest of the prompt. False when a request
        stopped it."""
        llm, directory, wanted = self._llm, self._prefix_state_dir, self._wanted
        if (directory is not None and stable and stable != self._state_saved_for
                and isinstance(llm, PrefixStateStore) and not wanted.is_set()):
            kept = (llm.restore_prefix_state(stable, directory, tools=tools)
                    or llm.save_prefix_state(stable, directory, tools=tools, stop=wanted)
                    is not None)
            stopped = not kept and wanted.is_set()
            self._state_saved_for = None if stopped else stable  # a stopped save is owed
        if wanted.is_set():
            return False
        llm.prewarm(messages, tools, wanted)
        return not wanted.is_set()


def _completed(task: asyncio.Task[bool]) -> bool:
    """Whether a finished prewarm ran to its end. One that failed only costs the next request
    its speed (the request itself will report a broken model); one a request stopped is owed."""
    return not task.cancelled() and task.exception() is None and task.result()
