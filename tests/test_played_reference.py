"""The echo canceller's far end: what the speaker played, laid out at the times the microphone
captured it, however late and bunched the loop takes the microphone's frames."""

from __future__ import annotations

import random

import numpy as np
import pytest

from edge_agent.audio.played_reference import (
    RESTART_S,
    RESYNC_S,
    CaptureClock,
    PlayedReference,
)
from edge_agent.audio.virtual import VirtualSpeaker
from edge_agent.clock import VirtualClock

RATE = 16000
FRAME = 512
FRAME_S = FRAME / RATE
LAG = 64
"""REFERENCE_LAG_S at 16 kHz: the reference sits this many samples behind the capture clock."""


def voice(seconds: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.integers(-8000, 8000, int(seconds * RATE)).astype(np.int16)


class Timeline:
    """What the microphone's stream should hold as the reference: each played sample at the
    microphone sample captured when it played (plus the lag), silence elsewhere."""

    def __init__(self) -> None:
        self._pieces: list[tuple[float, np.ndarray]] = []

    def played(self, at_s: float, audio: np.ndarray) -> None:
        self._pieces.append((at_s, audio))

    def check(self, heard: np.ndarray) -> None:
        """Each piece whole, where it played (the speaker's cursor counts whole samples: a
        sample early or late at most), and nothing else."""
        rest = heard.copy()
        for at_s, audio in self._pieces:
            start = round(at_s * RATE) + LAG
            found = [at for at in (start - 1, start, start + 1)
                     if np.array_equal(heard[at:at + len(audio)], audio[:len(heard) - at])]
            assert found, f"the audio played at {at_s:.4f} s is not at sample {start} (+-1)"
            rest[found[0]:found[0] + len(audio)] = 0
        assert not rest.any(), f"sound where nothing played: samples {np.nonzero(rest)[0][:5]}"


class Microphone:
    """Frames captured every 32 ms from clock time 0 (the reference created then), taken by the
    test when it likes: on time, or late and in a burst."""

    def __init__(self, clock: VirtualClock, reference: PlayedReference) -> None:
        self.clock = clock
        self.reference = reference
        self.captured = 0
        self.taken: list[bytes] = []

    async def on_time_until(self, seconds: float) -> None:
        while (self.captured + 1) * FRAME_S <= seconds + 1e-9:
            await self.clock.advance((self.captured + 1) * FRAME_S - self.clock.now())
            self.captured += 1
            self.take()

    async def catch_up(self) -> None:
        """Take the frames captured while the loop was busy, 10 ms apart."""
        while self.captured * FRAME_S < self.clock.now() - FRAME_S:
            self.captured += 1
            self.take()
            await self.clock.advance(0.01)

    def take(self) -> None:
        self.taken.append(self.reference.take(FRAME))

    def stream(self) -> np.ndarray:
        return np.frombuffer(b"".join(self.taken), dtype=np.int16)


async def test_a_reply_that_starts_while_the_loop_catches_up_is_one_piece_at_its_time() -> None:
    # After a barge-in the loop was busy (transcribing the interruption) and takes the frames
    # captured meanwhile ~10 ms apart; the next reply starts then. Before: each frame of the
    # burst got the ~10 ms played since the one before and ~22 ms of silence, and the
    # canceller let the reply's echo through at up to -17 dBFS.
    clock = VirtualClock()
    speaker = VirtualSpeaker(clock, RATE)
    mic = Microphone(clock, PlayedReference(speaker, RATE, clock))
    await mic.on_time_until(0.32)
    await clock.advance(0.2)  # busy: 6 frames captured, none taken
    reply = voice(1.0, seed=1)
    speaker.write(reply.tobytes())
    timeline = Timeline()
    timeline.played(0.52, reply)
    await mic.catch_up()
    await mic.on_time_until(0.95)
    timeline.check(mic.stream())


async def test_a_pause_a_resume_and_an_interrupt_are_silence_at_their_times() -> None:
    clock = VirtualClock()
    speaker = VirtualSpeaker(clock, RATE)
    mic = Microphone(clock, PlayedReference(speaker, RATE, clock))
    timeline = Timeline()
    first, second = voice(1.0, seed=2), voice(0.5, seed=3)
    await mic.on_time_until(0.1)
    await clock.advance(0.005)
    started = clock.now()
    speaker.write(first.tobytes())
    await mic.on_time_until(0.3)
    await clock.advance(0.012)
    speaker.pause()
    held = speaker.played_frames()
    await mic.on_time_until(0.5)
    await clock.advance(0.007)
    resumed = clock.now()
    speaker.resume()
    await mic.on_time_until(0.6)
    await clock.advance(0.02)
    kept = speaker.interrupt()  # what plays next reuses the frames never played
    await mic.on_time_until(0.8)
    await clock.advance(0.003)
    restarted = clock.now()
    speaker.write(second.tobytes())
    await mic.on_time_until(1.5)
    timeline.played(started, first[:held])
    timeline.played(resumed, first[held:kept])
    timeline.played(restarted, second)
    timeline.check(mic.stream())


@pytest.mark.parametrize("busy", [False, True])
async def test_a_reply_whose_next_piece_came_late_is_placed_where_each_stretch_played(
        busy: bool) -> None:
    # The machine busy: the reply's second clause was synthesized after the first had played
    # out, and the speaker ran dry for 95 ms. Before, the audio after the gap was laid out
    # straight after the first clause (the cursor alone cannot tell where the gap was), early
    # by the gap until the next frame was taken: for 0.2 s when the loop was late too.
    clock = VirtualClock()
    speaker = VirtualSpeaker(clock, RATE)
    mic = Microphone(clock, PlayedReference(speaker, RATE, clock))
    first, second = voice(0.5, seed=6), voice(0.6, seed=7)
    await mic.on_time_until(0.1)
    await clock.advance(0.005)
    speaker.write(first.tobytes())
    timeline = Timeline()
    timeline.played(clock.now(), first)
    await mic.on_time_until(0.55)
    if busy:
        await clock.advance(0.15)  # 0.7 s: nothing taken since 0.544
    else:
        await mic.on_time_until(0.7)
    speaker.write(second.tobytes())
    timeline.played(clock.now(), second)
    if busy:
        await clock.advance(0.2)
        await mic.catch_up()
    await mic.on_time_until(1.5)
    timeline.check(mic.stream())


def test_the_capture_clock_holds_steady_through_the_loops_jitter_and_stalls() -> None:
    rng = random.Random(4)
    capture = CaptureClock(RATE)
    captured = 0
    ends = []

    def take(at: float) -> None:
        ends.append(capture.frame_end(FRAME, at) - captured * FRAME_S)

    for second in range(60):  # each frame taken 0-1.5 ms late, some 0.1-0.3 s late
        for _ in range(round(1 / FRAME_S)):
            captured += 1
            late = rng.uniform(0.1, 0.3) if rng.random() < 0.05 else rng.uniform(0, 0.0015)
            take(captured * FRAME_S + late)
        if second == 30:  # the loop stuck for 0.6 s, then catching up 5 ms a frame
            stuck_until = captured * FRAME_S + 0.6
            for behind in range(round(0.6 / FRAME_S) + 1):
                captured += 1
                take(max(captured * FRAME_S, stuck_until + 0.005 * behind))
    # The first frame was taken a little late; after it, the clock never moves (a shift of
    # the reference is a new echo path to the canceller).
    assert max(ends) - min(ends) < 1e-9 and 0 <= ends[0] <= RESYNC_S


def test_the_capture_clock_follows_a_microphone_that_restarted() -> None:
    rng = random.Random(5)
    capture = CaptureClock(RATE)
    captured = 0
    for _ in range(300):
        captured += 1
        capture.frame_end(FRAME, captured * FRAME_S + rng.uniform(0, 0.0015))
    # The microphone stops for 2 s and comes back: its frames are 2 s later than they count.
    ends = []
    for _ in range(round(RESTART_S / FRAME_S) + 10):
        captured += 1
        now = 2.0 + captured * FRAME_S + rng.uniform(0, 0.0015)
        ends.append(capture.frame_end(FRAME, now) - captured * FRAME_S)
    assert 2.0 <= ends[-1] <= 2.0 + RESYNC_S
