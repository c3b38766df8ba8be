"""Speaking: a reply from model hops to clauses, speech, playback and one Finalize per unit.

A reply is a sequence of model hops. Text streams into clauses that are synthesized and queued
on the speaker while the model goes on; a hop's text is one unit, opened at its first word, so a
hop that only calls tools opens none. Units play back to back and each is finalized when its
playback ends, or, on a barge-in, where the device's played position leaves it
(`conversation.playback`).

A reply may start from a `PreparedReply` (its first hop requested and its first piece
synthesized while the user's silence was still running). The model's requests and its
prewarming go through `conversation.model`.

With the venue's knowledge (`knowledge`), each turn is looked up first (on its own thread):
an answer the knowledge gives itself (an entry's answer, the opening hours, the fallback line
for a question it does not cover) is said as a unit of its own with no model call; otherwise
the model answers, with the entries that match placed before the caller's words.

An engine failing mid-reply (the model, the voice, a tool) ends that reply, not the loop: what
was already queued plays out and is recorded as heard, the rest is dropped, and the fallback
line is said as a unit of its own (`conversation.failures`, `ReplyFailed`). A preparation that
failed is not used: the answer is generated again.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Protocol, TypeVar

from edge_agent.audio.device import Speaker
from edge_agent.audio.unit_audio import UnitAudioSink
from edge_agent.conversation.clauses import SpokenText
from edge_agent.conversation.failures import (
    FALLBACK_LINE,
    EngineFailure,
    describe,
    failure_of,
    tagged,
)
from edge_agent.conversation.model import Model
from edge_agent.conversation.playback import NowPlaying, Playback
from edge_agent.conversation.prepared import PreparedReply
from edge_agent.conversation.settings import ConversationSettings, Engines
from edge_agent.conversation.tools import Toolbox
from edge_agent.engines.base import ChatMessage, SpeechAudio, ToolCall
from edge_agent.engines.cpu_share import listener_waits
from edge_agent.events import (
    CommandAnswered,
    EventLog,
    KnowledgeUsed,
    LlmRequest,
    Notice,
    ReplyFailed,
    SpeculationCancelled,
    ToolUsed,
    TurnStage,
)
from edge_agent.heard.ledger import Unit
from edge_agent.knowledge.ground import SAID, Context, Grounding
from edge_agent.knowledge.live import Grounder
from edge_agent.memory.conversation_memory import ConversationMemory
from edge_agent.memory.history import Turn
from edge_agent.owner import Owner

T = TypeVar("T")
Speech = asyncio.Queue[tuple[Unit, str | None] | None]
"""Clauses for the voice, unit by unit: (unit, clause); (unit, None) ends a unit; None ends all."""


class Commands(Protocol):
    """Requests answered without the model (the timers' commands)."""

    def claims(self, text: str) -> bool:
        """`text` is one of them (its answer is not prepared by the model)."""
        ...

    async def answer(self, text: str) -> str | None:
        """Do what `text` asks and return the words to say ("": nothing); None if `text`
        is not one of them."""
        ...


class Responder:
    """One reply at a time: its model hops, tools and speech, and what is said instead when an
    engine fails; its units are played and recorded by `Playback`."""

    def __init__(self, *, speaker: Speaker, engines: Engines, settings: ConversationSettings,
                 log: EventLog, memory: ConversationMemory, owner: Callable[[str], Owner],
                 unit_audio: UnitAudioSink | None, tools: Toolbox,
                 knowledge: Grounder | None = None) -> None:
        self._engines = engines
        self._settings = settings
        self._log = log
        self.memory = memory
        self._playback = Playback(speaker, memory, log, unit_audio, settings.heard_policy)
        self._tools = tools
        # With no tool call allowed, none is offered: the model answers in words.
        offered = tools if settings.max_tool_hops > 0 else Toolbox()
        self._model = Model(engines.llm, owner("llm"), memory, offered, settings.prefix_state_dir)
        self._tts_thread = owner("tts")
        self._tools_thread = owner("tools")
        self._knowledge = knowledge
        self.commands: Commands | None = None
        """Answered before the model is asked (set once, before the loop starts)."""
        self._lead = b""
        self._knowledge_thread = owner("knowledge") if knowledge is not None else None
        self._tool_jobs: set[asyncio.Future[str]] = set()
        self._reply: asyncio.Task[None] | None = None
        self._prepared: PreparedReply | None = None
        self._stages: tuple[int, set[str]] = (-1, set())
        self._first_unit_of_reply: str | None = None
        self._preparing: weakref.WeakKeyDictionary[PreparedReply, list[EngineFailure]] = (
            weakref.WeakKeyDictionary())
        """What failed in each preparation not taken yet."""
        self.failure: BaseException | None = None
        """An error a reply could not recover from (not an engine failure: those are spoken
        over with the fallback line), for the loop to surface."""

    @property
    def replying(self) -> bool:
        """True while a reply is being generated, synthesized or played."""
        return self._reply is not None and not self._reply.done()

    @property
    def playing_unit(self) -> str | None:
        return self._playback.playing_unit

    def now_playing(self) -> NowPlaying | None:
        return self._playback.now_playing()

    async def prepare(self, turn: int, user_text: str) -> PreparedReply | None:
        """Start answering `user_text` as turn `turn` without playing or recording anything:
        the knowledge's lookup, the model's first hop and the first piece's audio (see
        `PreparedReply`). None for a command (`Commands`): it acts, so it waits for the
        turn."""
        if self.commands is not None and self.commands.claims(user_text):
            return None
        grounding = await self._look_up(user_text, self.memory.history.turns)
        messages = self._prompt(pending_user=user_text, note=_note(grounding))
        failures: list[EngineFailure] = []

        async def synthesize(text: str) -> SpeechAudio:
            try:
                return await self._synthesize(text, first=True)
            except EngineFailure as failure:
                failures.append(failure)
                raise

        said = _said(grounding)

        def stage(name: str, speculative: bool) -> None:
            if said is None or name not in MODEL_STAGES:
                self._stage(turn, name, speculative)

        pieces = (_pieces_of(said) if said is not None
                  else self._model.stream(messages, failures))
        prepared = PreparedReply(turn, messages, pieces, synthesize,
                                 self._settings.interrupted_marker, stage, grounding)
        self._preparing[prepared] = failures
        return prepared

    async def discard(self, prepared: PreparedReply, reason: str) -> None:
        """A preparation that will not be used: stop its model request, withdraw it."""
        await prepared.cancel()
        if _said(prepared.grounding) is None:  # an answer the knowledge gave asked no model
            await self._model.withdraw()
        self._stages = (-1, set())  # the turn's stages start over
        self._log.publish(SpeculationCancelled(prepared.turn, reason))

    def start(self, turn: int, prepared: PreparedReply | None = None, asked: str = "") -> None:
        """Answer user turn `turn` (0: the greeting, no model involved), whose words were
        `asked`, from `prepared` if it was prepared for this turn and this history."""
        self._first_unit_of_reply = None
        self._lead = b""
        self._reply = asyncio.create_task(self._answer(turn, prepared, asked),
                                          name=f"reply-{turn}")
        self._reply.add_done_callback(self._check_reply)

    def announce(self, words: str, lead: bytes = b"") -> asyncio.Task[None]:
        """Say `words` as a reply of its own (no turn, no model: a timer's ring), `lead` (PCM
        at the voice's rate) played before the first word. The task ends when it has played
        out; it is cancelled if something cuts it (a barge-in, `stop`)."""
        self._first_unit_of_reply = None
        self._lead = lead
        reply = asyncio.create_task(self._answer(0, None, "", said=words), name="announce")
        reply.add_done_callback(self._check_reply)
        self._reply = reply
        return reply

    def number_units_after(self, count: int) -> None:
        """Units of a resumed session exist up to u`count`: new ones are numbered after it."""
        self._playback.number_units_after(count)

    async def run_on_model(self, fn: Callable[..., T], *args: object) -> T:
        """Background work on the model's thread (a summary), queued after a reply's."""
        return await self._model.run(fn, *args)

    @property
    def model_idle(self) -> bool:
        """No reply and no prewarm is using the model."""
        return not self.replying and not self._model.warming

    def prewarm(self) -> None:
        """Evaluate the stable part of the next prompt in the background (`Model.prewarm`)."""
        self._model.prewarm()

    def checkpoint(self) -> None:
        """Save where the playing unit is, for crash recovery (`Playback.checkpoint`)."""
        self._playback.checkpoint()

    def recent_units(self) -> tuple[Unit, ...]:
        """The last few units opened (finalized or not), oldest first."""
        return self._playback.recent_units()

    def close(self) -> None:
        self._model.close()
        for thread in (self._tts_thread, self._tools_thread, self._knowledge_thread):
            if thread is not None:
                thread.close()

    def _check_reply(self, reply: asyncio.Task[None]) -> None:
        if not reply.cancelled() and reply.exception() is not None:
            error = reply.exception()
            # An error inside the reply's task groups: surface the error itself.
            while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
                error = error.exceptions[0]
            self.failure = error

    def _prompt(self, pending_user: str | None = None, note: str = "") -> list[ChatMessage]:
        """The next request's messages; `pending_user`: a user turn not in history yet;
        `note`: the venue's information, before the last user turn's words."""
        return self.memory.messages(pending_user, note)

    async def refresh_knowledge(self) -> None:
        """Read again the knowledge files that changed (on the knowledge's thread); what was
        indexed again, or could not be read, is a Notice."""
        if self._knowledge is None or self._knowledge_thread is None:
            return
        try:
            refreshed = await self._knowledge_thread.call(self._knowledge.refresh)
        except Exception as exc:  # the upkeep goes on (checkpoints): the old entries answer
            self._log.publish(Notice(f"knowledge: reading the files again failed "
                                     f"({type(exc).__name__}: {exc}); answering from what it "
                                     "held before"))
            return
        for path in refreshed.indexed:
            self._log.publish(Notice(f"knowledge: {path} changed; indexed again"))
        for error in refreshed.errors:
            self._log.publish(Notice(f"knowledge: {error}"))

    async def _look_up(self, text: str, before: list[Turn]) -> Grounding | None:
        """The knowledge's answer to `text`, said after the turns `before` (None without
        knowledge)."""
        if self._knowledge is None or self._knowledge_thread is None:
            return None
        earlier = [t for t in before if t.role == "user"]
        spoken = [t for t in before if t.role == "assistant"]
        context = Context(previous_question=earlier[-1].text if earlier else "",
                          agent_asked=bool(spoken) and spoken[-1].text.rstrip().endswith("?"))
        return await self._knowledge_thread.call(self._knowledge.ground, text, context)

    def _used(self, turn: int, grounding: Grounding | None) -> None:
        if grounding is None:
            return
        shown = grounding.said or tuple(m.entry for m in grounding.matches
                                        if grounding.how == "model")
        best = grounding.matches[0].score if grounding.matches else 0.0
        self._log.publish(KnowledgeUsed(turn, grounding.how, tuple(e.ref for e in shown),
                                        min(1.0, best), grounding.ms))

    async def _synthesize(self, text: str, first: bool = False) -> SpeechAudio:
        """`text` in the voice; `first`: the reply's first piece, which the listener waits for:
        the model holds meanwhile (`CpuShare.listener_waiting`)."""
        with listener_waits(self._engines.cpu) if first else contextlib.nullcontext():
            return await tagged("tts", self._tts_thread.call(self._engines.tts.synthesize, text))

    async def _ask(self, turn: int, hop: int, note: str) -> AsyncIterator[str | ToolCall]:
        messages = self._prompt(note=note)
        self._log.publish(LlmRequest(turn, hop, tuple(dict(m) for m in messages)))
        if hop == 1:
            self._stage(turn, "request")
        async for piece in self._model.stream(messages):
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
        """`prepared` if it answers this turn with this history and nothing in it failed;
        otherwise it is discarded (and the answer is generated again)."""
        if prepared is None:
            return None
        failures = self._preparing.pop(prepared, [])
        if prepared.turn != turn or prepared.messages != self._prompt(
                note=_note(prepared.grounding)):
            await self.discard(prepared, "history changed")
            return None
        if failures:  # an engine failed while the silence ran; it may not fail again
            failure = failures[0]
            self._log.publish(ReplyFailed(turn, failure.stage, describe(failure.error), "retry"))
            await self.discard(prepared, "preparation failed")
            return None
        prepared.committed = True
        self._used(turn, prepared.grounding)
        if _said(prepared.grounding) is None:
            self._log.publish(LlmRequest(turn, 1, tuple(dict(m) for m in prepared.messages)))
        await self.memory.flushed()  # the user turn is on disk before its answer plays
        return prepared

    async def _answer(self, turn: int, prepared: PreparedReply | None, asked: str,
                      said: str | None = None) -> None:
        """One reply: model hops (each may speak, call tools, or both) and their speech; or
        the words `said` (turn 0: the greeting, or an announcement). The playback tasks
        (finalizing, announcing) outlive a failed hop: what was queued plays."""
        try:
            async with asyncio.TaskGroup() as playback:
                try:
                    await self._say(playback, turn, lambda speech: self._hops(
                        turn, prepared, asked, speech, said))
                except Exception as error:  # cancellation, Ctrl-C and exit are not: they go on
                    await self._recover(turn, error, playback)
            self.prewarm()
        finally:
            if prepared is not None and not (prepared.committed or prepared.cancelled):
                await self.discard(prepared, "reply stopped")  # stopped before it was taken
            if self._prepared is not None:
                await self._prepared.cancel()
                self._prepared = None

    async def _say(self, playback: asyncio.TaskGroup, turn: int,
                   produce: Callable[[Speech], Awaitable[object]]) -> None:
        """Voice what `produce` puts into the speech queue, until it is done and voiced. If
        `produce` fails, the clauses it completed are still voiced (the listener hears whole
        clauses before the fallback), then its error is raised."""
        speech: Speech = asyncio.Queue()
        failed: Exception | None = None
        async with asyncio.TaskGroup() as work:
            work.create_task(self._voice(speech, playback, turn))
            try:
                await produce(speech)
            except Exception as error:
                failed = error
            finally:
                speech.put_nowait(None)
        if failed is not None:
            raise failed

    async def _recover(self, turn: int, error: Exception, playback: asyncio.TaskGroup) -> None:
        """The reply failed: its units keep what was already queued (heard as it plays), the
        rest is dropped; then the fallback line is said as a unit of its own. If that fails too,
        the turn ends silently: the next user turn is answered afresh."""
        stage, what = failure_of(error)
        cut = self._playback.open_units
        if self._prepared is not None:
            await self._prepared.cancel()
            self._prepared = None
        if cut:
            playback.create_task(self._playback.play_out(cut))
        if turn == 0:  # the greeting: nothing was asked, so nothing to ask again
            self._log.publish(ReplyFailed(turn, stage, what, "silent"))
            return
        self._log.publish(ReplyFailed(turn, stage, what, "fallback"))
        try:
            await self._say(playback, turn,
                            lambda speech: self._speak_hop(_pieces_of(FALLBACK_LINE), speech))
        except Exception as again:
            stage, what = failure_of(again)
            self._log.publish(ReplyFailed(turn, stage, what, "silent"))
            fallback = [unit for unit in self._playback.open_units
                        if all(unit is not earlier for earlier in cut)]
            if fallback:
                playback.create_task(self._playback.play_out(fallback))

    async def _hops(self, turn: int, prepared: PreparedReply | None, asked: str,
                    speech: Speech, said: str | None) -> None:
        if turn == 0:
            await self._speak_hop(_pieces_of(self._settings.greeting if said is None
                                             else said), speech)
            return
        if self.commands is not None and (words := await self.commands.answer(asked)) is not None:
            self._log.publish(CommandAnswered(turn))
            if prepared is not None:
                await self.discard(prepared, "a command")
            if words:
                await self._speak_hop(_pieces_of(words), speech)
            return
        if self._tool_jobs:
            # A tool from a cut reply still runs (its action happens): the next prompt waits
            # for its result.
            await asyncio.wait(set(self._tool_jobs))
        self._prepared = await self._take_prepared(turn, prepared)
        if self._prepared is not None:
            grounding = self._prepared.grounding
        else:
            grounding = await self._look_up(asked, self.memory.history.turns[:-1])
            self._used(turn, grounding)
        said = _said(grounding)
        if said is not None:  # the knowledge's own answer: no model
            await self._speak_hop(self._prepared.pieces() if self._prepared is not None
                                  else _pieces_of(said), speech)
            return
        allowed = self._settings.max_tool_hops
        used = 0
        for hop in itertools.count(1):  # ends: each hop returns, or runs a call or more
            if hop == 1 and self._prepared is not None:
                pieces = self._prepared.pieces()
            else:
                pieces = self._ask(turn, hop, _note(grounding))
            calls = await self._speak_hop(pieces, speech)
            if not calls:
                return
            if used + len(calls) > allowed:
                break
            for call in calls:
                await self._use_tool(turn, call)
            used += len(calls)
        self._log.publish(Notice(
            f"turn {turn}: the model asked for more than the {allowed} tool call(s) "
            "[tools] max_hops allows per turn; its reply ends here and the call(s) it asked "
            "for last were not run"))

    async def _speak_hop(self, pieces: AsyncIterator[str | ToolCall],
                         speech: Speech) -> list[ToolCall]:
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

    async def _voice(self, speech: Speech, tasks: asyncio.TaskGroup, turn: int) -> None:
        """Synthesize clauses in order and queue them on the speaker, unit after unit; the
        playback of each goes on in `tasks`."""
        while (item := await speech.get()) is not None:
            unit, clause = item
            if clause is None:
                tasks.create_task(self._playback.finish(unit))
                continue
            text_start, text_end = unit.audio_text_end, unit.audio_text_end + len(clause)
            if not clause.strip():
                unit.add_audio(0, (), text_start, text_end)
                continue
            audio = await self._prepared.audio_for(clause) if self._prepared is not None else None
            first = unit.audio_samples == 0 and unit.unit_id == self._first_unit_of_reply
            if audio is None:
                audio = await self._synthesize(clause, first)
            if first:
                audio = audio.without_leading_silence()  # the listener waits for this one
                if self._lead:
                    audio, self._lead = audio.led_by(self._lead), b""
            self._stage(turn, "first_piece")
            if self._playback.queue(unit, audio, text_start, text_end):
                tasks.create_task(self._announce_playback(unit, turn))

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
        await tagged("tool", asyncio.shield(job))

    def _open_unit(self) -> Unit:
        unit = self._playback.open(self._engines.tts.sample_rate)
        if self._first_unit_of_reply is None:
            self._first_unit_of_reply = unit.unit_id
        return unit

    async def _announce_playback(self, unit: Unit, turn: int) -> None:
        await self._playback.started(unit)
        self._stage(turn, "first_audio")

    async def stop(self) -> None:
        """Stop playback at once (no tail, queue dropped), cancel the reply's LLM and TTS work,
        and finalize every open unit where the device's played position leaves it."""
        reply, self._reply = self._reply, None
        if reply is None:
            return
        played = self._playback.interrupt()
        if not reply.done():
            reply.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait({reply})  # its error, if any, is taken by _check_reply
        self._playback.finalize_all(played)
        self.prewarm()


async def _pieces_of(text: str) -> AsyncIterator[str | ToolCall]:
    yield text


MODEL_STAGES = frozenset({"request", "first_token"})
"""Stages of a turn that only a model request has."""


def _said(grounding: Grounding | None) -> str | None:
    """The words the knowledge answers with itself (None: the model answers)."""
    return grounding.say if grounding is not None and grounding.how in SAID else None


def _note(grounding: Grounding | None) -> str:
    """The venue's information for the model's prompt ("" without)."""
    return grounding.note if grounding is not None else ""

