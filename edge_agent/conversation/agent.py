"""The loop: microphone -> VAD -> STT -> user turn -> LLM -> clauses -> TTS -> speaker.

One asyncio task listens; one task at a time speaks a reply. Blocking engines run on their
owner threads. Every unit opened is finalized here, once, from the speaker's played position.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field

from edge_agent.audio.device import Microphone, Speaker
from edge_agent.audio.unit_audio import UnitAudioWriter
from edge_agent.conversation.clauses import ClauseSplitter
from edge_agent.conversation.segmenter import Boundary, SegmenterSettings, SpeechSegmenter
from edge_agent.conversation.tools import Toolbox
from edge_agent.engines.base import (
    ChatMessage,
    LanguageModel,
    SpeechRecognizer,
    TextToSpeech,
    ToolCall,
    VoiceActivityDetector,
)
from edge_agent.events import (
    BargeIn,
    EventLog,
    LlmRequest,
    Notice,
    PlaybackStarted,
    ToolUsed,
    TurnDropped,
    UnitFinalized,
    UserSpeechEnded,
    UserSpeechStarted,
    UserTurn,
)
from edge_agent.heard.ledger import Finalize, Unit, UnitLedger
from edge_agent.heard.truncation import HeardPolicy
from edge_agent.memory.history import History, assemble_prompt
from edge_agent.owner import Owner, OwnerThread


@dataclass(frozen=True)
class ConversationSettings:
    system_prompt: str = "You are a helpful voice assistant. Answer in one or two short sentences."
    greeting: str = ""
    segmenter: SegmenterSettings = field(default_factory=SegmenterSettings)
    preroll_ms: int = 256
    """Audio kept from before the speech onset and fed to the recognizer with it."""
    barge_in_min_ms: int = 300
    """User speech this long while the agent talks interrupts it."""
    heard_policy: HeardPolicy = HeardPolicy.COMPLETED
    interrupted_marker: str = " [interrupted]"
    history_turns: int = 20
    max_tool_hops: int = 3
    """Rounds of tool calls one reply may make before it is ended."""


@dataclass(frozen=True)
class Engines:
    vad: VoiceActivityDetector
    stt: SpeechRecognizer
    llm: LanguageModel
    tts: TextToSpeech


class Conversation:
    def __init__(
        self,
        *,
        mic: Microphone,
        speaker: Speaker,
        engines: Engines,
        settings: ConversationSettings,
        log: EventLog,
        history: History | None = None,
        owner: Callable[[str], Owner] = OwnerThread,
        unit_audio: UnitAudioWriter | None = None,
        tools: Toolbox | None = None,
    ) -> None:
        self._mic = mic
        self._speaker = speaker
        self._engines = engines
        self._settings = settings
        self._log = log
        self.history = history or History()
        self._ledger = UnitLedger(settings.heard_policy)
        self._unit_audio = unit_audio
        self._stt_thread = owner("stt")
        self._llm_thread = owner("llm")
        self._tts_thread = owner("tts")
        self._tools_thread = owner("tools")
        self._tools = tools or Toolbox()
        self._tool_jobs: set[asyncio.Future[str]] = set()
        self._reply: asyncio.Task[None] | None = None
        self._failure: BaseException | None = None
        self._hearing = False

    @property
    def replying(self) -> bool:
        """True while a reply is being generated, synthesized or played."""
        return self._reply is not None and not self._reply.done()

    @property
    def busy(self) -> bool:
        """True while the user is talking or the agent is answering or speaking."""
        return self._hearing or self.replying

    async def run(self) -> None:
        """Greet (if configured) and converse until cancelled; then finalize what is open."""
        try:
            if self._settings.greeting:
                self._start_reply(turn=0)
            await self._listen()
        finally:
            await self._stop_speaking()
            for thread in (self._stt_thread, self._llm_thread, self._tts_thread,
                           self._tools_thread):
                thread.close()

    async def _listen(self) -> None:
        mic = self._mic
        frame_ms = 1000 * mic.frame_samples / mic.sample_rate
        segmenter = SpeechSegmenter(self._settings.segmenter, frame_ms)
        preroll: deque[bytes] = deque(maxlen=max(1, round(self._settings.preroll_ms / frame_ms)))
        frames_seen = 0
        user_turns = 0
        stt = self._engines.stt
        async for frame in mic.frames():
            if self._failure is not None:
                raise self._failure
            frames_seen += 1
            boundary = segmenter.push(self._engines.vad.speech_probability(frame))
            preroll.append(frame)
            audio_time = frames_seen * frame_ms / 1000
            if boundary is Boundary.START:
                self._hearing = True
                self._log.publish(UserSpeechStarted(audio_time - segmenter.speech_ms / 1000))
                await self._stt_thread.call(stt.begin)
                await self._stt_thread.call(stt.feed, b"".join(preroll))
            elif segmenter.in_speech or boundary is Boundary.END:
                await self._stt_thread.call(stt.feed, frame)
            if (segmenter.in_speech and self.replying
                    and segmenter.speech_ms >= self._settings.barge_in_min_ms):
                await self._barge_in()
            if boundary is Boundary.END:
                self._log.publish(UserSpeechEnded(audio_time))
                transcript = await self._stt_thread.call(stt.end)
                self._hearing = False
                if not transcript.text.strip():
                    self._log.publish(TurnDropped(audio_time))
                    continue
                self._log.publish(UserTurn(
                    transcript.text, tuple((w.text, w.start, w.end) for w in transcript.words)
                ))
                self.history.add_user(transcript.text)
                await self._stop_speaking()
                user_turns += 1
                self._start_reply(user_turns)

    def _prompt(self) -> list[ChatMessage]:
        return assemble_prompt(self._settings.system_prompt, self.history.turns,
                               self._settings.history_turns, self._settings.interrupted_marker)

    def _ask(self, turn: int, hop: int) -> AsyncIterator[str | ToolCall]:
        messages = self._prompt()
        self._log.publish(LlmRequest(turn, hop, tuple(dict(m) for m in messages)))
        llm, tools = self._engines.llm, self._tools.specs()

        def generate() -> Iterator[str | ToolCall]:
            return llm.stream(messages, tools)

        return self._llm_thread.stream(generate)

    def _start_reply(self, turn: int) -> None:
        """Answer user turn `turn` (0: the greeting, no model involved)."""
        self._reply = asyncio.create_task(self._answer(turn), name=f"reply-{turn}")
        self._reply.add_done_callback(self._check_reply)

    def _check_reply(self, reply: asyncio.Task[None]) -> None:
        if not reply.cancelled() and reply.exception() is not None:
            error = reply.exception()
            # An engine failing inside the reply's task group: surface the engine's own error.
            while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
                error = error.exceptions[0]
            self._failure = error

    async def _answer(self, turn: int) -> None:
        """One reply: model hops (each may speak, call tools, or both) and their speech.

        Text streams into clauses that are synthesized and played while the model goes on;
        a hop's text is one unit, opened at its first word, so a hop that only calls tools
        opens none. Units play back to back and each is finalized when its playback ends.
        """
        speech: asyncio.Queue[tuple[Unit, str | None] | None] = asyncio.Queue()
        async with asyncio.TaskGroup() as tasks:
            tasks.create_task(self._voice(speech, tasks))
            try:
                if turn == 0:
                    await self._speak_hop(_pieces_of(self._settings.greeting), speech)
                    return
                if self._tool_jobs:
                    # A tool from a cut reply still runs (its action happens): the next prompt
                    # waits for its result.
                    await asyncio.wait(set(self._tool_jobs))
                for hop in range(1, self._settings.max_tool_hops + 2):
                    calls = await self._speak_hop(self._ask(turn, hop), speech)
                    if not calls:
                        return
                    for call in calls:
                        await self._use_tool(turn, call)
                self._log.publish(Notice(
                    f"turn {turn}: the model was still calling tools after "
                    f"{self._settings.max_tool_hops} rounds; its reply ends here"))
            finally:
                speech.put_nowait(None)

    async def _speak_hop(self, pieces: AsyncIterator[str | ToolCall],
                         speech: asyncio.Queue[tuple[Unit, str | None] | None]) -> list[ToolCall]:
        """Stream one hop's text into clauses for the voice; returns the tools it called."""
        calls: list[ToolCall] = []
        unit: Unit | None = None
        leading = ""
        splitter = ClauseSplitter()
        async for piece in pieces:
            if isinstance(piece, ToolCall):
                calls.append(piece)
                continue
            if unit is None:
                leading += piece
                if not leading.strip():
                    continue
                piece, leading = leading, ""
                unit = self._ledger.open(self._engines.tts.sample_rate)
            unit.add_text(piece)
            for clause in splitter.push(piece):
                speech.put_nowait((unit, clause))
        if unit is None and not calls:
            unit = self._ledger.open(self._engines.tts.sample_rate)  # an empty reply
        if unit is not None:
            speech.put_nowait((unit, splitter.flush()))
            speech.put_nowait((unit, None))
        return calls

    async def _voice(self, speech: asyncio.Queue[tuple[Unit, str | None] | None],
                     tasks: asyncio.TaskGroup) -> None:
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
            audio = await self._tts_thread.call(self._engines.tts.synthesize, clause)
            unit.add_audio(audio.samples, audio.words, text_start, text_end)
            device_frame = self._speaker.write(audio.pcm)
            if self._unit_audio is not None:
                self._unit_audio.add(unit.unit_id, audio.pcm)
            if unit.device_start is None:
                unit.device_start = device_frame
                tasks.create_task(self._announce_playback(unit, device_frame))

    async def _finish(self, unit: Unit) -> None:
        """Wait until the unit has played out, then finalize it (and any opened before it)."""
        if unit.device_start is not None:
            await self._speaker.wait_played(unit.device_start + unit.audio_samples)
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
            self.history.add_tool(call, result)
            self._log.publish(ToolUsed(turn, call, result))

        self._tool_jobs.add(job)
        job.add_done_callback(record)
        await asyncio.shield(job)

    async def _announce_playback(self, unit: Unit, device_frame: int) -> None:
        await self._speaker.wait_played(device_frame + 1)
        self._log.publish(PlaybackStarted(unit.unit_id))

    async def _barge_in(self) -> None:
        playing = self._ledger.open_units[0].unit_id if self._ledger.open_units else None
        self._log.publish(BargeIn(playing))
        await self._stop_speaking()

    async def _stop_speaking(self) -> None:
        """Stop playback at once, cancel the reply's work, finalize every open unit."""
        reply, self._reply = self._reply, None
        if reply is None:
            return
        played = self._speaker.interrupt()
        if not reply.done():
            reply.cancel()
        with contextlib.suppress(Exception, asyncio.CancelledError):
            await reply  # its failure, if any, was taken by _check_reply
        self._record(self._ledger.finalize_all(played))

    def _record(self, finalizes: list[Finalize]) -> None:
        for finalize in finalizes:
            self.history.add_finalize(finalize)
            self._log.publish(UnitFinalized(finalize))
            if self._unit_audio is not None:
                self._unit_audio.finish(finalize)


async def _pieces_of(text: str) -> AsyncIterator[str | ToolCall]:
    yield text
