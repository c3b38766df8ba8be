"""The shape of a short burst of speech: could it be a hum ("mm-hm", "mhm")?

Recognizers garble the listener's hums: Moonshine hears a Piper "mm-hmm" as "Mm, m, uh." or
"M. H. N.", PocketSphinx as "enema". The sound tells part of what the words cannot: a hum is
short, voiced from end to end (a steady pitch) and has one to three syllables; a cough, a click
or a breath is not voiced. (A real closed-mouth hum also has almost no energy above 1 kHz, but
synthetic voices, Piper's and espeak-ng's, do not hum like that — their "mm-hmm" measures like
"no" — so `high_ratio` is measured and reported, not used to decide.)

`voice_shape` measures, over the frames of the burst that carry speech energy:
- `voiced_ratio`: share of 40 ms frames with a clear pitch (normalized autocorrelation >= 0.6
  at a lag of 70-400 Hz);
- `high_ratio`: energy above 1 kHz over all energy (a hum: below ~0.08; vowels: 0.2 and more);
- `speech_ms` and `syllables` (energy peaks with a dip of 3 dB or more between them).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from edge_agent.audio.device import MIC_RATE

_FRAME = 640  # 40 ms: two periods of the lowest pitch looked for
_SPEECH_DB = 30.0
"""Frames within this many dB of the loudest frame carry the burst (the rest is silence)."""


@dataclass(frozen=True)
class VoiceShape:
    """What a burst of speech sounds like, whatever its words."""

    speech_ms: float
    """Duration of the frames that carry speech energy."""
    voiced_ratio: float
    """Share of those frames that have a clear pitch (0..1)."""
    high_ratio: float
    """Their energy above 1 kHz over their whole energy (0..1): low for a closed-mouth hum."""
    syllables: int
    """Energy peaks separated by dips of 3 dB or more."""

    def is_short_voiced_burst(self, max_ms: float = 900.0) -> bool:
        """Short, voiced for a good part and of at most three syllables: what "mm-hm", "uh-huh"
        or "mhm" sound like (a cough, a click or a breath is unvoiced). Measured on Piper's
        hums: 0.47-0.6 of their 40 ms frames have a clear pitch, so a third is asked for."""
        return (0 < self.speech_ms <= max_ms and self.voiced_ratio >= 0.35
                and self.syllables <= 3)


def voice_shape(pcm: bytes, rate: int = MIC_RATE) -> VoiceShape:
    """The shape of `pcm` (int16 mono at `rate`; 16 kHz expected). Cheap enough for the loop's
    thread: ~2 ms per second of audio."""
    samples = np.frombuffer(pcm, dtype=np.int16).astype(np.float64)
    frame = max(1, _FRAME * rate // MIC_RATE)
    count = len(samples) // frame
    if count == 0:
        return VoiceShape(0.0, 0.0, 0.0, 0)
    frames = samples[: count * frame].reshape(count, frame)
    frames = frames - frames.mean(axis=1, keepdims=True)
    energy = np.sum(frames**2, axis=1) + 1e-9
    level = 10 * np.log10(energy)
    speech = level >= level.max() - _SPEECH_DB
    if not np.any(energy[speech] > frame * 100.0**2):  # quieter than ~-50 dBFS: no burst
        return VoiceShape(0.0, 0.0, 0.0, 0)
    spectrum = np.abs(np.fft.rfft(frames[speech] * np.hanning(frame), axis=1)) ** 2
    cut = int(1000 * frame / rate)
    high_ratio = float(spectrum[:, cut:].sum() / (spectrum.sum() + 1e-9))
    return VoiceShape(
        speech_ms=1000.0 * int(speech.sum()) * frame / rate,
        voiced_ratio=float(np.mean(_pitched(frames[speech], rate))),
        high_ratio=high_ratio,
        syllables=_syllables(level, speech),
    )


def _pitched(frames: np.ndarray, rate: int) -> np.ndarray:
    """Per frame: a clear period between 70 and 400 Hz — the frame correlates with itself
    shifted by one period (normalized over the overlapping parts, so long periods are not
    penalized). All frames at once, by FFT."""
    count, size = frames.shape
    lo, hi = rate // 400, rate // 70
    if size <= 2 * hi:
        return np.zeros(count, dtype=bool)
    spectrum = np.fft.rfft(frames, 2 * size, axis=1)
    correlation = np.fft.irfft(np.abs(spectrum) ** 2, 2 * size, axis=1)[:, lo:hi + 1]
    energy = np.cumsum(frames**2, axis=1)
    lags = np.arange(lo, hi + 1)
    head = energy[:, size - 1 - lags]  # samples [0, size - lag)
    tail = energy[:, -1:] - energy[:, lags - 1]  # samples [lag, size)
    normalized = correlation / np.sqrt(np.maximum(head * tail, 1e-9))
    return np.asarray(normalized.max(axis=1) >= 0.6)


def _syllables(level: np.ndarray, speech: np.ndarray, dip_db: float = 3.0) -> int:
    """Peaks of the (3-frame smoothed) level: a new one starts when the level rises `dip_db`
    above the lowest point since the previous peak, which it had fallen `dip_db` below."""
    smooth = np.convolve(level, np.ones(3) / 3, mode="same")
    peaks = 0
    rising = False
    extreme = 0.0  # the peak while rising, the trough while falling
    for value, is_speech in zip(smooth, speech, strict=True):
        if not is_speech:
            rising = False
            extreme = -np.inf
            continue
        if rising:
            if value > extreme:
                extreme = value
            elif value < extreme - dip_db:
                rising, extreme = False, value
        elif value > extreme + dip_db or extreme == -np.inf or peaks == 0:
            peaks += 1
            rising, extreme = True, value
        else:
            extreme = min(extreme, value)
    return peaks
