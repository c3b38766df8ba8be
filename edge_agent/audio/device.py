"""What the loop needs from a microphone and a speaker."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Protocol

MIC_RATE = 16000
"""Samples per second the microphone is read at: the rate Silero VAD, Moonshine, PocketSphinx,
Vosk and Smart Turn all take, so nothing is resampled between the microphone and them."""
MIC_FRAME = 512
"""Samples in one microphone frame, the unit the loop hears in: Silero VAD's frame (32 ms)."""
OUTPUT_PERIOD = 512
"""Frames the speaker's device is handed per callback (`[audio] output_period`'s default).
PortAudio keeps about two and a half of them queued: a reply's first sample waits behind that
much of the silence played while idle (56 ms of buffer at 22.05 kHz; 256 frames: 28 ms). Measured
(`bench latency`, 9 questions, 7 Dec 2026, 2-core x86, callback threads at SCHED_FIFO): 256
started the answer ~30 ms sooner (piece -> device 32-35 ms against 54-89) with 0 and 1 speaker
underruns idle, but beside two busy processes the speaker underran 11 times in the call against
0 and 2 with 512 (each an audible gap in the agent's voice): the callbacks need Python's
interpreter lock, which a busy machine's other threads hold."""

class Microphone(Protocol):
    sample_rate: int
    frame_samples: int

    def frames(self) -> AsyncIterator[bytes]:
        """Capture frames of `frame_samples` int16 samples, in order, as they arrive."""
        ...


class Speaker(Protocol):
    """Playback with a played-frame cursor.

    Frame counts are device frames since the speaker opened, counting only audio that was
    written (underrun silence is not a frame). `played_frames` counts frames that reached the
    DAC, never frames still queued.
    """

    sample_rate: int

    def write(self, pcm: bytes) -> int:
        """Queue audio without blocking; returns the device frame where it starts."""
        ...

    def played_frames(self) -> int: ...

    async def wait_played(self, frame: int) -> None:
        """Return once `played_frames() >= frame` (or the queue was dropped before it)."""
        ...

    def pause(self) -> None:
        """Hold playback where it is (queued audio is kept; the cursor stops)."""
        ...

    def resume(self) -> None:
        """Continue from where `pause` held it: nothing skipped, nothing repeated."""
        ...

    def interrupt(self) -> int:
        """Stop at once with no tail, drop everything queued; returns the final played count."""
        ...

    def played_audio(self, start: int, end: int) -> bytes:
        """The samples written for device frames [start, end) (int16), as far as the last few
        seconds are kept; silence where nothing was written. The agent's own voice, to tell
        its echo in the microphone from a person."""
        ...

    def played_when(self, frame: int) -> tuple[int, float] | None:
        """When a recently played `frame` reached the DAC: (the first frame of its stretch of
        back-to-back playback, the clock time that frame began to play); `frame` played
        `frame - first` samples later. None if no recent stretch played it. Playback stalls
        between stretches (an underrun: the next audio was written late; a pause), and the
        echo canceller's reference must place each stretch at the time it played."""
        ...
