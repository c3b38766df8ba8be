"""The engine interfaces. Implementations are blocking; the loop calls them on owner threads."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

from edge_agent.heard.timings import WordTiming

ChatMessage = dict[str, str]


@dataclass(frozen=True)
class RecognizedWord:
    """A word the recognizer heard."""

    text: str
    """The word, as the recognizer spells it."""
    start: float
    """Seconds from the start of the utterance audio fed to the recognizer."""
    end: float
    """Seconds, end of the word."""


@dataclass(frozen=True)
class Transcript:
    """What the recognizer made of one utterance."""

    text: str
    """The words joined by spaces; empty when nothing was recognized."""
    words: tuple[RecognizedWord, ...]
    """Each word with its times."""


@dataclass(frozen=True)
class SpeechAudio:
    """Synthesized speech for one piece of text."""

    pcm: bytes
    """Mono signed 16-bit little-endian samples."""
    sample_rate: int
    """Samples per second."""
    words: tuple[WordTiming, ...]
    """Timings of the text's tokens; char offsets relative to the synthesized text."""

    @property
    def samples(self) -> int:
        return len(self.pcm) // 2


class VoiceActivityDetector(Protocol):
    sample_rate: int
    frame_samples: int

    def speech_probability(self, frame: bytes) -> float:
        """Probability that this frame (`frame_samples` int16 samples) holds speech."""
        ...

    def reset(self) -> None: ...


class SpeechRecognizer(Protocol):
    sample_rate: int

    def begin(self) -> None:
        """Start a new utterance."""
        ...

    def feed(self, pcm: bytes) -> None: ...

    def end(self) -> Transcript:
        """Finish the utterance and return what was said."""
        ...


class LanguageModel(Protocol):
    def stream(self, messages: list[ChatMessage]) -> Iterator[str]:
        """Yield the reply in pieces. Closing the iterator cancels generation."""
        ...


class TextToSpeech(Protocol):
    sample_rate: int

    def synthesize(self, text: str) -> SpeechAudio: ...
