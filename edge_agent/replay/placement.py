"""The caller's recorded speech as timed lines, with the cues of a call file.

A replayed agent does not answer at the moment the recorded one did (its engines take no time
on the virtual clock, a changed setting makes it cut or resume elsewhere), so a caller segment
is not replayed at its recorded time but at the moment it had *relative to the agent*, as a
person would have said it (`demo.callfile.CallerLine` semantics):

- an agent unit was playing at the segment's onset: it cuts in `after` seconds after that
  unit's `PlaybackStarted` (call files' `barge_in_after`);
- else an agent unit finished since the previous segment: `after` seconds after the last such
  `UnitFinalized` (`after_agent_done` with `pause`);
- else at its recorded time (`at`). A segment of a later run (the agent was restarted) never
  waits for what the agent did before the restart.

A call file's cue is the *first* such event after the previous line was said; a replay names
the k-th (`Cue.count`), so a reply of several units, or a second overlap of the same unit
(`count` 0: the unit already playing), is found. It counts from when the previous segment
*began*: where a segment ends is where its turn ended, which is later in the recording than in
the replay (the recorded agent waited for its recognizer's words before it ended the turn;
the replay's recognizer answers at once), so counting from its end would miss a reply that
the replay starts sooner.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypedDict

from edge_agent.events import PlaybackStarted, UnitFinalized
from edge_agent.replay.timeline import FRAME_SECONDS, Timeline, frames_of

CueEvent = type[PlaybackStarted] | type[UnitFinalized]
"""What a line can wait for: a unit starting to play (it cuts in) or finishing (it answers)."""


@dataclass(frozen=True)
class CallerSegment:
    """One stretch of the caller's speech as the recording heard it."""

    text: str
    """What was said: the call file's line, or what the recognizer heard."""
    pcm: bytes
    """The audio to say, int16 mono at `rate`."""
    rate: int
    """Its sample rate (the microphone's)."""
    start: float
    """Replay-timeline start of the frame that holds its first sample (a frame boundary)."""
    onset: float
    """Replay-timeline moment its speech began."""
    source: str
    """Where its audio comes from: "kept clip c3", "call line", "transcript"."""

    @property
    def end(self) -> float:
        """When the microphone has handed all of it out (a frame boundary)."""
        return self.start + frames_of(len(self.pcm) // 2, self.rate) * FRAME_SECONDS


@dataclass(frozen=True)
class Cue:
    """The agent event a line waits for."""

    event: CueEvent
    """`PlaybackStarted` (it cuts in) or `UnitFinalized` (it answers)."""
    count: int
    """The `count`-th such event after the previous line began; 0: the last one before."""
    after: float
    """Seconds from that event to the line's start (negative: the line's pre-roll began
    before it; that much of its head is not said)."""
    unit: str
    """The recorded unit of that event."""


@dataclass(frozen=True)
class ReplayLine:
    segment: CallerSegment
    cue: Cue | None
    """None: said at `segment.start`."""


class LineRecord(TypedDict):
    """A replayed caller line, as the report shows it (call-file terms)."""

    text: str
    source: str
    """"kept clip cN", "call line" or "transcript"."""
    at: float | None
    """Seconds on the replay's clock, for a line not tied to the agent."""
    after_agent_done: bool
    pause: float | None
    """With after_agent_done: seconds after that unit finished."""
    barge_in_after: float | None
    """Seconds after the unit's playback started."""
    cue_unit: str | None
    """The recorded unit the cue waits for."""
    cue_count: int | None
    """Which such event, counted from when the previous line began (0: the one already
    playing)."""


def place_lines(segments: Sequence[CallerSegment], timeline: Timeline) -> list[ReplayLine]:
    """Each segment (in time order) with its cue, by the rules above."""
    starts = [(e.t, e.event.unit_id) for e in timeline.of_type(PlaybackStarted)]
    finalized = [(e.t, e.event.finalize) for e in timeline.of_type(UnitFinalized)]
    # A unit that said nothing is no cue (the scripted caller, too, never waits for one).
    finals = [(t, finalize.unit_id) for t, finalize in finalized if finalize.generated]
    ended = {finalize.unit_id: t for t, finalize in finalized}
    runs = sorted(run.base for run in timeline.runs)
    lines: list[ReplayLine] = []
    began = float("-inf")  # when the previous segment began
    for segment in sorted(segments, key=lambda s: s.start):
        # A restart is no cue: a segment waits for nothing its run's agent did not do.
        run = max((base for base in runs if base <= segment.start), default=began)
        lines.append(ReplayLine(segment, _cue(segment, began, run, starts, finals, ended)))
        began = segment.start
    return lines


def _cue(segment: CallerSegment, began: float, run: float, starts: list[tuple[float, str]],
         finals: list[tuple[float, str]], ended: dict[str, float]) -> Cue | None:
    onset = segment.onset
    playing = [(t, unit) for t, unit in starts
               if run <= t <= onset < ended.get(unit, float("inf"))]
    began = max(began, run)
    if playing:
        t, unit = playing[-1]
        count = sum(1 for s, _ in starts if began < s <= t)
        return Cue(PlaybackStarted, count, segment.start - t, unit)
    finished = [(t, unit) for t, unit in finals if began < t <= onset]
    if finished:
        t, unit = finished[-1]
        return Cue(UnitFinalized, len(finished), segment.start - t, unit)
    return None


def line_record(line: ReplayLine) -> LineRecord:
    cue = line.cue
    segment = line.segment
    return {
        "text": segment.text, "source": segment.source,
        "at": round(segment.start, 4) if cue is None else None,
        "after_agent_done": cue is not None and cue.event is UnitFinalized,
        "pause": round(cue.after, 4) if cue is not None and cue.event is UnitFinalized else None,
        "barge_in_after": (round(cue.after, 4) if cue is not None
                           and cue.event is PlaybackStarted else None),
        "cue_unit": cue.unit if cue is not None else None,
        "cue_count": cue.count if cue is not None else None,
    }

