"""The few events that cross the loop, and the per-session event log.

Each event is a small frozen dataclass; `EventLog.publish` stamps it with the clock and hands
it to every subscriber (the console printer, the scripted caller, the session record).
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any

from edge_agent.clock import Clock
from edge_agent.engines.base import ToolCall
from edge_agent.heard.ledger import Finalize
from edge_agent.shapes import NUMBER, TEXT, Bound, decode, require

MAX_CLOCK_S = 1e9
"""A moment on a run's clock (`at`, `audio_time`), in seconds either side of its start: 31
years of uptime. (Read back from a record, every number is range-checked: far past any real
session, and still finite.)"""
MAX_MS = 3_600_000
"""A length inside one unit or one speech (`silence_ms`, word times): an hour."""
MAX_WHOLE = 10**9
"""A turn, hop or session number."""

CLOCK_RANGE = Bound(-MAX_CLOCK_S, MAX_CLOCK_S, "seconds on the run's clock")
MS_RANGE = Bound(0, MAX_MS, "milliseconds, an hour at most")
COUNT_RANGE = Bound(0, MAX_WHOLE)

ClockSeconds = Annotated[float, CLOCK_RANGE]
Milliseconds = Annotated[int, MS_RANGE]
Seconds = Annotated[float, Bound(0, MAX_MS / 1000, "seconds, an hour at most")]
Count = Annotated[int, COUNT_RANGE]
Probability = Annotated[float, Bound(0, 1, "a probability")]


@dataclass(frozen=True)
class UserSpeechStarted:
    """The VAD heard the user start speaking."""

    audio_time: ClockSeconds
    """Seconds of microphone audio since the session started, at the speech onset."""


@dataclass(frozen=True)
class UserSpeechEnded:
    """The user's turn ended: the silence after their speech was long enough."""

    audio_time: ClockSeconds
    """Seconds of microphone audio when the end-of-turn silence completed."""
    silence_ms: Milliseconds = 0
    """The silence that ended it (the speech itself ended this much earlier); it depends on
    the words and the sound (see `conversation.endpoint`)."""
    sounded_finished: Probability | None = None
    """The end-of-turn model's probability that the turn sounded finished, as the loop had it
    when the turn ended (None: no model, or its verdict was not back)."""


@dataclass(frozen=True)
class UserTurn:
    """A committed user turn: what the recognizer heard, ready to be answered."""

    text: str
    """The transcript; several commits within one turn are joined."""
    words: tuple[tuple[str, Seconds | None, Seconds | None], ...]
    """(word, start, end) in seconds of the utterance's audio, as the recognizer timed them
    (None where the recognizer does not time words)."""


@dataclass(frozen=True)
class TurnDropped:
    """A user speech segment ended with nothing recognized; it is not answered."""

    audio_time: ClockSeconds
    """Seconds of microphone audio at the end of the segment."""


@dataclass(frozen=True)
class PlaybackStarted:
    """The first sample of a unit reached the device."""

    unit_id: str
    """The unit now audible."""


@dataclass(frozen=True)
class BargeIn:
    """The user cut in: playback was stopped and the reply cancelled."""

    unit_id: str | None
    """The unit that was playing, if any."""
    words: str = ""
    """What the recognizer had made of the interruption when it was decided."""
    by: str = "voice"
    """What cut in: "voice" (the caller spoke over the agent), "touch" (the stop button of
    the kiosk's screen) or "wake" (the wake word said over the agent)."""


@dataclass(frozen=True)
class UnitFinalized:
    """A unit's playback ended; `finalize` says what was heard."""

    finalize: Finalize
    """The one Finalize of the unit."""


@dataclass(frozen=True)
class LlmRequest:
    """Messages sent to the language model, exactly."""

    turn: Count
    """Which user turn this answers (1 = the first)."""
    hop: Count
    """1 for the reply's first request; one more after each round of tool calls."""
    messages: tuple[dict[str, Any], ...]
    """The chat messages, in order."""


@dataclass(frozen=True)
class ToolUsed:
    """A tool ran for the model; the call and its result are in history from now on."""

    turn: Count
    """Which user turn's reply called it."""
    call: ToolCall
    """The call as the model made it."""
    result: str
    """What the tool returned (`error: ...` when it could not run)."""


@dataclass(frozen=True)
class CallerSpoke:
    """The scripted caller started saying a line into the microphone (demo only)."""

    text: str
    """The line as written in the call file."""
    speech_offset: Seconds = 0.0
    """Seconds from the start of the line's audio to its first loud sample (speech onset)."""


@dataclass(frozen=True)
class PlaybackPaused:
    """User speech began over the agent: playback holds until it is judged."""

    unit_id: str | None
    """The unit that was playing."""


@dataclass(frozen=True)
class PlaybackResumed:
    """The speech over the agent was not an interruption: playback goes on where it paused."""

    unit_id: str | None
    """The unit that resumes."""


@dataclass(frozen=True)
class Backchannel:
    """The user spoke over the agent with an acknowledgement ("mm-hm", "sí claro"): logged,
    not answered, nothing truncated."""

    text: str
    """What the recognizer heard."""
    speech_ms: Milliseconds
    """How long the user spoke."""


@dataclass(frozen=True)
class EchoIgnored:
    """Speech recognized over the agent was the agent's own voice coming back."""

    text: str
    """What the recognizer heard."""
    playing: str
    """The agent's words played meanwhile, which it matched."""


@dataclass(frozen=True)
class SessionStarted:
    """A conversation session opened; its history starts empty."""

    session: Count
    """1 for the first session of this run."""
    how: str
    """"start-up", "speech", "wake", "timer" (a timer rang while no session was open) or
    "announcement" (the house asked the agent to say something then)."""


@dataclass(frozen=True)
class SessionEnded:
    """A session ended after the configured idle time."""

    session: Count
    """The session that ended."""


@dataclass(frozen=True)
class TurnStage:
    """A step of answering a user turn, when it happened: the stages split a turn's latency.

    Stages, in order: "transcript" (the words are known), "request" (sent to the language
    model), "first_token" (its first output), "first_piece" (the first spoken piece is
    synthesized), "first_audio" (its first sample reached the device)."""

    turn: Count
    """The user turn being answered (1 = the first)."""
    stage: str
    """Which step."""
    speculative: bool
    """It happened while the turn's end was not yet certain (the silence was still running);
    a `SpeculationCancelled` for the turn means that work was thrown away."""


@dataclass(frozen=True)
class SpeculationCancelled:
    """Work started for a turn before its end was certain was thrown away: nothing of it was
    played, recorded as said or kept in history."""

    turn: Count
    """The turn it was for."""
    reason: str
    """"speech resumed", "words changed" (the final transcript differs), "history changed",
    "reply stopped" (cut before it started) or "preparation failed" (an engine failed while
    preparing: the answer is generated again)."""


@dataclass(frozen=True)
class ReplyFailed:
    """An engine failed while the agent answered; the loop goes on. What had played of the
    reply is recorded as heard, the rest is dropped, and the fallback line is said instead."""

    turn: Count
    """The user turn being answered (0: the greeting)."""
    stage: str
    """What failed: "llm", "tts" or "tool" ("reply": the reply's own work, no engine)."""
    error: str
    """The exception, as "Type: message"."""
    recovery: str
    """What the agent does about it: "fallback" (says the fallback line), "retry" (a
    speculative preparation failed: the answer is generated again) or "silent" (nothing more
    this turn: the fallback failed too, or it was the greeting)."""


@dataclass(frozen=True)
class KnowledgeUsed:
    """The venue's knowledge was looked up for a user turn: what it decided."""

    turn: Count
    """The user turn being answered (1 = the first)."""
    how: str
    """"direct" (an entry's answer was said, no model), "hours" (the opening hours were
    answered from the clock), "fallback" (a question the knowledge does not cover: the
    fallback line was said), "model" (the model answered with `entries` in its prompt) or
    "chat" (not a question for the venue: the model answered as without knowledge)."""
    entries: tuple[str, ...] = ()
    """The entries said or shown to the model, as "file:line"."""
    score: Probability = 0.0
    """How surely the best entry answers the turn (0..1; 0 when none matched)."""
    lookup_ms: Annotated[float, MS_RANGE] = 0.0
    """How long the lookup took."""


@dataclass(frozen=True)
class CommandAnswered:
    """A user turn was a command the agent's own rules answered, not the model (a timer's:
    "set a timer for ten minutes", "stop" while one rings): no model request was made for it."""

    turn: Count
    """The user turn answered (1 = the first)."""


@dataclass(frozen=True)
class TimerChanged:
    """A timer, alarm or reminder was set, rang or ended (`[timers]`)."""

    timer: Count
    """Its number (the id of its row in the memory database's `timers` table)."""
    kind: str
    """"timer", "alarm" or "reminder"."""
    change: str
    """"set", "ringing", "done" (stopped by the listener), "unanswered" (it rang for
    `ring_for_s` and nobody stopped it), "snoozed" (due again later) or "cancelled"."""
    due: str
    """When it is (or was) due, ISO 8601 on the local clock."""
    late: bool = False
    """It came due while the agent was off: it rings with "While I was off, ..."."""


@dataclass(frozen=True)
class AudioHealth:
    """How the sound devices fare in this run (a live device's): published once the callback
    threads' scheduling is known, then whenever a count grows (checked every second)."""

    scheduling: str
    """The device's callback threads: "real-time (SCHED_FIFO 10)", or "normal priority (...)"
    with why and how to allow it ([audio] realtime_priority)."""
    input_overflows: Count
    """Callbacks so far that reported captured audio lost (nobody read it in time)."""
    output_underflows: Count
    """Callbacks so far that reported the speaker playing silence nobody gave it."""
    losses: Count
    """Times so far the microphone or the speaker was lost (gone, or no audio for seconds)."""


@dataclass(frozen=True)
class Notice:
    """Something a user should know that is not an error (e.g. a scripted LLM ran out)."""

    text: str
    """The message."""


Event = (
    UserSpeechStarted | UserSpeechEnded | UserTurn | TurnDropped | PlaybackStarted | BargeIn
    | UnitFinalized | LlmRequest | ToolUsed | Backchannel | EchoIgnored | CallerSpoke
    | PlaybackPaused | PlaybackResumed | SessionStarted | SessionEnded | TurnStage
    | SpeculationCancelled | ReplyFailed | KnowledgeUsed | CommandAnswered | TimerChanged
    | AudioHealth | Notice
)


def event_json(event: Event) -> dict[str, Any]:
    """`event` as records hold it: its type's name under "type", then its fields."""
    return {"type": type(event).__name__, **dataclasses.asdict(event)}


EVENT_TYPES: Mapping[str, type[Event]] = {kind.__name__: kind for kind in typing.get_args(Event)}
"""Every event type by the name records give it (`"type"`)."""
CLOCK = NUMBER.bounded(CLOCK_RANGE)
"""A moment on a run's clock, as `at` holds it."""


@dataclass(frozen=True)
class LoggedEvent:
    """An event as it entered the log."""

    at: float
    """Clock time, seconds since the run of the agent started."""
    event: Event
    """The event."""
    run_id: str = ""
    """Which run of the agent logged it, in a record that spans restarts ("" as it is
    published: the run is the one publishing it)."""

    def to_json(self) -> dict[str, Any]:
        run = {"run_id": self.run_id} if self.run_id else {}
        return {"at": round(self.at, 4), **event_json(self.event), **run}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> LoggedEvent | None:
        """The event `to_json` wrote (a record's, a database row's), every field checked
        against its dataclass (`shapes.decode`); None for a type this version does not know
        (a newer edge-agent's: kept in the record, unread). A field that does not fit is a
        `shapes.ShapeError` naming it."""
        at = require(data.get("at"), "at", CLOCK)
        kind = EVENT_TYPES.get(require(data.get("type"), "type", TEXT))
        run_id = require(data.get("run_id", ""), "run_id", TEXT)
        if kind is None:
            return None
        return cls(float(at), decode(kind, data), run_id)


class EventLog:
    """Ordered record of a session's events, with live subscribers."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._start = clock.now()
        self.entries: list[LoggedEvent] = []
        self._subscribers: list[asyncio.Queue[LoggedEvent]] = []
        self._listeners: list[Callable[[LoggedEvent], None]] = []

    @property
    def clock(self) -> Clock:
        return self._clock

    def elapsed(self) -> float:
        return self._clock.now() - self._start

    def publish(self, event: Event) -> LoggedEvent:
        entry = LoggedEvent(self.elapsed(), event)
        self.entries.append(entry)
        for listener in self._listeners:
            listener(entry)
        for queue in self._subscribers:
            queue.put_nowait(entry)
        return entry

    def publisher(self) -> Callable[[Event], None]:
        """`publish` for code on another thread (an engine's owner thread): the event is
        published on this loop, after what the loop is doing now. Made on the loop."""
        loop = asyncio.get_running_loop()
        loop_thread = threading.get_ident()

        def publish(event: Event) -> None:
            if threading.get_ident() == loop_thread:  # an engine run inline, on the loop
                self.publish(event)
            else:
                loop.call_soon_threadsafe(self.publish, event)

        return publish

    def listen(self, listener: Callable[[LoggedEvent], None]) -> None:
        """Call `listener` with every event as it is published, before `publish` returns (the
        memory records events in the order they happened)."""
        self._listeners.append(listener)

    def subscribe(self) -> asyncio.Queue[LoggedEvent]:
        queue: asyncio.Queue[LoggedEvent] = asyncio.Queue()
        self._subscribers.append(queue)
        return queue

    def unsubscribe(self, queue: asyncio.Queue[LoggedEvent]) -> None:
        self._subscribers.remove(queue)
