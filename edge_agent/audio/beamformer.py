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
is still one fixed filter, so the echo canceller works on the beamformer's output (one
canceller, not one per microphone). An adaptive beamformer would move that path under the
canceller as it adapts. Which design is the default was chosen by measurement
(`edge-agent bench rooms`, see `DEFAULT_BEAMFORMER`).
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from typing import Protocol

import numpy as np

from edge_agent.audio.array import SPEED_OF_SOUND, MicArray
from edge_agent.audio.pcm import to_pcm

BEAMFORMERS = ("superdirective", "delay-and-sum")
DEFAULT_BEAMFORMER = "superdirective"
FILTER_TAPS = 256
"""Length of each microphone's filter: 16 ms at 16 kHz (a superdirective response needs
~10 ms to reach down to 300 Hz); it delays the output by half that."""
LOADING = 0.01
"""Diagonal loading of the diffuse field's coherence matrix (relative to its diagonal of 1):
at 0.01 the superdirective beam may amplify uncorrelated noise (a microphone's own hiss) by
at most ~20 dB at the lowest frequencies, instead of without bound."""


class ArrayMicrophone(Protocol):
    """A microphone with several channels: each frame holds `frame_samples` samples of every
    channel, interleaved (int16)."""

    sample_rate: int
    frame_samples: int
    channels: int

    def frames(self) -> AsyncIterator[bytes]: ...


def design_filters(array: MicArray, rate: int, azimuth_deg: float, elevation_deg: float,
                   kind: str = DEFAULT_BEAMFORMER, taps: int = FILTER_TAPS) -> np.ndarray:
    """One causal FIR filter per microphone (rows), `taps` long, steering the array toward
    (azimuth, elevation); summing the filtered microphones is the beamformer's output."""
    if kind not in BEAMFORMERS:
        raise ValueError(f"beamformer must be one of {', '.join(BEAMFORMERS)}, got {kind!r}")
    frequencies = np.fft.rfftfreq(taps, 1.0 / rate)
    delays = array.delays_s(azimuth_deg, elevation_deg)
    steering = np.exp(-2j * math.pi * frequencies[:, None] * delays[None, :])  # (F, M)
    if kind == "delay-and-sum":
        weights = steering / array.size
    else:
        weights = _superdirective(array, frequencies, steering)
    # The output is w^H x: filtering microphone m by conj(w_m) and summing.
    responses = np.fft.irfft(np.conj(weights), n=taps, axis=0)  # (taps, M), centred on 0
    filters = np.roll(responses, taps // 2, axis=0) * np.hanning(taps + 1)[:taps, None]
    result: np.ndarray = filters.T.copy()
    return result


def _superdirective(array: MicArray, frequencies: np.ndarray,
                    steering: np.ndarray) -> np.ndarray:
    distances = np.linalg.norm(array.positions_m[:, None, :] - array.positions_m[None, :, :],
                               axis=-1)
    weights = np.empty_like(steering)
    identity = np.eye(array.size)
    for index, frequency in enumerate(frequencies):
        # Coherence of a diffuse field between two points d apart: sin(kd)/(kd).
        coherence = np.sinc(2.0 * frequency * distances / SPEED_OF_SOUND) + LOADING * identity
        solved = np.linalg.solve(coherence, steering[index])
        weights[index] = solved / np.vdot(steering[index], solved)
    return weights


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
    """The filters applied to a stream of interleaved frames, piece by piece: the filters'
    tails carry across frames, so any cutting of the stream gives the same samples."""

    def __init__(self, array: MicArray, filters: np.ndarray) -> None:
        self.array = array
        self.delay_samples = filters.shape[1] // 2
        self._filters = filters
        self._spectra: dict[int, np.ndarray] = {}
        self._tail = np.zeros(filters.shape[1] - 1)

    def process(self, interleaved: bytes) -> bytes:
        """One channel (int16) from a frame of the array's `input_channels`, interleaved."""
        return to_pcm(self.steer(self.microphones(interleaved)))

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
        size = 1 << (length + self._filters.shape[1] - 2).bit_length()
        if size not in self._spectra:
            self._spectra[size] = np.fft.rfft(self._filters, size, axis=1)
        summed = np.sum(np.fft.rfft(mics.T, size, axis=1) * self._spectra[size], axis=0)
        full = np.fft.irfft(summed, size)[:length + len(self._tail)]
        full[:len(self._tail)] += self._tail
        self._tail = full[length:].copy()
        out: np.ndarray = full[:length]
        return out


class BeamformedMicrophone:
    """One steered channel from an `ArrayMicrophone`: a Microphone like any other."""

    def __init__(self, source: ArrayMicrophone, beamformer: Beamformer) -> None:
        if source.channels != beamformer.array.input_channels:
            raise ValueError(f"the microphone delivers {source.channels} channels; the array "
                             f"needs {beamformer.array.input_channels}")
        self.sample_rate = source.sample_rate
        self.frame_samples = source.frame_samples
        self._source = source
        self._beamformer = beamformer

    async def frames(self) -> AsyncIterator[bytes]:
        async for frame in self._source.frames():
            yield self._beamformer.process(frame)
