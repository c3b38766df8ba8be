"""What the conversation does in the background between turns: checkpoint the playing unit,
look at the venue's knowledge files for changes, move the memory window when its summary is
ready and start the next summary when one is due, while nobody talks."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from edge_agent.clock import Clock
from edge_agent.conversation.replies import Responder
from edge_agent.conversation.settings import ConversationSettings
from edge_agent.memory.conversation_memory import ConversationMemory


class Upkeep:
    """The background task beside the loop (`run`), and the summary it may have started."""

    def __init__(self, settings: ConversationSettings, clock: Clock, responder: Responder,
                 memory: ConversationMemory, knowledge: bool) -> None:
        """`knowledge`: the venue's knowledge files are looked up (and so looked at)."""
        self._settings = settings
        self._clock = clock
        self._responder = responder
        self._memory = memory
        self._knowledge = knowledge
        self._folding: asyncio.Task[None] | None = None

    async def run(self, busy: Callable[[], bool]) -> None:
        """Checkpoint the playing unit; look at the knowledge files every reload interval; while
        idle (not `busy()`), move the window a step when its summary is ready (then prewarm the
        new prefix), and start the next summary when one is due."""
        interval = self._settings.checkpoint_ms / 1000
        looked = self._clock.now()
        while True:
            await self._clock.sleep(interval)
            self._responder.checkpoint()
            reload_s = self._settings.knowledge_reload_s
            if self._knowledge and not busy() and self._clock.now() - looked >= reload_s:
                looked = self._clock.now()
                await self._responder.refresh_knowledge()
            if busy() or not self._responder.model_idle:
                # A prewarm in progress would be stale once the window moved: it finishes
                # (or a reply stops it) first.
                continue
            self._memory.apply_ready_fold()
            self._responder.prewarm()  # nothing to do unless the prompt changed
            if (self._memory.fold_due() and self._responder.model_idle
                    and (self._folding is None or self._folding.done())):
                # Armed here, in the same step as the checks: speech beginning from now on
                # stops the summary (cleared inside `fold`, an onset between this line and
                # its first step was lost and the summary ran its ~5 s to the end).
                self._memory.stop_background.clear()
                self._folding = asyncio.create_task(
                    self._memory.fold(self._responder.run_on_model), name="fold")

    async def stop_folding(self) -> None:
        """Stop a summary in progress and wait for it to give the model back."""
        folding, self._folding = self._folding, None
        if folding is not None and not folding.done():
            self._memory.stop_background.set()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await folding
