"""A recording's events on the replay's timeline, frame for frame.

The loop hears the microphone in 32 ms frames: audio said at any moment is heard from the start
of the frame it falls in, and every decision is taken at a frame's end. For a replay to hear the
caller exactly as the recording did, each recorded moment must land at the same place relative
to the frames. The recording never wrote down when its microphone started, but its speech
events say it: `UserSpeechEnded` is published at a frame's end with `audio_time` = the audio
heard so far, so `at - audio_time` is the microphone's start (plus how late the loop was, never
less: the smallest is taken). Each run of a session (a restart resumes it) has its own clock
and grid; runs are laid one after the other, a frame-aligned gap between them.

On the replay's timeline the microphone starts at 0 and a frame ends at every multiple of
`FRAME_SECONDS`, as the replay's own virtual microphone does.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar, cast

from edge_agent.audio.device import MIC_FRAME, MIC_RATE
from edge_agent.events import Event, LoggedEvent, UserSpeechEnded, UserSpeechStarted

FRAME_SECONDS = MIC_FRAME / MIC_RATE
"""The microphone frame the loop takes (512 samples at 16 kHz)."""
RUN_GAP_S = 2.0
"""Silence put between two runs of a session on the replay's timeline."""
LEAD_S = 2.0
"""Most of a run's quiet start kept before its first event: a service runs for days and opens a
session whenever someone comes, and a replay steps through every frame it keeps."""


E = TypeVar("E", bound=Event, covariant=True)


@dataclass(frozen=True)
class TimedEvent(Generic[E]):
    """A recorded event placed on the replay's timeline."""

    t: float
    """Seconds on the replay's timeline (its microphone started at 0)."""
    event: E
    """The event as recorded."""
    at: float
    """When it was recorded, on its own run's clock."""
    run_id: str
    """The run that recorded it ("" for events recorded before runs were named)."""


@dataclass(frozen=True)
class RunClock:
    """Where one run of the session lies on the replay's timeline."""

    run_id: str
    """The run ("" for events recorded before runs were named)."""
    mic_start: float
    """When the run's microphone started, on the run's clock."""
    base: float
    """Where that moment lies on the replay's timeline (a frame boundary)."""
    pinned: bool
    """True when speech events pinned the microphone's start down; False: assumed at 0."""
    skipped: float = 0.0
    """Seconds of the run's quiet start left out (whole frames, so that every moment keeps
    its place in its frame): all but `LEAD_S` before its first event."""

    def to_replay(self, at: float) -> float:
        """A moment on the run's clock, on the replay's timeline."""
        return self.base + at - self.mic_start - self.skipped

    def audio_to_replay(self, audio_time: float) -> float:
        """A moment of the run's microphone audio (an event's `audio_time`), on the replay's
        timeline."""
        return self.base + audio_time - self.skipped


K = TypeVar("K", bound=Event)


@dataclass(frozen=True)
class Timeline:
    events: tuple[TimedEvent[Event], ...]
    """Every event of the record, in order, on the replay's timeline."""
    runs: tuple[RunClock, ...]
    """The session's runs, in order."""
    onset_frames: int
    """Frames of speech the recording's VAD needed before an onset (its `min_speech_ms`)."""

    def of_type(self, kind: type[K]) -> list[TimedEvent[K]]:
        """The events of type `kind`, in order."""
        return [cast(TimedEvent[K], timed) for timed in self.events
                if isinstance(timed.event, kind)]

    @property
    def end(self) -> float:
        """The last event's time (0 for none)."""
        return max((event.t for event in self.events), default=0.0)


def build_timeline(events: Sequence[LoggedEvent], onset_frames: int) -> Timeline:
    """`events` (a session record's, in order) on the replay's timeline. `onset_frames` (the
    configured VAD onset, in frames) is used only when the record shows none of its own."""
    by_run: dict[str, list[LoggedEvent]] = {}
    for entry in events:
        by_run.setdefault(entry.run_id, []).append(entry)
    runs: list[RunClock] = []
    seen: Counter[int] = Counter()
    base = 0.0
    for run_id, run_events in by_run.items():
        mic_start, pinned = _mic_start(run_events, onset_frames)
        quiet = min(e.at for e in run_events) - mic_start - LEAD_S
        run = RunClock(run_id, mic_start, base, pinned,
                       skipped=max(0, math.floor(quiet / FRAME_SECONDS)) * FRAME_SECONDS)
        runs.append(run)
        seen.update(round((e.at - mic_start - e.event.audio_time) / FRAME_SECONDS)
                    for e in run_events if isinstance(e.event, UserSpeechStarted))
        last = max((run.to_replay(e.at) for e in run_events), default=base)
        base = frame_ceil(last + RUN_GAP_S)
    clocks = {run.run_id: run for run in runs}
    timed = tuple(TimedEvent(clocks[e.run_id].to_replay(e.at), e.event, e.at, e.run_id)
                  for e in events)
    # The frames between a speech onset and its event, as most onsets of the record show.
    return Timeline(timed, tuple(runs), seen.most_common(1)[0][0] if seen else onset_frames)


def _mic_start(events: Sequence[LoggedEvent], onset_frames: int) -> tuple[float, bool]:
    ends = [e.at - e.event.audio_time for e in events if isinstance(e.event, UserSpeechEnded)]
    if ends:
        return min(ends), True
    # An onset is published `onset_frames` frames after the speech began (`audio_time`).
    starts = [e.at - e.event.audio_time - onset_frames * FRAME_SECONDS
              for e in events if isinstance(e.event, UserSpeechStarted)]
    if starts:
        return min(starts), True
    return 0.0, False


def frame_floor(t: float) -> float:
    """The start of the frame that audio said at `t` is heard in."""
    return math.floor(t / FRAME_SECONDS + 1e-9) * FRAME_SECONDS


def frame_ceil(t: float) -> float:
    """The first frame boundary at or after `t`."""
    return math.ceil(t / FRAME_SECONDS - 1e-9) * FRAME_SECONDS


def frame_round(t: float) -> float:
    """The frame boundary nearest to `t`."""
    return round(t / FRAME_SECONDS) * FRAME_SECONDS


def frames_of(samples: int, rate: int) -> int:
    """Frames the microphone takes to hand out `samples` samples."""
    return math.ceil(samples / (FRAME_SECONDS * rate) - 1e-9)
