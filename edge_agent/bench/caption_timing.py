"""The arithmetic of `edge-agent bench screen`, apart from anything that plays or connects:
when a recorded sample was played, when the heard-truth policy counts each word heard, when a
page marked it, and the skew between the two.

Times are seconds on `time.monotonic()`'s clock (CLOCK_MONOTONIC: one clock for every process
on the machine, so the pages' process and the recorder's thread stamp on the same one).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from edge_agent.heard.timings import WordTiming
from edge_agent.heard.truncation import HeardPolicy

Marks = tuple[float, Mapping[str, int]]
"""One snapshot as a page received it: (arrival, {unit id: length of its heard part})."""


@dataclass(frozen=True)
class SampleClock:
    """When the recording's sample n was played: `start + n / rate` seconds."""

    start: float
    rate: float
    """Samples per second, as the recording's own arrivals measured it."""
    residual_p50_ms: float
    """How late the median chunk arrived after the line: the recorder's usual delay."""

    def at(self, sample: float) -> float:
        return self.start + sample / self.rate

    def sample_at(self, moment: float) -> float:
        return (moment - self.start) * self.rate


def fit_sample_clock(arrivals: Sequence[tuple[int, float]]) -> SampleClock:
    """The clock of a recording read in chunks: `arrivals` are (samples recorded so far, when
    the read that brought them returned), one per chunk.

    A chunk can only arrive after its last sample was played, never before, and a busy machine
    only delays it: the slope comes from a least-squares fit over all chunks, then the line is
    lowered onto the earliest arrival (no chunk before it), rather than run through the middle
    of the delays. ValueError with fewer than two chunks of different lengths."""
    if len({samples for samples, _ in arrivals}) < 2:
        raise ValueError("the recording needs at least two chunks to be timed")
    samples = np.array([float(n) for n, _ in arrivals])
    times = np.array([t for _, t in arrivals])
    slope, _ = np.polyfit(samples, times, 1)
    lateness = times - slope * samples
    start = float(lateness.min())
    return SampleClock(start=start, rate=float(1.0 / slope),
                       residual_p50_ms=round(float(np.median(lateness - start)) * 1000, 3))


def heard_after(words: Sequence[WordTiming], audio_samples: int,
                policy: HeardPolicy) -> list[int]:
    """For each word of a unit whose whole text was synthesized, the unit's played samples from
    which `heard_prefix` counts it heard: words are heard in order (a word counts only once
    every word before it does), nothing before the first sample, everything once the audio
    has played out."""
    after: list[int] = []
    reached = 1
    for word in words:
        if policy is HeardPolicy.COMPLETED or word.start_sample == word.end_sample:
            needed = word.end_sample
        else:
            needed = word.start_sample + 1
        reached = max(reached, needed)
        after.append(min(reached, audio_samples))
    return after


def first_marked(arrivals: Sequence[Marks], unit_id: str,
                 char_ends: Sequence[int]) -> list[float | None]:
    """For each word of unit `unit_id` (where its text ends), the arrival of the first
    snapshot whose heard part of that unit covers it; None when none did."""
    marked: list[float | None] = [None] * len(char_ends)
    pending = 0
    for arrival, heard in arrivals:
        length = heard.get(unit_id, -1)
        while pending < len(char_ends) and char_ends[pending] <= length:
            marked[pending] = arrival
            pending += 1
        if pending == len(char_ends):
            break
    return marked


@dataclass(frozen=True)
class WordSkew:
    """One word: when it left the speaker against when the page marked it."""

    unit_id: str
    word: str
    spoken_at: float
    """When the heard policy's instant of the word left the speaker (the recording's clock)."""
    marked_at: float | None
    """When the page received the first snapshot marking it; None if none did."""

    @property
    def skew_ms(self) -> float | None:
        """Positive: the page marked it late."""
        if self.marked_at is None:
            return None
        return (self.marked_at - self.spoken_at) * 1000


def word_skews(unit_id: str, words: Sequence[WordTiming], audio_samples: int,
               policy: HeardPolicy, recorded_start: int, clock: SampleClock,
               arrivals: Sequence[Marks]) -> list[WordSkew]:
    """Each word of one unit, which the recording holds from sample `recorded_start` on,
    against the snapshots one page received (`arrivals`, in order)."""
    after = heard_after(words, audio_samples, policy)
    marked = first_marked(arrivals, unit_id, [word.char_end for word in words])
    return [WordSkew(unit_id, word.text, clock.at(recorded_start + played), at)
            for word, played, at in zip(words, after, marked, strict=True)]
