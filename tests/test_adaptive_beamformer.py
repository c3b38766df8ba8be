"""The adaptive beamformer: it learns where the people who are not the caller are and takes
them out, keeps the caller as the fixed design does, holds still while the agent speaks (the
echo canceller's path), and changes its filters without a click."""

from __future__ import annotations

import math

import numpy as np
import pytest

from edge_agent.audio import adaptive_beamformer as adaptive
from edge_agent.audio.adaptive_beamformer import AdaptiveBeamformer, build_beamformer
from edge_agent.audio.array import MicArray, mic_array
from edge_agent.audio.beamformer import (
    FILTER_TAPS,
    Beamformer,
    Look,
    design_filters,
    response_db,
)
from edge_agent.audio.room_acoustics import RoomLayout, render
from edge_agent.config.file import parse_config
from edge_agent.errors import ConfigError

RATE = 16000
FRAME = 512
LOOK = (0.0, 31.0)
"""Where the caller is, as `bench rooms`' café has them: 0.5 m in front, 0.3 m up."""


def _hat() -> MicArray:
    array = mic_array("respeaker-4mic-hat", [], [], 0)
    assert array is not None
    return array


def _voice(rng: np.random.Generator, seconds: float) -> np.ndarray:
    """Speech-band noise: what matters to a beamformer is where it comes from."""
    white = rng.standard_normal(round(seconds * RATE))
    shaped = np.convolve(white, np.hanning(7), mode="same")
    return 3000.0 * shaped / np.std(shaped)


def _bursts(signal: np.ndarray, on_s: float, off_s: float) -> np.ndarray:
    """The signal in turns of talking and pausing, as a caller does."""
    period = round((on_s + off_s) * RATE)
    talking = (np.arange(len(signal)) % period) < round(on_s * RATE)
    return signal * talking


def _through(steering: Beamformer | AdaptiveBeamformer, mics: np.ndarray,
             played: list[int] | None = None) -> list[np.ndarray]:
    """The filters in force for each frame of `mics` fed in the loop's frames."""
    used = []
    for start in range(0, len(mics), FRAME):
        used.append(steering.filters.copy())
        steering.steer(mics[start:start + FRAME])
        if played is not None:
            played[0] += FRAME
    return used


def _replayed(array: MicArray, used: list[np.ndarray], mics: np.ndarray) -> np.ndarray:
    """`mics` through the same filters, frame by frame, as the beamformer had them."""
    steering = Beamformer(array, used[0])
    out = []
    for index, start in enumerate(range(0, len(mics), FRAME)):
        steering.retune(used[index])
        out.append(steering.steer(mics[start:start + FRAME]))
    return np.concatenate(out)


def _in_room(source: np.ndarray, paths: np.ndarray) -> np.ndarray:
    """What each microphone hears of `source` through its path in the room."""
    return np.stack([np.convolve(source, path)[:len(source)] for path in paths], axis=1)


def _level_db(samples: np.ndarray) -> float:
    return 10.0 * math.log10(float(np.mean(samples ** 2)) + 1e-12)


def test_a_voice_from_the_side_is_taken_out_far_deeper_than_the_fixed_design_can() -> None:
    hat = _hat()
    rng = np.random.default_rng(11)
    seconds = 6.0
    caller = hat.plane_wave(_bursts(_voice(rng, seconds), 0.6, 0.6), *LOOK, RATE)
    other = 0.5 * hat.plane_wave(_voice(rng, seconds), 100.0, 10.0, RATE)
    steering = AdaptiveBeamformer(hat, RATE, *LOOK, played_frames=lambda: 0)
    used = _through(steering, caller + other)
    assert steering.adapted
    fixed = design_filters(hat, RATE, *LOOK, "superdirective")
    last = slice(round(4.0 * RATE), None)
    adapted_out = _replayed(hat, used, other)[last]
    fixed_out = Beamformer(hat, fixed).steer(other)[last]
    # The fixed design takes a few dB off that voice; the adaptive one puts a notch on it.
    assert _level_db(adapted_out) < _level_db(fixed_out) - 8.0
    # Toward the caller it is still distortionless.
    for frequency in (300.0, 1000.0, 3000.0, 6000.0):
        assert abs(response_db(hat, used[-1], RATE, frequency, *LOOK)) < 0.5


def test_the_agents_voice_holds_the_filters_still_until_the_room_has_stopped_ringing() -> None:
    hat = _hat()
    rng = np.random.default_rng(12)
    other = hat.plane_wave(_voice(rng, 3.0), -80.0, 0.0, RATE)
    played = [0]
    steering = AdaptiveBeamformer(hat, RATE, *LOOK, played_frames=lambda: played[0])
    fixed = steering.filters.copy()
    _through(steering, other, played)  # the agent talks all along: its speaker plays
    assert not steering.adapted
    assert np.array_equal(steering.filters, fixed)
    # The speaker stops: within the echo's tail nothing moves, after it the filters adapt.
    tail = round(adaptive.ECHO_TAIL_S * RATE) // FRAME * FRAME
    _through(steering, other[:tail - FRAME])
    assert np.array_equal(steering.filters, fixed)
    _through(steering, other)
    assert steering.adapted


def test_in_a_reverberant_cafe_the_caller_keeps_their_level_and_the_talker_loses_more() -> None:
    hat = _hat()
    layout = RoomLayout(size_m=(8.0, 6.0, 3.0))
    talker_at = (1.8, 2.2, 0.4)
    rooms = render(layout, 400.0, hat.centred_m, [talker_at], RATE)
    rng = np.random.default_rng(13)
    seconds = 8.0
    caller = _in_room(_bursts(_voice(rng, seconds), 1.5, 1.0), rooms.caller)
    talker = _in_room(_voice(rng, seconds), rooms.talkers[0])
    talker *= math.sqrt(np.mean(caller[:, 0] ** 2) / np.mean(talker[:, 0] ** 2)) * 10 ** (-5 / 20)
    steering = AdaptiveBeamformer(hat, RATE, *LOOK, played_frames=lambda: 0)
    used = _through(steering, caller + talker)
    fixed = Beamformer(hat, design_filters(hat, RATE, *LOOK, "superdirective"))
    last = slice(round(4.0 * RATE), None)
    fixed_caller = fixed.steer(caller)[last]
    fixed_talker = Beamformer(hat, fixed.filters).steer(talker)[last]
    adapted_caller = _replayed(hat, used, caller)[last]
    adapted_talker = _replayed(hat, used, talker)[last]
    # Not the caller cancelled as noise (their own reverberation is not a plane wave)...
    assert abs(_level_db(adapted_caller) - _level_db(fixed_caller)) < 1.0
    # ...and the talker further down than the fixed design has them.
    assert _level_db(adapted_talker) < _level_db(fixed_talker) - 2.0


def test_it_tells_the_callers_place_from_the_rooms_and_marks_the_agents_voice() -> None:
    # The café: the caller 0.5 m in front, then someone 3 m away at another angle as loud at
    # the board, through the same reverberant room (RT60 400 ms).
    hat = _hat()
    rooms = render(RoomLayout(size_m=(8.0, 6.0, 3.0)), 400.0, hat.centred_m,
                   [(1.8, 2.2, 0.4)], RATE)
    rng = np.random.default_rng(15)
    caller = _in_room(_voice(rng, 2.0), rooms.caller)
    talker = _in_room(_voice(rng, 2.0), rooms.talkers[0])
    talker *= math.sqrt(np.mean(caller[:, 0] ** 2) / np.mean(talker[:, 0] ** 2))
    both = np.concatenate([caller, talker])
    pieces = round(2.0 * RATE) // FRAME
    hold = round(adaptive.LOOK_HOLD_S * RATE / FRAME) + 2  # the caller's reverberant tail

    def told(played: list[int] | None) -> list[Look | None]:
        steering = AdaptiveBeamformer(hat, RATE, *LOOK,
                                      played_frames=lambda: played[0] if played else 0)
        assert steering.from_the_look() is None  # nothing heard yet
        verdicts = []
        for start in range(0, len(both), FRAME):
            if played is not None:
                played[0] += FRAME
            steering.steer(both[start:start + FRAME])
            verdicts.append(steering.from_the_look())
        return verdicts

    silent = told(None)
    callers, theirs = silent[3:pieces], silent[pieces + hold:]
    assert callers.count(Look.CALLER) >= 0.9 * len(callers), callers
    assert theirs.count(Look.ELSEWHERE) >= 0.9 * len(theirs), theirs
    # While the agent's speaker plays, elsewhere is told apart: the caller's own first
    # syllables may be drowned by the agent's voice there.
    speaking = told([0])
    assert speaking[3:pieces] == callers
    assert speaking[pieces + hold:] == [Look.ELSEWHERE_OVER_THE_AGENT if verdict is Look.ELSEWHERE
                                        else verdict for verdict in theirs]


def test_new_filters_fade_in_over_one_piece_and_then_hold_exactly() -> None:
    hat = _hat()
    rng = np.random.default_rng(14)
    mics = rng.normal(0.0, 2000.0, (3 * FRAME, hat.size))
    first = design_filters(hat, RATE, 0.0, 0.0, "superdirective")
    second = design_filters(hat, RATE, 90.0, 0.0, "delay-and-sum")
    steering = Beamformer(hat, first)
    before = steering.steer(mics[:FRAME])
    steering.retune(second)
    assert np.array_equal(steering.filters, second)
    faded = steering.steer(mics[FRAME:2 * FRAME])
    after = steering.steer(mics[2 * FRAME:])

    def direct(filters: np.ndarray) -> np.ndarray:
        summed: np.ndarray = sum(np.convolve(mics[:, m], filters[m])[:len(mics)]
                                 for m in range(hat.size))
        return summed

    old, new = direct(first), direct(second)
    np.testing.assert_allclose(before, old[:FRAME], atol=1e-6)
    fade = (np.arange(FRAME) + 1.0) / FRAME
    np.testing.assert_allclose(faded, old[FRAME:2 * FRAME] * (1 - fade)
                               + new[FRAME:2 * FRAME] * fade, atol=1e-6)
    np.testing.assert_allclose(after, new[2 * FRAME:], atol=1e-6)
    with pytest.raises(ValueError, match="shape"):
        steering.retune(first[:, :FILTER_TAPS // 2])


def test_the_config_chooses_the_adaptive_beamformer_and_names_the_choices() -> None:
    config = parse_config('[audio]\narray = "respeaker-4mic-hat"\nbeamformer = "adaptive"\n',
                          "edge-agent.toml")
    array = config.audio.mic_array()
    assert array is not None
    built = build_beamformer(array, RATE, 0.0, 0.0, config.audio.beamformer)
    assert isinstance(built, AdaptiveBeamformer)
    assert built.delay_samples == FILTER_TAPS // 2
    with pytest.raises(ConfigError) as raised:
        parse_config('[audio]\nbeamformer = "mvdr"\n', "edge-agent.toml")
    assert raised.value.key == "audio.beamformer"
    assert "adaptive" in str(raised.value) and "superdirective" in str(raised.value)
