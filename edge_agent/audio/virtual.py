"""A clock-paced virtual microphone and speaker, in-process (no sound card, no server).

The speaker plays written audio at exactly its sample rate on the injected clock, so its
played-frame cursor is exact; the microphone delivers frames at capture pace, carrying
whatever audio was queued into it (silence otherwise).
"""

from __future__ import annotations

import asyncio
import math
from collections import deque
from collections.abc import AsyncIterator

import numpy as np

from edge_agent.audio.device import MIC_FRAME, MIC_RATE
from edge_agent.audio.pcm import StreamResampler, silence
from edge_agent.audio.recent import RecentAudio
from edge_agent.audio.room import Room, RoomEcho, RoomNoise, RoomTalk
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

    def played_when(self, frame: int) -> tuple[int, float] | None:
        """When `frame` played, as (a frame, the clock time it began to play) of the same
        stretch of continuous playback (a recent one): `frame` began at that time plus the
        frames between over the rate. None if no recent stretch played it."""
        stretches = [(old_frame, since) for _, old_frame, since in self._anchors]
        stretches.append((self._anchor_frame, self._anchor_time))
        # The latest stretch that reached `frame`: frames after an interrupt reuse numbers.
        for anchor_frame, since in reversed(stretches):
            if since is not None and anchor_frame <= frame:
                return anchor_frame, since
        return None

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

    With `echo_of` and a `room` whose echo_gain is above 0, the microphone also hears that
    speaker through the room, like a kiosk without an echo canceller; in a `room` with
    noise_db, it hears the room's steady noise in every frame, one continuous stream; with
    `talk`, other people talking nearby.
    """

    def __init__(self, clock: Clock, sample_rate: int = MIC_RATE, frame_samples: int = MIC_FRAME,
                 echo_of: VirtualSpeaker | None = None, room: Room | None = None,
                 talk: RoomTalk | None = None) -> None:
        self.sample_rate = sample_rate
        self.frame_samples = frame_samples
        self._clock = clock
        self._pending = bytearray()
        self._frames_out = 0
        self._drained = asyncio.Event()
        self._drained.set()
        self._echo = (SpeakerEcho(echo_of, room, sample_rate, frame_samples)
                      if echo_of is not None and room is not None and room.heard else None)
        noise = RoomNoise(room, sample_rate) if room is not None and room.noisy else None
        self._ambient = [source for source in (noise, talk) if source is not None]

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
            if self._echo is not None:
                # The speaker's cursor at the moment this frame was captured, not when it is
                # handed over (the loop may be late): the echo keeps the timing a room gives it.
                frame = self._echo.mixed_into(frame, start, self._frames_out)
            if self._ambient:
                frame = self._with_ambient(frame)
            yield frame

    def _with_ambient(self, frame: bytes) -> bytes:
        mixed = np.frombuffer(frame, dtype=np.int16).astype(np.float64)
        for source in self._ambient:
            mixed += source.take(len(frame) // 2)
        return bytes(np.clip(np.round(mixed), -32768, 32767).astype(np.int16).tobytes())


class SpeakerEcho:
    """What a microphone hears of a speaker through a room, frame by frame.

    The speaker's output is one continuous stream in time: each played sample at the moment
    it played, silence where nothing played (idle, paused, before a start or after the end in
    a frame). That stream is resampled to the microphone's rate without seams
    (`StreamResampler`) and passed through the room (`RoomEcho`), so a sample the speaker
    played at time t reaches the microphone at t + delay_ms.
    """

    SLACK = 2
    """Speaker samples the stream may trail the call's time while nothing plays: the cursor
    rounds to whole samples, and filling silence up to the exact time would push the next
    sample played one late (a seam)."""

    def __init__(self, speaker: VirtualSpeaker, room: Room, rate: int,
                 frame_samples: int) -> None:
        self._speaker = speaker
        self._rate = rate
        self._frame_samples = frame_samples
        self._heard = speaker.played_frames()
        self._fed = 0
        """Speaker-rate samples of the stream so far, since the microphone started."""
        self._resampler = StreamResampler(speaker.sample_rate, rate)
        # The resampler holds a few samples back and the stream may trail by SLACK: that much
        # of the room's delay is spent waiting for them, so every frame is whole.
        lead = self._resampler.held_back + math.ceil(self.SLACK * rate / speaker.sample_rate)
        self._room = RoomEcho(room, rate, spent_samples=lead)
        self._ready = np.zeros(lead)

    def mixed_into(self, frame: bytes, started: float, frames: int) -> bytes:
        """`frame`, the `frames`-th of a microphone started at clock time `started`, with the
        echo it heard."""
        rate = self._speaker.sample_rate
        captured_at = started + frames * self._frame_samples / self._rate
        played = self._speaker.played_frames_at(captured_at)
        heard = np.frombuffer(self._speaker.played_audio(self._heard, played),
                              dtype=np.int16).astype(np.float64)
        stream = [heard]
        when = self._speaker.played_when(self._heard) if len(heard) else None
        if when is not None:
            anchor_frame, since = when
            position = round((since - started) * rate) + self._heard - anchor_frame
            stream.insert(0, np.zeros(max(0, position - self._fed)))
        self._heard = played
        fed = self._fed + sum(len(part) for part in stream)
        due = frames * self._frame_samples * rate // self._rate - self.SLACK
        stream.append(np.zeros(max(0, due - fed)))
        pushed = np.concatenate(stream)
        self._fed += len(pushed)
        echo = self._room.process(self._resampler.push_samples(pushed))
        self._ready = np.concatenate([self._ready, echo])
        heard_now, self._ready = (self._ready[:self._frame_samples],
                                  self._ready[self._frame_samples:])
        mixed = np.frombuffer(frame, dtype=np.int16).astype(np.float64)
        mixed[:len(heard_now)] += heard_now
        return bytes(np.clip(np.round(mixed), -32768, 32767).astype(np.int16).tobytes())
