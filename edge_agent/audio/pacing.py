"""Frames handed to an idle loop a few at a time, so that a kiosk that waits for someone to
speak does not wake 31 times a second.

Measured on a 2-core PC under PulseAudio, idle, with the default models: waking the event loop
for every 32 ms frame and running Silero VAD on it right away took ~4.4 % of a core on the
loop's thread. Most of that is not the detector's arithmetic but its start from cold caches:
one Silero call 32 ms after the last costs ~0.85 ms, a call right after another ~0.3 ms. So while
nothing is going on (`urgent()` false: the agent is not answering or speaking, no speech has
begun) a `PacedMicrophone` wakes the loop only once `PACED_FRAMES` frames are waiting, and the
loop scores them back to back; as soon as something is going on it wakes the loop for every
frame again. Nothing is dropped or reordered, and the audio clock (frames counted) is exact: the
only cost is that, while idle, the start of speech is seen up to 256 ms after it was captured.
Turn ends, barge-ins and echo are judged frame by frame as before, because by then `urgent()` is
true.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Protocol, runtime_checkable

from edge_agent.audio.device import Microphone

PACED_FRAMES = 8
"""Frames an idle loop is handed at once (8 x 32 ms = 256 ms)."""


@runtime_checkable
class PacedMicrophone(Microphone, Protocol):
    def paced_frames(self, urgent: Callable[[], bool]) -> AsyncIterator[bytes]:
        """`frames()`, except that while `urgent()` is false (asked on the audio thread; it
        must only read state) the loop is woken once `PACED_FRAMES` frames are waiting."""
        ...


def paced_frames(mic: Microphone, urgent: Callable[[], bool]) -> AsyncIterator[bytes]:
    """The frames of `mic`, paced by `urgent` where the microphone can do that."""
    return mic.paced_frames(urgent) if isinstance(mic, PacedMicrophone) else mic.frames()
