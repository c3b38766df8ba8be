"""The simulator's steady noise: a room's `noise_db` and `noise_kind`, heard in every frame of
the virtual microphone, the same samples for the same seed, one stream across frames; and the
call file's keys for it."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from edge_agent.audio.room import NOISE_KINDS, Room, RoomNoise
from edge_agent.demo.callfile import parse_call
from edge_agent.errors import ConfigError
from tests.virtual_room import capture

RATE = 16000
CALLER = '[[caller]]\nsay = "Hello there."\nat = 0.5\n'


def _dbfs(samples: np.ndarray) -> float:
    return float(20 * np.log10(np.sqrt(np.mean(np.square(samples))) / 32768))


def _band_energy(samples: np.ndarray, low: float, high: float) -> float:
    spectrum = np.abs(np.fft.rfft(samples)) ** 2
    freqs = np.fft.rfftfreq(len(samples), 1 / RATE)
    return float(np.sum(spectrum[(freqs >= low) & (freqs < high)]))


@pytest.mark.parametrize("kind", NOISE_KINDS)
@pytest.mark.parametrize("noise_db", [-60.0, -45.0, -30.0, -10.0])
def test_the_microphone_hears_the_noise_at_noise_db(kind: str, noise_db: float) -> None:
    heard = asyncio.run(capture(Room(noise_db=noise_db, noise_kind=kind, seed=3), 5.0))
    assert abs(_dbfs(heard) - noise_db) <= 1.0
    # Steady from the first frame: the first half second is as loud as the rest.
    assert abs(_dbfs(heard[:RATE // 2]) - noise_db) <= 1.5


def test_the_kinds_have_their_spectra() -> None:
    def low_share(kind: str) -> float:
        noise = RoomNoise(Room(noise_db=-30.0, noise_kind=kind, seed=5), RATE).take(10 * RATE)
        return _band_energy(noise, 50, 500) / _band_energy(noise, 50, 8000)

    # White: 450 of 7950 Hz, ~6 %; pink: 2.3 of 5.3 octaves, ~43 %; brown: nearly all.
    white, pink, brown = low_share("white"), low_share("pink"), low_share("brown")
    assert 0.03 < white < 0.09
    assert 0.3 < pink < 0.6
    assert brown > 0.9


def test_the_same_seed_gives_the_same_noise_and_another_seed_other_noise() -> None:
    room = Room(noise_db=-40.0, seed=9)
    first = asyncio.run(capture(room, 1.0))
    assert np.array_equal(first, asyncio.run(capture(room, 1.0)))
    other = asyncio.run(capture(Room(noise_db=-40.0, seed=10), 1.0))
    assert not np.allclose(first, other)


def test_noise_frame_by_frame_is_one_pass() -> None:
    room = Room(noise_db=-25.0, noise_kind="pink", seed=4)
    source = RoomNoise(room, RATE)
    sizes = np.random.default_rng(2).integers(1, 1500, size=60)
    joined = np.concatenate([source.take(int(size)) for size in sizes])
    whole = RoomNoise(room, RATE).take(len(joined))
    np.testing.assert_allclose(joined, whole, atol=1e-6)
    # What the microphone hears in 512-sample frames is that stream, rounded to int16.
    heard = asyncio.run(capture(room, 2.0))
    assert len(whole) > len(heard)
    assert np.max(np.abs(heard - np.round(whole[:len(heard)]))) <= 1.0


def test_a_room_without_noise_db_is_silent() -> None:
    assert not asyncio.run(capture(Room(seed=3), 0.5)).any()
    with pytest.raises(ValueError, match="noise_db"):
        RoomNoise(Room(), RATE)


def test_the_noise_is_mixed_with_the_echo() -> None:
    room = Room(echo_gain=0.5, noise_db=-40.0, seed=1)
    steady = np.full(22050, 8000, dtype=np.int16).tobytes()
    heard = asyncio.run(capture(room, 1.28, [(0.0, lambda speaker: speaker.write(steady))]))
    noise = np.round(RoomNoise(room, RATE).take(len(heard)))
    echo = heard - noise
    # The noise is exactly the room's; what is left is the speaker's steady 4000-ish echo.
    middle = echo[RATE // 4:RATE // 2]
    assert abs(float(np.median(middle)) - 4000) < 50
    assert np.std(middle) < 5


def test_a_call_file_gives_its_room_noise() -> None:
    call = parse_call('[room]\nnoise_db = -35\nnoise_kind = "white"\nseed = 3\n' + CALLER,
                      "call.toml")
    assert call.room == Room(noise_db=-35.0, noise_kind="white", seed=3)
    assert call.room.noisy and not call.room.heard
    assert parse_call("[room]\nnoise_db = -45\n" + CALLER, "c.toml").room.noise_kind == "pink"


@pytest.mark.parametrize(("table", "key", "message"), [
    ("noise_db = -5", "room.noise_db", "-10"),
    ("noise_db = -95", "room.noise_db", "-90"),
    ('noise_db = "loud"', "room.noise_db", "number"),
    ('noise_db = -40\nnoise_kind = "grey"', "room.noise_kind", "pink"),
    ('noise_kind = "white"', "room.noise_kind", "noise_db"),
])
def test_a_call_file_with_bad_noise_is_refused_naming_the_key(table: str, key: str,
                                                              message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_call(f"[room]\n{table}\n" + CALLER, "call.toml")
    assert key in str(caught.value) and message in str(caught.value)
