"""Silero VAD through onnxruntime (no torch)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from edge_agent.engines.ort_session import open_session
from edge_agent.errors import ModelFileError
from edge_agent.printable import shown

_CONTEXT = 64
_INPUTS = ("input", "state", "sr")
"""What a Silero VAD v5/v6 model takes: audio, its recurrent state, the sample rate."""
_NOT_SILERO = "point vad.model at a Silero VAD v5/v6 .onnx file (the default: silero-vad)"


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
        self._check_is_silero(model_path)
        self.reset()

    def _check_is_silero(self, model_path: Path) -> None:
        """Refuse, at load, an ONNX model that is not Silero VAD (another model would fail at
        the first frame, deep in the loop): by its inputs and outputs, then by one frame."""
        inputs = [i.name for i in self._session.get_inputs()]
        outputs = [o.name for o in self._session.get_outputs()]
        if sorted(inputs) != sorted(_INPUTS) or len(outputs) != 2:
            raise ModelFileError(
                model_path, f"not a Silero VAD model: it takes {_names(inputs)} and gives "
                f"{_names(outputs)}; Silero VAD takes {', '.join(_INPUTS)} and gives a speech "
                "probability and its next state", f"Fix: {_NOT_SILERO}")
        self.reset()
        try:
            probability = self.speech_probability(bytes(2 * self.frame_samples))
        except Exception as exc:
            raise ModelFileError(model_path, "not a Silero VAD v5/v6 model: a frame of silence "
                                 f"fails ({type(exc).__name__}: {shown(str(exc), 300)})",
                                 f"Fix: {_NOT_SILERO}") from None
        if not 0.0 <= probability <= 1.0:
            raise ModelFileError(model_path, "not a Silero VAD model: the speech probability of "
                                 f"a frame of silence is {probability!r}, not between 0 and 1",
                                 f"Fix: {_NOT_SILERO}")

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


def _names(names: list[str]) -> str:
    return ", ".join(shown(n, 40) for n in names) or "nothing"
