"""Echo by sound: the double-talk measure on synthetic signals (no models)."""

from __future__ import annotations

import numpy as np

from edge_agent.conversation.echo_audio import RATE, echo_coherence, to_compare_rate


def _voice(seconds: float, seed: int) -> np.ndarray:
    """Speech-like: noise shaped by a slow syllable envelope, band-limited."""
    rng = np.random.default_rng(seed)
    n = int(seconds * 16000)
    envelope = np.abs(np.sin(np.linspace(0, seconds * 4 * np.pi, n))) + 0.05
    noise = np.convolve(rng.normal(0, 1, n), np.ones(4) / 4, mode="same")
    return noise * envelope * 6000


def _pcm(samples: np.ndarray) -> bytes:
    return np.clip(samples, -32768, 32767).astype(np.int16).tobytes()


def test_a_delayed_quieter_copy_is_echo_and_other_speech_is_not() -> None:
    played = _voice(2.0, seed=1)
    delay = int(0.08 * 16000)
    echo = np.concatenate([np.zeros(delay), played[: -delay]]) * 0.3
    window = slice(8000, 20000)  # 0.75 s of microphone audio
    reference = to_compare_rate(_pcm(played), 16000)
    assert echo_coherence(to_compare_rate(_pcm(echo[window]), 16000), reference) > 0.9
    user = _voice(2.0, seed=2)
    assert echo_coherence(to_compare_rate(_pcm(user[window]), 16000), reference) < 0.2
    # A user talking over the echo, three times louder: mostly the user.
    mixed = user[window] + echo[window] * 1.0
    assert echo_coherence(to_compare_rate(_pcm(mixed), 16000), reference) < 0.5


def test_short_or_silent_input_is_not_echo() -> None:
    reference = to_compare_rate(_pcm(_voice(1.0, seed=3)), 16000)
    assert echo_coherence(np.zeros(RATE), reference) == 0.0
    assert echo_coherence(np.ones(10), reference) == 0.0
    assert echo_coherence(reference, reference[:100]) == 0.0


def test_rates_are_reduced_to_the_compare_rate() -> None:
    one_second = _pcm(_voice(1.0, seed=4))
    assert len(to_compare_rate(one_second, 16000)) == RATE
    assert len(to_compare_rate(b"", 22050)) == 0
