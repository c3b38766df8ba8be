"""The replay's two sides of the virtual audio pair: a caller who says the recorded lines at
their cues, to the frame, and a speaker that starts each unit when the recorded one started.

The replayed agent's engines take no virtual time: left alone it would answer at once, at a
frame's end, where the recorded agent answered tens of milliseconds later, wherever its
engines finished. Both matter. The silence between the caller's lines changes what the VAD
makes of the next one (its state drifts through a silence: an onset found a frame earlier
moves the recognizer's pre-roll and can change its words); and where a cut falls inside a word
depends on the phase at which the unit started. So `AlignedSpeaker` starts each unit (after a
silence) as long after the caller's line before it as the recorded one did, at the phase that
puts the played position at its first pause where the recorded pause found it. A replay that
changed nothing thus plays the recording's timeline again; where it differs (a reply taking
longer than recorded), the unit starts as soon as it can, at the recorded phase.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from dataclasses import dataclass

from edge_agent.audio.pcm import first_loud_sample, silence
from edge_agent.audio.virtual import VirtualSpeaker
from edge_agent.clock import Clock
from edge_agent.demo.caller import CUE_TIMEOUT, CallerVoice, next_event, said_something
from edge_agent.events import (
    CallerSpoke,
    EventLog,
    LoggedEvent,
    Notice,
    PlaybackPaused,
    PlaybackStarted,
    UnitFinalized,
)
from edge_agent.replay.placement import Cue, ReplayLine
from edge_agent.replay.timeline import FRAME_SECONDS, Timeline, frame_floor, frame_round


@dataclass(frozen=True)
class UnitStart:
    """When the replay starts a unit's audio (the n-th start of the recording)."""

    line: int | None
    """The caller line it followed (index into the replayed lines); None: the call's start."""
    after: float
    """Seconds after that line's first frame (or the call's start) it started."""
    phase: float
    """Seconds into a microphone frame at which it starts."""


def unit_starts(timeline: Timeline, lines: Sequence[ReplayLine], sample_rate: int
                ) -> list[UnitStart]:
    """For each recorded `PlaybackStarted`, in order, when the replay starts that unit."""
    wake = 1 / sample_rate  # PlaybackStarted is told once the unit's first sample has played
    starts = []
    for start in timeline.of_type(PlaybackStarted):
        unit = start.event.unit_id
        ended = next((e.t for e in timeline.of_type(UnitFinalized)
                      if e.t >= start.t and e.event.finalize.unit_id == unit), float("inf"))
        paused = [e.t for e in timeline.of_type(PlaybackPaused)
                  if e.event.unit_id == unit and start.t <= e.t <= ended]
        # A replayed pause falls on a frame's end: the unit starts that far before one.
        phase = (-(paused[0] - start.t) if paused else start.t) - wake
        # The last line begun before it, unless that line waits for this very unit (its
        # pre-roll began before the unit, its speech came over it).
        before = [i for i, line in enumerate(lines) if line.segment.start <= start.t
                  and not (line.cue and line.cue.event is PlaybackStarted
                           and line.cue.unit == unit)]
        anchor = before[-1] if before else None
        begin = lines[anchor].segment.start if anchor is not None else 0.0
        starts.append(UnitStart(anchor, start.t - wake - begin, phase % FRAME_SECONDS))
    return starts


class AlignedSpeaker(VirtualSpeaker):
    """A virtual speaker that starts its n-th unit from silence as `starts[n]` says (the
    replay's frames end at multiples of `FRAME_SECONDS`); `line_starts` are the replayed
    lines' first frames, as the caller says them."""

    def __init__(self, clock: Clock, sample_rate: int, log: EventLog,
                 starts: Sequence[UnitStart], line_starts: Sequence[float]) -> None:
        super().__init__(clock, sample_rate)
        self._starts = list(starts)
        self._line_starts = line_starts
        self._started = 0
        log.listen(self._count_starts)

    def _count_starts(self, entry: LoggedEvent) -> None:
        if isinstance(entry.event, PlaybackStarted):
            self._started += 1

    def _lead(self) -> float:
        """Seconds of silence before the next unit, written now, starts."""
        now = self._clock.now()
        if self._started >= len(self._starts):
            return 0.0
        start = self._starts[self._started]
        if start.line is None:
            wanted = start.after
        elif start.line < len(self._line_starts):
            wanted = self._line_starts[start.line] + start.after
        else:
            wanted = now  # the replay has not said that line: as soon as it can
        # The moment with the unit's phase nearest to the wanted one, not before now.
        at = wanted + (start.phase - wanted + FRAME_SECONDS / 2) % FRAME_SECONDS \
            - FRAME_SECONDS / 2
        if at < now:
            at += math.ceil((now - at) / FRAME_SECONDS - 1e-9) * FRAME_SECONDS
        return at - now

    def write(self, pcm: bytes) -> int:
        # Idle (not paused, everything written played): the unit starts from silence, the
        # moment `VirtualSpeaker.write` re-anchors its cursor.
        if not self._paused and self.played_frames() >= self._written:
            lead = round(self._lead() * self.sample_rate)
            if lead:
                super().write(silence(lead))
        return super().write(pcm)


class ReplayCaller:
    """Says each line at its cue (`placement`), its audio starting in the frame it started in
    relative to that cue in the recording. A line is handed to the microphone a frame at a
    time, so that the next line can start where it must: what is left of the previous one
    then (the silence its turn ended with, which the replay may end sooner) is not said."""

    def __init__(self, clock: Clock, mic: CallerVoice, log: EventLog,
                 lines: Sequence[ReplayLine], line_starts: list[float] | None = None) -> None:
        self._clock = clock
        self._mic = mic
        self._log = log
        self._lines = list(lines)
        self._events = log.subscribe()  # subscribed now, so no early event is missed
        self.line_starts = line_starts if line_starts is not None else []
        """Where each line begun was meant to begin (the start of its first frame)."""

    @property
    def said(self) -> int:
        """Lines begun."""
        return len(self.line_starts)

    @property
    def unsaid(self) -> list[ReplayLine]:
        return self._lines[self.said:]

    async def run(self) -> None:
        mark = 0  # events seen when the previous line began
        saying: asyncio.Task[None] | None = None
        try:
            for line in self._lines:
                target = line.segment.start
                if line.cue is not None:
                    target = frame_round(await self._cue_time(line.cue, mark) + line.cue.after)
                pcm, first = line.segment.pcm, target
                if self._clock.now() < target + FRAME_SECONDS / 2:
                    await self._clock.sleep_until(target + FRAME_SECONDS / 2)
                else:  # its head is past: the rest goes into the frame being heard
                    first = frame_floor(self._clock.now())
                    pcm = pcm[2 * round((first - target) * self._mic.sample_rate):]
                if saying is not None:
                    saying.cancel()
                loud = first_loud_sample(pcm)
                self._log.publish(CallerSpoke(line.segment.text,
                                              round((loud or 0) / self._mic.sample_rate, 4)))
                self.line_starts.append(target)
                mark = len(self._log.entries)
                saying = asyncio.create_task(self._say(pcm, first))
            if saying is not None:
                await saying
        finally:
            if saying is not None:
                saying.cancel()
            self._log.unsubscribe(self._events)

    async def _say(self, pcm: bytes, first: float) -> None:
        """`pcm` into the frames from the one starting at `first`, each part in the middle of
        the frame before the microphone hands it out."""
        size = 2 * round(FRAME_SECONDS * self._mic.sample_rate)
        for index, offset in enumerate(range(0, len(pcm), size)):
            if index:
                await self._clock.sleep_until(first + (index + 0.5) * FRAME_SECONDS)
            self._mic.say(pcm[offset:offset + size])

    async def _cue_time(self, cue: Cue, mark: int) -> float:
        """When the cue's event happened (seconds since the log started)."""
        if cue.count == 0:
            before = [e.at for e in self._log.entries[:mark] if _matches(e, cue)]
            if before:
                return before[-1]
        wanted = max(1, cue.count)
        deadline = self._clock.now() + CUE_TIMEOUT
        while True:
            seen = [e.at for e in self._log.entries[mark:] if _matches(e, cue)]
            if len(seen) >= wanted:
                return seen[wanted - 1]
            remaining = deadline - self._clock.now()
            if remaining <= 0:
                self._log.publish(Notice(
                    f"replay caller: no cue ({cue.event.__name__} #{wanted}, unit {cue.unit} in the "
                    f"recording) within {CUE_TIMEOUT:.0f} s; saying the next line anyway"))
                return self._clock.now()
            await next_event(self._events, self._clock, deadline)  # then look again


def _matches(entry: LoggedEvent, cue: Cue) -> bool:
    return isinstance(entry.event, cue.event) and said_something(entry)
