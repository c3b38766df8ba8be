"""PCM helpers: resampling and WAV files (mono, signed 16-bit)."""

from __future__ import annotations

import math
import os
import wave
from pathlib import Path

import numpy as np

from edge_agent.files import open_private


def resample(pcm: bytes, from_rate: int, to_rate: int) -> bytes:
    """Band-limited resampling of a whole clip (FFT), for offline audio such as caller lines."""
    if from_rate == to_rate or not pcm:
        return pcm
    samples = np.frombuffer(pcm, dtype=np.int16).astype(np.float64)
    target_len = round(len(samples) * to_rate / from_rate)
    spectrum = np.fft.rfft(samples)
    keep = min(len(spectrum), target_len // 2 + 1)
    resized = np.zeros(target_len // 2 + 1, dtype=complex)
    resized[:keep] = spectrum[:keep]
    out = np.fft.irfft(resized, n=target_len) * (target_len / len(samples))
    return to_pcm(out)


class StreamResampler:
    """Resamples a stream pushed in pieces of any size as if it were one clip: the phase
    between the two rates is carried exactly (integer arithmetic), so the output has no seams
    at piece boundaries and no drift over hours (after N input samples, N * to_rate /
    from_rate output samples less at most `held_back`).

    Band-limited: each output sample is a windowed-sinc (Kaiser) interpolation of the input
    around its exact position, low-passed below the lower rate's Nyquist frequency, so a
    22050 Hz voice downsampled to 16 kHz does not fold its highs back as aliases. The input
    before the first sample counts as silence.
    """

    ZERO_CROSSINGS = 8
    """Sinc lobes on each side of an output sample: ~70 dB stopband with KAISER_BETA."""
    KAISER_BETA = 8.0
    ROLLOFF = 0.9
    """Passband edge as a fraction of the lower rate's Nyquist frequency (the rest is the
    filter's transition band)."""
    TABLE_PHASES = 4096
    """Rate pairs with at most this many distinct output phases (22050 -> 16000 has 320) get
    their interpolation weights computed once, not per output sample."""

    def __init__(self, from_rate: int, to_rate: int) -> None:
        if from_rate <= 0 or to_rate <= 0:
            raise ValueError(f"sample rates must be positive, got {from_rate} -> {to_rate}")
        common = math.gcd(from_rate, to_rate)
        self.from_rate, self.to_rate = from_rate, to_rate
        self._up, self._down = to_rate // common, from_rate // common
        # Cutoff in cycles per input sample; the kernel spans ZERO_CROSSINGS of its lobes.
        self._cutoff = 0.5 * min(1.0, to_rate / from_rate) * self.ROLLOFF
        self._half = 0 if from_rate == to_rate else math.ceil(
            self.ZERO_CROSSINGS / (2 * self._cutoff))
        self._taps = np.arange(1 - self._half, self._half + 1)
        self._table = (self._weights(np.arange(self._up))
                       if self._half and self._up <= self.TABLE_PHASES else None)
        self._buffer = np.zeros(self._half)
        self._base = -self._half
        """Input index of `_buffer[0]` (negative: the silence before the stream)."""
        self._received = 0
        self._next = 0
        """Index of the next output sample."""

    @property
    def held_back(self) -> int:
        """Output samples the input already reaches but which wait for the input after them
        (the filter looks ahead): a consumer that needs the output on time delays it by this."""
        return 0 if self._half == 0 else math.ceil((self._half + 1) * self._up / self._down)

    def push(self, pcm: bytes) -> bytes:
        """The int16 output that `pcm` (int16, the stream's next samples) completes."""
        out = self.push_samples(np.frombuffer(pcm, dtype=np.int16).astype(np.float64))
        return to_pcm(out)

    def push_samples(self, samples: np.ndarray) -> np.ndarray:
        """`push` on float samples (int16 scale), without rounding."""
        if self._half == 0:
            return np.asarray(samples, dtype=np.float64).copy()
        self._buffer = np.concatenate([self._buffer, samples])
        self._received += len(samples)
        # Output k sits at input position k * down / up and needs `_half` samples past it.
        last_whole = self._received - 1 - self._half
        end = max(self._next, -(-(last_whole + 1) * self._up // self._down))
        positions = np.arange(self._next, end, dtype=np.int64) * self._down
        whole, phase = np.divmod(positions, self._up)
        weights = self._weights(phase) if self._table is None else self._table[phase]
        around = self._buffer[whole[:, None] + self._taps[None, :] - self._base]
        out: np.ndarray = (around * weights).sum(axis=1)
        self._next = end
        keep_from = end * self._down // self._up + 1 - self._half
        if keep_from > self._base:
            self._buffer = self._buffer[keep_from - self._base:]
            self._base = keep_from
        return out

    def _weights(self, phase: np.ndarray) -> np.ndarray:
        """Interpolation weights, one row per output phase (its fraction of an input sample),
        summing to 1 so that a constant passes unchanged."""
        offsets = (phase / self._up)[:, None] - self._taps[None, :]
        weights: np.ndarray = np.sinc(2 * self._cutoff * offsets) * np.i0(
            self.KAISER_BETA * np.sqrt(np.clip(1 - (offsets / self._half) ** 2, 0.0, 1.0)))
        normalized: np.ndarray = weights / weights.sum(axis=1, keepdims=True)
        return normalized


def first_loud_sample(pcm: bytes, level: int = 1000) -> int | None:
    """Index of the first sample at or above `level` in magnitude (speech onset), if any."""
    loud = np.flatnonzero(np.abs(np.frombuffer(pcm, dtype=np.int16).astype(np.int32)) >= level)
    return int(loud[0]) if len(loud) else None


def lag_samples(signal: np.ndarray, delayed: np.ndarray, longest: int) -> int:
    """How many samples `delayed` trails `signal` (0..`longest`), by cross-correlation."""
    length = min(len(signal), len(delayed))
    size = 1 << (2 * length - 1).bit_length()
    correlation = np.fft.irfft(np.fft.rfft(delayed[:length], size)
                               * np.conj(np.fft.rfft(signal[:length], size)), size)
    return int(np.argmax(correlation[:longest + 1]))


def to_pcm(samples: np.ndarray) -> bytes:
    """Float samples (int16 scale) as int16 PCM: rounded, clipped to full scale."""
    return np.clip(np.round(samples), -32768, 32767).astype(np.int16).tobytes()


def silence(samples: int) -> bytes:
    return bytes(2 * samples)


def read_wav(path: Path) -> tuple[bytes, int]:
    with wave.open(str(path), "rb") as wav:
        if wav.getnchannels() != 1 or wav.getsampwidth() != 2:
            raise ValueError(f"{path}: need mono 16-bit PCM WAV")
        return wav.readframes(wav.getnframes()), wav.getframerate()


def write_wav(path: Path, pcm: bytes, rate: int) -> None:
    """`pcm` as a WAV file at `path`: created private (it holds a voice), never written
    through a symlink or into a device (`files.open_private`: UnsafePathError)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with os.fdopen(open_private(path), "wb") as file, wave.open(file, "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(rate)
        wav.writeframes(pcm)


def fft_convolve(signal: np.ndarray, response: np.ndarray) -> np.ndarray:
    """The full linear convolution of two 1-D arrays (float64)."""
    length = len(signal) + len(response) - 1
    size = 1 << (length - 1).bit_length()
    full: np.ndarray = np.fft.irfft(np.fft.rfft(signal, size) * np.fft.rfft(response, size),
                                    size)[:length]
    return full
