"""A recorded session played again through the current code, on the virtual clock.

The ears and the judgement are the configured ones: the VAD, the recognizer, the turn-taking
rules and the backchannel classifier, the whole loop. What the agent said is the recording's
(`agent_script`, `voice`), the caller says what the recording heard (`segments`, `placement`)
and the microphone and speaker are the clock-paced virtual pair. Every engine is called inline
on the loop (`InlineOwner`): its work takes no virtual time and the order of everything is
fixed, so a replay gives the same result every time and runs faster than the call did.
Nothing is written: memory is in-process, tools return their recorded results.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from edge_agent.app import build_conversation, build_engines, conversation_parts
from edge_agent.audio.device import MIC_RATE
from edge_agent.audio.pcm import resample
from edge_agent.audio.room import Room
from edge_agent.audio.virtual import VirtualMicrophone
from edge_agent.clock import VirtualClock
from edge_agent.config import Config
from edge_agent.conversation.agent import Conversation, Engines
from edge_agent.engines.llm.scripted import ScriptedLanguageModel
from edge_agent.errors import ConfigError
from edge_agent.events import EchoIgnored, EventLog, Notice
from edge_agent.memory.kept_audio import AGENT, CALLER, AudioClip
from edge_agent.memory.record import SessionRecord, record_events
from edge_agent.owner import InlineOwner
from edge_agent.replay.agent_script import AgentScript, agent_script, recorded_toolbox
from edge_agent.replay.decisions import Decision, Row, compare, decisions
from edge_agent.replay.devices import AlignedSpeaker, ReplayCaller, unit_starts
from edge_agent.replay.placement import ReplayLine, place_lines
from edge_agent.replay.segments import caller_segments, caller_source
from edge_agent.replay.timeline import FRAME_SECONDS, Timeline, build_timeline
from edge_agent.replay.voice import RecordedSpeech, recorded_units
from edge_agent.runner import IDLE_TO_END

Printer = Callable[[str], None]
OVERTIME_S = 60.0
"""Virtual seconds a replay may run past the recording's end before it is stopped."""
MAX_REPLAY_S = 24 * 3600.0
"""Virtual seconds a replay may span (its runs laid end to end, each from just before its
first event): a replay steps through every 32 ms frame of it, so a recorded moment of 1e9 s
(in range for a record) would keep it busy for years."""
SETTLE_TURNS = 100
"""Loop turns given to the work a frame triggers before the clock moves on (the loop must
never fall behind the microphone, as a real one keeps up with real time)."""


@dataclass(frozen=True)
class ReplayResult:
    session_id: str
    caller_audio: str
    """Where the caller's audio came from: "kept clips", "call lines" or "transcripts"."""
    lines: tuple[ReplayLine, ...]
    script: AgentScript
    recorded: tuple[Decision, ...]
    replayed: tuple[Decision, ...]
    rows: tuple[Row, ...]
    notes: tuple[str, ...]
    call_seconds: float
    """Virtual seconds the replay ran."""
    wall_seconds: float
    """Real seconds it took (models loaded, lines spoken again, the call replayed)."""
    load_seconds: float = 0.0
    """Of which loading the models."""


async def replay_session(config: Config, record: SessionRecord, clips: Sequence[AudioClip],
                         printer: Printer = print, echo_gain: float = 0.0) -> ReplayResult:
    """Replay `record` (a session record) with `clips` (its kept audio, if any) through the
    engines and rules of `config`; `echo_gain`: the microphone hears the agent that loud (a
    demo's `echo_gain`, which the record does not keep)."""
    began = time.monotonic()
    replay_timeline(config, record)  # refused before the models load
    printer(f"replaying session {record['session_id']}: loading models...")
    # The language model is the scripted one (`replay_with` gives it the recorded replies):
    # nothing of the configured model is loaded.
    # repeatable, as a demo loads it: a demo's caller lines come out as they did in the demo
    engines, _ = await asyncio.to_thread(lambda: build_engines(config, (), repeatable=True))
    loaded = time.monotonic()
    voice = engines.tts

    def speak(text: str) -> bytes:
        return resample(voice.synthesize(text).pcm, voice.sample_rate, MIC_RATE)

    result = await replay_with(config, engines, record, clips, speak, printer, echo_gain)
    return dataclasses.replace(result, wall_seconds=time.monotonic() - began,
                               load_seconds=loaded - began)


async def replay_with(config: Config, engines: Engines, record: SessionRecord,
                      clips: Sequence[AudioClip], speak: Callable[[str], bytes],
                      printer: Printer = print, echo_gain: float = 0.0) -> ReplayResult:
    """`replay_session` with the engines loaded: `engines.vad` and `engines.stt` hear the
    call, `engines.tts` is the voice for what the recording has no timings or sound for, and
    `speak` says caller lines again (text -> int16 at 16 kHz). The language model is replaced
    by the recorded replies."""
    began = time.monotonic()
    timeline = replay_timeline(config, record)
    script = agent_script(record["llm_requests"], timeline)
    caller_clips = [clip for clip in clips if clip.kind == CALLER]
    source = caller_source(timeline, caller_clips)
    segments = await asyncio.to_thread(caller_segments, timeline, caller_clips, speak, MIC_RATE)
    lines = place_lines(segments, timeline)
    played = {clip.ref: resample(clip.pcm, clip.sample_rate, engines.tts.sample_rate)
              for clip in clips if clip.kind == AGENT}
    speech = RecordedSpeech(recorded_units(record["units"], played), engines.tts)
    printer(f"replaying {timeline.end:.1f} s: {len(lines)} caller line(s) from {source}, "
            f"{len(script.replies)} model repl(ies), on the virtual clock...")
    clock = VirtualClock()
    log = EventLog(clock)
    talk, caller = _conversation(
        config, script, timeline, lines,
        dataclasses.replace(engines, llm=ScriptedLanguageModel(script.replies), tts=speech),
        clock, log, echo_gain)
    await _drive(talk, caller, clock, log, timeline.end + OVERTIME_S, printer)
    recorded = decisions(record_events(record))
    replayed = decisions(log.entries)
    notes = [*script.notes, *_notes(timeline, caller, speech, log, source, echo_gain)]
    return ReplayResult(record["session_id"], source, tuple(lines), script,
                        tuple(recorded), tuple(replayed), tuple(compare(recorded, replayed)),
                        tuple(notes), clock.now(), time.monotonic() - began)


def replay_timeline(config: Config, record: SessionRecord) -> Timeline:
    """The record's events on the replay's timeline; ConfigError if it spans more than
    `MAX_REPLAY_S`."""
    timeline = build_timeline(record_events(record),
                              max(1, round(config.vad.min_speech_ms / 1000 / FRAME_SECONDS)))
    if timeline.end > MAX_REPLAY_S:
        raise ConfigError(f"session {record['session_id']}", "events",
                          f"spans {timeline.end / 3600:.2f} hours on the replay's timeline "
                          f"(each run from just before its first event); a replay plays at most "
                          f"{MAX_REPLAY_S / 3600:g} hours")
    return timeline


def _conversation(config: Config, script: AgentScript, timeline: Timeline,
                  lines: Sequence[ReplayLine], engines: Engines, clock: VirtualClock,
                  log: EventLog, echo_gain: float) -> tuple[Conversation, ReplayCaller]:
    parts = conversation_parts(config, script.greeting,
                               tools=recorded_toolbox(script.tool_results), effects=False)
    parts = dataclasses.replace(parts, settings=dataclasses.replace(
        parts.settings, session_start=script.session_start, prefix_state_dir=None))
    line_starts: list[float] = []  # the caller's, as it says them; the speaker follows them
    speaker = AlignedSpeaker(clock, engines.tts.sample_rate, log,
                             unit_starts(timeline, lines, engines.tts.sample_rate), line_starts)
    mic = VirtualMicrophone(clock, MIC_RATE, echo_of=speaker, room=Room(echo_gain=echo_gain))

    # No memory: nothing of a replay is written.
    talk = build_conversation(config, parts, mic=mic, speaker=speaker, engines=engines, log=log,
                              owner=InlineOwner)
    return talk, ReplayCaller(clock, mic, log, lines, line_starts)


async def _drive(talk: Conversation, caller: ReplayCaller, clock: VirtualClock, log: EventLog,
                 limit: float, printer: Printer) -> None:
    """Move the clock a frame at a time until the caller is done and the agent has been idle
    for `IDLE_TO_END`, as a demo ends (or `limit` is reached); then stop the conversation
    (what is open is finalized where it stands)."""
    talking = asyncio.create_task(talk.run())
    calling = asyncio.create_task(caller.run())
    quiet_since, seen, shown = 0.0, 0, 0.0
    try:
        while clock.now() < limit:
            await clock.advance(FRAME_SECONDS, settle_turns=SETTLE_TURNS)
            if talking.done():
                talking.result()  # the loop's own error
                break
            if clock.now() - shown >= 10.0:
                shown = clock.now()
                printer(f"  ... {shown:.0f} s replayed")
            if not calling.done() or talk.busy or len(log.entries) != seen:
                quiet_since, seen = clock.now(), len(log.entries)
            elif clock.now() - quiet_since >= IDLE_TO_END:
                calling.result()
                break
        else:
            log.publish(Notice(f"the replay reached its limit ({limit:.0f} s of virtual time) "
                               "before the call was over"))
    finally:
        for task in (calling, talking):
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


def _notes(timeline: Timeline, caller: ReplayCaller, speech: RecordedSpeech, log: EventLog,
           source: str, echo_gain: float) -> list[str]:
    notes = []
    if source == "call lines":
        notes.append("the caller's audio is the call lines spoken again by the seeded voice, "
                     "as the demo spoke them: the same sound unless the voice or edge-agent "
                     "changed since (record with [memory] keep_audio = true to keep the sound)")
    elif source != "kept clips":
        notes.append(f"the caller's audio is the {source} spoken again by the voice, not the "
                     "recorded sound (a synthesized voice, not the caller's): differences can "
                     "come from that; record with [memory] keep_audio = true for an exact "
                     "replay")
    if any(not run.pinned for run in timeline.runs):
        notes.append("a run with no speech ending in it: its frames could not be lined up")
    if len(timeline.runs) > 1:
        notes.append(f"the session spans {len(timeline.runs)} runs (restarts); they are "
                     "replayed one after the other as one run")
    if speech.untimed:
        notes.append(f"{len(speech.untimed)} clause(s) had no recorded timings and were "
                     f"spoken by the voice as it speaks now (first: {speech.untimed[0]!r})")
    if caller.unsaid:
        notes.append(f"{len(caller.unsaid)} caller line(s) never said")
    echoes = len(timeline.of_type(EchoIgnored))
    if echoes and not echo_gain and source != "kept clips":
        notes.append(f"the recording ignored the agent's echo {echoes} time(s): replay with "
                     "--echo-gain (a demo's echo_gain, e.g. 0.4 for `demo --call echo`) to "
                     "let the microphone hear the agent")
    notes.extend(f"replay: {entry.event.text}" for entry in log.entries
                 if isinstance(entry.event, Notice))
    return notes
