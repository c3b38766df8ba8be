"""A reply prepared while the user's silence is still running: speculation.

After a short silence (`turns.speculate_after_ms`) the loop transcribes what the user said and,
if a reply would follow, prepares it: the language model request is sent and its first spoken
piece is synthesized — but nothing is played, no speech unit is opened, no tool runs and nothing
enters history or the session record. When the silence lasts long enough to end the turn, the
reply starts from what was prepared (the model's text so far, the first piece's audio); if the
user speaks again first, the preparation is cancelled and leaves no trace but a
`SpeculationCancelled` event.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

from edge_agent.conversation.clauses import SpokenText
from edge_agent.engines.base import ChatMessage, SpeechAudio, ToolCall
from edge_agent.knowledge.ground import Grounding


class PreparedReply:
    """The first model hop of a reply, consumed in the background into a buffer, and the audio
    of its first spoken piece."""

    def __init__(self, turn: int, messages: list[ChatMessage],
                 pieces: AsyncIterator[str | ToolCall],
                 synthesize: Callable[[str], Awaitable[SpeechAudio]], marker: str,
                 stage: Callable[[str, bool], None], grounding: Grounding | None = None) -> None:
        self.turn = turn
        """The user turn it answers (1 = the first)."""
        self.messages = messages
        """The request sent to the model, exactly (or, when the knowledge answers itself,
        the request that would have been: its history must still be the turn's)."""
        self.grounding = grounding
        """What the venue's knowledge made of the words (None: no knowledge)."""
        self.committed = False
        """The turn really ended and the reply uses this preparation."""
        self.cancelled = False
        """It was stopped (thrown away, or done with)."""
        self._pieces = pieces
        self._synthesize = synthesize
        self._marker = marker
        self._publish_stage = stage
        self._buffer: list[str | ToolCall] = []
        self._done = False
        self._grown = asyncio.Event()
        self._first_piece: tuple[str, asyncio.Future[SpeechAudio]] | None = None
        self._task = asyncio.create_task(self._run(), name=f"prepare-{turn}")
        self._stage("request")

    def _stage(self, stage: str) -> None:
        self._publish_stage(stage, not self.committed)

    async def _run(self) -> None:
        spoken = SpokenText(self._marker)  # what the reply will do with the same text
        first: str | None = None
        try:
            async for piece in self._pieces:
                if not self._buffer:
                    self._stage("first_token")
                self._buffer.append(piece)
                self._grown.set()
                if first is None and not isinstance(piece, ToolCall):
                    clauses = spoken.push(piece)[1]
                    if clauses:
                        first = clauses[0]
                        await self._synthesize_first(first)
            if first is None and not any(isinstance(p, ToolCall) for p in self._buffer):
                await self._synthesize_first(spoken.flush()[1][0])
        finally:
            self._done = True
            self._grown.set()

    async def _synthesize_first(self, clause: str) -> None:
        if not clause.strip():
            return
        audio: asyncio.Future[SpeechAudio] = asyncio.get_running_loop().create_future()
        self._first_piece = (clause, audio)
        try:
            audio.set_result(await self._synthesize(clause))
        except asyncio.CancelledError:
            audio.cancel()
            raise
        except Exception as exc:
            audio.set_exception(exc)
            audio.exception()  # retrieved: whoever awaits it sees the error, no warning
            raise
        self._stage("first_piece")

    async def audio_for(self, clause: str) -> SpeechAudio | None:
        """The first piece's audio if `clause` is that piece (handed out once; waits for it if
        it is still being synthesized)."""
        if self._first_piece is None or self._first_piece[0] != clause:
            return None
        audio = self._first_piece[1]
        self._first_piece = None
        try:
            return await audio
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if audio.cancelled() and task is not None and not task.cancelling():
                return None  # the preparation was stopped: synthesize it anew
            raise

    async def pieces(self) -> AsyncIterator[str | ToolCall]:
        """The model's output: what was buffered, then the rest as it comes."""
        at = 0
        while True:
            while at < len(self._buffer):
                yield self._buffer[at]
                at += 1
            if self._done:
                if self._task.done() and not self._task.cancelled():
                    error = self._task.exception()
                    if error is not None:
                        raise error
                return
            self._grown.clear()
            await self._grown.wait()

    async def cancel(self) -> None:
        """Stop the model and drop everything prepared."""
        self.cancelled = True
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self._task
        self._buffer.clear()
        self._first_piece = None
