"""The agent's echo told at an onset the loop takes late: the overlap compares what the
microphone heard with what the speaker played when it was captured (the loop's capture clock,
`CaptureClock`, tells when), not when it is read."""

from __future__ import annotations

import numpy as np

from edge_agent.audio.pcm import resample
from edge_agent.audio.played_reference import CaptureClock
from edge_agent.audio.virtual import VirtualSpeaker
from edge_agent.clock import VirtualClock
from edge_agent.conversation.overlap import OverlapAudio
from tests.fakes import speech

SPEAKER_RATE, MIC_RATE = 22050, 16000


def test_the_capture_clock_tells_how_late_the_loop_takes_a_frame_and_forgets_a_gap() -> None:
    capture = CaptureClock(16000)
    frame, frame_s = 512, 0.032

    def behind_s(now: float) -> float:
        return now - capture.frame_end(frame, now)

    # On time (a few ms of jitter): nothing behind.
    on_time = [behind_s(10.0 + (n + 1) * frame_s + jitter)
               for n, jitter in enumerate((0.002, 0.0, 0.003, 0.001))]
    assert all(0.0 <= behind < 0.004 for behind in on_time), on_time
    # Held 0.5 s (a long transcript on the loop): the next frames are taken late, then caught up.
    assert behind_s(10.0 + 5 * frame_s + 0.5) > 0.49
    assert behind_s(10.0 + 6 * frame_s + 0.47) > 0.45
    # A capture gap (a device reopened 1 s later): every frame after it looks late at first,
    # and within 20 s of frames that is forgotten.
    after = [behind_s(11.0 + (n + 1) * frame_s) for n in range(6, 6 + 625)]
    assert after[0] > 0.9 and after[-1] < 0.01


async def test_an_onset_taken_late_is_compared_with_what_played_when_it_was_heard() -> None:
    clock = VirtualClock()
    speaker = VirtualSpeaker(clock, SPEAKER_RATE)
    voice = speech(4.0, rate=SPEAKER_RATE, seed=5)
    speaker.write(voice)
    await clock.advance(2.5)
    # The microphone heard the agent's voice from 1.5 to 2.0 s (its echo, 40 ms late); the
    # loop takes that onset only at 2.5 s.
    heard = resample(voice[2 * int(1.46 * SPEAKER_RATE):2 * int(1.96 * SPEAKER_RATE)],
                     SPEAKER_RATE, MIC_RATE)
    late = OverlapAudio(speaker, MIC_RATE, heard, 500.0, behind_s=0.5)
    read_as_on_time = OverlapAudio(speaker, MIC_RATE, heard, 500.0)
    assert late.echo_score() > 0.8
    assert read_as_on_time.echo_score() < 0.5
    assert np.isfinite(late.echo_score())
