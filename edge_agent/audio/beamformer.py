"""Listening toward the person in front of the kiosk with a microphone array.

A fixed filter-and-sum beamformer: each microphone's signal goes through its own short FIR
filter and the results are summed into the one channel the rest of the loop hears (VAD,
recognizer, talker gate, kept audio). The filters are designed once, for the look direction,
in the frequency domain, and made causal by half their length (`FILTER_TAPS` / 2 samples: the
latency the beamformer adds, 8 ms at 16 kHz). Two designs, both distortionless toward the
look direction (a voice from there comes out as the centre of the board hears it):

- "delay-and-sum": each microphone delayed so that a wave from the look direction lines up,
  then averaged. Uncorrelated noise drops by 10·log10(M) dB; other directions are rejected
  only where the array is large against the wavelength (above ~2 kHz for a 8 cm board).
- "superdirective": the minimum-variance (MVDR) weights against a diffuse field (sound from
  every direction equally: a room's reverberation and its people), with diagonal loading
  (`LOADING`) bounding how much uncorrelated noise it may amplify. It rejects off-axis
  voices down to a few hundred Hz, where speech has most of its energy.

Both are linear and time-invariant: the echo path from the loudspeaker through the beamformer
is one fixed filter, so the echo canceller works on the beamformer's output (one canceller,
not one per microphone). The adaptive beamformer (`edge_agent.audio.adaptive_beamformer`)
starts from the superdirective design and changes it only while the agent is silent; which
one `[audio] beamformer` defaults to was chosen by measurement (see there).
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from enum import Enum
from typing import Protocol

import numpy as np

from edge_agent.audio.array import SPEED_OF_SOUND, MicArray
from edge_agent.audio.pcm import to_pcm

FIXED_DESIGNS = ("superdirective", "delay-and-sum")
FILTER_TAPS = 256
"""Length of each microphone's filter: 16 ms at 16 kHz (a superdirective response needs
~10 ms to reach down to 300 Hz); it delays the output by half that."""
LOADING = 0.01
"""Diagonal loading of the diffuse field's coherence matrix (relative to its diagonal of 1):
at 0.01 the superdirective beam may amplify uncorrelated noise (a microphone's own hiss) by
at most ~20 dB at the lowest frequencies, instead of without bound."""


class Look(Enum):
    """Where a frame's sound came from, as a beamformer that measures it tells."""

    CALLER = "caller"
    """From the look direction: the person in front."""
    ELSEWHERE = "elsewhere"
    """Not from the look direction, the agent silent: someone else in the room."""
    ELSEWHERE_OVER_THE_AGENT = "elsewhere over the agent"
    """Not from the look direction while the agent's voice fills the room: someone else, or
    the caller drowned by the agent's voice (an interruption's first syllables)."""


class ArrayBeamformer(Protocol):
    """The array's channels in, one steered channel out, piece by piece."""

    array: MicArray
    delay_samples: int
    """How far the output trails a wave from the look direction at the board's centre."""

    def process(self, interleaved: bytes) -> bytes:
        """One channel (int16) from a frame of the array's `input_channels`, interleaved."""
        ...

    def from_the_look(self) -> Look | None:
        """Where the last piece's sound came from (None: not known)."""
        ...

    def steer(self, mics: np.ndarray) -> np.ndarray:
        """The output for the next `mics` (samples x microphones)."""
        ...


class ArrayMicrophone(Protocol):
    """A microphone with several channels: each frame holds `frame_samples` samples of every
    channel, interleaved (int16)."""

    sample_rate: int
    frame_samples: int
    channels: int

    def frames(self) -> AsyncIterator[bytes]: ...


def design_filters(array: MicArray, rate: int, azimuth_deg: float, elevation_deg: float,
                   kind: str = "superdirective", taps: int = FILTER_TAPS) -> np.ndarray:
    """One causal FIR filter per microphone (rows), `taps` long, steering the array toward
    (azimuth, elevation); summing the filtered microphones is the beamformer's output."""
    if kind not in FIXED_DESIGNS:
        raise ValueError(f"a fixed beamformer is one of {', '.join(FIXED_DESIGNS)}, got {kind!r}")
    frequencies = np.fft.rfftfreq(taps, 1.0 / rate)
    steering = steering_vectors(array, frequencies, azimuth_deg, elevation_deg)
    if kind == "delay-and-sum":
        weights = steering / array.size
    else:
        weights = distortionless(diffuse_coherence(array, frequencies), steering)
    return filters_from_weights(weights)


def steering_vectors(array: MicArray, frequencies: np.ndarray, azimuth_deg: float,
                     elevation_deg: float) -> np.ndarray:
    """How a plane wave from that direction reaches each microphone, per frequency: (F, M)."""
    delays = array.delays_s(azimuth_deg, elevation_deg)
    steering: np.ndarray = np.exp(-2j * math.pi * frequencies[:, None] * delays[None, :])
    return steering


def diffuse_coherence(array: MicArray, frequencies: np.ndarray) -> np.ndarray:
    """The coherence of a diffuse field between the microphones, per frequency, with the
    diagonal loading `LOADING`: (F, M, M). Two points d apart: sin(kd)/(kd)."""
    distances = np.linalg.norm(array.positions_m[:, None, :] - array.positions_m[None, :, :],
                               axis=-1)
    coherence: np.ndarray = (np.sinc(2.0 * frequencies[:, None, None] * distances[None]
                                     / SPEED_OF_SOUND) + LOADING * np.eye(array.size))
    return coherence


def distortionless(covariance: np.ndarray, steering: np.ndarray) -> np.ndarray:
    """The minimum-variance distortionless weights against `covariance` (F, M, M) toward
    `steering` (F, M): w = R^-1 d / (d^H R^-1 d), per frequency."""
    solved = np.linalg.solve(covariance, steering[:, :, None])[:, :, 0]
    weights: np.ndarray = solved / np.sum(np.conj(steering) * solved, axis=1)[:, None]
    return weights


def filters_from_weights(weights: np.ndarray) -> np.ndarray:
    """Per-frequency weights (F, M) of an rfft grid as causal FIR filters, one row per
    microphone, delayed by half their length and windowed."""
    taps = 2 * (len(weights) - 1)
    # The output is w^H x: filtering microphone m by conj(w_m) and summing.
    responses = np.fft.irfft(np.conj(weights), n=taps, axis=0)  # (taps, M), centred on 0
    filters = np.roll(responses, taps // 2, axis=0) * np.hanning(taps + 1)[:taps, None]
    result: np.ndarray = filters.T.copy()
    return result


def response_db(array: MicArray, filters: np.ndarray, rate: int, frequency: float,
                azimuth_deg: float, elevation_deg: float = 0.0) -> float:
    """The beamformer's gain, dB, for a plane wave of `frequency` from that direction (0 dB
    toward the look direction)."""
    arrival = array.delays_s(azimuth_deg, elevation_deg)
    taps = filters.shape[1]
    phases = np.exp(-2j * math.pi * frequency * np.arange(taps) / rate)
    per_mic = filters @ phases  # each filter's response at `frequency`
    total = np.sum(per_mic * np.exp(-2j * math.pi * frequency * arrival))
    return 20.0 * math.log10(max(abs(total), 1e-12))


class Beamformer:
    """The filters applied to a stream of interleaved frames, piece by piece: each piece is
    filtered together with the last `taps - 1` samples before it, so any cutting of the stream
    gives the same samples, and new filters (`retune`) apply from the next piece on, faded in
    over it (no click where they change)."""

    def __init__(self, array: MicArray, filters: np.ndarray) -> None:
        self.array = array
        self.delay_samples = filters.shape[1] // 2
        self._filters = filters
        self._next: np.ndarray | None = None
        self._spectra: dict[int, np.ndarray] = {}
        self._history = np.zeros((filters.shape[1] - 1, array.size))

    @property
    def filters(self) -> np.ndarray:
        """The filters the next piece is (or, after a `retune`, ends up) steered with."""
        return self._filters if self._next is None else self._next

    def retune(self, filters: np.ndarray) -> None:
        """Steer with `filters` (the same shape) from the next piece on."""
        if filters.shape != self._filters.shape:
            raise ValueError(f"filters of shape {filters.shape}, the beamformer has "
                             f"{self._filters.shape}")
        self._next = filters

    def process(self, interleaved: bytes) -> bytes:
        """One channel (int16) from a frame of the array's `input_channels`, interleaved."""
        return to_pcm(self.steer(self.microphones(interleaved)))

    def from_the_look(self) -> Look | None:
        """Not known: a fixed design does not measure where the sound comes from."""
        return None

    def microphones(self, interleaved: bytes) -> np.ndarray:
        """The microphones' channels of an interleaved frame: samples x microphones."""
        samples = np.frombuffer(interleaved, dtype=np.int16).reshape(-1, self.array.input_channels)
        mics: np.ndarray = samples[:, list(self.array.channels)].astype(np.float64)
        return mics

    def steer(self, mics: np.ndarray) -> np.ndarray:
        """The beamformer's output for the next `mics` (samples x microphones)."""
        length = len(mics)
        if not length:
            return np.zeros(0)
        taken = np.concatenate([self._history, mics])
        self._history = taken[length:].copy()
        size = 1 << (len(taken) - 1).bit_length()
        spectrum = np.fft.rfft(taken.T, size, axis=1)
        out = self._filtered(spectrum, self._filters, size, length)
        if self._next is not None:
            fade = (np.arange(length) + 1.0) / length
            out = out * (1.0 - fade) + self._filtered(spectrum, self._next, size, length) * fade
            self._filters, self._next = self._next, None
            self._spectra.clear()
        return out

    def _filtered(self, spectrum: np.ndarray, filters: np.ndarray, size: int,
                  length: int) -> np.ndarray:
        if filters is self._filters:
            if size not in self._spectra:
                self._spectra[size] = np.fft.rfft(filters, size, axis=1)
            responses = self._spectra[size]
        else:
            responses = np.fft.rfft(filters, size, axis=1)
        full = np.fft.irfft(np.sum(spectrum * responses, axis=0), size)
        start = len(self._history)
        out: np.ndarray = full[start:start + length]
        return out


class BeamformedMicrophone:
    """One steered channel from an `ArrayMicrophone`: a Microphone like any other."""

    def __init__(self, source: ArrayMicrophone, beamformer: ArrayBeamformer) -> None:
        if source.channels != beamformer.array.input_channels:
            raise ValueError(f"the microphone delivers {source.channels} channels; the array "
                             f"needs {beamformer.array.input_channels}")
        self.sample_rate = source.sample_rate
        self.frame_samples = source.frame_samples
        self._source = source
        self._beamformer = beamformer

    def from_the_look(self) -> Look | None:
        """Where the last frame's sound came from, where the beamformer tells (the adaptive
        one; None otherwise): the talker gate takes sound from elsewhere for the room's."""
        return self._beamformer.from_the_look()

    async def frames(self) -> AsyncIterator[bytes]:
        async for frame in self._source.frames():
            yield self._beamformer.process(frame)
