"""A clock-paced virtual microphone and speaker, in-process (no sound card, no server).

The speaker plays written audio at exactly its sample rate on the injected clock, so its
played-frame cursor is exact; the microphone delivers frames at capture pace, carrying
whatever audio was queued into it (silence otherwise).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator

import numpy as np

from edge_agent.audio.pcm import silence
from edge_agent.audio.recent import RecentAudio
from edge_agent.clock import Clock


class VirtualSpeaker:
    """Plays queued audio continuously at `sample_rate`.

    The cursor advances from an anchor (frame, clock time) while audio is queued and not
    paused; idle or paused, it stands still at the anchor frame.
    """

    def __init__(self, clock: Clock, sample_rate: int) -> None:
        self.sample_rate = sample_rate
        self._clock = clock
        self._written = 0
        self._anchor_frame = 0
        self._anchor_time: float | None = None
        # Earlier anchors (set at, frame, running since), so the cursor can be told for a
        # moment just past (the echo path asks for when a microphone frame was captured).
        self._anchors: deque[tuple[float, int, float | None]] = deque(maxlen=64)
        self._paused = False
        self._changed = asyncio.Event()
        self._recent = RecentAudio(sample_rate)

    def write(self, pcm: bytes) -> int:
        start = self._written
        if not self._paused and self.played_frames() >= self._written:
            self._anchor(self._written, self._clock.now())
        self._written += len(pcm) // 2
        self._recent.add(start, pcm)
        self._changed.set()
        return start

    def played_frames(self) -> int:
        return self.played_frames_at(self._clock.now())

    def played_frames_at(self, when: float) -> int:
        """The cursor at clock time `when`, now or in the recent past."""
        frame, since = self._anchor_frame, self._anchor_time
        for set_at, old_frame, old_since in reversed(self._anchors):
            if set_at <= when:
                break
            frame, since = old_frame, old_since
        if since is None:
            return frame
        elapsed = max(0.0, when - since)
        return min(self._written, frame + int(elapsed * self.sample_rate))

    def _anchor(self, frame: int, since: float | None) -> None:
        self._anchors.append((self._clock.now(), self._anchor_frame, self._anchor_time))
        self._anchor_frame, self._anchor_time = frame, since

    def played_audio(self, start: int, end: int) -> bytes:
        return self._recent.get(start, end)

    async def wait_played(self, frame: int) -> None:
        while self.played_frames() < (target := min(frame, self._written)):
            self._changed.clear()
            waiting: list[asyncio.Future[object]] = [
                asyncio.ensure_future(self._changed.wait())]
            if self._anchor_time is not None:
                due = self._anchor_time + (target - self._anchor_frame) / self.sample_rate
                waiting.append(asyncio.ensure_future(self._clock.sleep_until(due + 1e-6)))
            try:
                await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for waiter in waiting:
                    waiter.cancel()

    def pause(self) -> None:
        if not self._paused:
            self._anchor(self.played_frames(), None)
            self._paused = True
            self._changed.set()

    def resume(self) -> None:
        if self._paused:
            self._paused = False
            self._anchor(self._anchor_frame, self._clock.now())
            self._changed.set()

    def interrupt(self) -> int:
        played = self.played_frames()
        self._written = played
        self._recent.drop_from(played)
        self._anchor(played, None)
        self._paused = False
        self._changed.set()
        return played


class VirtualMicrophone:
    """Delivers 16 kHz frames at capture pace; `say` queues audio to come out of it.

    With `echo_of`, the microphone also hears that speaker, like a kiosk without an echo
    canceller: each frame carries what the speaker played meanwhile, scaled by `echo_gain`.
    """

    def __init__(self, clock: Clock, sample_rate: int = 16000, frame_samples: int = 512,
                 echo_of: VirtualSpeaker | None = None, echo_gain: float = 0.5) -> None:
        self.sample_rate = sample_rate
        self.frame_samples = frame_samples
        self._clock = clock
        self._pending = bytearray()
        self._frames_out = 0
        self._drained = asyncio.Event()
        self._drained.set()
        self._echo_of = echo_of
        self._echo_gain = echo_gain
        self._echo_heard = echo_of.played_frames() if echo_of is not None else 0

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
            yield self._with_echo(frame, start + self._frames_out * frame_seconds)

    def _with_echo(self, frame: bytes, captured_at: float) -> bytes:
        if self._echo_of is None:
            return frame
        # The speaker's cursor at the moment this frame was captured, not when it is handed
        # over (the loop may be late): the echo keeps the timing a room would give it.
        played = self._echo_of.played_frames_at(captured_at)
        heard = self._echo_of.played_audio(self._echo_heard, played)
        self._echo_heard = played
        if not heard:
            return frame
        echo = np.frombuffer(heard, dtype=np.int16).astype(np.float64) * self._echo_gain
        # What played during this frame, at the microphone's rate, ending with the frame.
        count = min(self.frame_samples,
                    round(len(echo) * self.sample_rate / self._echo_of.sample_rate))
        positions = np.linspace(0, len(echo) - 1, count)
        resampled = np.interp(positions, np.arange(len(echo)), echo)
        mixed = np.frombuffer(frame, dtype=np.int16).astype(np.float64)
        mixed[self.frame_samples - count:] += resampled
        return bytes(np.clip(np.round(mixed), -32768, 32767).astype(np.int16).tobytes())
