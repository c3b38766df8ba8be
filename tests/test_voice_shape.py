"""The sound shape of a burst, on synthetic signals whose answer is known."""

from __future__ import annotations

import numpy as np

from edge_agent.conversation.voice_shape import voice_shape

RATE = 16000


def _voiced(seconds: float, pitch: float = 120.0, syllables: int = 1) -> np.ndarray:
    """A buzz of harmonics at `pitch` (what a hum's source is), in `syllables` swells."""
    t = np.arange(int(seconds * RATE)) / RATE
    buzz = sum(np.sin(2 * np.pi * pitch * k * t) / k for k in range(1, 8))
    envelope = np.sin(np.pi * syllables * t / seconds) ** 2
    return buzz * envelope * 6000


def _pcm(*parts: np.ndarray) -> bytes:
    return np.concatenate(parts).astype(np.int16).tobytes()


def test_a_short_voiced_burst_is_one() -> None:
    shape = voice_shape(_pcm(np.zeros(4096), _voiced(0.45, syllables=2), np.zeros(3200)))
    assert 300 <= shape.speech_ms <= 500
    assert shape.voiced_ratio >= 0.8
    assert shape.syllables == 2
    assert shape.is_short_voiced_burst()


def test_noise_a_long_stretch_and_silence_are_not() -> None:
    noise = np.random.default_rng(1).standard_normal(int(0.4 * RATE)) * 6000
    assert voice_shape(_pcm(noise)).voiced_ratio < 0.2  # a cough, a click: unvoiced
    assert not voice_shape(_pcm(noise)).is_short_voiced_burst()
    assert not voice_shape(_pcm(_voiced(1.6, syllables=6))).is_short_voiced_burst()
    silent = voice_shape(_pcm(np.zeros(RATE)))
    assert silent.speech_ms == 0 and not silent.is_short_voiced_burst()


def test_a_low_pitch_is_found_over_a_whole_frame() -> None:
    # 75 Hz: a period of 213 samples in a 640-sample frame (normalized, not biased to short lags).
    assert voice_shape(_pcm(_voiced(0.5, pitch=75.0))).voiced_ratio >= 0.8
