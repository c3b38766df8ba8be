"""VAD probabilities, frame by frame -> where user speech starts and ends."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Boundary(enum.Enum):
    START = "start"
    END = "end"


@dataclass(frozen=True)
class SegmenterSettings:
    threshold: float = 0.5
    """Probability at or above which a frame is speech."""
    min_speech_ms: int = 96
    """Consecutive speech needed before an onset counts (filters clicks)."""
    end_silence_ms: int = 400
    """Silence that ends a speech segment (end of user turn)."""


class SpeechSegmenter:
    """Hysteresis over VAD frames: onset after `min_speech_ms`, end after `end_silence_ms`."""

    def __init__(self, settings: SegmenterSettings, frame_ms: float) -> None:
        self._settings = settings
        self._frame_ms = frame_ms
        self._release = max(0.0, settings.threshold - 0.15)
        self._run_speech = 0
        self._run_silence = 0
        self.in_speech = False
        self.speech_frames = 0

    @property
    def speech_ms(self) -> float:
        """Length of the current segment so far (0 outside speech)."""
        return self.speech_frames * self._frame_ms

    @property
    def onset_frames(self) -> int:
        """Frames of the current segment that were heard before the onset was declared."""
        return self._frames(self._settings.min_speech_ms)

    def push(self, probability: float) -> Boundary | None:
        if not self.in_speech:
            self._run_speech = self._run_speech + 1 if probability >= self._settings.threshold else 0
            if self._run_speech >= self.onset_frames:
                self.in_speech = True
                self.speech_frames = self._run_speech
                self._run_silence = 0
                return Boundary.START
            return None
        self.speech_frames += 1
        self._run_silence = self._run_silence + 1 if probability < self._release else 0
        if self._run_silence >= self._frames(self._settings.end_silence_ms):
            self.in_speech = False
            self.speech_frames = 0
            self._run_speech = 0
            return Boundary.END
        return None

    def _frames(self, ms: int) -> int:
        return max(1, round(ms / self._frame_ms))
