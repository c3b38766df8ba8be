"""Microphone arrays: the presets' geometry, the `[audio]` keys that describe an array (each
mistake one specific error), and the beamformer: distortionless toward the caller, rejecting other
directions, the same samples however the stream is cut; the doctor naming a sound card with
too few channels."""

from __future__ import annotations

import itertools
import math
from collections.abc import AsyncIterator

import numpy as np
import pytest

from edge_agent.app.conversation import steered, talker_gate
from edge_agent.audio.array import PRESETS, SPEED_OF_SOUND, MicArray, direction, mic_array
from edge_agent.audio.beamformer import (
    FILTER_TAPS,
    FIXED_DESIGNS,
    Beamformer,
    design_filters,
    response_db,
)
from edge_agent.audio.realtime import AudioThreads
from edge_agent.audio.talker_gate import LevelGate
from edge_agent.audio.virtual import VirtualMicrophone, VirtualSpeaker
from edge_agent.clock import VirtualClock
from edge_agent.config.file import parse_config
from edge_agent.doctor import checks as doctor_checks
from edge_agent.errors import ConfigError

RATE = 16000


def _preset(name: str) -> MicArray:
    array = mic_array(name, [], [], 0)
    assert array is not None
    return array


def test_the_presets_are_the_boards_published_geometry() -> None:
    hat = _preset("respeaker-4mic-hat")
    assert hat.size == 4 and hat.input_channels == 4 and hat.channels == (0, 1, 2, 3)
    assert np.allclose(np.linalg.norm(hat.positions_m, axis=1), 0.0405)
    assert hat.aperture_m == pytest.approx(0.081)
    six = _preset("respeaker-6mic")
    assert six.size == 6 and six.input_channels == 8 and six.channels == (0, 1, 2, 3, 4, 5)
    assert np.allclose(np.linalg.norm(six.positions_m, axis=1), 0.0463, atol=1e-4)
    usb = _preset("respeaker-usb-4mic")
    assert usb.channels == (1, 2, 3, 4) and usb.input_channels == 6
    assert np.allclose(np.linalg.norm(usb.positions_m, axis=1), 0.032)
    for preset in PRESETS.values():  # flat boards: every microphone in the board's plane
        assert all(z == 0.0 for _, _, z in preset.positions_mm)


def test_a_wave_from_in_front_reaches_the_front_microphone_first() -> None:
    hat = _preset("respeaker-4mic-hat")
    delays = hat.delays_s(0.0, 0.0)  # from +y
    front = int(np.argmax(hat.positions_m[:, 1]))
    back = int(np.argmin(hat.positions_m[:, 1]))
    assert delays[front] == pytest.approx(-0.0405 / SPEED_OF_SOUND)
    assert delays[back] == pytest.approx(0.0405 / SPEED_OF_SOUND)
    assert np.allclose(direction(90.0, 0.0), [1.0, 0.0, 0.0])
    assert np.allclose(direction(0.0, 90.0), [0.0, 0.0, 1.0])


def test_a_custom_board_takes_its_positions_and_channels() -> None:
    config = parse_config('[audio]\nmic_positions_mm = [[-30, 0], [30, 0, 5]]\n'
                          'mic_channels = [2, 0]\n', "edge-agent.toml")
    array = config.audio.mic_array()
    assert array is not None and array.name == "custom"
    assert array.channels == (2, 0) and array.input_channels == 3
    assert np.allclose(array.positions_m, [[-0.03, 0.0, 0.0], [0.03, 0.0, 0.005]])


@pytest.mark.parametrize(("audio", "key", "says"), [
    ('array = "respeaker-9mic"', "audio.array", "is not a preset (the presets: respeaker-4mic"),
    ('array = "respeaker-6mic"\nmic_positions_mm = [[0, 0], [30, 0]]', "audio.array",
     "not both"),
    ("mic_positions_mm = [[0, 0]]", "audio.mic_positions_mm", "at least 2 microphones"),
    ("mic_positions_mm = [[0, 0], [0.5, 0]]", "audio.mic_positions_mm", "at the same place"),
    ("mic_positions_mm = [[0, 0], [30, 0, 0, 1]]", "audio.mic_positions_mm[1]",
     "[x, y] or [x, y, z]"),
    ("mic_positions_mm = [[-260, 0], [260, 0]]", "audio.mic_positions_mm", "span 520 mm"),
    ("mic_positions_mm = [[0, 0], [30, 0]]\nmic_channels = [0]", "audio.mic_channels",
     "1 channels for 2 microphones"),
    ("mic_positions_mm = [[0, 0], [30, 0]]\nmic_channels = [1, 1]", "audio.mic_channels",
     "named twice"),
    ("mic_positions_mm = [[0, 0], [30, 0]]\nmic_channels = [0, 7]\ninput_channels = 4",
     "audio.input_channels", "open at least 8"),
    ("input_channels = 4", "audio.input_channels", "no array"),
    ("mic_channels = [0, 1]", "audio.mic_channels", "only for an array"),
    ('array = "respeaker-6mic"\nbeamformer = "mvdr"', "audio.beamformer", "must be one of"),
    ("mic_positions_mm = [[0, 0], [600, 0]]", "audio.mic_positions_mm[1][0]", "between -500"),
])
def test_an_array_that_cannot_be_listened_with_is_one_clear_error(audio: str, key: str,
                                                                   says: str) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_config(f"[audio]\n{audio}\n", "edge-agent.toml")
    assert raised.value.key == key
    assert says in str(raised.value)


@pytest.mark.parametrize("kind", FIXED_DESIGNS)
@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_the_caller_in_the_look_direction_passes_unchanged(kind: str, preset: str) -> None:
    array = _preset(preset)
    for azimuth, elevation in ((0.0, 0.0), (75.0, 30.0)):
        filters = design_filters(array, RATE, azimuth, elevation, kind)
        for frequency in (200.0, 500.0, 1000.0, 2000.0, 4000.0, 7000.0):
            gain = response_db(array, filters, RATE, frequency, azimuth, elevation)
            assert abs(gain) < 0.5, (frequency, gain)  # the window ripples at 200 Hz


def test_superdirective_rejects_voices_from_the_sides_where_speech_is() -> None:
    hat = _preset("respeaker-4mic-hat")
    superdirective = design_filters(hat, RATE, 0.0, 0.0, "superdirective")
    delay_and_sum = design_filters(hat, RATE, 0.0, 0.0, "delay-and-sum")
    for frequency in (300.0, 500.0, 1000.0, 2000.0):
        for azimuth in (90.0, 180.0, -120.0):
            assert response_db(hat, superdirective, RATE, frequency, azimuth) < -6.0
    for frequency in (300.0, 500.0, 1000.0):  # a delay-and-sum beam of 8 cm is wide there
        assert response_db(hat, delay_and_sum, RATE, frequency, 90.0) > -3.0


def _interleaved(array: MicArray, mics: np.ndarray) -> bytes:
    channels = np.zeros((len(mics), array.input_channels))
    channels[:, list(array.channels)] = mics
    return np.clip(np.round(channels), -32768, 32767).astype(np.int16).tobytes()


def test_the_stream_comes_out_of_the_front_and_is_cut_from_the_sides() -> None:
    usb = _preset("respeaker-usb-4mic")  # microphones on channels 1-4 of 6
    rng = np.random.default_rng(3)
    speech_band = np.convolve(rng.standard_normal(RATE), np.hanning(9), mode="same")
    voice = 3000.0 * speech_band / np.std(speech_band)
    filters = design_filters(usb, RATE, 0.0, 0.0, "superdirective")
    front, side = (np.frombuffer(Beamformer(usb, filters).process(
        _interleaved(usb, usb.plane_wave(voice, azimuth, 0.0, RATE))),
        dtype=np.int16).astype(np.float64) for azimuth in (0.0, 90.0))
    delay = FILTER_TAPS // 2
    settled = slice(delay + FILTER_TAPS, len(voice) - FILTER_TAPS)
    shifted = slice(FILTER_TAPS, len(voice) - FILTER_TAPS - delay)
    # The voice from in front comes out as it was, FILTER_TAPS / 2 samples later...
    error = front[settled] - voice[shifted]
    assert 10 * math.log10(np.mean(error ** 2) / np.mean(voice ** 2)) < -20.0
    # ...and from the side at least 6 dB down over the band.
    assert 10 * math.log10(np.mean(side[settled] ** 2) / np.mean(voice ** 2)) < -6.0


def test_any_cutting_of_the_stream_gives_the_same_samples() -> None:
    six = _preset("respeaker-6mic")
    rng = np.random.default_rng(5)
    mics = rng.normal(0.0, 2000.0, (4000, six.size))
    stream = _interleaved(six, mics)
    filters = design_filters(six, RATE, 30.0, 10.0, "superdirective")
    whole = Beamformer(six, filters).process(stream)
    frame_bytes = 2 * six.input_channels
    beamformer = Beamformer(six, filters)
    cuts = [0, 1, 512, 513, 1700, 1701, 4000]
    pieces = [beamformer.process(stream[a * frame_bytes:b * frame_bytes])
              for a, b in itertools.pairwise(cuts)]
    assert b"".join(pieces) == whole
    # One filter per microphone, summed: the same as a direct convolution.
    expected = sum(np.convolve(mics[:, m], filters[m])[:4000] for m in range(six.size))
    got = np.frombuffer(whole, dtype=np.int16).astype(np.float64)
    assert np.max(np.abs(got - np.clip(np.round(expected), -32768, 32767))) <= 1.0


class _TwoChannelCard:
    """PyAudio as a stereo USB sound card shows itself (nothing is opened)."""

    def get_device_info_by_index(self, index: int) -> dict[str, object]:
        return {"index": index, "name": "USB Audio", "maxInputChannels": 2,
                "maxOutputChannels": 2}

    def get_device_count(self) -> int:
        return 1

    def get_default_input_device_info(self) -> dict[str, object]:
        return self.get_device_info_by_index(0)


def test_doctor_names_a_sound_card_with_fewer_channels_than_the_array() -> None:
    card = _TwoChannelCard()
    array = mic_array("respeaker-6mic", [], [], 0)
    threads = AudioThreads(10)
    record = doctor_checks._input(card, [card.get_device_info_by_index(0)], "", array, threads)
    assert threads.state().scheduling == ""  # refused before any stream (or thread) opened
    assert record["status"] == "FAIL"
    assert "has 2 input channel(s); the microphone array (respeaker-6mic) needs 8" in (
        record["detail"])
    assert "input_device" in record["fix"]


class _ArrayCard:
    """An array's sound card as the loop is built on it (nothing is read from it)."""

    sample_rate = RATE
    frame_samples = 512

    def __init__(self, channels: int) -> None:
        self.channels = channels

    async def frames(self) -> AsyncIterator[bytes]:
        return
        yield


@pytest.mark.parametrize(("gate", "with_array", "with_one"), [
    ("auto", True, False), ("level", True, True), ("off", False, False)])
def test_the_talker_gate_is_on_by_default_with_an_array_and_off_with_one_microphone(
        gate: str, with_array: bool, with_one: bool) -> None:
    config = parse_config(f'[audio]\narray = "respeaker-4mic-hat"\ntalker_gate = "{gate}"\n',
                          "edge-agent.toml")
    array = config.audio.mic_array()
    assert array is not None
    clock = VirtualClock()
    beam = steered(config, array, _ArrayCard(array.input_channels), VirtualSpeaker(clock, RATE))
    assert isinstance(talker_gate(config, beam), LevelGate) is with_array
    assert isinstance(talker_gate(config, VirtualMicrophone(clock)), LevelGate) is with_one
