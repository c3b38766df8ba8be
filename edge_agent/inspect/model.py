"""What `edge-agent inspect` draws: a session as runs on their own clocks, each holding the
caller's speech, the agent's units with every word placed where it played, the moments that
decided turns, and each turn's latency split into stages.

Times are seconds on the run's clock (the events' `at`). Built from a session record (and kept
audio) by `inspect.timeline`; drawn by `inspect.page`.
"""

from __future__ import annotations

from dataclasses import dataclass

from edge_agent.events import Event

DECISIONS = ("answered", "barge-in", "backchannel", "echo", "dropped", "not answered",
             "unfinished")
"""What became of a caller's speech: answered; answered after cutting the agent (barge-in);
an acknowledgement over the agent (backchannel) or the agent's own voice coming back (echo),
both ignored; nothing recognized (dropped); recognized but not answered (no session open);
still going when the run ended (unfinished)."""

STAGES = ("turn_end", "transcript", "request", "first_token", "first_piece", "first_audio")
"""A turn's latency stages, in order, after the caller's speech really ended: the silence that
ended the turn, the words known, the request sent, the first token, the first spoken piece
synthesized, its first sample at the device."""


@dataclass(frozen=True)
class PlacedWord:
    """One word of an agent unit, on the run's clock."""

    index: int
    """Its position in the unit (0 = the first)."""
    text: str
    start: float
    """Where it started playing (heard), or would have had playback gone on (unheard)."""
    end: float
    heard: bool
    """Inside the unit's heard prefix."""
    exact: bool
    """Timed from phoneme alignments (false: safe bounds)."""


@dataclass(frozen=True)
class Pause:
    """Playback held while the caller's speech over the agent was judged."""

    start: float
    end: float
    """Resumed here, or the unit ended here (the speech was an interruption)."""
    resumed: bool


@dataclass(frozen=True)
class UnitView:
    """One agent speech unit."""

    unit_id: str
    generated: str
    heard: str
    played_ms: int
    """Audio that reached the listener, in ms of the unit's audio."""
    start: float | None
    """Its first sample at the device (None: it never played)."""
    end: float
    """Playback ended (or, never played, the unit was finalized)."""
    playing: tuple[tuple[float, float], ...]
    """The stretches of the clock its audio was actually playing (pauses excluded)."""
    pauses: tuple[Pause, ...]
    words: tuple[PlacedWord, ...]

    @property
    def interrupted(self) -> bool:
        """Not all of it was heard."""
        return self.heard != self.generated


@dataclass(frozen=True)
class CallerSpeech:
    """One stretch of caller speech the VAD found, and what became of it."""

    index: int
    """1 for the run's first."""
    start: float
    """Speech onset (the VAD's onset moved onto the events' clock)."""
    end: float
    """Where the speech really ended (the end-of-turn silence before the end was detected)."""
    detected: float
    """The end was detected (the silence was long enough)."""
    decision: str
    """One of `DECISIONS`."""
    text: str
    """The transcript; or what the recognizer heard of a backchannel or echo."""
    turn: int | None
    """The answered turn's number on the run (None: not answered)."""
    why: Event | None
    """The event that decided it (BargeIn, Backchannel, EchoIgnored, TurnDropped); None for a
    plain answer."""


@dataclass(frozen=True)
class Marker:
    """A moment worth seeing on the axis."""

    kind: str
    """"barge-in", "backchannel", "echo", "dropped", "tool", "failed", "session", "cancelled",
    "knowledge", "notice", "timer"."""
    at: float
    label: str
    """Short text drawn next to it."""
    event: Event
    """The event, as recorded."""


@dataclass(frozen=True)
class Stage:
    """One step of answering a turn."""

    name: str
    """One of `STAGES`."""
    at: float
    after_ms: int
    """Milliseconds after the caller's speech really ended."""
    speculative: bool
    """Done while the end of the turn was not yet certain."""


@dataclass(frozen=True)
class TurnRow:
    """One line of the turn table: a caller speech and the agent's answer to it (the first
    row may be the greeting, with no caller speech)."""

    key: str
    """Unique in the page ("r1-t3": run 1, row 3)."""
    caller: CallerSpeech | None
    decision: str
    """The caller speech's decision; "greeting" (units before any answered turn) or
    "untimed" (units whose events are gone: laid end to end)."""
    unit_ids: tuple[str, ...]
    """The units that answered it."""
    happenings: tuple[Marker, ...]
    """Its tool calls (ToolUsed) and failures (ReplyFailed), in order."""
    stages: tuple[Stage, ...]
    """The latency stages found, in `STAGES` order."""


@dataclass(frozen=True)
class Wave:
    """An envelope of kept audio: per bucket, its time and the lowest and highest sample
    (-1..1). Agent clips are moved across pauses like their words."""

    kind: str
    """"caller" or "agent"."""
    ref: str
    """The unit id, or "c1", "c2", ..."""
    points: tuple[tuple[float, float, float], ...]


@dataclass(frozen=True)
class RunView:
    """One process run of the session: its own clock, starting near 0."""

    number: int
    """1 for the session's first run."""
    run_id: str
    start: float
    end: float
    caller: tuple[CallerSpeech, ...]
    units: tuple[UnitView, ...]
    markers: tuple[Marker, ...]
    rows: tuple[TurnRow, ...]
    waves: tuple[Wave, ...]


@dataclass(frozen=True)
class Timeline:
    """The whole session."""

    session_id: str
    sessions: tuple[str, ...]
    engines: dict[str, str]
    runs: tuple[RunView, ...]
    audio_kept: bool
    """Waveforms are drawn (some audio was kept)."""
