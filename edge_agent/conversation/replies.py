"""Speaking: a reply from model hops to clauses, speech, playback and one Finalize per unit.

A reply is a sequence of model hops. Text streams into clauses that are synthesized and queued
on the speaker while the model goes on; a hop's text is one unit, opened at its first word, so a
hop that only calls tools opens none. Units play back to back and each is finalized when its
playback ends, or, on a barge-in, where the device's played position leaves it.

A reply may start from a `PreparedReply` (its first hop requested and its first piece
synthesized while the user's silence was still running). Whenever history has changed and the
model is idle, the stable part of the next prompt is evaluated in the background (`prewarm`),
so the next request only evaluates the user's new words.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator
from typing import TypeVar

from edge_agent.audio.device import Speaker
from edge_agent.audio.unit_audio import UnitAudioWriter
from edge_agent.conversation.clauses import SpokenText
from edge_agent.conversation.prepared import PreparedReply
from edge_agent.conversation.settings import ConversationSettings, Engines
from edge_agent.conversation.tools import Toolbox
from edge_agent.engines.base import ChatMessage, PrefixStateStore, SpeechAudio, ToolCall, ToolSpec
from edge_agent.events import (
    EventLog,
    LlmRequest,
    Notice,
    PlaybackStarted,
    SpeculationCancelled,
    ToolUsed,
    TurnStage,
    UnitFinalized,
)
from edge_agent.heard.ledger import Finalize, Unit, UnitLedger
from edge_agent.memory.conversation_memory import ConversationMemory
from edge_agent.owner import Owner

T = TypeVar("T")


class Responder:
    """Owns the speaker side: one reply at a time, the unit ledger, and what it records."""

    def __init__(self, *, speaker: Speaker, engines: Engines, settings: ConversationSettings,
                 log: EventLog, memory: ConversationMemory, owner: Callable[[str], Owner],
                 unit_audio: UnitAudioWriter | None, tools: Toolbox) -> None:
        self._speaker = speaker
        self._engines = engines
        self._settings = settings
        self._log = log
        self.memory = memory
        self._ledger = UnitLedger(settings.heard_policy)
        self._recent: deque[Unit] = deque(maxlen=4)
        self._unit_audio = unit_audio
        self._tools = tools
        self._llm_thread = owner("llm")
        self._tts_thread = owner("tts")
        self._tools_thread = owner("tools")
        self._tool_jobs: set[asyncio.Future[str]] = set()
        self._reply: asyncio.Task[None] | None = None
        self._prepared: PreparedReply | None = None
        self._stages: tuple[int, set[str]] = (-1, set())
        self._prewarm: asyncio.Task[None] | None = None
        self._prewarmed: list[ChatMessage] | None = None
        self._first_unit_of_reply: str | None = None
        self._checkpointed: tuple[str, int] | None = None
        self._state_saved_for: list[ChatMessage] | None = None
        self.failure: BaseException | None = None
        """An engine error raised inside a reply, for the loop to surface."""

    @property
    def replying(self) -> bool:
        """True while a reply is being generated, synthesized or played."""
        return self._reply is not None and not self._reply.done()

    @property
    def playing_unit(self) -> str | None:
        return self._ledger.open_units[0].unit_id if self._ledger.open_units else None

    def prepare(self, turn: int, user_text: str) -> PreparedReply:
        """Start answering `user_text` as turn `turn` without playing or recording anything:
        the model's first hop and the first piece's audio (see `PreparedReply`)."""
        messages = self._prompt(pending_user=user_text)

        async def synthesize(text: str) -> SpeechAudio:
            return await self._tts_thread.call(self._engines.tts.synthesize, text)

        def stage(name: str, speculative: bool) -> None:
            self._stage(turn, name, speculative)

        return PreparedReply(turn, messages, self._generate(messages), synthesize,
                             self._settings.interrupted_marker, stage)

    async def discard(self, prepared: PreparedReply, reason: str) -> None:
        """A preparation that will not be used: stop its model request, withdraw it."""
        await prepared.cancel()
        await self._llm_thread.call(self._engines.llm.withdraw)
        self._stages = (-1, set())  # the turn's stages start over
        self._log.publish(SpeculationCancelled(prepared.turn, reason))

    def start(self, turn: int, prepared: PreparedReply | None = None) -> None:
        """Answer user turn `turn` (0: the greeting, no model involved), from `prepared` if it
        was prepared for this turn and this history."""
        self._first_unit_of_reply = None
        self._reply = asyncio.create_task(self._answer(turn, prepared), name=f"reply-{turn}")
        self._reply.add_done_callback(self._check_reply)

    def number_units_after(self, count: int) -> None:
        """Units of a resumed session exist up to u`count`: new ones are numbered after it."""
        self._ledger.number_after(count)

    def checkpoint(self) -> None:
        """Tell memory where the playing unit is, if it moved: a crash recovers the unit with
        the heard prefix of its last checkpoint (never more than had played)."""
        open_units = self._ledger.open_units
        if not open_units or open_units[0].device_start is None:
            return
        unit = open_units[0]
        played, heard = self._ledger.heard_at(unit, self._speaker.played_frames())
        if self._checkpointed == (unit.unit_id, played):
            return
        self._checkpointed = (unit.unit_id, played)
        self.memory.checkpoint(unit.unit_id, unit.text, heard,
                               round(played * 1000 / unit.sample_rate))

    async def run_on_model(self, fn: Callable[..., T], *args: object) -> T:
        """Background work on the model's thread (a summary), queued after a reply's."""
        return await self._llm_thread.call(fn, *args)

    @property
    def model_idle(self) -> bool:
        """No reply and no prewarm is using the model."""
        return not self.replying and (self._prewarm is None or self._prewarm.done())

    def recent_units(self) -> tuple[Unit, ...]:
        """The last few units opened (finalized or not), oldest first."""
        return tuple(self._recent)

    def close(self) -> None:
        for thread in (self._llm_thread, self._tts_thread, self._tools_thread):
            thread.close()

    def _check_reply(self, reply: asyncio.Task[None]) -> None:
        if not reply.cancelled() and reply.exception() is not None:
            error = reply.exception()
            # An engine failing inside the reply's task group: surface the engine's own error.
            while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
                error = error.exceptions[0]
            self.failure = error

    def _prompt(self, pending_user: str | None = None) -> list[ChatMessage]:
        """The next request's messages; `pending_user`: a user turn not in history yet."""
        return self.memory.messages(pending_user)

    async def _generate(self, messages: list[ChatMessage]) -> AsyncIterator[str | ToolCall]:
        """Every request: sent once every turn before it is on disk, so what the model saw is
        always on record first (a speculative request's own user turn is not a turn yet: it
        is committed when the turn ends, before its answer plays)."""
        llm, tools = self._engines.llm, self._tools.specs()

        def generate() -> Iterator[str | ToolCall]:
            return llm.stream(messages, tools)

        await self.memory.flushed()
        # Closed with this generator (a cancelled preparation), so the model stops at once.
        async with contextlib.aclosing(self._llm_thread.stream(generate)) as pieces:
            async for piece in pieces:
                yield piece

    async def _ask(self, turn: int, hop: int) -> AsyncIterator[str | ToolCall]:
        messages = self._prompt()
        self._log.publish(LlmRequest(turn, hop, tuple(dict(m) for m in messages)))
        if hop == 1:
            self._stage(turn, "request")
        async for piece in self._generate(messages):
            if hop == 1:
                self._stage(turn, "first_token")
            yield piece

    def _stage(self, turn: int, stage: str, speculative: bool = False) -> None:
        """Publish a stage of answering `turn`, once per turn."""
        if self._stages[0] != turn:
            self._stages = (turn, set())
        if turn > 0 and stage not in self._stages[1]:
            self._stages[1].add(stage)
            self._log.publish(TurnStage(turn, stage, speculative))

    async def _take_prepared(self, turn: int, prepared: PreparedReply | None
                             ) -> PreparedReply | None:
        """`prepared` if it answers this turn with this history; otherwise it is discarded."""
        if prepared is None:
            return None
        if prepared.turn == turn and prepared.messages == self._prompt():
            prepared.committed = True
            self._log.publish(LlmRequest(turn, 1, tuple(dict(m) for m in prepared.messages)))
            await self.memory.flushed()  # the user turn is on disk before its answer plays
            return prepared
        await self.discard(prepared, "history changed")
        return None

    async def _answer(self, turn: int, prepared: PreparedReply | None = None) -> None:
        """One reply: model hops (each may speak, call tools, or both) and their speech."""
        speech: asyncio.Queue[tuple[Unit, str | None] | None] = asyncio.Queue()
        try:
            async with asyncio.TaskGroup() as tasks:
                tasks.create_task(self._voice(speech, tasks, turn))
                try:
                    await self._hops(turn, prepared, speech)
                finally:
                    speech.put_nowait(None)
            self.prewarm()
        finally:
            if prepared is not None and not (prepared.committed or prepared.cancelled):
                await self.discard(prepared, "reply stopped")  # stopped before it was taken
            if self._prepared is not None:
                await self._prepared.cancel()
                self._prepared = None

    async def _hops(self, turn: int, prepared: PreparedReply | None,
                    speech: asyncio.Queue[tuple[Unit, str | None] | None]) -> None:
        if turn == 0:
            await self._speak_hop(_pieces_of(self._settings.greeting), speech)
            return
        if self._tool_jobs:
            # A tool from a cut reply still runs (its action happens): the next prompt waits
            # for its result.
            await asyncio.wait(set(self._tool_jobs))
        self._prepared = await self._take_prepared(turn, prepared)
        for hop in range(1, self._settings.max_tool_hops + 2):
            if hop == 1 and self._prepared is not None:
                pieces = self._prepared.pieces()
            else:
                pieces = self._ask(turn, hop)
            calls = await self._speak_hop(pieces, speech)
            if not calls:
                return
            for call in calls:
                await self._use_tool(turn, call)
        self._log.publish(Notice(
            f"turn {turn}: the model was still calling tools after "
            f"{self._settings.max_tool_hops} rounds; its reply ends here"))

    async def _speak_hop(self, pieces: AsyncIterator[str | ToolCall],
                         speech: asyncio.Queue[tuple[Unit, str | None] | None]) -> list[ToolCall]:
        """Stream one hop's text into clauses for the voice; returns the tools it called."""
        calls: list[ToolCall] = []
        unit: Unit | None = None
        spoken = SpokenText(self._settings.interrupted_marker)

        def take(text: str, clauses: list[str]) -> None:
            nonlocal unit
            if not text and not clauses:
                return
            if unit is None:
                unit = self._open_unit()
            unit.add_text(text)
            for clause in clauses:
                speech.put_nowait((unit, clause))

        async for piece in pieces:
            if isinstance(piece, ToolCall):
                calls.append(piece)
            else:
                take(*spoken.push(piece))
        text, clauses = spoken.flush()
        if spoken.started or not calls:
            take(text, clauses)  # an empty reply (no word, no tool) is a unit too
        if unit is not None:
            speech.put_nowait((unit, None))
        return calls

    async def _voice(self, speech: asyncio.Queue[tuple[Unit, str | None] | None],
                     tasks: asyncio.TaskGroup, turn: int) -> None:
        """Synthesize clauses in order and queue them on the speaker, unit after unit."""
        while (item := await speech.get()) is not None:
            unit, clause = item
            if clause is None:
                tasks.create_task(self._finish(unit))
                continue
            text_start, text_end = unit.audio_text_end, unit.audio_text_end + len(clause)
            if not clause.strip():
                unit.add_audio(0, (), text_start, text_end)
                continue
            audio = await self._prepared.audio_for(clause) if self._prepared is not None else None
            if audio is None:
                audio = await self._tts_thread.call(self._engines.tts.synthesize, clause)
            if unit.audio_samples == 0 and unit.unit_id == self._first_unit_of_reply:
                audio = audio.without_leading_silence()  # the listener waits for this one
            self._stage(turn, "first_piece")
            unit.add_audio(audio.samples, audio.words, text_start, text_end)
            device_frame = self._speaker.write(audio.pcm)
            if self._unit_audio is not None:
                self._unit_audio.add(unit.unit_id, audio.pcm)
            if unit.device_start is None:
                unit.device_start = device_frame
                tasks.create_task(self._announce_playback(unit, device_frame, turn))

    async def _finish(self, unit: Unit) -> None:
        """Wait until the unit has played out, then finalize it (and any opened before it)."""
        if unit.device_start is not None:
            end = unit.device_start + unit.audio_samples
            await self._speaker.wait_played(end)
            if self._speaker.played_frames() < end:
                # The queue was dropped (a barge-in) before the unit played out: `stop` is
                # finalizing it where playback was cut. Finalizing it here as played out would
                # record words nobody heard.
                return
        if not unit.text:
            self._log.publish(Notice(f"{unit.unit_id}: the reply was empty; nothing to say"))
        self._record(self._ledger.finalize(unit, unit.audio_samples))

    async def _use_tool(self, turn: int, call: ToolCall) -> None:
        """Run a tool; its call and result reach history even if the reply is cut meanwhile."""
        job = asyncio.ensure_future(self._tools_thread.call(self._tools.run, call))

        def record(done: asyncio.Future[str]) -> None:
            self._tool_jobs.discard(done)
            if done.cancelled():
                result = "error: cancelled before it ran"
            elif (error := done.exception()) is not None:
                result = f"error: {call.name} could not run: {error}"
            else:
                result = done.result()
            self.memory.add_tool(call, result)
            self._log.publish(ToolUsed(turn, call, result))

        self._tool_jobs.add(job)
        job.add_done_callback(record)
        await asyncio.shield(job)

    def _open_unit(self) -> Unit:
        unit = self._ledger.open(self._engines.tts.sample_rate)
        if self._first_unit_of_reply is None:
            self._first_unit_of_reply = unit.unit_id
        self._recent.append(unit)
        return unit

    async def _announce_playback(self, unit: Unit, device_frame: int, turn: int) -> None:
        await self._speaker.wait_played(device_frame + 1)
        self._log.publish(PlaybackStarted(unit.unit_id))
        self._stage(turn, "first_audio")

    async def stop(self) -> None:
        """Stop playback at once (no tail, queue dropped), cancel the reply's LLM and TTS work,
        and finalize every open unit where the device's played position leaves it."""
        reply, self._reply = self._reply, None
        if reply is None:
            return
        played = self._speaker.interrupt()
        if not reply.done():
            reply.cancel()
        with contextlib.suppress(Exception, asyncio.CancelledError):
            await reply  # its failure, if any, was taken by _check_reply
        self._record(self._ledger.finalize_all(played))
        self.prewarm()

    def _record(self, finalizes: list[Finalize]) -> None:
        for finalize in finalizes:
            self.memory.add_finalize(finalize)
            self._log.publish(UnitFinalized(finalize))
            if self._unit_audio is not None:
                self._unit_audio.finish(finalize)

    def prewarm(self) -> None:
        """Have the model evaluate the stable part of the next prompt (everything but the next
        user turn) in the background, if it changed; never awaited by a reply."""
        messages = self._prompt()
        if messages == self._prewarmed or (self._prewarm is not None and not self._prewarm.done()):
            return
        self._prewarmed = messages
        stable = self.memory.context.stable_messages()
        self._prewarm = asyncio.create_task(
            self._llm_thread.call(self._warm, messages, stable, self._tools.specs()),
            name="prewarm")
        self._prewarm.add_done_callback(_ignore_result)

    def _warm(self, messages: list[ChatMessage], stable: list[ChatMessage],
              tools: list[ToolSpec]) -> None:
        """On the model's thread: the stable prefix from its saved state (or evaluated and
        saved, for the next start), then the rest of the prompt."""
        llm, directory = self._engines.llm, self._settings.prefix_state_dir
        if (directory is not None and stable and stable != self._state_saved_for
                and isinstance(llm, PrefixStateStore)):
            self._state_saved_for = stable
            if not llm.restore_prefix_state(stable, directory, tools=tools):
                llm.save_prefix_state(stable, directory, tools=tools)
        llm.prewarm(messages, tools)


async def _pieces_of(text: str) -> AsyncIterator[str | ToolCall]:
    yield text


def _ignore_result(task: asyncio.Task[None]) -> None:
    """A prewarm that failed only costs the next request its speed; the request itself will
    report a broken model."""
    if not task.cancelled():
        task.exception()
