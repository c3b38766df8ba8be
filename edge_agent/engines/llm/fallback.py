"""The LAN server when it answers, the on-device model when it does not.

Each reply goes to the server first (`server.ServerLanguageModel`). When it gives no piece of
the reply within `[llm] server_timeout_ms` (unreachable, an error, too slow), the same request
goes to the on-device model at once, so the caller waits at most that much longer, and the
kiosk goes on with its own model: the server is asked again `RETRY_S` after it last failed (a
server that is down costs one wait per `RETRY_S`, not one per turn). A Notice says so once per
change: when the kiosk falls back, and when the server answers again.

A reply the server began and then broke off is not restarted on the device (its first words
may already have been heard): it fails like any engine's, and the next reply falls back.
Everything the conversation does around the model (heard truth, tools, the stepped window,
speculation) sees one `LanguageModel` and works the same either way. The on-device model's
prompt prefix is saved and restored as without a server (a fallback starts warm); it is
prewarmed only while it answers (while the server does, the kiosk's CPU is left alone).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from edge_agent.clock import Clock
from edge_agent.engines.base import (
    ChatMessage,
    LanguageModel,
    PrefixStateStore,
    ToolCall,
    ToolSpec,
)
from edge_agent.engines.llm.server import ServerLanguageModel, ServerUnavailable
from edge_agent.errors import EngineError

log = logging.getLogger("edge_agent")

RETRY_S = 15.0
"""Seconds after a failed request before the server is asked again."""


class FallbackLanguageModel:
    """`server` while it answers, else `local` (see the module's doc). Each change is told in
    words to `announce_to`'s sink (until one is given: the "edge_agent" logger)."""

    def __init__(self, server: ServerLanguageModel, local: LanguageModel, clock: Clock) -> None:
        self.server = server
        self.local = local
        self._clock = clock
        self._announce: Callable[[str], None] = log.warning
        self._down_since: float | None = None
        """When the latest failed request was sent (None: the server is in use)."""
        self.answered_by = ""
        """"server" or "device": who began the latest reply ("" before the first)."""

    def announce_to(self, sink: Callable[[str], None]) -> None:
        """Tell each change to `sink` (called on the model's owner thread: it must be safe to
        call from there), and what the server's client chooses or notices."""
        self._announce = sink
        self.server.announce_to(sink)

    @property
    def on_server(self) -> bool:
        """The next reply goes to the server first."""
        return self._down_since is None or self._clock.now() - self._down_since >= RETRY_S

    def stream(self, messages: list[ChatMessage], tools: Sequence[ToolSpec] = ()
               ) -> Iterator[str | ToolCall]:
        if self.on_server:
            asked = self._clock.now()
            pieces = self.server.stream(messages, tools)
            try:
                first = next(pieces)
            except ServerUnavailable as exc:
                self._fell_back(asked, str(exc))
            except StopIteration:
                self._answered()
                return
            else:
                self._answered()
                yield first
                try:
                    yield from pieces
                except EngineError as exc:
                    self._fell_back(asked, str(exc))
                    raise
                return
        self.answered_by = "device"
        yield from self.local.stream(messages, tools)

    def _answered(self) -> None:
        self.answered_by = "server"
        if self._down_since is not None:
            self._down_since = None
            self._announce(f"the LLM server at {self.server.address.shown} answers again: "
                           "replies come from it")

    def _fell_back(self, asked: float, reason: str) -> None:
        first = self._down_since is None
        self._down_since = asked
        if first:
            self._announce(f"{reason}; replies come from the on-device model until it answers "
                           f"again (asked again every {RETRY_S:g} s)")

    def prewarm(self, messages: list[ChatMessage], tools: Sequence[ToolSpec] = (),
                stop: threading.Event | None = None) -> None:
        """The on-device model's, while it answers: the server caches its own prompt."""
        if not self.on_server:
            self.local.prewarm(messages, tools, stop)

    def withdraw(self) -> None:
        """The latest request, withdrawn from the model that answered it."""
        (self.server if self.answered_by == "server" else self.local).withdraw()

    def save_prefix_state(self, messages: list[ChatMessage], directory: Path, *,
                          tools: Sequence[ToolSpec] = (),
                          stop: threading.Event | None = None) -> Path | None:
        """The on-device model's prefix state (see `PrefixStateStore`), so that a fallback
        starts warm."""
        if isinstance(self.local, PrefixStateStore):
            return self.local.save_prefix_state(messages, directory, tools=tools, stop=stop)
        return None

    def restore_prefix_state(self, messages: list[ChatMessage], directory: Path, *,
                             tools: Sequence[ToolSpec] = ()) -> bool:
        if isinstance(self.local, PrefixStateStore):
            return self.local.restore_prefix_state(messages, directory, tools=tools)
        return False
