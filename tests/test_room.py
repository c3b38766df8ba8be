"""The simulator's room: the echo path from the virtual speaker to the virtual microphone
(delay, reverberation, a small speaker's clipping, fixed seeds) and the streaming resampler
it and the echo canceller use."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from edge_agent.audio.pcm import StreamResampler, lag_samples, resample
from edge_agent.audio.room import Room, RoomEcho
from edge_agent.audio.virtual import SpeakerEcho, VirtualSpeaker
from edge_agent.demo.callfile import load_call, parse_call
from tests.virtual_room import SpeakerAction, capture

RATE = 16000
CALLER = '[[caller]]\nsay = "Hello there."\nat = 0.5\n'


def _noise(seconds: float, rate: int = RATE, level: float = 6000.0, seed: int = 1) -> np.ndarray:
    samples: np.ndarray = np.random.default_rng(seed).standard_normal(round(seconds * rate))
    return samples * level


def _lag(reference: np.ndarray, heard: np.ndarray) -> int:
    """Where `reference` sits in `heard`, in samples."""
    return lag_samples(reference, heard, longest=len(heard) - 1)


def _in_pieces(process: Callable[[np.ndarray], np.ndarray], samples: np.ndarray,
               seed: int = 2) -> np.ndarray:
    """`process` (a push-like method) fed `samples` in random pieces of 1..1500, joined."""
    rng = np.random.default_rng(seed)
    out, start = [], 0
    while start < len(samples):
        size = int(rng.integers(1, 1500))
        out.append(process(samples[start:start + size]))
        start += size
    return np.concatenate(out)


@pytest.mark.parametrize("delay_ms", [0.0, 12.5, 40.0, 250.0])
def test_the_echo_arrives_delay_ms_after_the_sound(delay_ms: float) -> None:
    played = _noise(1.0)
    room = Room(echo_gain=0.5, delay_ms=delay_ms, reverb_ms=150.0, seed=3)
    echo = RoomEcho(room, RATE).process(played)
    assert len(echo) == len(played)
    assert _lag(played, echo) == round(delay_ms * RATE / 1000)


@pytest.mark.parametrize("reverb_ms", [100.0, 300.0])
def test_the_reverberation_dies_away_60_db_over_reverb_ms(reverb_ms: float) -> None:
    impulse = np.zeros(RATE)
    impulse[0] = 10000.0
    echo = RoomEcho(Room(echo_gain=1.0, delay_ms=0.0, reverb_ms=reverb_ms, seed=5), RATE).process(impulse)
    length = round(reverb_ms * RATE / 1000)

    def level_db(start: float, end: float) -> float:
        window = echo[1 + round(start * length):1 + round(end * length)]
        return float(10 * np.log10(np.mean(window ** 2)))

    # -60 dB over reverb_ms: -30 dB between windows half of reverb_ms apart (within the
    # scatter of random reflections).
    assert level_db(0.5, 0.75) - level_db(0.0, 0.25) == pytest.approx(-30.0, abs=4.0)
    assert level_db(0.75, 1.0) - level_db(0.25, 0.5) == pytest.approx(-30.0, abs=4.0)
    assert np.max(np.abs(echo[1 + length:])) < 1e-6  # nothing after the tail
    # The direct path dominates, and the whole echo has the energy echo_gain says.
    assert echo[0] == pytest.approx(10000.0 * np.sqrt(1 / (1 + 10 ** -0.6)))
    assert np.sum(echo ** 2) == pytest.approx(10000.0 ** 2)


def test_no_reverb_is_the_direct_path_only() -> None:
    played = _noise(0.2)
    echo = RoomEcho(Room(echo_gain=0.3, delay_ms=10.0), RATE).process(played)
    np.testing.assert_allclose(echo[160:], 0.3 * played[:-160])
    assert not echo[:160].any()


def test_a_small_speaker_clips_the_loud_and_keeps_the_quiet() -> None:
    seconds = np.arange(RATE) / RATE
    loud = 32767.0 * np.sin(2 * np.pi * 440 * seconds)
    room = Room(echo_gain=0.8, delay_ms=0.0, clip=0.5)
    echo = RoomEcho(room, RATE).process(loud)
    assert np.max(np.abs(echo)) <= 0.8 * 0.5 * 32768
    assert np.max(np.abs(echo)) > 0.8 * 0.5 * 32768 * 0.9  # flattened, not just scaled down
    quiet = loud / 50
    np.testing.assert_allclose(RoomEcho(room, RATE).process(quiet), 0.8 * quiet,
                               atol=0.01 * 0.8 * 655)
    # With a reverberant room the level is bounded by the clipped speaker through the room.
    reverberant = Room(echo_gain=0.8, delay_ms=0.0, reverb_ms=150.0, clip=0.5)
    bound = 0.5 * 32768 * np.sum(np.abs(reverberant.impulse_response(RATE)))
    assert np.max(np.abs(RoomEcho(reverberant, RATE).process(loud))) <= bound


def test_the_same_seed_gives_the_same_samples_and_another_seed_another_room() -> None:
    played = _noise(0.5)
    room = Room(echo_gain=0.6, delay_ms=40.0, reverb_ms=150.0, clip=0.5, seed=11)
    first = RoomEcho(room, RATE).process(played)
    assert np.array_equal(first, RoomEcho(room, RATE).process(played))
    other = RoomEcho(Room(echo_gain=0.6, delay_ms=40.0, reverb_ms=150.0, clip=0.5, seed=12),
                     RATE).process(played)
    assert not np.allclose(first, other)


@pytest.mark.parametrize("reverb_ms", [0.0, 150.0, 1000.0])
def test_frame_by_frame_gives_the_samples_of_one_pass(reverb_ms: float) -> None:
    # Pieces far shorter than the tail (1000 ms) and the delay: both carry across pieces.
    played = _noise(2.0, level=20000.0)
    room = Room(echo_gain=0.7, delay_ms=120.0, reverb_ms=reverb_ms, clip=0.5, seed=4)
    whole = RoomEcho(room, RATE).process(played)
    pieces = _in_pieces(RoomEcho(room, RATE).process, played)
    np.testing.assert_allclose(pieces, whole, atol=1e-6)


def test_spent_samples_shorten_the_delay_line() -> None:
    played = _noise(0.5)
    room = Room(echo_gain=1.0, delay_ms=40.0)
    assert _lag(played, RoomEcho(room, RATE, spent_samples=11).process(played)) == 640 - 11
    assert _lag(played, RoomEcho(Room(echo_gain=1.0, delay_ms=0.0), RATE, spent_samples=11)
                .process(played)) == 0


@pytest.mark.parametrize(("from_rate", "to_rate"), [(22050, 16000), (16000, 48000),
                                                    (44100, 16001), (16000, 16000)])
def test_the_stream_resampler_in_pieces_equals_one_pass(from_rate: int, to_rate: int) -> None:
    samples = np.clip(np.round(_noise(1.5, from_rate, level=8000.0)), -32768, 32767)
    pcm = samples.astype(np.int16).tobytes()
    whole = np.frombuffer(StreamResampler(from_rate, to_rate).push(pcm), dtype=np.int16)
    resampler = StreamResampler(from_rate, to_rate)
    pieces = np.frombuffer(b"".join(
        resampler.push(pcm[2 * start:2 * (start + size)])
        for start, size in _pieces(len(samples))), dtype=np.int16)
    assert len(pieces) == len(whole)
    assert np.max(np.abs(pieces.astype(np.int32) - whole)) <= 1


def _pieces(total: int) -> list[tuple[int, int]]:
    rng = np.random.default_rng(9)
    out, start = [], 0
    while start < total:
        size = int(rng.integers(0, 1200))
        out.append((start, size))
        start += size
    return out


def test_the_stream_resampler_keeps_time_over_minutes_of_frames() -> None:
    resampler = StreamResampler(22050, 16000)
    rng = np.random.default_rng(3)
    pushed = produced = 0
    while pushed < 22050 * 180:  # three minutes in microphone-frame-sized pieces
        size = int(rng.integers(700, 712))
        produced += len(resampler.push_samples(np.zeros(size)))
        pushed += size
        expected = pushed * 16000 / 22050
        assert expected - resampler.held_back <= produced <= expected


def test_the_stream_resampler_keeps_a_tone_and_drops_what_would_alias() -> None:
    seconds = np.arange(22050) / 22050
    tone = _in_pieces(StreamResampler(22050, 16000).push_samples,
                      8000.0 * np.sin(2 * np.pi * 1000 * seconds))
    expected = 8000.0 * np.sin(2 * np.pi * 1000 * np.arange(len(tone)) / 16000)
    assert np.max(np.abs(tone[50:] - expected[50:])) < 2.0
    # 10 kHz is above the microphone's 8 kHz Nyquist frequency: a naive resampler folds it
    # back to 6 kHz at full level; this one leaves less than -60 dB of it.
    high = StreamResampler(22050, 16000).push_samples(8000.0 * np.sin(2 * np.pi * 10000 * seconds))
    assert np.sqrt(np.mean(high[50:] ** 2)) < 8000.0 / np.sqrt(2) / 1000
    # It agrees with the whole-clip FFT resampler where both are accurate (away from edges).
    clip = (8000.0 * np.sin(2 * np.pi * 440 * seconds)).astype(np.int16).tobytes()
    offline = np.frombuffer(resample(clip, 22050, 16000), dtype=np.int16).astype(float)
    streamed = np.frombuffer(StreamResampler(22050, 16000).push(clip), dtype=np.int16)
    assert np.max(np.abs(streamed[200:-200] - offline[200:len(streamed) - 200])) <= 3


def _write(samples: np.ndarray) -> SpeakerAction:
    pcm = samples.astype(np.int16).tobytes()
    return lambda speaker: speaker.write(pcm)


def _burst(seconds: float, seed: int) -> np.ndarray:
    return np.clip(np.round(_noise(seconds, 22050, level=5000.0, seed=seed)), -32768, 32767)


def _at(seconds: float) -> np.ndarray:
    return np.zeros(round(seconds * 22050))


FIRST, SECOND = _burst(0.2, 1), _burst(0.3, 2)
SPEAKER_SCRIPTS = {
    # script, the speaker's output as one stream from the microphone's start
    "one burst": ([(0.3, _write(SECOND))], [_at(0.3), SECOND]),
    "one burst, off the sample grid": ([(0.31337, _write(SECOND))], [_at(0.31337), SECOND]),
    "queued behind playing audio": ([(0.3, _write(FIRST)), (0.4, _write(SECOND))],
                                    [_at(0.3), FIRST, SECOND]),
    "after a silence": ([(0.3, _write(FIRST)), (0.9, _write(SECOND))],
                        [_at(0.3), FIRST, _at(0.4), SECOND]),
    "ran dry, the next piece came late": ([(0.3, _write(FIRST)), (0.56, _write(SECOND))],
                                          [_at(0.3), FIRST, _at(0.06), SECOND]),
    "paused and resumed": ([(0.3, _write(SECOND)), (0.4, VirtualSpeaker.pause),
                            (0.7, VirtualSpeaker.resume)],
                           [_at(0.3), SECOND[:2205], _at(0.3), SECOND[2205:]]),
    "interrupted, then a new reply": ([(0.3, _write(SECOND)), (0.4, VirtualSpeaker.interrupt),
                                       (0.6, _write(FIRST))],
                                      [_at(0.3), SECOND[:2205], _at(0.2), FIRST]),
}


@pytest.mark.parametrize("busy", [None, (0.35, 0.8)], ids=["on time", "loop busy"])
@pytest.mark.parametrize("delay_ms", [40.0, 0.0])
@pytest.mark.parametrize("scenario", SPEAKER_SCRIPTS)
def test_the_microphone_hears_the_speaker_delay_ms_after_it_played(
        delay_ms: float, scenario: str, busy: tuple[float, float] | None) -> None:
    # A busy loop takes the frames captured meanwhile late, in a burst: each still hears
    # what played while it was captured (before, audio written after the speaker ran dry was
    # heard as if it had followed on at once, when a frame spanning the gap was taken late).
    script, played = SPEAKER_SCRIPTS[scenario]
    room = Room(echo_gain=0.5, delay_ms=delay_ms, reverb_ms=150.0, clip=0.5, seed=2)
    heard = asyncio.run(capture(room, 1.5, script, busy))
    # The speaker's output as one stream, through the room in one pass...
    stream = np.concatenate([*played, np.zeros(22050)])
    echo = RoomEcho(dataclasses.replace(room, delay_ms=0.0), RATE).process(
        StreamResampler(22050, RATE).push_samples(stream))
    # ...is what the microphone heard, delay_ms later (at least the few samples the streaming
    # resampler holds back), to the sample: no seams between frames.
    lead = (StreamResampler(22050, RATE).held_back
            + math.ceil(SpeakerEcho.SLACK * RATE / 22050))
    delay = max(round(delay_ms * RATE / 1000), lead)
    expected = np.concatenate([np.zeros(delay), echo])[:len(heard)]
    assert np.max(np.abs(heard - expected)) <= 0.5 + 1e-6
    assert np.max(np.abs(heard)) > 1000
    # The same call, the same samples.
    assert np.array_equal(heard, asyncio.run(capture(room, 1.5, script, busy)))


def test_a_silent_room_adds_nothing() -> None:
    heard = asyncio.run(capture(Room(echo_gain=0.0, delay_ms=40.0, reverb_ms=150.0), 0.5,
                                [(0.2, _write(np.full(5000, 9000)))]))
    assert not heard.any()


def test_a_call_file_describes_its_room(tmp_path: Path) -> None:
    call = parse_call('[agent]\necho_gain = 0.4\n[room]\ndelay_ms = 40\nreverb_ms = 150\n'
                      'clip = 0.5\nseed = 7\n' + CALLER, "call.toml")
    assert call.room == Room(echo_gain=0.4, delay_ms=40.0, reverb_ms=150.0, clip=0.5, seed=7)
    assert call.echo_gain == 0.4
    plain = parse_call("[agent]\necho_gain = 0.4\n" + CALLER, "call.toml")
    assert plain.room == Room(echo_gain=0.4)
    assert load_call(Path("echo")).room == Room(echo_gain=0.4)  # the built-in call: gain only
    assert parse_call(CALLER, "call.toml").room == Room()


def test_a_room_nobody_hears_is_warned_about(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="edge_agent"):
        call = parse_call("[room]\ndelay_ms = 40\n" + CALLER, "call.toml")
    assert not call.room.heard
    assert "room" in caplog.text and "echo_gain is 0" in caplog.text
