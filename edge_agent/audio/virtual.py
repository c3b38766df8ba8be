"""A clock-paced virtual microphone and speaker, in-process (no sound card, no server).

The speaker plays written audio at exactly its sample rate on the injected clock, so its
played-frame cursor is exact; the microphone delivers frames at capture pace, carrying
whatever audio was queued into it (silence otherwise).
"""

from __future__ import annotations

import asyncio
import math
from collections import deque
from collections.abc import AsyncIterator, Sequence

import numpy as np

from edge_agent.audio.device import MIC_FRAME, MIC_RATE
from edge_agent.audio.pcm import StreamResampler, fft_convolve, to_pcm
from edge_agent.audio.played_reference import played_stretches
from edge_agent.audio.recent import RecentAudio
from edge_agent.audio.room import Room, RoomEcho, RoomNoise, RoomTalk
from edge_agent.audio.room_acoustics import RoomResponses
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
        ran_out = self._written
        for set_at, old_frame, old_since in reversed(self._anchors):
            if set_at <= when:
                break
            # A stretch ends where the next begins: written after it ran dry, what came later
            # was not there to play at `when` (before, a frame computed late heard it early).
            ran_out = frame
            frame, since = old_frame, old_since
        if since is None:
            return frame
        elapsed = max(0.0, when - since)
        return min(ran_out, frame + int(elapsed * self.sample_rate))

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

    With `responses` (a room where everyone has a place: `edge_agent.audio.room_acoustics`),
    it is an array of microphones, one channel each (frames interleaved): what is said reaches
    each through the caller's response, the speaker's echo through the speaker's, and the
    steady noise is each microphone's own.
    """

    def __init__(self, clock: Clock, sample_rate: int = MIC_RATE, frame_samples: int = MIC_FRAME,
                 echo_of: VirtualSpeaker | None = None, room: Room | None = None,
                 talk: RoomTalk | None = None, responses: RoomResponses | None = None,
                 wiring: tuple[Sequence[int], int] | None = None) -> None:
        """`wiring`: the input channel of each microphone and how many channels the device
        delivers (None: one channel per microphone, in order)."""
        self.sample_rate = sample_rate
        self.frame_samples = frame_samples
        microphones = 1 if responses is None else len(responses.caller)
        wired = list(range(microphones)) if wiring is None else list(wiring[0])
        self.channels = microphones if wiring is None else wiring[1]
        if len(wired) != microphones:
            raise ValueError(f"{microphones} microphones wired to {len(wired)} channels")
        # None: each microphone is its own channel, in order (nothing to rearrange per frame)
        self._wired = None if wired == list(range(self.channels)) else wired
        self._clock = clock
        self._said_through = None if responses is None else responses.caller
        self._queued = np.zeros((0, microphones))
        """What the microphones will hear of the caller, from the next frame on."""
        self._direct_left = 0
        """Samples of `_queued` that are still the lines themselves (not their reverberation)."""
        self._frames_out = 0
        self._drained = asyncio.Event()
        self._drained.set()
        self._echo = (SpeakerEcho(echo_of, room, sample_rate, frame_samples,
                                  None if responses is None else responses.speaker)
                      if echo_of is not None and room is not None and room.heard else None)
        self._noises = ([RoomNoise(room, sample_rate, mic) for mic in range(microphones)]
                        if room is not None and room.noisy else [])
        self._talk = talk

    def say(self, pcm: bytes) -> None:
        """Queue audio; it is captured after anything already queued."""
        line = np.frombuffer(pcm, dtype=np.int16).astype(np.float64)
        if not len(line):
            return
        heard = (line[:, None] if self._said_through is None else
                 np.stack([fft_convolve(line, response) for response in self._said_through],
                          axis=1))
        start = self._direct_left
        if len(self._queued) < start + len(heard):
            grown = np.zeros((start + len(heard), self._queued.shape[1]))
            grown[:len(self._queued)] = self._queued
            self._queued = grown
        self._queued[start:start + len(heard)] += heard
        self._direct_left = start + len(line)
        self._drained.clear()

    async def wait_said(self) -> None:
        """Wait until everything queued has been captured."""
        await self._drained.wait()

    async def frames(self) -> AsyncIterator[bytes]:
        frame_seconds = self.frame_samples / self.sample_rate
        start = self._clock.now()
        size = self.frame_samples
        while True:
            await self._clock.sleep_until(start + (self._frames_out + 1) * frame_seconds)
            frame = np.zeros((size, self._queued.shape[1]))
            taken = self._queued[:size]
            frame[:len(taken)] = taken
            self._queued = self._queued[size:]
            self._direct_left = max(0, self._direct_left - size)
            if not self._direct_left:
                self._drained.set()
            self._frames_out += 1
            if self._echo is not None:
                # The speaker's cursor at the moment this frame was captured, not when it is
                # handed over (the loop may be late): the echo keeps the timing a room gives it.
                frame += self._echo.heard(start, self._frames_out)
            for channel, noise in enumerate(self._noises):
                frame[:, channel] += noise.take(size)
            if self._talk is not None:
                talk = self._talk.take(size)
                frame += talk if talk.ndim == 2 else talk[:, None]
            if self._wired is not None:
                wired = np.zeros((size, self.channels))
                wired[:, self._wired] = frame
                frame = wired
            yield to_pcm(frame)


class SpeakerEcho:
    """What a microphone hears of a speaker through a room, frame by frame.

    The speaker's output is one continuous stream in time: each played sample at the moment
    it played, silence where nothing played (idle, paused, before a start or after the end in
    a frame). That stream is resampled to the microphone's rate without seams
    (`StreamResampler`) and passed through the room (`RoomEcho`, one per microphone), so a
    sample the speaker played at time t reaches the microphone at t + delay_ms.
    """

    SLACK = 2
    """Speaker samples the stream may trail the call's time while nothing plays: the cursor
    rounds to whole samples, and filling silence up to the exact time would push the next
    sample played one late (a seam)."""

    def __init__(self, speaker: VirtualSpeaker, room: Room, rate: int, frame_samples: int,
                 responses: np.ndarray | None = None) -> None:
        """`responses`: the echo path to each microphone (rows, energy 1 at the first; None:
        one microphone, the room's own random response)."""
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
        paths = [None] if responses is None else list(responses)
        self._rooms = [RoomEcho(room, rate, spent_samples=lead, response=path) for path in paths]
        self._ready = np.zeros((lead, len(paths)))

    def heard(self, started: float, frames: int) -> np.ndarray:
        """The echo in the `frames`-th frame of a microphone started at clock time `started`:
        (samples, microphones)."""
        rate = self._speaker.sample_rate
        captured_at = started + frames * self._frame_samples / self._rate
        played = self._speaker.played_frames_at(captured_at)
        stream = []
        fed = self._fed
        for first, end, when in played_stretches(self._speaker, self._heard, played):
            if when is not None:  # each stretch at the time it played, silence between
                anchor_frame, since = when
                position = round((since - started) * rate) + first - anchor_frame
                stream.append(np.zeros(max(0, position - fed)))
                fed += len(stream[-1])
            stream.append(np.frombuffer(self._speaker.played_audio(first, end),
                                        dtype=np.int16).astype(np.float64))
            fed += end - first
        self._heard = played
        due = frames * self._frame_samples * rate // self._rate - self.SLACK
        stream.append(np.zeros(max(0, due - fed)))
        pushed = np.concatenate(stream)
        self._fed += len(pushed)
        resampled = self._resampler.push_samples(pushed)
        echo = np.stack([room.process(resampled) for room in self._rooms], axis=1)
        self._ready = np.concatenate([self._ready, echo])
        heard_now = np.zeros((self._frame_samples, len(self._rooms)))
        ready = self._ready[:self._frame_samples]
        heard_now[:len(ready)] = ready
        self._ready = self._ready[self._frame_samples:]
        return heard_now
