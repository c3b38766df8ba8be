"""A room between the agent's loudspeaker and its microphone, for the simulator: the echo a
kiosk's microphone hears of what its speaker plays, delayed, reverberated and a little
distorted, the same samples for the same room in every run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

MAX_DELAY_MS = 500.0
"""Longest echo delay a room may have: far past a speaker and a microphone in one box
(tens of ms of device buffers plus centimetres of air)."""
MAX_REVERB_MS = 1000.0
"""Longest reverberation: a large hall; a furnished room is 200-600 ms."""
DIRECT_TO_REVERB_DB = 6.0
"""How much more energy the direct path from speaker to microphone carries than the
reverberant tail: speaker and microphone share a box, the walls are farther."""
FULL_SCALE = 32768.0


@dataclass(frozen=True)
class Room:
    """The echo path from the agent's speaker to its microphone."""

    echo_gain: float = 0.0
    """Level of the echo against what the speaker plays, linear (energy of the whole impulse
    response; 0: the microphone does not hear the speaker)."""
    delay_ms: float = 10.0
    """From the speaker's cursor to the microphone: device buffers plus the sound's flight
    (40 ms is a typical kiosk; no real device is under a few ms, and an echo canceller counts on
    the echo coming after what it is told played: WebRTC's misses an echo under ~1 ms). In the
    simulator it is at least the ~0.8 ms its streaming resampler holds samples back."""
    reverb_ms: float = 0.0
    """Time the reverberation takes to die away by 60 dB (RT60) in an exponentially decaying
    random impulse response (150 ms: a small furnished room; 0: none, the direct path only)."""
    clip: float | None = None
    """Level where a small loudspeaker saturates, as a fraction of full scale (soft clipping:
    0.5 flattens the agent's loudest syllables and distorts the rest a little; None: a clean
    speaker)."""
    seed: int = 0
    """Seed of the impulse response's random reflections: the same room, the same echo."""

    def __post_init__(self) -> None:
        if not (math.isfinite(self.echo_gain) and self.echo_gain >= 0):
            raise ValueError(f"echo_gain must be a finite number >= 0, got {self.echo_gain!r}")
        if not 0 <= self.delay_ms <= MAX_DELAY_MS:
            raise ValueError(f"delay_ms must be within 0..{MAX_DELAY_MS:g}, got {self.delay_ms!r}")
        if not 0 <= self.reverb_ms <= MAX_REVERB_MS:
            raise ValueError(f"reverb_ms must be within 0..{MAX_REVERB_MS:g}, "
                             f"got {self.reverb_ms!r}")
        if self.clip is not None and not 0 < self.clip <= 1:
            raise ValueError(f"clip must be within (0, 1] or None, got {self.clip!r}")
        if self.seed < 0:
            raise ValueError(f"seed must be >= 0, got {self.seed!r}")

    @property
    def heard(self) -> bool:
        """Whether the microphone hears the speaker at all."""
        return self.echo_gain > 0

    def delay_samples(self, rate: int) -> int:
        return round(self.delay_ms * rate / 1000)

    def impulse_response(self, rate: int) -> np.ndarray:
        """The room at `rate` Hz, without its delay: the direct path, then Gaussian reflections
        decaying 60 dB over `reverb_ms`; scaled to energy `echo_gain ** 2`."""
        length = round(self.reverb_ms * rate / 1000)
        response = np.zeros(1 + length)
        response[0] = 1.0
        if length:
            reflections = np.random.default_rng(self.seed).standard_normal(length)
            reflections *= 10.0 ** (-3.0 * np.arange(length) / length)  # -60 dB at the end
            tail_energy = 10.0 ** (-DIRECT_TO_REVERB_DB / 10)
            response[1:] = reflections * math.sqrt(tail_energy / np.sum(reflections ** 2))
        scaled: np.ndarray = response * (self.echo_gain / math.sqrt(np.sum(response ** 2)))
        return scaled


class RoomEcho:
    """The echo of a stream, piece by piece: `process` takes what the speaker played next (at
    the microphone's rate, int16 scale) and returns the echo the microphone hears meanwhile,
    as long as the input. The reverberation's tail and the delay line carry across pieces, so
    processing in frames gives the samples processing the whole stream at once would."""

    def __init__(self, room: Room, rate: int, spent_samples: int = 0) -> None:
        """`spent_samples`: delay the caller already adds upstream (a resampler holding samples
        back); the delay line adds only the rest, so the echo arrives `delay_ms` after the
        sound wherever the delay is longer than that."""
        self.room = room
        self._clip_level = None if room.clip is None else room.clip * FULL_SCALE
        self._response = room.impulse_response(rate)
        self._spectra: dict[int, np.ndarray] = {}
        self._tail = np.zeros(len(self._response) - 1)
        self._line = np.zeros(max(0, room.delay_samples(rate) - spent_samples))

    def process(self, samples: np.ndarray) -> np.ndarray:
        played = np.asarray(samples, dtype=np.float64)
        if not len(played):
            return played.copy()
        if self._clip_level is not None:
            played = self._clip_level * np.tanh(played / self._clip_level)
        echo = np.concatenate([self._line, self._reverberate(played)])
        out, self._line = echo[:len(played)], echo[len(played):]
        return out

    def _reverberate(self, played: np.ndarray) -> np.ndarray:
        if len(self._response) == 1:
            result: np.ndarray = played * self._response[0]
            return result
        full_length = len(played) + len(self._response) - 1
        size = 1 << (full_length - 1).bit_length()
        if size not in self._spectra:
            self._spectra[size] = np.fft.rfft(self._response, size)
        full = np.fft.irfft(np.fft.rfft(played, size) * self._spectra[size], size)[:full_length]
        full[:len(self._tail)] += self._tail
        self._tail = full[len(played):]
        return full[:len(played)]
