"""Microphone arrays: where each microphone of a board sits, which input channel carries it,
and the direction the person at the kiosk speaks from.

Coordinates are the board's own, in millimetres: x and y in the board's plane, z up out of it
(a board lying flat on a kiosk: x to the side, y toward the person in front). A direction is
an azimuth (degrees from +y toward +x, in the board's plane) and an elevation (degrees up out
of it). The geometries of the presets are the boards' published microphone positions (the
same ones the ODAS localisation project ships for them):

- `respeaker-4mic-hat`: the ReSpeaker 4-Mic Array for Raspberry Pi; 4 microphones on a
  square, 40.5 mm from the centre; 4 input channels.
- `respeaker-6mic`: the ReSpeaker 6-Mic Circular Array kit; 6 on a circle of 46.3 mm; 8 input
  channels, the microphones on the first 6.
- `respeaker-usb-4mic`: the ReSpeaker USB Mic Array v2.0 with its 6-channel firmware; 4 on a
  circle of 32 mm; 6 input channels, the raw microphones on channels 1-4 (0 is the board's
  own processed mix).

Any other board: `mic_positions_mm` (one [x, y, z] per microphone) and `mic_channels`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

SPEED_OF_SOUND = 343.0
"""Metres per second, in air at 20 °C."""
MAX_APERTURE_MM = 500.0
"""Widest array taken: beyond half a metre a caller half a metre away is not in the far
field the beamformer assumes, and the microphones would not share one sound card's clock."""
MIN_SPACING_MM = 1.0
"""Two microphones closer than this are one position written twice."""


class ArrayError(ValueError):
    """An `[audio]` array that cannot be listened with; `key` names the key at fault."""

    def __init__(self, key: str, reason: str) -> None:
        super().__init__(f"{key}: {reason}")
        self.key = key
        self.reason = reason


@dataclass(frozen=True)
class ArrayPreset:
    positions_mm: tuple[tuple[float, float, float], ...]
    channels: tuple[int, ...]
    """The input channel of each microphone."""
    input_channels: int
    """Channels the device delivers (some carry no microphone: a processed mix, playback)."""
    board: str


def _circle(radius_mm: float, count: int, first_deg: float) -> tuple[tuple[float, float, float],
                                                                      ...]:
    return tuple((round(radius_mm * math.cos(math.radians(first_deg + 360.0 * i / count)), 1),
                  round(radius_mm * math.sin(math.radians(first_deg + 360.0 * i / count)), 1),
                  0.0) for i in range(count))


PRESETS: dict[str, ArrayPreset] = {
    "respeaker-4mic-hat": ArrayPreset(((-40.5, 0.0, 0.0), (0.0, 40.5, 0.0), (40.5, 0.0, 0.0),
                                       (0.0, -40.5, 0.0)), (0, 1, 2, 3), 4,
                                      "ReSpeaker 4-Mic Array for Raspberry Pi"),
    "respeaker-6mic": ArrayPreset(_circle(46.3, 6, 120.0), (0, 1, 2, 3, 4, 5), 8,
                                  "ReSpeaker 6-Mic Circular Array kit"),
    "respeaker-usb-4mic": ArrayPreset(_circle(32.0, 4, 180.0), (1, 2, 3, 4), 6,
                                      "ReSpeaker USB Mic Array v2.0 (6-channel firmware)"),
}


@dataclass(frozen=True)
class MicArray:
    """The microphones the agent listens with, as the beamformer needs them."""

    positions_m: np.ndarray
    """One row (x, y, z) per microphone, metres, in the board's coordinates."""
    channels: tuple[int, ...]
    """The input channel each microphone arrives on."""
    input_channels: int
    """Channels the input device is opened with."""
    name: str
    """The preset's name, or "custom"."""

    @property
    def size(self) -> int:
        return len(self.channels)

    @property
    def aperture_m(self) -> float:
        """The largest distance between two microphones."""
        differences = self.positions_m[:, None, :] - self.positions_m[None, :, :]
        return float(np.max(np.linalg.norm(differences, axis=-1)))

    @property
    def centred_m(self) -> np.ndarray:
        """The positions against the board's centre (the mean of the microphones')."""
        centred: np.ndarray = self.positions_m - self.positions_m.mean(axis=0)
        return centred

    def delays_s(self, azimuth_deg: float, elevation_deg: float) -> np.ndarray:
        """When a plane wave from that direction reaches each microphone, against the board's
        centre (seconds; negative: earlier)."""
        toward = direction(azimuth_deg, elevation_deg)
        delays: np.ndarray = -(self.centred_m @ toward) / SPEED_OF_SOUND
        return delays


    def plane_wave(self, signal: np.ndarray, azimuth_deg: float, elevation_deg: float,
                   rate: int) -> np.ndarray:
        """What each microphone hears of `signal` (as the board's centre would) arriving from
        far off in that direction: samples x microphones, delayed by fractions of a sample."""
        size = 2 * len(signal)
        spectrum = np.fft.rfft(signal, size)
        frequencies = np.fft.rfftfreq(size, 1.0 / rate)
        heard: np.ndarray = np.stack(
            [np.fft.irfft(spectrum * np.exp(-2j * math.pi * frequencies * delay),
                          size)[:len(signal)]
             for delay in self.delays_s(azimuth_deg, elevation_deg)], axis=1)
        return heard


def direction(azimuth_deg: float, elevation_deg: float) -> np.ndarray:
    """A unit vector toward (azimuth, elevation) in the board's coordinates."""
    azimuth, elevation = math.radians(azimuth_deg), math.radians(elevation_deg)
    return np.array([math.sin(azimuth) * math.cos(elevation),
                     math.cos(azimuth) * math.cos(elevation), math.sin(elevation)])


def mic_array(preset: str, positions_mm: list[list[float]], channels: list[int],
              input_channels: int) -> MicArray | None:
    """The array `[audio]` describes (None: one microphone). ArrayError, naming the key, for a
    geometry that cannot be listened with."""
    if preset and positions_mm:
        raise ArrayError("array", "give a preset or mic_positions_mm, not both")
    if preset:
        if preset not in PRESETS:
            raise ArrayError("array", f"{preset!r} is not a preset (the presets: "
                             f"{', '.join(PRESETS)}; another board: mic_positions_mm)")
        chosen = PRESETS[preset]
        rows = [list(p) for p in chosen.positions_mm]
        channels = channels or list(chosen.channels)
        input_channels = input_channels or chosen.input_channels
    elif positions_mm:
        rows = [_position(i, p) for i, p in enumerate(positions_mm)]
        channels = channels or list(range(len(rows)))
        input_channels = input_channels or max(channels) + 1
    else:
        if channels:
            raise ArrayError("mic_channels",
                             "only for an array (set array or mic_positions_mm)")
        return None
    _check_channels(len(rows), channels, input_channels)
    positions = np.array(rows, dtype=np.float64) / 1000.0
    array = MicArray(positions, tuple(channels), input_channels, preset or "custom")
    if array.aperture_m * 1000 > MAX_APERTURE_MM:
        raise ArrayError("mic_positions_mm",
                         f"the microphones span {array.aperture_m * 1000:.0f} mm; at most "
                         f"{MAX_APERTURE_MM:g} mm (one board's array) is taken")
    for i in range(array.size):
        for j in range(i):
            if np.linalg.norm(positions[i] - positions[j]) * 1000 < MIN_SPACING_MM:
                raise ArrayError("mic_positions_mm", f"microphones {j} and {i} are at the "
                                 "same place; each needs its own position")
    return array


def _position(index: int, row: list[float]) -> list[float]:
    if len(row) not in (2, 3):
        raise ArrayError(f"mic_positions_mm[{index}]",
                         f"give [x, y] or [x, y, z] in mm, got {len(row)} numbers")
    return [*row, 0.0] if len(row) == 2 else list(row)


def _check_channels(microphones: int, channels: list[int], input_channels: int) -> None:
    if microphones < 2:
        raise ArrayError("mic_positions_mm", "an array needs at least 2 microphones (one "
                         "microphone: leave array and mic_positions_mm empty)")
    if len(channels) != microphones:
        raise ArrayError("mic_channels", f"{len(channels)} channels for {microphones} "
                         "microphones; give one input channel per microphone")
    if len(set(channels)) != len(channels):
        raise ArrayError("mic_channels",
                         "a channel is named twice; each microphone has its own")
    if max(channels) >= input_channels:
        raise ArrayError("input_channels",
                         f"{input_channels} channels, but mic_channels names channel "
                         f"{max(channels)} (counted from 0); open at least {max(channels) + 1}")
