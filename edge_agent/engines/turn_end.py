"""Has the speaker finished their turn? Asked of the sound: Smart Turn v3.2 on onnxruntime.

People end a turn with their voice as much as with their words: the pitch falls, the last
syllable lengthens and fades. "Six people," ends on a comma, so the words alone say nothing,
while its falling pitch says it is finished; "It was the best of times," said rising and held,
sounds unfinished. Smart Turn v3.2 (pipecat-ai/smart-turn, BSD-2-Clause, code, weights and data) is a
Whisper-tiny encoder with a small head, trained on 23 languages: it takes the last 8 s of a
turn (16 kHz mono, padded with silence in front when shorter) as Whisper's log-mel features
and gives one probability that the turn is complete.

The model file (`smart-turn-v3.2-cpu.onnx`, 8.7 MB, int8) ships inside the `pipecat-ai` wheel on
PyPI; edge-agent reads it from an installed wheel without importing pipecat, or
`edge-agent models fetch smart-turn-v3.2` downloads the wheel and keeps only that file.

The features are computed here with numpy (no torch, no transformers), the way Whisper's
feature extractor computes them: the waveform normalized to zero mean and unit variance, a
400-point periodic Hann window every 160 samples (centered, reflect-padded), the power
spectrum through 80 Slaney-normalized mel filters (0-8 kHz), log10 floored at 1e-10, clamped to
8 below its maximum, then (x + 4) / 4; the last frame is dropped, leaving 800.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from edge_agent.engines.ort_session import open_session
from edge_agent.errors import ModelFileError
from edge_agent.printable import shown

SAMPLE_RATE = 16000
WINDOW_SECONDS = 8
"""The model hears at most the turn's last 8 s."""
_N_FFT = 400
_HOP = 160
_MELS = 80
_FRAMES = WINDOW_SECONDS * SAMPLE_RATE // _HOP
_INPUT = "input_features"
_NOT_SMART_TURN = "point vad.end_model at a Smart Turn v3 .onnx file (the default: smart-turn-v3.2)"


def _slaney_mel(hz: np.ndarray) -> np.ndarray:
    """Hertz to mels, Slaney's scale: linear up to 1 kHz, logarithmic above."""
    linear = 3.0 * hz / 200.0
    logarithmic = 15.0 + np.log(np.maximum(hz, 1e-9) / 1000.0) * (27.0 / np.log(6.4))
    return np.where(hz >= 1000.0, logarithmic, linear)


def _slaney_hz(mel: np.ndarray) -> np.ndarray:
    linear = 200.0 * mel / 3.0
    logarithmic = 1000.0 * np.exp((mel - 15.0) * (np.log(6.4) / 27.0))
    return np.where(mel >= 15.0, logarithmic, linear)


def mel_filters() -> np.ndarray:
    """Whisper's 80 triangular filters over the 201 bins of a 400-point FFT at 16 kHz, each
    scaled by 2 / its width (Slaney's area normalization); shape (80, 201)."""
    edges = _slaney_hz(np.linspace(0.0, float(_slaney_mel(np.array(SAMPLE_RATE / 2))),
                                   _MELS + 2))
    bins = np.linspace(0.0, SAMPLE_RATE / 2, _N_FFT // 2 + 1)
    lower, centre, upper = edges[:-2, None], edges[1:-1, None], edges[2:, None]
    rising = (bins[None, :] - lower) / (centre - lower)
    falling = (upper - bins[None, :]) / (upper - centre)
    triangles: np.ndarray = np.maximum(0.0, np.minimum(rising, falling)) * (2.0 / (upper - lower))
    return triangles


_FILTERS = mel_filters()
_HANN = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(_N_FFT) / _N_FFT)  # periodic


def last_window(pcm: bytes) -> np.ndarray:
    """The last 8 s of int16 `pcm` as floats in [-1, 1), silence in front when shorter."""
    samples = np.frombuffer(pcm, dtype=np.int16)[-WINDOW_SECONDS * SAMPLE_RATE:]
    window = np.zeros(WINDOW_SECONDS * SAMPLE_RATE, dtype=np.float32)
    if samples.size:
        window[-samples.size:] = samples.astype(np.float32) / 32768.0
    return window


def log_mel(window: np.ndarray) -> np.ndarray:
    """Whisper's log-mel features of an 8 s window: shape (80, 800), float32."""
    normalized = (window - window.mean()) / np.sqrt(window.var() + 1e-7)
    padded = np.pad(normalized.astype(np.float64), _N_FFT // 2, mode="reflect")
    frames = np.lib.stride_tricks.sliding_window_view(padded, _N_FFT)[::_HOP]
    power = np.abs(np.fft.rfft(frames * _HANN, axis=-1)) ** 2
    mel = np.log10(np.maximum(_FILTERS @ power.T, 1e-10))[:, :_FRAMES]
    mel = np.maximum(mel, mel.max() - 8.0)
    features: np.ndarray = ((mel + 4.0) / 4.0).astype(np.float32)
    return features


class SmartTurn:
    """Smart Turn v3.x: the probability that a turn whose audio (16 kHz int16, from its first
    sound to now, the silence after it included) is `pcm` is complete."""

    sample_rate = SAMPLE_RATE
    window_s = float(WINDOW_SECONDS)

    def __init__(self, model_path: Path, threads: int = 1) -> None:
        try:
            self._session = open_session(model_path, threads=threads)
        except Exception as exc:
            raise ModelFileError(model_path, f"onnxruntime cannot load it as Smart Turn ({exc})",
                                 f"Fix: {_NOT_SMART_TURN}") from None
        inputs = [(i.name, list(i.shape)) for i in self._session.get_inputs()]
        if len(inputs) != 1 or inputs[0][0] != _INPUT or inputs[0][1][1:] != [_MELS, _FRAMES]:
            shown_inputs = ", ".join(f"{shown(name, 40)} {shape}" for name, shape in inputs)
            raise ModelFileError(
                model_path, f"not a Smart Turn v3 model: it takes {shown_inputs or 'nothing'}; "
                f"Smart Turn v3 takes {_INPUT} [batch, {_MELS}, {_FRAMES}]",
                f"Fix: {_NOT_SMART_TURN}")
        probability = self.complete_probability(b"")
        if not 0.0 <= probability <= 1.0:
            raise ModelFileError(model_path, "not a Smart Turn v3 model: for silence it gives "
                                 f"{probability!r}, not a probability", f"Fix: {_NOT_SMART_TURN}")

    def complete_probability(self, pcm: bytes) -> float:
        features = log_mel(last_window(pcm))[np.newaxis]
        output = self._session.run(None, {_INPUT: features})[0]
        return float(np.asarray(output).reshape(-1)[0])
