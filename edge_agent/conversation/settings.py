"""What the conversation loop is configured with, and the engines it drives."""

from __future__ import annotations

from dataclasses import dataclass, field

from edge_agent.conversation.segmenter import SegmenterSettings
from edge_agent.engines.base import (
    LanguageModel,
    SpeechRecognizer,
    TextToSpeech,
    VoiceActivityDetector,
)
from edge_agent.heard.truncation import HeardPolicy


@dataclass(frozen=True)
class ConversationSettings:
    system_prompt: str = "You are a helpful voice assistant. Answer in one or two short sentences."
    """Put first in every prompt."""
    greeting: str = ""
    """Spoken when the session starts; "" for none."""
    segmenter: SegmenterSettings = field(default_factory=SegmenterSettings)
    """VAD hysteresis: onset and end-of-turn silence."""
    preroll_ms: int = 256
    """Audio kept from before the speech onset and fed to the recognizer with it."""
    language: str = "en"
    """Language of the conversation, for the backchannel classifier ("any": all it knows)."""
    pause_on_speech: bool = True
    """Pause playback as soon as the user starts speaking over the agent; resume it if that
    turns out to be a backchannel, noise or echo."""
    barge_in_min_ms: int = 300
    """User speech over the agent must last this long before it can interrupt."""
    barge_in_min_words: int = 2
    """...and the recognizer must have this many words of it, not a backchannel."""
    barge_in_force_ms: int = 2500
    """Speech over the agent this long interrupts whatever the words (unless it is echo)."""
    echo_coherence: float = 0.5
    """Speech over the agent whose sound correlates this well with what it played is echo."""
    heard_policy: HeardPolicy = HeardPolicy.COMPLETED
    """Which words of a cut unit count as heard."""
    interrupted_marker: str = " [interrupted]"
    """Added in prompts to an assistant turn that was cut."""
    history_turns: int = 20
    """Verbatim turns sent to the language model."""
    max_tool_hops: int = 3
    """Rounds of tool calls one reply may make before it is ended."""
    session_start: str = "immediate"
    """"immediate" (greet at once), "speech" (the first speech opens a session and is answered)
    or "wake" (an utterance holding `wake_phrase` opens it)."""
    wake_phrase: str = ""
    """For session_start = "wake": words that open a session (matched case-insensitively)."""
    idle_end_s: float = 0.0
    """A session with nothing said or played for this long ends; the next starts fresh
    (0: sessions never end)."""


@dataclass(frozen=True)
class Engines:
    vad: VoiceActivityDetector
    """Speech probability per microphone frame."""
    stt: SpeechRecognizer
    """Streaming speech-to-text."""
    llm: LanguageModel
    """The model that writes replies."""
    tts: TextToSpeech
    """Speech with word timings."""
