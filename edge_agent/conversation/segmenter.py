"""VAD probabilities, frame by frame -> where user speech starts, and how long it has been
silent since. Where it ends is decided by the loop (`conversation.endpoint`: the words tell
how much silence is enough)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SegmenterSettings:
    threshold: float
    """Probability at or above which a frame is speech."""
    min_speech_ms: int
    """Consecutive speech needed before an onset counts (filters clicks)."""


class SpeechSegmenter:
    """Hysteresis over VAD frames: an onset after `min_speech_ms` of speech; inside a segment, a
    frame is silence below `threshold - 0.15` (so a soft syllable does not count as silence)."""

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
        """Length of the current segment so far, trailing silence included (0 outside speech)."""
        return self.speech_frames * self._frame_ms

    @property
    def silence_ms(self) -> float:
        """Silence at the end of the current segment so far (0 while the user speaks)."""
        return self._run_silence * self._frame_ms

    @property
    def idle(self) -> bool:
        """No speech in progress and none starting: the next frame can wait a little."""
        return not self.in_speech and self._run_speech == 0

    @property
    def onset_frames(self) -> int:
        """Frames of the current segment that were heard before the onset was declared."""
        return max(1, round(self._settings.min_speech_ms / self._frame_ms))

    def push(self, probability: float) -> bool:
        """Take the next frame's speech probability; True when speech starts with this frame
        (the onset: `onset_frames` of speech in a row)."""
        if not self.in_speech:
            self._run_speech = self._run_speech + 1 if probability >= self._settings.threshold else 0
            if self._run_speech >= self.onset_frames:
                self.in_speech = True
                self.speech_frames = self._run_speech
                self._run_silence = 0
                return True
            return False
        self.speech_frames += 1
        self._run_silence = self._run_silence + 1 if probability < self._release else 0
        return False

    def end(self) -> None:
        """The segment is over (the loop judged the silence long enough)."""
        self.in_speech = False
        self.speech_frames = 0
        self._run_speech = 0
        self._run_silence = 0
