"""PCM helpers: resampling and WAV files (mono, signed 16-bit)."""

from __future__ import annotations

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
    return bytes(np.clip(np.round(out), -32768, 32767).astype(np.int16).tobytes())


def first_loud_sample(pcm: bytes, level: int = 1000) -> int | None:
    """Index of the first sample at or above `level` in magnitude (speech onset), if any."""
    loud = np.flatnonzero(np.abs(np.frombuffer(pcm, dtype=np.int16).astype(np.int32)) >= level)
    return int(loud[0]) if len(loud) else None


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


class StreamResampler:
    """Resamples a stream that comes in pieces, continuously: the fractional position carries
    from one piece to the next (linear interpolation), so pieces leave no seams and the output
    length follows the input's exactly over time (no drift)."""

    def __init__(self, from_rate: int, to_rate: int) -> None:
        self._step = from_rate / to_rate
        self._position = 0.0
        """Where the next output sample lies, in input samples from the held one."""
        self._held = np.zeros(0, dtype=np.float64)

    def push(self, pcm: bytes) -> bytes:
        samples = np.concatenate([self._held, np.frombuffer(pcm, dtype=np.int16)])
        if len(samples) < 2:
            self._held = samples
            return b""
        last = len(samples) - 1
        count = max(0, int(np.floor((last - self._position) / self._step)) + 1)
        positions = self._position + self._step * np.arange(count)
        positions = positions[positions < last]
        out = np.interp(positions, np.arange(len(samples)), samples)
        next_position = self._position + self._step * len(positions)
        keep = int(np.floor(next_position))
        self._held = samples[keep:]
        self._position = next_position - keep
        return bytes(np.clip(np.round(out), -32768, 32767).astype(np.int16).tobytes())
