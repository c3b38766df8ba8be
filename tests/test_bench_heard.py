"""The benchmark's measurement of a recording, on synthetic audio (no sound server)."""

from __future__ import annotations

import numpy as np
import pytest

from edge_agent.bench.heard import audible_everywhere, recorded_length, speech_onset


def _unit(samples: int = 6000, seed: int = 3) -> np.ndarray:
    rng = np.random.default_rng(seed)
    quiet = np.zeros(400, dtype=np.int16)  # Piper units start near-silent
    loud = rng.integers(-9000, 9000, samples - len(quiet), dtype=np.int16)
    loud[1000:1300] = 0  # a pause of digital silence in the middle
    return np.concatenate([quiet, loud])


@pytest.mark.parametrize("cut", [700, 1150, 1250, 3000, 5999])
def test_recorded_length_finds_where_playback_stopped(cut: int) -> None:
    unit = np.frombuffer(audible_everywhere(_unit().tobytes()), dtype=np.int16)
    assert not (unit == 0).any()
    recording = np.concatenate([np.zeros(777, np.int16), unit[:cut], np.zeros(500, np.int16)])
    assert recorded_length(recording.tobytes(), unit.tobytes()) == cut


def test_a_whole_unit_is_found_even_with_silence_inside() -> None:
    unit = _unit()
    recording = np.concatenate([np.zeros(50, np.int16), unit, np.zeros(50, np.int16)])
    assert recorded_length(recording.tobytes(), unit.tobytes()) == len(unit)


def test_a_resampled_or_scaled_recording_is_refused() -> None:
    unit = _unit()
    louder = (unit.astype(np.int32) * 2 // 3).astype(np.int16)
    with pytest.raises(ValueError, match="bit for bit"):
        recorded_length(louder.tobytes(), unit.tobytes())


def test_speech_onset_is_the_first_loud_sample() -> None:
    unit = _unit()
    onset = speech_onset(unit.tobytes())
    assert onset >= 400 and abs(int(unit[onset])) >= 1000
    with pytest.raises(ValueError, match="no audible speech"):
        speech_onset(np.zeros(100, np.int16).tobytes())
