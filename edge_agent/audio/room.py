"""A room between the agent's loudspeaker and its microphone, for the simulator: the echo a
kiosk's microphone hears of what its speaker plays, delayed, reverberated and a little
distorted, the same samples for the same room in every run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from edge_agent.audio.room_acoustics import RoomLayout

MAX_DELAY_MS = 500.0
"""Longest echo delay a room may have: far past a speaker and a microphone in one box
(tens of ms of device buffers plus centimetres of air)."""
MAX_REVERB_MS = 1000.0
"""Longest reverberation: a large hall; a furnished room is 200-600 ms."""
DIRECT_TO_REVERB_DB = 6.0
"""How much more energy the direct path from speaker to microphone carries than the
reverberant tail: speaker and microphone share a box, the walls are farther."""
FULL_SCALE = 32768.0
NOISE_DB_RANGE = (-90.0, -10.0)
"""Steady noise levels a room may have, dBFS: from inaudible to louder than most speech."""
NOISE_KINDS = ("pink", "white", "brown")
TALKER_DIRECT_TO_REVERB_DB = 0.0
"""A talker a few metres away: the room's reverberation carries as much of their voice as
the direct path does (the agent's own speaker, in the box, is 6 dB more direct)."""


@dataclass(frozen=True)
class Room:
    """The echo path from the agent's speaker to its microphone."""

    echo_gain: float = 0.0
    """Level of the echo against what the speaker plays, linear (energy of the whole impulse
    response; 0: the microphone does not hear the speaker)."""
    delay_ms: float = 10.0
    """From the speaker's cursor to the microphone: device buffers plus the sound's flight
    (40 ms is a typical kiosk; no real device is under a few ms, and an echo canceller counts on
    the echo coming after what it is told played: the agent's reference is laid out 4 ms behind
    the microphone's capture clock and WebRTC's canceller misses an echo less than ~3 ms after
    it, so under ~7 ms the echo is not cancelled; see played_reference.REFERENCE_LAG_S). In the
    simulator it is at least the ~0.8 ms its streaming resampler holds samples back."""
    reverb_ms: float = 0.0
    """Time the reverberation takes to die away by 60 dB (RT60) in an exponentially decaying
    random impulse response (150 ms: a small furnished room; 0: none, the direct path only)."""
    clip: float | None = None
    """Level where a small loudspeaker saturates, as a fraction of full scale (soft clipping:
    0.5 flattens the agent's loudest syllables and distorts the rest a little; None: a clean
    speaker)."""
    seed: int = 0
    """Seed of the impulse response's random reflections and of the steady noise: the same
    room, the same echo and the same noise."""
    layout: RoomLayout | None = None
    """Where the kiosk, the caller and the people nearby stand (None: no places, the echo's
    random response and each talker's own); with it every path is the room's own
    (`edge_agent.audio.room_acoustics`), `reverb_ms` its reverberation time."""
    noise_db: float | None = None
    """Level of steady background noise the microphone hears, in dBFS (RMS against full
    scale): -45 a quiet fan, -35 an office's ventilation, -30 a street through a door; None:
    a silent room."""
    noise_kind: str = "pink"
    """The noise's spectrum: "pink" (equal energy per octave: fans, traffic, a room's hum),
    "white" (hiss, flat to the Nyquist frequency) or "brown" (a rumble, mostly low)."""

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
        low, high = NOISE_DB_RANGE
        if self.noise_db is not None and not low <= self.noise_db <= high:
            raise ValueError(f"noise_db must be within {low:g}..{high:g} or None, "
                             f"got {self.noise_db!r}")
        if self.noise_kind not in NOISE_KINDS:
            raise ValueError(f"noise_kind must be one of {', '.join(NOISE_KINDS)}, "
                             f"got {self.noise_kind!r}")

    @property
    def noisy(self) -> bool:
        """Whether the microphone hears steady noise."""
        return self.noise_db is not None

    @property
    def heard(self) -> bool:
        """Whether the microphone hears the speaker at all."""
        return self.echo_gain > 0

    def delay_samples(self, rate: int) -> int:
        return round(self.delay_ms * rate / 1000)

    def impulse_response(self, rate: int) -> np.ndarray:
        """The room at `rate` Hz, without its delay: the direct path, then Gaussian reflections
        decaying 60 dB over `reverb_ms`; scaled to energy `echo_gain ** 2`."""
        scaled: np.ndarray = self.echo_gain * reverberant_response(
            rate, self.reverb_ms, DIRECT_TO_REVERB_DB, self.seed)
        return scaled


def reverberant_response(rate: int, reverb_ms: float, direct_to_reverb_db: float,
                         seed: int) -> np.ndarray:
    """An impulse response of energy 1 at `rate` Hz: the direct path, then Gaussian
    reflections (from `seed`) decaying 60 dB over `reverb_ms`, `direct_to_reverb_db` below
    the direct path in energy."""
    length = round(reverb_ms * rate / 1000)
    response = np.zeros(1 + length)
    response[0] = 1.0
    if length:
        reflections = np.random.default_rng(seed).standard_normal(length)
        reflections *= 10.0 ** (-3.0 * np.arange(length) / length)  # -60 dB at the end
        tail_energy = 10.0 ** (-direct_to_reverb_db / 10)
        response[1:] = reflections * math.sqrt(tail_energy / np.sum(reflections ** 2))
    normalized: np.ndarray = response / math.sqrt(np.sum(response ** 2))
    return normalized


class RoomEcho:
    """The echo of a stream, piece by piece: `process` takes what the speaker played next (at
    the microphone's rate, int16 scale) and returns the echo the microphone hears meanwhile,
    as long as the input. The reverberation's tail and the delay line carry across pieces, so
    processing in frames gives the samples processing the whole stream at once would."""

    def __init__(self, room: Room, rate: int, spent_samples: int = 0,
                 response: np.ndarray | None = None) -> None:
        """`spent_samples`: delay the caller already adds upstream (a resampler holding samples
        back); the delay line adds only the rest, so the echo arrives `delay_ms` after the
        sound wherever the delay is longer than that. `response`: the path from the speaker
        (energy 1 is the room's echo_gain; None: the room's own random response)."""
        self.room = room
        self._clip_level = None if room.clip is None else room.clip * FULL_SCALE
        self._response = (room.impulse_response(rate) if response is None
                          else room.echo_gain * np.asarray(response, dtype=np.float64))
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


_SHAPING: dict[str, tuple[tuple[tuple[float, float], ...], float]] = {
    # Paul Kellett's economy pink filter: three leaky integrators plus the white input, within
    # 0.05 dB of 1/f over the speech band (a few Hz up) -- cheap, and continuous across frames.
    "pink": (((0.99765, 0.0990460), (0.96300, 0.2965164), (0.57000, 1.0526913)), 0.1848),
    "white": ((), 1.0),
    # A leaky integrator: 1/f^2 above ~5 Hz at 16 kHz, without wandering off like a pure one.
    "brown": (((0.998, 1.0),), 0.0),
}
"""Each kind as one-pole low-passes (pole, gain) fed the same white noise, summed with the
white noise itself times a direct gain."""
NOISE_BLOCK = 256
"""Samples filtered at once: a one-pole's closed form divides by pole**n, which must stay far
from float64's range (0.57 ** -256 is ~1e62)."""
NOISE_WARM_UP_S = 1.0
"""Noise run through the filters before the first sample is handed out, so the level is
steady from the start (the slowest pole settles in a few hundred samples)."""


class RoomNoise:
    """A room's steady noise, piece by piece: `take(n)` returns the next n samples (int16
    scale, float64) at `noise_db` RMS; the same room gives the same samples however the
    stream is cut into pieces."""

    def __init__(self, room: Room, rate: int, microphone: int = 0) -> None:
        """`microphone`: which microphone of an array hears it (each its own noise)."""
        if room.noise_db is None:
            raise ValueError("the room has no steady noise (noise_db is None)")
        # Its own stream, apart from the reflections': noise and echo do not share values.
        self._random = np.random.default_rng([room.seed, 1] if not microphone
                                             else [room.seed, 1, microphone])
        self._poles, self._direct = _SHAPING[room.noise_kind]
        self._states = [0.0] * len(self._poles)
        self._scale = FULL_SCALE * 10.0 ** (room.noise_db / 20) / math.sqrt(self._variance())
        self.take(round(NOISE_WARM_UP_S * rate))

    def take(self, samples: int) -> np.ndarray:
        pieces = [self._shaped(min(NOISE_BLOCK, samples - start))
                  for start in range(0, samples, NOISE_BLOCK)]
        noise: np.ndarray = (np.concatenate(pieces) if pieces else np.zeros(0)) * self._scale
        return noise

    def _shaped(self, samples: int) -> np.ndarray:
        white = self._random.standard_normal(samples)
        out = self._direct * white
        for i, (pole, gain) in enumerate(self._poles):
            # y[n] = pole * y[n-1] + gain * x[n], for the whole block at once
            powers = pole ** np.arange(samples)
            low_passed = powers * (pole * self._states[i] + gain * np.cumsum(white / powers))
            self._states[i] = float(low_passed[-1])
            out = out + low_passed
        return out

    def _variance(self) -> float:
        """The shaped noise's variance for unit white noise: the low-passes are correlated
        (they filter the same input), so the cross terms count."""
        total = self._direct ** 2
        for pole, gain in self._poles:
            total += 2 * self._direct * gain
            total += sum(gain * other_gain / (1 - pole * other_pole)
                         for other_pole, other_gain in self._poles)
        return total


class RoomTalk:
    """Other people talking in the room, piece by piece: each track (one talker's speech as
    the microphone hears it, int16 scale, at the microphone's rate; with an array, a column
    per microphone) from its first sample on, over and over; `take(n)` returns the next n
    samples of all of them together."""

    def __init__(self, tracks: list[tuple[np.ndarray, int]]) -> None:
        """`tracks`: (speech, the sample it starts at) per talker, all of the same shape."""
        self._tracks = [(np.asarray(track, dtype=np.float64), start)
                        for track, start in tracks if len(track)]
        self._shape = self._tracks[0][0].shape[1:] if self._tracks else ()
        self._position = 0

    def take(self, samples: int) -> np.ndarray:
        out = np.zeros((samples, *self._shape))
        for track, start in self._tracks:
            offsets = np.arange(self._position - start, self._position - start + samples)
            talking = offsets >= 0
            out[talking] += track[offsets[talking] % len(track)]
        self._position += samples
        return out
