"""`bench rooms`' calls: scripted calls through the real engines on the virtual audio pair
(`runner.run_demo`) in a simulated room, and what each caller line became, read off the call's
event log.

A caller line's **onset** is its first loud sample (`CallerSpoke` plus its speech offset); the
agent's playback **stopped** when the loop paused it on the caller's speech (`PlaybackPaused`,
with `[turns] pause_on_speech`) if that pause led to the barge-in, else at the `BargeIn`
itself: the simulator's speaker goes silent at that instant. Playback already paused at the
onset (on the agent's own echo) counts as stopped at once, and the line says so. An
interruption is **taken** when a `BargeIn` follows its onset before the next line; what the
agent **heard** of a line is the `UserTurn`s before the next line (nothing, when its words
were dropped as the agent's own voice: every word counts as an error then).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from edge_agent.audio.room import Room
from edge_agent.bench.wer import word_errors
from edge_agent.config import Config
from edge_agent.demo.callfile import CallerLine, CallScript
from edge_agent.demo.talkers import Talker
from edge_agent.events import (
    BargeIn,
    CallerSpoke,
    EchoIgnored,
    LlmRequest,
    LoggedEvent,
    PlaybackPaused,
    PlaybackResumed,
    PlaybackStarted,
    UserTurn,
)
from edge_agent.memory.record import SessionRecord, record_events

CALL_LIMIT_S = 1200.0
"""Longest call `bench rooms` runs (100 replies at echo 1.0 take ~10 minutes)."""


@dataclass(frozen=True)
class LineOutcome:
    """One caller line of a call, as the agent took it."""

    say: str
    kind: str
    """"question" (said while the agent was silent) or "interruption" (over a reply)."""
    onset_s: float
    heard: str
    """What the agent's turns heard of it ("" for nothing)."""
    errors: int
    words: int
    taken: bool
    """A barge-in followed (for an interruption: the agent stopped for it)."""
    stop_ms: float | None
    """Onset -> playback stopped, when taken (0 when it had stopped already)."""
    already_paused: bool = False
    """Taken, with playback already paused at the onset: the agent had paused on its own
    echo before the caller spoke (a stutter), and that pause became the barge-in."""
    echo_ignored: tuple[str, ...] = field(default=())
    """What the agent heard over its reply and dropped as its own voice."""


CallRunner = Callable[[Config, CallScript], SessionRecord]
"""Runs a call, returns its session record (`run_call`; a test's fake)."""


def run_call(config: Config, call: CallScript) -> SessionRecord:
    """The call through the real engines (loaded for it) on the virtual audio pair; its
    session record. The call's lines are said in the agent's own voice; its console lines are
    not shown (the figures say what happened)."""
    from edge_agent.runner import run_demo

    return asyncio.run(run_demo(config, call, printer=_quiet, max_seconds=CALL_LIMIT_S))


def _quiet(line: str) -> None:
    del line


def room_config(config: Config, noise_suppression: str = "off",
                talker_gate: str | None = None) -> Config:
    """`config` with the canceller on (whatever the user's `[audio]` says: it is what is
    measured), noise suppression as given, and the talker gate as given (None: as the config
    has it)."""
    return dataclasses.replace(config, audio=dataclasses.replace(
        config.audio, echo_cancel="on", noise_suppression=noise_suppression,
        talker_gate=config.audio.talker_gate if talker_gate is None else talker_gate))


def interruption_call(room: Room, questions: Sequence[str], interruptions: Sequence[str],
                      cues: Sequence[float], long_reply: str, short_reply: str) -> CallScript:
    """A question, then each interruption over the agent's reply to the line before, `cues`
    seconds into it; the last one is answered short (the call ends sooner)."""
    lines = [CallerLine(questions[0], at=0.5)]
    lines += [CallerLine(text, barge_in_after=cue) for text, cue in zip(interruptions, cues,
                                                                           strict=True)]
    replies = (long_reply,) * len(interruptions) + (short_reply,) * 3  # spares: a stray turn
    return CallScript(source="(bench rooms: interruptions)", lines=tuple(lines), greeting="",
                      replies=replies, room=room)


def replies_call(room: Room, replies: int, reply: str) -> CallScript:
    """`replies` replies played one after the other, the caller silent over each ("Go on."
    once it is done)."""
    lines = [CallerLine("Go on.", at=0.5)]
    lines += [CallerLine("Go on.", after_agent_done=True) for _ in range(replies - 1)]
    return CallScript(source="(bench rooms: replies)", lines=tuple(lines), greeting="",
                      replies=(reply,) * replies, room=room)


def questions_call(room: Room, questions: Sequence[str], reply: str,
                   talkers: tuple[Talker, ...] = ()) -> CallScript:
    """Questions said while the agent is silent, each answered with `reply`; `talkers`
    chatting nearby all along."""
    lines = [CallerLine(questions[0], at=0.5)]
    lines += [CallerLine(text, after_agent_done=True) for text in questions[1:]]
    return CallScript(source="(bench rooms: questions)", lines=tuple(lines), greeting="",
                      replies=(reply,) * (len(questions) + 2), room=room, talkers=talkers)


def line_outcomes(call: CallScript, events: Sequence[LoggedEvent]) -> list[LineOutcome]:
    """What each line of `call` became, in the order said (lines never said are left out)."""
    spoken = [(i, e.at, e.event) for i, e in enumerate(events) if isinstance(e.event, CallerSpoke)]
    outcomes = []
    for number, ((index, at, spoke), line) in enumerate(zip(spoken, call.lines, strict=False)):
        end = spoken[number + 1][0] if number + 1 < len(spoken) else len(events)
        outcomes.append(_outcome(line, at + spoke.speech_offset, _paused_at(events[:index]),
                                 events[index + 1:end]))
    return outcomes


def _paused_at(before: Sequence[LoggedEvent]) -> float | None:
    """When playback was paused, if it still was after `before` (on the agent's own echo,
    since no caller line was being said)."""
    paused: float | None = None
    for entry in before:
        if isinstance(entry.event, PlaybackPaused):
            paused = entry.at if paused is None else paused
        elif isinstance(entry.event, PlaybackResumed | BargeIn | PlaybackStarted):
            paused = None
    return paused


def _outcome(line: CallerLine, onset: float, paused_at: float | None,
             after: Sequence[LoggedEvent]) -> LineOutcome:
    heard = " ".join(e.event.text for e in after if isinstance(e.event, UserTurn))
    already_paused = paused_at is not None
    stopped_at: float | None = None
    for entry in after:
        event, at = entry.event, entry.at
        if isinstance(event, PlaybackPaused) and paused_at is None:
            paused_at = at
        elif isinstance(event, PlaybackResumed):
            paused_at = None  # not an interruption after all: playback went on
            already_paused = False
        elif isinstance(event, BargeIn):
            stopped_at = paused_at if paused_at is not None else at
            break
    errors, words = word_errors(line.say, heard)
    stop_ms = None if stopped_at is None else round(1000 * max(0.0, stopped_at - onset), 1)
    return LineOutcome(
        say=line.say, kind="question" if line.barge_in_after is None else "interruption",
        onset_s=round(onset, 3), heard=heard, errors=errors, words=words,
        taken=stopped_at is not None, stop_ms=stop_ms,
        already_paused=already_paused and stopped_at is not None,
        echo_ignored=tuple(e.event.text for e in after if isinstance(e.event, EchoIgnored)))


def line_json(outcome: LineOutcome) -> dict[str, Any]:
    return {**dataclasses.asdict(outcome), "echo_ignored": list(outcome.echo_ignored)}


def wer_percent(outcomes: Sequence[LineOutcome]) -> float:
    """All errors over all words said."""
    words = sum(o.words for o in outcomes)
    return round(100 * sum(o.errors for o in outcomes) / words, 1) if words else 0.0


def kept_events(record: SessionRecord) -> list[dict[str, Any]]:
    """The call's events for the results file, without the model requests (each repeats the
    whole history so far: a long call's would dwarf the rest)."""
    return [e.to_json() for e in record_events(record) if not isinstance(e.event, LlmRequest)]


def self_interruptions(record: SessionRecord) -> dict[str, Any]:
    """A call with no caller over the agent: every barge-in is the agent interrupting itself,
    every pause a stutter the caller hears."""
    events = [e.event for e in record_events(record)]
    units = [u for u in record["units"] if u["generated"]]
    return {"replies": sum(isinstance(e, PlaybackStarted) for e in events),
            "barge_ins": sum(isinstance(e, BargeIn) for e in events),
            "pauses": sum(isinstance(e, PlaybackPaused) for e in events),
            "units_not_heard_whole": sum(1 for u in units if u["heard"] != u["generated"])}
