"""Where sound is in a recording: audible stretches of 16 kHz int16 audio, sample-exact at
their ends (`bench latency` reads the caller and the agent off them, `bench service` the answer
that reached the speaker)."""

from __future__ import annotations

import numpy as np

from edge_agent.audio.device import MIC_RATE

AUDIBLE = 150
"""RMS (int16) of a 10 ms window above which it is audible (-47 dBFS)."""
_WINDOW = 160
"""10 ms at 16 kHz."""


def audible_spans(samples: np.ndarray, bridge_ms: int) -> list[tuple[float, float]]:
    """(start, end) seconds of audible stretches, gaps shorter than `bridge_ms` bridged."""
    windows = len(samples) // _WINDOW
    if windows == 0:
        return []
    power = samples[: windows * _WINDOW].astype(np.float64).reshape(windows, _WINDOW) ** 2
    loud = np.sqrt(power.mean(axis=1)) >= AUDIBLE
    spans: list[list[int]] = []
    for index in np.flatnonzero(loud):
        if spans and index - spans[-1][1] <= bridge_ms // 10:
            spans[-1][1] = int(index) + 1
        else:
            spans.append([int(index), int(index) + 1])
    rate = MIC_RATE
    return [(_edge(samples, a * _WINDOW, rising=True) / rate,
             _edge(samples, b * _WINDOW, rising=False) / rate) for a, b in spans]


def audible_part(samples: np.ndarray) -> np.ndarray:
    """`samples` from their first audible sample to their last, as `audible_spans` finds them
    (nothing when none is audible)."""
    spans = audible_spans(samples, bridge_ms=0)
    if not spans:
        return samples[:0]
    rate = MIC_RATE
    return samples[round(spans[0][0] * rate):round(spans[-1][1] * rate)]


def _edge(samples: np.ndarray, at: int, rising: bool) -> int:
    """The first (rising) or last (falling) sample near window boundary `at` whose magnitude is
    audible: sample-exact ends of a span."""
    window = samples[max(0, at - _WINDOW):at + _WINDOW].astype(np.int32)
    loud = np.flatnonzero(np.abs(window) >= AUDIBLE)
    if not len(loud):
        return at
    return max(0, at - _WINDOW) + int(loud[0] if rising else loud[-1] + 1)
