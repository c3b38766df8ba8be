"""A room that knows where people stand, for the simulator: the caller, the people talking
nearby, the kiosk's loudspeaker and its microphones at their places in a box-shaped room, and
what every microphone hears of each of them.

The impulse responses come from the image-source method (`pyroomacoustics`, MIT: the walls
reflect each source into mirror images, their sum is the room's response), with the walls'
absorption chosen by Sabine's formula for the room's reverberation time; the same room gives
the same responses in every run. `pyroomacoustics` is only needed here (`pip install
'edge-agent[rooms]'`), never by the running agent.

Positions are metres. The kiosk's array sits at `array_at_m` in the room, its board lying flat
and facing into the room (+y); everyone else is placed relative to the array in the board's
own axes (x to the side, y in front, z up: `edge_agent.audio.array`), so a call file says "the
caller half a metre in front" whatever the room.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

Position = tuple[float, float, float]

SIZE_RANGE_M = ((2.0, 30.0), (2.0, 30.0), (2.2, 10.0))
"""Rooms the simulator takes: a booth to a hall."""
WALL_CLEARANCE_M = 0.1
"""Nobody stands closer to a wall than this (a source on a wall has no room behind it)."""
CALLER_AT_M: Position = (0.0, 0.5, 0.3)
"""The person at the kiosk: half a metre in front of the array, their mouth 30 cm above it."""
SPEAKER_AT_M: Position = (0.0, -0.05, -0.15)
"""The kiosk's loudspeaker: in the same box, a little behind and below the microphones."""
TALKER_SPOTS_M: tuple[Position, ...] = ((1.8, 2.2, 0.4), (-2.0, 3.0, 0.4), (2.4, 4.0, 0.4),
                                         (-1.2, 4.2, 0.4))
"""Where people talking nearby stand when a call file does not say: 2.8-4.4 m away, to
either side; the same spots again, a metre further back, for more talkers."""


@dataclass(frozen=True)
class RoomLayout:
    """A box-shaped room and where the kiosk stands in it ([room] size_m in a call file)."""

    size_m: Position
    """Length (x), depth (y) and height (z) of the room."""
    array_at_m: Position | None = None
    """Where the centre of the kiosk's microphones is (None: the middle of the wall at y = 0,
    0.5 m out from it, 1.2 m up)."""
    caller_at_m: Position = CALLER_AT_M
    """The caller's mouth, relative to the array in the board's axes."""
    speaker_at_m: Position = SPEAKER_AT_M
    """The kiosk's loudspeaker, relative to the array."""

    @property
    def array_centre(self) -> np.ndarray:
        if self.array_at_m is not None:
            return np.array(self.array_at_m, dtype=np.float64)
        return np.array([self.size_m[0] / 2, 0.5, 1.2])

    def place(self, relative: Position) -> np.ndarray:
        """A position given relative to the array, in the room's coordinates."""
        return self.array_centre + np.array(relative, dtype=np.float64)

    def talker_at(self, index: int, given: Position | None) -> Position:
        """Where talker `index` stands (relative to the array): as given, else a spot of
        `TALKER_SPOTS_M`."""
        if given is not None:
            return given
        x, y, z = TALKER_SPOTS_M[index % len(TALKER_SPOTS_M)]
        return (x, y + float(index // len(TALKER_SPOTS_M)), z)

    def check(self, relative: Position, what: str) -> None:
        """ValueError if `what`, at `relative` to the array, is not inside the room."""
        where = self.place(relative)
        for axis, (value, size) in enumerate(zip(where, self.size_m, strict=True)):
            if not WALL_CLEARANCE_M <= value <= size - WALL_CLEARANCE_M:
                raise ValueError(f"{what}: {_shown(where)} m in the room is outside a room "
                                 f"of {_shown(self.size_m)} m along {'xyz'[axis]} (keep "
                                 f"{WALL_CLEARANCE_M:g} m from the walls)")


@dataclass(frozen=True)
class RoomResponses:
    """What each microphone hears of each source: one impulse response per microphone (rows),
    at the microphone's rate."""

    caller: np.ndarray
    """Scaled so the caller's direct sound reaches the first microphone at its own level (gain
    1 at low frequencies)."""
    speaker: np.ndarray
    """Scaled to energy 1 at the first microphone (the echo's gain is applied on top)."""
    talkers: tuple[np.ndarray, ...]
    """Scaled as the caller's: their level is set against the caller's later."""


def render(layout: RoomLayout, reverb_ms: float, microphones_m: np.ndarray,
           talkers_at: Sequence[Position], rate: int) -> RoomResponses:
    """The room's impulse responses for microphones at `microphones_m` (rows of x, y, z,
    relative to the array's centre) and talkers at `talkers_at` (relative to the array).
    `reverb_ms`: the room's RT60 (0: no reflections, the direct sound only)."""
    try:
        import pyroomacoustics as pra
    except ImportError:
        raise ImportError("a call file's [room] size_m needs pyroomacoustics: "
                          "pip install 'edge-agent[rooms]'") from None
    if reverb_ms > 0:
        try:
            absorption, max_order = pra.inverse_sabine(reverb_ms / 1000.0, list(layout.size_m))
        except ValueError:
            raise ValueError(f"a room of {_shown(layout.size_m)} m cannot have a reverberation "
                             f"time of {reverb_ms:g} ms (its walls would have to absorb more "
                             "than all the sound that reaches them): a longer reverb_ms or a "
                             "smaller room") from None
        materials = pra.Material(float(absorption))
    else:
        max_order, materials = 0, pra.Material(1.0)
    room = pra.ShoeBox(list(layout.size_m), fs=rate, materials=materials,
                       max_order=int(max_order), air_absorption=False)
    sources = [layout.caller_at_m, layout.speaker_at_m, *talkers_at]
    for source in sources:
        room.add_source(layout.place(source).tolist())
    mics = layout.array_centre[None, :] + np.asarray(microphones_m, dtype=np.float64)
    room.add_microphone_array(mics.T)
    room.compute_rir()
    responses = [_stacked([room.rir[m][s] for m in range(len(mics))])
                 for s in range(len(sources))]
    caller, speaker, *talkers = responses
    # The caller's direct sound alone (no walls), at its low-frequency gain.
    anechoic = pra.ShoeBox(list(layout.size_m), fs=rate, materials=pra.Material(1.0),
                           max_order=0, air_absorption=False)
    anechoic.add_source(layout.place(layout.caller_at_m).tolist())
    anechoic.add_microphone_array(mics[:1].T)
    anechoic.compute_rir()
    direct = float(np.sum(anechoic.rir[0][0]))
    return RoomResponses(caller=caller / direct,
                         speaker=speaker / math.sqrt(float(np.sum(speaker[0] ** 2))),
                         talkers=tuple(t / direct for t in talkers))


def _stacked(rows: list[np.ndarray]) -> np.ndarray:
    length = max(len(r) for r in rows)
    out = np.zeros((len(rows), length))
    for i, row in enumerate(rows):
        out[i, :len(row)] = row
    return out


def _shown(position: Sequence[float] | np.ndarray) -> str:
    return "(" + ", ".join(f"{float(v):g}" for v in position) + ")"
