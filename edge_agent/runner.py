"""Running a conversation: a scripted call on the virtual audio pair (`run_demo`) or the live
agent on the sound devices (`run_live`), each recorded in the memory database and returned as
its session record. The parts come from the composition root (`edge_agent.app`)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import tempfile
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from edge_agent.app import (
    ConversationParts,
    Memory,
    build_conversation,
    build_engines,
    build_screen,
    build_summarizer,
    close_memory,
    conversation_parts,
    microphone_processing,
    open_knowledge,
    open_memory,
    steered,
)
from edge_agent.audio.array import MicArray
from edge_agent.audio.echo_cancel import MicrophoneProcessing
from edge_agent.audio.pcm import resample
from edge_agent.audio.room_acoustics import RoomResponses, render
from edge_agent.audio.unit_audio import UnitAudioWriter
from edge_agent.audio.virtual import VirtualMicrophone, VirtualSpeaker
from edge_agent.clock import Clock, MonotonicClock
from edge_agent.config import Config
from edge_agent.console import describe
from edge_agent.conversation.agent import Conversation, Engines
from edge_agent.demo.caller import ScriptedCaller
from edge_agent.demo.callfile import (
    CallerLine,
    CallScript,
    call_config,
    call_tools,
    check_reachable,
)
from edge_agent.demo.talkers import room_talk
from edge_agent.engines.base import TextToSpeech
from edge_agent.engines.heap import release_freed_heap
from edge_agent.errors import ConfigError, EdgeAgentError, OutputError
from edge_agent.events import EventLog, LoggedEvent, Notice, ReplyFailed
from edge_agent.house.link import HouseLink
from edge_agent.knowledge.live import VenueKnowledge
from edge_agent.memory.record import SessionRecord
from edge_agent.memory.writer_lock import WriterLock
from edge_agent.printable import clip
from edge_agent.screen.server import ScreenServer, ScreenUnavailableError
from edge_agent.service.journal import session_line, session_tagged
from edge_agent.service.notify import SystemdNotifier, supervised
from edge_agent.service.status import LISTENING, device_status, status_after

Printer = Callable[[str], None]
IDLE_TO_END = 1.5
"""Seconds the demo waits with nothing happening after the last caller line before it ends."""
TALKERS_TAIL_S = 20.0
"""After its last line, a call with background talkers waits at most this long for the agent to
finish: that room never falls quiet, and a conversation that takes them for the caller is never
idle."""


@dataclass
class Reporter:
    """Where a run's events go: one console line each and, under systemd, the STATUS line."""

    printer: Printer = print
    warner: Printer | None = None
    """Where notes (a device lost or back) and failed replies go, when not to `printer`: a
    journal stores them at warning priority."""
    transcripts: bool = True
    """Show what was said; else only how many words (a public kiosk's journal)."""
    notifier: SystemdNotifier | None = None
    session: Callable[[], str | None] | None = None
    """The open session's id, put at the start of every line (a journal mixes sessions)."""

    down: set[str] = field(default_factory=set)
    """Devices that are gone: while one is, STATUS keeps saying so."""
    on_listening: Callable[[], None] | None = None
    """Called each time the agent goes back to listening (a reply done or cut)."""

    def event(self, entry: LoggedEvent) -> None:
        line = describe(entry, self.transcripts)
        if line:
            warning = isinstance(entry.event, Notice | ReplyFailed)
            self.say(line, self.warner if warning else None)
        status = status_after(entry.event)
        if status is not None and self.notifier is not None and not self.down:
            self.notifier.status(status)
        if status == LISTENING and self.on_listening is not None:
            self.on_listening()

    def device(self, device: str, state: str) -> None:
        """`device` ("microphone", "speaker") is "lost", "waiting" or "back"."""
        if state == "back":
            self.down.discard(device)
        else:
            self.down.add(device)
        if self.notifier is not None:
            shown = sorted(self.down)
            self.notifier.status(device_status(shown[0], "lost") if shown
                                 else device_status(device, "back"))

    def say(self, line: str, printer: Printer | None = None) -> None:
        session = self.session() if self.session is not None else None
        (printer or self.printer)(session_line(line, session))


async def _report_events(queue: asyncio.Queue[LoggedEvent], reporter: Reporter) -> None:
    while True:
        reporter.event(await queue.get())


def _check_heard_by(call: CallScript, array: MicArray | None) -> None:
    """A call heard by an array needs places for the array's microphones."""
    if array is not None and call.room.layout is None:
        raise ConfigError(call.source, "room.size_m",
                          f"the config listens with a microphone array ({array.name}); a call "
                          "heard by an array needs a room where everyone has a place: give "
                          "[room] size_m (e.g. [6, 5, 3])")


def _room_responses(call: CallScript, array: MicArray | None, rate: int
                    ) -> RoomResponses | None:
    """What each microphone hears in the call's room, where it gives everyone a place."""
    layout = call.room.layout
    if layout is None:
        return None
    microphones = np.zeros((1, 3)) if array is None else array.centred_m
    talkers_at = [layout.talker_at(i, t.at_m) for i, t in enumerate(call.talkers)]
    try:
        return render(layout, call.room.reverb_ms, microphones, talkers_at, rate)
    except ValueError as exc:
        raise ConfigError(call.source, "room.reverb_ms", str(exc)) from None
    except ImportError as exc:
        raise ConfigError(call.source, "room.size_m", str(exc)) from None


async def run_demo(config: Config, call: CallScript, printer: Printer = print,
                   clock: Clock | None = None, max_seconds: float = 300.0,
                   audio_dir: Path | None = None, db_path: Path | None = None) -> SessionRecord:
    """A whole call through the real engines on the virtual audio pair; returns the record.
    With `audio_dir`, each unit's played audio is written there as `<unit_id>.wav`. The call
    is recorded in `db_path` (resumed from it if a session there is open), else in a private
    database that lives for this call only (so scripted calls are reproducible)."""
    clock = clock or MonotonicClock()
    check_reachable(call, max_seconds)
    array = config.audio.mic_array()
    _check_heard_by(call, array)
    tools = call_tools(call, config.tools.enabled, config.source)
    if tools is not None:
        config = dataclasses.replace(config, tools=dataclasses.replace(config.tools,
                                                                       enabled=tools))
    config = call_config(call, config)
    # A user's database is held from the start: a second writer is refused before it spends
    # seconds loading models, and never interleaves its sessions with ours.
    lock = WriterLock.acquire(db_path) if db_path is not None else None
    with lock or contextlib.nullcontext(), \
            tempfile.TemporaryDirectory(prefix="edge-agent-demo-") as private:
        db_path = db_path or Path(private) / "edge-agent.db"
        parts = conversation_parts(config, call.greeting, db_path)
        # repeatable: the caller's lines are the same audio in every run of the call
        engines, names = await asyncio.to_thread(
            lambda: build_engines(config, call.replies, repeatable=True))
        summarizer = await asyncio.to_thread(
            build_summarizer, config, engines.llm)
        speaker = VirtualSpeaker(clock, engines.tts.sample_rate)
        rate = engines.vad.sample_rate  # the microphone delivers what the VAD takes
        lines = await asyncio.to_thread(_caller_audio, engines.tts, call, rate)
        responses = await asyncio.to_thread(_room_responses, call, array, rate)
        others = await asyncio.to_thread(room_talk, call.talkers, engines.tts,
                                         [pcm for _, pcm in lines], rate, call.room.seed,
                                         responses)
        said_into = VirtualMicrophone(
            clock, rate, echo_of=speaker, room=call.room, talk=others, responses=responses,
            wiring=None if array is None else (array.channels, array.input_channels))
        mic = said_into if array is None else steered(config, array, said_into, speaker)
        log = EventLog(clock)
        processing = microphone_processing(config, mic.sample_rate,
                                           speaker_audible=call.echo_gain > 0)
        names = _with_processing(names, processing)
        memory = await open_memory(config, parts, log, names, summarizer, db_path, lock)
        knowledge = await _open_knowledge(config, db_path, parts, memory)
        unit_audio = UnitAudioWriter(audio_dir) if audio_dir is not None else None
        talk = build_conversation(config, parts, mic=mic, speaker=speaker, engines=engines,
                                  log=log, memory=memory.conversation, unit_audio=unit_audio,
                                  processing=processing, knowledge=knowledge)

        async def greeting_begun() -> bool:
            await talk.started.wait()
            return talk.replying

        caller = ScriptedCaller(clock, said_into, log, lines, agent_speaks_first=greeting_begun)

        async def call_then_idle(talking: asyncio.Task[None]) -> None:
            started = clock.now()
            await _until_first(talking, caller.run(), clock, max_seconds)
            if caller.unsaid or caller.cut_short:
                log.publish(Notice(f"the call reached its {max_seconds:g} s limit"
                                   + _unfinished(caller.cut_short, caller.unsaid)))
                return
            left = max_seconds - (clock.now() - started)
            if call.talkers:
                left = min(left, TALKERS_TAIL_S)
            await _until_first(talking, _idle(talk, log, clock), clock, left)

        return await _session(talk, log, memory, Reporter(printer), call_then_idle,
                              unit_audio, knowledge, build_screen(config, talk, log),
                              parts.house)


def _caller_audio(tts: TextToSpeech, call: CallScript, rate: int) -> list[tuple[CallerLine, bytes]]:
    return [(line, resample(tts.synthesize(line.say).pcm, tts.sample_rate, rate))
            for line in call.lines]


async def _open_knowledge(config: Config, db_path: Path | None, parts: ConversationParts,
                          memory: Memory) -> VenueKnowledge | None:
    """The venue's knowledge, indexed in the memory database (its error closes the memory)."""
    try:
        return await asyncio.to_thread(open_knowledge, config, db_path or config.db_path,
                                       parts.tools.names)
    except BaseException:
        await close_memory(memory)
        raise


async def _session(conversation: Conversation, log: EventLog, memory: Memory,
                   reporter: Reporter, hold: Callable[[asyncio.Task[None]], Awaitable[None]],
                   unit_audio: UnitAudioWriter | None,
                   knowledge: VenueKnowledge | None,
                   screen: ScreenServer | None = None,
                   house: HouseLink | None = None) -> SessionRecord:
    """Converse while `hold` runs, then stop (finalizing what is open) and read the record.
    `screen`: the kiosk's screen, served meanwhile (one that cannot listen is said, and the
    agent goes on without it). `house`: the link to the house's broker, kept meanwhile."""
    events = log.subscribe()
    printing = asyncio.create_task(_report_events(events, reporter))
    linked = (asyncio.create_task(house.run(log, log.clock, conversation.announce),
                                  name="mqtt") if house is not None else None)
    if screen is not None:
        try:
            await screen.start()
        except ScreenUnavailableError as exc:
            log.publish(Notice(f"{exc}; going on without it"))
            screen = None
    talking = asyncio.create_task(conversation.run())
    try:
        await hold(talking)
    finally:
        talking.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await talking
        if linked is not None:  # after the conversation: its last state is published
            linked.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await linked
        if screen is not None:
            await screen.close()
        printing.cancel()
        while not events.empty():  # what happened last is said too
            reporter.event(events.get_nowait())
        refused: OutputError | None = None
        try:
            if unit_audio is not None:
                written = await asyncio.to_thread(unit_audio.close)
                reporter.say(f"unit audio: {len(written)} file(s) in {unit_audio.directory}")
        except OutputError as exc:  # a link or a device where a file goes: the rest are written
            refused = exc
        finally:
            if knowledge is not None:
                await asyncio.to_thread(knowledge.close)
            record = await close_memory(memory)
    if refused is not None:
        raise RecordedOutputError(refused, record)
    return record


class RecordedOutputError(OutputError):
    """A unit audio file could not be written; the session itself ended well, and its record
    is here to be kept (`--json`) before the error is reported."""

    def __init__(self, error: OutputError, record: SessionRecord) -> None:
        EdgeAgentError.__init__(self, str(error))
        self.record = record


async def _until_first(talking: asyncio.Task[None], work: Awaitable[Any], clock: Clock,
                       max_seconds: float | None) -> None:
    """Run `work` while the conversation runs; a conversation failure surfaces at once."""
    task = asyncio.ensure_future(work)
    waiting: set[asyncio.Future[Any]] = {task, talking}
    limit = asyncio.ensure_future(clock.sleep(max_seconds)) if max_seconds is not None else None
    if limit is not None:
        waiting.add(limit)
    done, _ = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
    if limit is not None:
        limit.cancel()
    if talking in done:
        task.cancel()
        talking.result()  # raises the engine's error
    if task not in done:
        task.cancel()
        return
    task.result()


def _with_processing(names: dict[str, str],
                     processing: MicrophoneProcessing | None) -> dict[str, str]:
    """The engines a session records, the microphone's cleaning among them when it runs."""
    return {**names, **processing.engines} if processing is not None else names


def _unfinished(cut_short: CallerLine | None, unsaid: list[CallerLine]) -> str:
    """What of the caller's script a call stopped at its limit did not finish, in words."""
    parts = []
    if cut_short is not None:
        parts.append(f"while the caller was saying {clip(cut_short.say, 80)!r}")
    if unsaid:
        parts.append(f"with {len(unsaid)} caller line(s) never said, from "
                     f"{clip(unsaid[0].say, 80)!r}")
    return " " + " and ".join(parts)


async def _idle(conversation: Conversation, log: EventLog, clock: Clock) -> None:
    quiet_since = clock.now()
    seen = len(log.entries)
    while True:
        await clock.sleep(0.1)
        if conversation.busy or len(log.entries) != seen:
            quiet_since = clock.now()
            seen = len(log.entries)
        elif clock.now() - quiet_since >= IDLE_TO_END:
            return


async def run_live(config: Config, stop: asyncio.Event, printer: Printer = print,
                   warner: Printer | None = None,
                   max_seconds: float | None = None, audio_dir: Path | None = None,
                   companion: Callable[[EventLog, Engines], Awaitable[None]] | None = None,
                   loaded: tuple[Engines, dict[str, str]] | None = None,
                   notifier: SystemdNotifier | None = None,
                   lock: WriterLock | None = None) -> SessionRecord:
    """The live loop on PyAudio devices until `stop` is set (or `max_seconds` pass). With a
    `companion` (a benchmark's caller), until it is done and the conversation is idle.
    `loaded`: engines already loaded, with their names (else the config's are loaded).
    `notifier` (systemd's, when run as a service) hears READY=1 once the models are loaded and
    the devices open, STATUS= lines as the conversation goes, and watchdog pings from this
    loop. `lock`: the memory database's writer lock, if the caller holds it already."""
    from edge_agent.app.audio_health import report_audio_health
    from edge_agent.audio.portaudio_host import PortAudioHost
    from edge_agent.audio.portaudio_start import open_pyaudio
    from edge_agent.audio.pyaudio_io import find_device
    from edge_agent.audio.realtime import AudioThreads
    from edge_agent.audio.resilient import ResilientMicrophone
    from edge_agent.audio.resilient_speaker import ResilientSpeaker

    clock = MonotonicClock()
    parts = conversation_parts(config)
    threads = AudioThreads(config.audio.realtime_priority)
    host = PortAudioHost(open_pyaudio(), clock, threads=threads)
    reporter = Reporter(printer, warner, config.log.transcripts, notifier)
    # A reply's transient buffers (the voice's and the recognizer's activations, llama.cpp's
    # batches) are freed into the C heap, which keeps them: a kiosk that answered once would
    # hold its peak for good. Given back, off the loop, each time the agent listens again.
    trims: set[asyncio.Future[bool]] = set()  # referenced until done

    def trim_heap() -> None:
        trim = asyncio.ensure_future(asyncio.to_thread(release_freed_heap))
        trims.add(trim)
        trim.add_done_callback(trims.discard)

    reporter.on_listening = trim_heap
    logs: list[EventLog] = []  # the log exists once the models are loaded
    losses = 0

    def on_state(device: str, state: str, detail: str) -> None:
        nonlocal losses
        if state == "lost":
            losses += 1
        line = f"{device} {state}: {detail}"
        if logs:
            logs[0].publish(Notice(line))
        else:
            reporter.say(f"edge-agent: {line}", reporter.warner)
        reporter.device(device, state)

    try:
        array = config.audio.mic_array()
        device_mic = ResilientMicrophone(host, config.audio.input_device, clock, on_state,
                                         channels=1 if array is None else array.input_channels)
        find_device(host.pa, config.audio.output_device, output=True)  # before models load
        if loaded is None:
            loaded = await asyncio.to_thread(build_engines, config, crash_checked=True)
        engines, names = loaded
        speaker = ResilientSpeaker(host, config.audio.output_device, engines.tts.sample_rate,
                                   clock, on_state, period=config.audio.output_period)
        mic = device_mic if array is None else steered(config, array, device_mic, speaker)
        log = EventLog(clock)
        logs.append(log)
        summarizer = await asyncio.to_thread(
            build_summarizer, config, engines.llm)
        processing = microphone_processing(config, mic.sample_rate, speaker_audible=True)
        names = _with_processing(names, processing)
        memory = await open_memory(config, parts, log, names, summarizer, lock=lock, venue=True)
        knowledge = await _open_knowledge(config, None, parts, memory)
        unit_audio = UnitAudioWriter(audio_dir) if audio_dir is not None else None
        talk = build_conversation(config, parts, mic=mic, speaker=speaker, engines=engines,
                                  log=log, memory=memory.conversation, unit_audio=unit_audio,
                                  processing=processing, knowledge=knowledge)
        def session_id() -> str | None:
            return memory.conversation.session_id

        reporter.session = session_id

        async def until_stopped(talking: asyncio.Task[None]) -> None:
            printer("edge-agent: listening (Ctrl-C to stop)")
            if notifier is not None:
                notifier.ready()
                notifier.status(LISTENING)
            # Once the conversation runs: what it publishes reaches the console and the record.
            health = asyncio.create_task(report_audio_health(threads, lambda: losses, log),
                                         name="audio-health")
            try:
                if companion is None:
                    await _until_first(talking, stop.wait(), clock, max_seconds)
                    return
                await _until_first(talking, companion(log, engines), clock, max_seconds)
                await _until_first(talking, _idle(talk, log, clock), clock, max_seconds)
            finally:
                health.cancel()
                await asyncio.wait([health])  # its last word is in the record

        try:
            with session_tagged(session_id):
                async with supervised(notifier or SystemdNotifier({})):
                    return await _session(talk, log, memory, reporter, until_stopped,
                                          unit_audio, knowledge, build_screen(config, talk, log),
                                          parts.house)
        finally:
            speaker.close()
    finally:
        host.terminate()
