"""Echo by sound: does the microphone hold what the speaker just played?

The words of a garbled echo often fail to match what the agent said (the recognizer turns
"the last orders" into "blast or"), but the audio does not lie: the loop knows every sample it
played. This is the classic double-talk detector: the normalized cross-correlation between the
microphone signal and the played signal, maximized over the echo delay. An echo alone scores
near its coherence with the playback (1.0 for a clean copy, lower with reverberation and
noise); a user speaking alone scores near 0; a user talking over the echo scores in between,
lower the louder the user is.

Both signals are reduced to 4 kHz first: speech energy lives below 2 kHz, and small timing
jitter between capture and playback clocks matters less there.
"""

from __future__ import annotations

import numpy as np

from edge_agent.audio.pcm import resample

RATE = 4000
"""Rate at which the two signals are compared."""


def to_compare_rate(pcm: bytes, rate: int) -> np.ndarray:
    """int16 PCM at `rate` -> float samples at `RATE` (band-limited)."""
    return np.frombuffer(resample(pcm, rate, RATE), dtype=np.int16).astype(np.float64)


def echo_coherence(mic: np.ndarray, played: np.ndarray) -> float:
    """Best normalized cross-correlation of `mic` against any equally long stretch of `played`
    (both at `RATE`; `played` should be longer, covering the possible delays). 0..1."""
    if len(mic) < RATE // 10 or len(played) < len(mic):
        return 0.0
    mic = mic - mic.mean()
    mic_norm = float(np.linalg.norm(mic))
    if mic_norm == 0.0:
        return 0.0
    size = 1 << (len(played) + len(mic)).bit_length()  # FFT correlation: milliseconds, not tens
    spectrum = np.fft.rfft(played, size) * np.conj(np.fft.rfft(mic, size))
    products = np.fft.irfft(spectrum, size)[: len(played) - len(mic) + 1]
    energy = np.concatenate([[0.0], np.cumsum(played**2)])
    sums = np.concatenate([[0.0], np.cumsum(played)])
    n = len(mic)
    window_energy = energy[n:] - energy[:-n]
    window_mean = (sums[n:] - sums[:-n]) / n
    # Correlation with the played window minus its mean (mic already has zero mean).
    norms = np.sqrt(np.maximum(window_energy - n * window_mean**2, 1e-9))
    return float(np.max(np.abs(products) / (norms * mic_norm)))
