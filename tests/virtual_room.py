"""What the simulator's virtual microphone hears in a room, for the room tests (echo and
noise)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

import numpy as np

from edge_agent.audio.room import Room
from edge_agent.audio.virtual import VirtualMicrophone, VirtualSpeaker
from edge_agent.clock import VirtualClock

MIC_RATE = 16000
SPEAKER_RATE = 22050

SpeakerAction = Callable[[VirtualSpeaker], object]


async def capture(room: Room, seconds: float,
                  script: Sequence[tuple[float, SpeakerAction]] = (),
                  busy: tuple[float, float] | None = None) -> np.ndarray:
    """What a virtual microphone in `room` hears in `seconds` while its speaker (22050 Hz) is
    driven by `script`: (clock time, action) in time order; none, nobody talks. `busy`:
    (from, until) clock times the loop takes no frame, catching up after."""
    clock = VirtualClock()
    speaker = VirtualSpeaker(clock, SPEAKER_RATE)
    mic = VirtualMicrophone(clock, echo_of=speaker, room=room)
    wanted = round(seconds * MIC_RATE) // mic.frame_samples
    frames: list[bytes] = []

    async def read() -> None:
        stall = busy
        async for frame in mic.frames():
            frames.append(frame)
            if len(frames) == wanted:
                return
            if stall is not None and clock.now() >= stall[0]:
                await clock.sleep_until(stall[1])
                stall = None

    reading = asyncio.create_task(read())
    for when, action in script:
        await clock.advance(when - clock.now())
        action(speaker)
    await clock.advance(seconds - clock.now() + 0.1)
    await reading
    return np.frombuffer(b"".join(frames), dtype=np.int16).astype(np.float64)
