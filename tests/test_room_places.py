"""A room where everyone has a place: the image-source responses put each sound at each
microphone when the geometry says, the simulator's array microphone hears a caller's line
through them on the channels the board wires, and a call file places people in the room
(every mistake one specific error)."""

from __future__ import annotations

import asyncio
import math

import numpy as np
import pytest

from edge_agent.audio.array import SPEED_OF_SOUND, MicArray, mic_array
from edge_agent.audio.room import Room
from edge_agent.audio.room_acoustics import TALKER_SPOTS_M, RoomLayout, render
from edge_agent.audio.virtual import VirtualMicrophone
from edge_agent.clock import VirtualClock
from edge_agent.demo.callfile import parse_call
from edge_agent.errors import ConfigError

RATE = 16000
LAYOUT = RoomLayout(size_m=(6.0, 5.0, 3.0))
CALLER = '[[caller]]\nsay = "Hello there."\nat = 0.5\n'


def _hat() -> MicArray:
    array = mic_array("respeaker-4mic-hat", [], [], 0)
    assert array is not None
    return array


def test_each_voice_reaches_each_microphone_when_the_geometry_says() -> None:
    hat = _hat()
    talker = (1.8, 2.2, 0.4)
    responses = render(LAYOUT, 150.0, hat.centred_m, [talker], RATE)
    for response, source in ((responses.caller, LAYOUT.caller_at_m), (responses.talkers[0],
                                                                       talker)):
        distances = np.linalg.norm(hat.centred_m - np.array(source), axis=1)
        arrivals = np.argmax(np.abs(response), axis=1)
        expected = (distances - distances[0]) / SPEED_OF_SOUND * RATE
        assert np.allclose(arrivals - arrivals[0], expected, atol=1.0)
    assert np.max(np.abs(responses.caller[0])) == pytest.approx(1.0, abs=0.2)
    assert np.sum(responses.speaker[0] ** 2) == pytest.approx(1.0)
    # Five times as far: about a fifth of the caller's direct amplitude.
    farther = np.max(np.abs(responses.talkers[0][0])) / np.max(np.abs(responses.caller[0]))
    ratio = np.linalg.norm(np.array(talker)) / np.linalg.norm(np.array(LAYOUT.caller_at_m))
    assert farther == pytest.approx(1.0 / ratio, rel=0.25)


def test_the_same_room_renders_the_same_and_a_livelier_one_rings_longer() -> None:
    hat = _hat()
    first = render(LAYOUT, 150.0, hat.centred_m, [], RATE)
    again = render(LAYOUT, 150.0, hat.centred_m, [], RATE)
    assert np.array_equal(first.caller, again.caller)
    lively = render(LAYOUT, 450.0, hat.centred_m, [], RATE)
    late = round(0.05 * RATE)

    def late_energy(response: np.ndarray) -> float:
        return float(np.sum(response[0, late:] ** 2) / np.sum(response[0] ** 2))

    assert late_energy(lively.caller) > 3 * late_energy(first.caller)


def test_a_hall_that_cannot_be_that_dead_says_so() -> None:
    with pytest.raises(ValueError, match="cannot have a reverberation time of 20 ms"):
        render(RoomLayout(size_m=(30.0, 30.0, 10.0)), 20.0, np.zeros((1, 3)), [], RATE)


async def _heard(mic: VirtualMicrophone, clock: VirtualClock, line: np.ndarray,
                 seconds: float) -> tuple[np.ndarray, float]:
    """What `mic` delivers in `seconds` with `line` said at the start, and when the line was
    said to be over."""
    frames: list[bytes] = []
    wanted = round(seconds * RATE) // mic.frame_samples
    said_at: list[float] = []

    async def read() -> None:
        async for frame in mic.frames():
            frames.append(frame)
            if len(frames) == wanted:
                return

    async def say() -> None:
        mic.say(line.astype(np.int16).tobytes())
        await mic.wait_said()
        said_at.append(clock.now())

    reading = asyncio.create_task(read())
    saying = asyncio.create_task(say())
    await clock.advance(seconds + 0.1)
    await reading
    await saying
    samples = np.frombuffer(b"".join(frames), dtype=np.int16).astype(np.float64)
    return samples.reshape(-1, mic.channels), said_at[0]


def test_the_simulated_array_hears_a_line_on_the_channels_the_board_wires() -> None:
    usb = mic_array("respeaker-usb-4mic", [], [], 0)
    assert usb is not None
    responses = render(LAYOUT, 150.0, usb.centred_m, [], RATE)
    clock = VirtualClock()
    mic = VirtualMicrophone(clock, RATE, room=Room(), responses=responses,
                            wiring=(usb.channels, usb.input_channels))
    assert mic.channels == 6
    line = np.zeros(RATE // 2)
    line[100] = 20000.0  # a click
    heard, said_at = asyncio.run(_heard(mic, clock, line, 1.0))
    assert not heard[:, 0].any() and not heard[:, 5].any()
    for mic_index, channel in enumerate(usb.channels):
        expected = np.round(20000.0 * responses.caller[mic_index])
        got = heard[100:100 + len(expected), channel]
        assert np.max(np.abs(got - np.clip(expected[:len(got)], -32768, 32767))) <= 1.0
    # The line is over when its own samples are (its reverberation rings on after).
    frame_s = mic.frame_samples / RATE
    assert said_at == pytest.approx(math.ceil(len(line) / mic.frame_samples) * frame_s)


def test_one_microphone_in_a_room_with_places_is_one_channel() -> None:
    responses = render(LAYOUT, 0.0, np.zeros((1, 3)), [], RATE)
    clock = VirtualClock()
    mic = VirtualMicrophone(clock, RATE, room=Room(), responses=responses)
    line = np.full(2000, 8000.0)
    heard, _ = asyncio.run(_heard(mic, clock, line, 0.5))
    assert mic.channels == 1
    # No reflections: the line itself, scaled to the caller's level, a few samples late.
    assert np.median(heard[200:1800]) == pytest.approx(8000.0, rel=0.02)


def test_a_call_file_places_people_in_the_room() -> None:
    call = parse_call('[room]\nsize_m = [8, 6, 3]\narray_at_m = [4, 0.4, 1.1]\n'
                      'caller_at_m = [0.2, 0.6, 0.35]\nreverb_ms = 300\n'
                      '[[talker]]\nsay = "One."\nat_m = [-2, 3, 0.4]\n'
                      '[[talker]]\nsay = "Two."\n' + CALLER, "call.toml")
    layout = call.room.layout
    assert layout is not None and layout.size_m == (8.0, 6.0, 3.0)
    assert layout.caller_at_m == (0.2, 0.6, 0.35)
    assert np.allclose(layout.place(layout.caller_at_m), [4.2, 1.0, 1.45])
    assert [t.at_m for t in call.talkers] == [(-2.0, 3.0, 0.4), TALKER_SPOTS_M[1]]
    assert parse_call(CALLER, "call.toml").room.layout is None


@pytest.mark.parametrize(("room", "talker", "key", "says"), [
    ("caller_at_m = [0, 1, 0]", "", "room.caller_at_m", "give room.size_m"),
    ("size_m = [6, 5, 3]\ncaller_at_m = [0, 9, 0]", "", "room.caller_at_m",
     "outside a room of (6, 5, 3) m along y"),
    ("size_m = [6, 5, 3]\narray_at_m = [0, 0, 0]", "", "room.array_at_m", "along x"),
    ("size_m = [1, 5, 3]", "", "room.size_m", "length 1 m is outside 2..30 m"),
    ("size_m = [6, 5]", "", "room.size_m", "[x, y, z] in metres, got 2 numbers"),
    ("size_m = [6, 5, 3]", 'at_m = [9, 1, 0]', "talker[1].at_m", "talker 1"),
    ("", 'at_m = [1, 1, 0]', "talker[1].at_m", "room without places"),
])
def test_a_place_that_is_not_in_the_room_is_one_clear_error(room: str, talker: str, key: str,
                                                            says: str) -> None:
    text = (f"[room]\n{room}\n" if room else "") + (
        f'[[talker]]\nsay = "Hi."\n{talker}\n' if talker else "") + CALLER
    with pytest.raises(ConfigError) as raised:
        parse_call(text, "call.toml")
    assert raised.value.key == key
    assert says in str(raised.value)
