"""The engine interfaces. Implementations are blocking; the loop calls them on owner threads."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from edge_agent.heard.timings import WordTiming

ChatMessage = dict[str, Any]
"""One chat message in the OpenAI shape llama.cpp takes: role, content (+ tool call fields)."""
ToolSpec = dict[str, Any]
"""One tool offered to the model, in the OpenAI `tools` shape (type, function: name,
description, parameters as a JSON schema)."""
MAX_TOOL_ARGUMENTS = 4096
"""A tool call's arguments, at most, in characters: a longer call is refused before its tool
runs (a kiosk's tools take a name, a time, a number; a model or a server that writes megabytes
of arguments would otherwise carry them in every later request)."""


@dataclass(frozen=True)
class ToolCall:
    """The model asks for a tool to run; its reply continues once the result is known."""

    call_id: str
    """Identifies the call; the result message refers to it."""
    name: str
    """The tool's name."""
    arguments: str
    """The arguments as the model wrote them: a JSON object, not yet checked."""


@dataclass(frozen=True)
class RecognizedWord:
    """A word the recognizer heard."""

    text: str
    """The word, as the recognizer spells it."""
    start: float | None
    """Seconds from the start of the utterance audio fed to the recognizer; None from an
    engine that does not time words (Moonshine)."""
    end: float | None
    """Seconds, end of the word (None as for `start`)."""


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

    def without_leading_silence(self, level: int = 100, keep_ms: float = 5.0) -> SpeechAudio:
        """The same speech starting `keep_ms` before its first sample of magnitude `level` or
        more (Piper puts ~35-50 ms of near-silence before a sentence); word timings move
        with it. A reply's first piece is trimmed so that the listener hears it sooner."""
        samples = np.frombuffer(self.pcm, dtype=np.int16)
        loud = np.flatnonzero(np.abs(samples.astype(np.int32)) >= level)
        cut = max(0, int(loud[0]) - int(keep_ms * self.sample_rate / 1000)) if len(loud) else 0
        if cut == 0:
            return self
        words = tuple(dataclasses.replace(w, start_sample=max(0, w.start_sample - cut),
                                          end_sample=max(0, w.end_sample - cut))
                      for w in self.words)
        return SpeechAudio(self.pcm[2 * cut:], self.sample_rate, words)

    def led_by(self, lead: bytes) -> SpeechAudio:
        """The same speech with `lead` (PCM at this rate: a chime) played before it; word
        timings move with it, so a cut during the lead hears no word."""
        shift = len(lead) // 2
        words = tuple(dataclasses.replace(w, start_sample=w.start_sample + shift,
                                          end_sample=w.end_sample + shift) for w in self.words)
        return SpeechAudio(lead + self.pcm, self.sample_rate, words)


class VoiceActivityDetector(Protocol):
    sample_rate: int
    frame_samples: int

    def speech_probability(self, frame: bytes) -> float:
        """Probability that this frame (`frame_samples` int16 samples) holds speech."""
        ...

    def reset(self) -> None: ...


class WakeWordDetector(Protocol):
    """Hears one wake word in a stream of audio (int16 mono at `sample_rate`)."""

    sample_rate: int
    phrase: str
    """The words it hears, for messages ("Okay Nabu")."""

    def heard(self, pcm: bytes) -> bool:
        """Take the next audio; True when the wake word ended in it (once per saying)."""
        ...

    def reset(self) -> None: ...


class SpeechRecognizer(Protocol):
    sample_rate: int

    def begin(self) -> None:
        """Start a new utterance."""
        ...

    def feed(self, pcm: bytes) -> None: ...

    def partial(self) -> str:
        """The words recognized so far in this utterance (may still change)."""
        ...

    def end(self) -> Transcript:
        """Finish the utterance and return what was said."""
        ...


class TurnEndModel(Protocol):
    """Judges by sound whether a turn is finished."""

    sample_rate: int
    window_s: float
    """How much of a turn's end it hears (seconds); more audio is not looked at."""

    def complete_probability(self, pcm: bytes) -> float:
        """Probability (0..1) that the turn whose audio is `pcm` (int16 at `sample_rate`, from
        its first sound to now, the silence after it included) is finished."""
        ...


class LanguageModel(Protocol):
    def stream(self, messages: list[ChatMessage], tools: Sequence[ToolSpec] = ()
               ) -> Iterator[str | ToolCall]:
        """Yield the reply: text in pieces, and tool calls (only when `tools` are offered).
        Closing the iterator cancels generation."""
        ...

    def prewarm(self, messages: list[ChatMessage], tools: Sequence[ToolSpec] = (),
                stop: threading.Event | None = None) -> None:
        """Evaluate `messages` as the start of the next request's prompt (the next user turn
        will follow them), so that request only evaluates what is new. May do nothing. Ends
        early, keeping what it evaluated, soon after `stop` is set (a reply wants the model)."""
        ...

    def withdraw(self) -> None:
        """The latest request was sent speculatively and its reply will not be used. A model
        whose replies depend only on the messages does nothing; a script gives the same reply
        to the next request."""
        ...


@runtime_checkable
class PrefixStateStore(Protocol):
    """A language model that can save the evaluated state of a stable prompt prefix (the
    system message) to a file and load it in a later process, so a restarted agent does not
    evaluate that prefix again. Optional: check with `isinstance(llm, PrefixStateStore)`."""

    def save_prefix_state(self, messages: list[ChatMessage], directory: Path, *,
                          tools: Sequence[ToolSpec] = (),
                          stop: threading.Event | None = None) -> Path | None:
        """Evaluate `messages` (and `tools` as every request offers them) if needed and save
        the state for exactly their tokens into `directory`; the file, or None when there is
        nothing to save or `stop` was set before it was evaluated. Raises OutputError when
        the file cannot be written."""
        ...

    def restore_prefix_state(self, messages: list[ChatMessage], directory: Path, *,
                             tools: Sequence[ToolSpec] = ()) -> bool:
        """Load the state saved for exactly these messages and tools; True when the model
        then holds them (verified). A missing, damaged or foreign file gives False, never an
        exception."""
        ...


class TextToSpeech(Protocol):
    sample_rate: int

    def synthesize(self, text: str) -> SpeechAudio: ...
