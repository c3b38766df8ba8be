"""The echo canceller: WebRTC AEC3 on a simulated room, and `[audio] echo_cancel` (the played
reference it is fed: tests/test_played_reference.py)."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from edge_agent.app import microphone_processing
from edge_agent.audio.echo_cancel import WebRtcProcessing
from edge_agent.audio.room import Room, RoomNoise
from edge_agent.config import Config
from edge_agent.config.file import parse_config
from edge_agent.errors import ConfigError

RATE = 16000
FRAME = 512


def speech_like(seconds: float, seed: int) -> np.ndarray:
    """Noise shaped like speech: syllables (a 4 Hz envelope with pauses) through a formant-ish
    filter, at about -20 dBFS."""
    rng = np.random.default_rng(seed)
    n = int(seconds * RATE)
    noise = rng.normal(0, 1, n)
    shaped = np.convolve(noise, np.hanning(24), mode="same")
    t = np.arange(n) / RATE
    envelope = np.clip(np.sin(2 * np.pi * 4 * t + rng.uniform(0, 6)), 0, None) ** 2
    envelope *= (np.sin(2 * np.pi * 0.3 * t) > -0.6)  # pauses between phrases
    signal = shaped * envelope
    return signal / np.sqrt(np.mean(signal ** 2)) * 3000


def room_echo(far: np.ndarray, gain: float, delay_ms: float = 40, seed: int = 7) -> np.ndarray:
    rng = np.random.default_rng(seed)
    taps = 1600
    response = rng.normal(0, 0.3, taps) * np.exp(-np.arange(taps) / 300)
    response[0] = 1.0
    echo = np.convolve(far, response)[:len(far)] * gain
    delay = int(delay_ms / 1000 * RATE)
    echo = np.concatenate([np.zeros(delay), echo])[:len(far)]
    return np.tanh(echo / 20000) * 20000  # a small loudspeaker's soft clipping


def run_canceller(near: np.ndarray, far: np.ndarray) -> np.ndarray:
    canceller = WebRtcProcessing(RATE)
    out = []
    for at in range(0, len(near) - FRAME + 1, FRAME):
        near_frame = np.clip(near[at:at + FRAME], -32768, 32767).astype(np.int16).tobytes()
        far_frame = np.clip(far[at:at + FRAME], -32768, 32767).astype(np.int16).tobytes()
        cleaned = canceller.process(near_frame, far_frame)
        assert len(cleaned) == len(near_frame)
        out.append(np.frombuffer(cleaned, dtype=np.int16).astype(np.float64))
    return np.concatenate(out)


def db(a: np.ndarray, b: np.ndarray) -> float:
    return float(10 * np.log10(np.mean(a ** 2) / max(np.mean(b ** 2), 1e-9)))


LAG = 287
"""Samples the cleaned microphone comes out behind the raw one: the canceller's 10 ms framing
and WebRTC's band-splitting filters (measured: 18 ms)."""


def _level_by_second(signal: np.ndarray) -> np.ndarray:
    seconds = len(signal) // RATE
    return np.array([np.mean(signal[i * RATE:(i + 1) * RATE] ** 2) for i in range(seconds)])


@pytest.mark.parametrize("gain", [0.3, 1.0])
def test_the_echo_of_what_played_is_taken_out(gain: float) -> None:
    far = speech_like(7.0, seed=1)
    echo = room_echo(far, gain)
    out = run_canceller(echo, far)[LAG:]
    removed = 10 * np.log10(_level_by_second(echo[:len(out)]) / np.maximum(
        _level_by_second(out), 1e-9))
    # Measured: 44-49 dB in the first second, then 16-73 dB second by second (the soft
    # clipping at gain 1.0 is what a linear filter cannot follow at once).
    assert np.median(removed[2:]) >= 25, removed


def test_a_voice_over_the_echo_comes_through() -> None:
    far = speech_like(8.0, seed=1)
    voice = speech_like(2.0, seed=2)
    caller = np.zeros_like(far)
    caller[5 * RATE:7 * RATE] = voice
    echo = room_echo(far, 1.0)
    talking = run_canceller(echo + caller, far)[LAG:]
    alone = run_canceller(echo, far)[LAG:]
    window = slice(5 * RATE, 7 * RATE)
    # The caller comes through nearly whole (measured -3.8 dB: the suppressor during double
    # talk), and what is left of the echo in the same window is far below it.
    assert db(talking[window], voice) > -6
    assert db(voice, alone[window]) > 20


def test_without_echo_the_microphone_passes_at_its_level_18_ms_late() -> None:
    voice = speech_like(3.0, seed=3)
    out = run_canceller(voice, np.zeros_like(voice))
    assert abs(db(out[RATE:], voice[RATE:len(out)])) < 3
    window = voice[RATE:2 * RATE]
    lags = range(0, 1000)
    best = max(lags, key=lambda lag: float(np.dot(out[RATE + lag:2 * RATE + lag], window)))
    assert abs(best - LAG) <= 16, best


def test_echo_cancel_is_on_where_the_microphone_hears_the_speaker() -> None:
    assert microphone_processing(Config(), RATE, speaker_audible=True) is not None
    assert microphone_processing(Config(), RATE, speaker_audible=False) is None
    headset = parse_config('[audio]\necho_cancel = "off"\n', "c.toml")
    assert microphone_processing(headset, RATE, speaker_audible=True) is None
    forced = parse_config('[audio]\necho_cancel = "on"\n', "c.toml")
    assert microphone_processing(forced, RATE, speaker_audible=False) is not None
    with pytest.raises(ConfigError, match="echo_cancel"):
        parse_config('[audio]\necho_cancel = "yes"\n', "c.toml")


def test_noise_suppression_is_off_unless_asked_for() -> None:
    assert microphone_processing(Config(), RATE, speaker_audible=False) is None
    plain = microphone_processing(Config(), RATE, speaker_audible=True)
    assert plain is not None and plain.engines == {"echo_cancel": "webrtc-aec3"}
    asked = parse_config('[audio]\nnoise_suppression = "on"\n', "c.toml")
    alone = microphone_processing(asked, RATE, speaker_audible=False)
    assert alone is not None and alone.engines == {"noise_suppression": "webrtc-ns"}
    both = microphone_processing(asked, RATE, speaker_audible=True)
    assert both is not None and both.engines == {"echo_cancel": "webrtc-aec3",
                                                 "noise_suppression": "webrtc-ns"}
    off = parse_config('[audio]\nnoise_suppression = "off"\necho_cancel = "off"\n', "c.toml")
    assert microphone_processing(off, RATE, speaker_audible=True) is None
    with pytest.raises(ConfigError, match="noise_suppression"):
        parse_config('[audio]\nnoise_suppression = "yes"\n', "c.toml")


def test_noise_suppression_alone_takes_steady_noise_down_and_ignores_the_far_end() -> None:
    noise = RoomNoise(Room(noise_db=-30.0, seed=2), RATE).take(4 * RATE)
    pcm = np.clip(np.round(noise), -32768, 32767).astype(np.int16)

    def suppressed(far_level: int) -> np.ndarray:
        processing = WebRtcProcessing(RATE, echo_cancellation=False, noise_suppression=True)
        far = np.full(FRAME, far_level, dtype=np.int16).tobytes()
        out = [processing.process(pcm[i:i + FRAME].tobytes(), far)
               for i in range(0, len(pcm) - FRAME + 1, FRAME)]
        return np.frombuffer(b"".join(out), dtype=np.int16).astype(np.float64)

    out = suppressed(0)
    # Once it has learnt the noise (a second), it takes 10 dB and more off it.
    assert db(out[2 * RATE:], noise[2 * RATE - LAG:len(out) - LAG]) < -10
    # No echo canceller: what played does not matter.
    assert np.array_equal(out, suppressed(12000))
    with pytest.raises(ValueError, match="nothing to do"):
        WebRtcProcessing(RATE, echo_cancellation=False)


def test_without_livekit_the_processing_is_one_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from edge_agent.errors import EngineError

    monkeypatch.setitem(sys.modules, "livekit.rtc", None)  # as on a machine without the wheel
    with pytest.raises(EngineError, match=r'pip install livekit.*echo_cancel = "off"'):
        WebRtcProcessing(RATE)
