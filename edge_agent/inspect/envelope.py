"""Waveform envelopes of kept audio: the page draws the lowest and highest sample of each short
bucket, never the samples themselves (a minute of speech is 2 MB of PCM, its envelope ~8 KB)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

BUCKET_S = 0.015
"""Seconds per envelope point: finer than a syllable, about 2 px on the page's axis."""


def envelope(pcm: bytes, sample_rate: int, bucket_s: float = BUCKET_S
             ) -> list[tuple[float, float, float]]:
    """(offset in seconds of the bucket's start, lowest, highest sample in -1..1) per bucket
    of int16 mono little-endian `pcm`; the last bucket may be shorter."""
    samples = np.frombuffer(pcm[: len(pcm) - len(pcm) % 2], dtype="<i2")
    size = max(1, round(sample_rate * bucket_s))
    whole = len(samples) - len(samples) % size
    lows = highs = np.empty(0)
    if whole:
        buckets = samples[:whole].reshape(-1, size)
        lows, highs = buckets.min(axis=1), buckets.max(axis=1)
    if whole < len(samples):
        lows = np.append(lows, samples[whole:].min())
        highs = np.append(highs, samples[whole:].max())
    step = size / sample_rate
    return [(round(i * step, 4), round(float(lo) / 32768, 3), round(float(hi) / 32768, 3))
            for i, (lo, hi) in enumerate(zip(lows, highs, strict=True))]


def placed(points: list[tuple[float, float, float]], clock: Callable[[float], float]
           ) -> tuple[tuple[float, float, float], ...]:
    """The envelope with each offset moved onto the clock by `clock` (a unit's playback)."""
    return tuple((round(clock(offset), 4), lo, hi) for offset, lo, hi in points)
