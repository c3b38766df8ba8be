"""A clock-paced virtual microphone and speaker, in-process (no sound card, no server).

The speaker plays written audio at exactly its sample rate on the injected clock, so its
played-frame cursor is exact; the microphone delivers frames at capture pace, carrying
whatever audio was queued into it (silence otherwise).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from edge_agent.audio.pcm import silence
from edge_agent.clock import Clock


class VirtualSpeaker:
    """Plays queued audio continuously at `sample_rate`."""

    def __init__(self, clock: Clock, sample_rate: int) -> None:
        self.sample_rate = sample_rate
        self._clock = clock
        self._written = 0
        self._busy_since: float | None = None
        self._busy_base = 0
        self._changed = asyncio.Event()

    def write(self, pcm: bytes) -> int:
        start = self._written
        if self.played_frames() >= self._written:
            self._busy_since = self._clock.now()
            self._busy_base = self._written
        self._written += len(pcm) // 2
        self._changed.set()
        return start

    def played_frames(self) -> int:
        if self._busy_since is None:
            return self._written
        elapsed = self._clock.now() - self._busy_since
        return min(self._written, self._busy_base + int(elapsed * self.sample_rate))

    async def wait_played(self, frame: int) -> None:
        while self.played_frames() < min(frame, self._written):
            assert self._busy_since is not None
            due = self._busy_since + (min(frame, self._written) - self._busy_base) / self.sample_rate
            self._changed.clear()
            sleeper = asyncio.ensure_future(self._clock.sleep_until(due + 1e-6))
            changed = asyncio.ensure_future(self._changed.wait())
            try:
                await asyncio.wait({sleeper, changed}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                sleeper.cancel()
                changed.cancel()

    def interrupt(self) -> int:
        played = self.played_frames()
        self._written = played
        self._busy_since = None
        self._changed.set()
        return played


class VirtualMicrophone:
    """Delivers 16 kHz frames at capture pace; `say` queues audio to come out of it."""

    def __init__(self, clock: Clock, sample_rate: int = 16000, frame_samples: int = 512) -> None:
        self.sample_rate = sample_rate
        self.frame_samples = frame_samples
        self._clock = clock
        self._pending = bytearray()
        self._frames_out = 0
        self._drained = asyncio.Event()
        self._drained.set()

    @property
    def captured_seconds(self) -> float:
        return self._frames_out * self.frame_samples / self.sample_rate

    def say(self, pcm: bytes) -> None:
        """Queue audio; it is captured after anything already queued."""
        self._pending.extend(pcm)
        if self._pending:
            self._drained.clear()

    async def wait_said(self) -> None:
        """Wait until everything queued has been captured."""
        await self._drained.wait()

    async def frames(self) -> AsyncIterator[bytes]:
        frame_seconds = self.frame_samples / self.sample_rate
        start = self._clock.now()
        while True:
            await self._clock.sleep_until(start + (self._frames_out + 1) * frame_seconds)
            size = self.frame_samples * 2
            frame = bytes(self._pending[:size])
            del self._pending[:size]
            if len(frame) < size:
                frame += silence((size - len(frame)) // 2)
            if not self._pending:
                self._drained.set()
            self._frames_out += 1
            yield frame
