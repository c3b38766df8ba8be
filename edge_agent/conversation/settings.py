"""What the conversation loop is configured with, and the engines it drives.

No defaults here: the config (`edge_agent.config`) holds every default, and the composition
root (`edge_agent.app.conversation_settings`) builds these from it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from edge_agent.conversation.endpoint import EndpointRules
from edge_agent.conversation.segmenter import SegmenterSettings
from edge_agent.conversation.timekeeper import RingSettings
from edge_agent.conversation.turn_taking import TurnRules
from edge_agent.engines.base import (
    LanguageModel,
    SpeechRecognizer,
    TextToSpeech,
    TurnEndModel,
    VoiceActivityDetector,
    WakeWordDetector,
)
from edge_agent.engines.cpu_share import CpuShare
from edge_agent.heard.truncation import HeardPolicy
from edge_agent.memory.conversation_memory import MemorySettings


@dataclass(frozen=True)
class ConversationSettings:
    greeting: str
    """Spoken when the session starts; "" for none."""
    segmenter: SegmenterSettings
    """VAD hysteresis: what an onset is."""
    endpoint: EndpointRules
    """How much silence ends a turn, by its words; when to prepare the answer."""
    preroll_ms: int
    """Audio kept from before the speech onset and fed to the recognizer with it."""
    turns: TurnRules
    """Overlap decisions: pause, barge-in, echo, backchannel."""
    heard_policy: HeardPolicy
    """Which words of a cut unit count as heard."""
    interrupted_marker: str
    """Added in prompts to an assistant turn that was cut."""
    memory: MemorySettings
    """The prompt's memory: system prompt, verbatim window, identity, session TTL."""
    checkpoint_ms: int
    """How often the playing unit's heard position is saved for crash recovery."""
    prefix_state_dir: Path | None
    """Where the model's state of the stable prompt prefix is saved for the next start (None:
    not saved)."""
    max_tool_hops: int
    """Tool calls one reply may run (0: tools are neither offered nor run); a call past this is
    not run and the reply ends."""
    session_start: str
    """"immediate" (greet at once), "speech" (the first speech opens a session and is answered)
    or "wake" (the wake word model, `Engines.wake`, hears its word; without one, an utterance
    holding `wake_phrase` opens it)."""
    wake_phrase: str
    """For session_start = "wake" without a wake word model: words that open a session (matched
    case-insensitively in the transcript)."""
    idle_end_s: float
    """A session with nothing said or played for this long ends; the next starts fresh
    (0: sessions never end)."""
    knowledge_reload_s: float
    """How often the venue's knowledge files are looked at for changes (seconds)."""
    words_every_ms: int
    """While the caller speaks, how often their words so far are read for the screen
    (`Conversation.caller_words`; 0: only when the loop reads them anyway, at pauses)."""
    push_to_talk: bool
    """The microphone counts only while the screen's Talk button is held
    (`Conversation.talk`); letting go ends the turn."""
    rings: RingSettings
    """How a timer that came due rings (with timers on)."""


@dataclass(frozen=True)
class Engines:
    vad: VoiceActivityDetector
    """Speech probability per microphone frame."""
    stt: SpeechRecognizer
    """Speech-to-text."""
    llm: LanguageModel
    """The model that writes replies."""
    tts: TextToSpeech
    """Speech with word timings."""
    turn_end: TurnEndModel | None = None
    """Whether a turn sounds finished (None: the words alone decide)."""
    cpu: CpuShare | None = None
    """Where the engines share the cores; the loop marks when the listener waits for the voice
    (None: nothing is shared)."""
    wake: WakeWordDetector | None = None
    """With session_start = "wake": the model that hears the wake word (None: the wake phrase
    is looked for in the transcripts)."""
