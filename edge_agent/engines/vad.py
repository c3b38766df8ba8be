"""Silero VAD through onnxruntime (no torch)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from edge_agent.engines.ort_session import open_session
from edge_agent.errors import ModelFileError

_CONTEXT = 64


class SileroVad:
    """Silero VAD v5/v6: 512-sample frames at 16 kHz, with 64 samples of carried context."""

    sample_rate = 16000
    frame_samples = 512

    def __init__(self, model_path: Path) -> None:
        try:
            self._session = open_session(model_path, threads=1)
        except Exception as exc:
            raise ModelFileError(
                model_path, f"onnxruntime cannot load it as the Silero VAD ({exc})") from None
        self._rate = np.array(self.sample_rate, dtype=np.int64)
        self.reset()

    def reset(self) -> None:
        self._state = np.zeros((2, 1, 128), dtype=np.float32)
        self._context = np.zeros(_CONTEXT, dtype=np.float32)

    def speech_probability(self, frame: bytes) -> float:
        samples = np.frombuffer(frame, dtype=np.int16).astype(np.float32) / 32768.0
        if samples.size != self.frame_samples:
            raise ValueError(f"Silero VAD needs {self.frame_samples} samples, got {samples.size}")
        window = np.concatenate([self._context, samples])[np.newaxis, :]
        output, self._state = self._session.run(
            None, {"input": window, "state": self._state, "sr": self._rate}
        )
        self._context = samples[-_CONTEXT:]
        return float(output[0][0])
