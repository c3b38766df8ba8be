"""Configuration: one TOML file -> frozen dataclasses.

Every key has a default here; `config/edge-agent.toml` documents them all (a test keeps the two
in step). Errors name the file, the key and what is wrong.
"""

from __future__ import annotations

import dataclasses
import os
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edge_agent.errors import ConfigError
from edge_agent.tomlfile import parse_toml, read_text

CONFIG_ENV = "EDGE_AGENT_CONFIG"
SEARCH_PATHS = (Path("/etc/edge-agent/edge-agent.toml"),)


@dataclass(frozen=True)
class AudioConfig:
    input_device: str = ""
    """PyAudio input device: "" for the default, else an index or part of its name."""
    output_device: str = ""
    """PyAudio output device: "" for the default, else an index or part of its name."""


@dataclass(frozen=True)
class VadConfig:
    model: str = "silero-vad"
    """Model name from `edge-agent models list`, or a path to a Silero .onnx file."""
    threshold: float = 0.5
    """Speech probability at or above which a 32 ms frame is speech (0..1)."""
    min_speech_ms: int = 96
    """Speech needed before an onset counts."""
    end_silence_ms: int = 500
    """Silence that ends the user's turn when its words say nothing about being finished."""
    end_silence_complete_ms: int = 250
    """Silence that ends a turn whose words finish a sentence ("What time do you open?")."""
    end_silence_incomplete_ms: int = 1000
    """Silence that ends a turn whose words stop mid-phrase ("a table for…", "um")."""
    speculate_after_ms: int = 128
    """Silence after which the words are transcribed and the answer prepared (not played)."""
    preroll_ms: int = 256
    """Audio before the onset that is still sent to the recognizer."""


@dataclass(frozen=True)
class SttConfig:
    engine: str = "auto"
    """"auto" (Vosk when vosk_model is set, else Moonshine), "moonshine", "pocketsphinx" or
    "vosk"."""
    moonshine_model: str = "moonshine-base-en"
    """Moonshine model: a name from `edge-agent models list` or a directory holding
    encoder_model.ort, decoder_model_merged.ort and tokenizer.bin."""
    vosk_model: str = ""
    """Vosk model: a name from `edge-agent models list` or a model directory."""
    threads: int = 1
    """CPU threads for the recognizer (Moonshine)."""


@dataclass(frozen=True)
class LlmConfig:
    engine: str = "llama"
    """"llama" (llama.cpp on a GGUF file) or "scripted" (replies read from `script`)."""
    model: str = "smollm2-135m"
    """GGUF model: a name from `edge-agent models list` or a path to a .gguf file."""
    script: str = ""
    """For engine = "scripted": a TOML file with `replies = [...]`."""
    system_prompt: str = (
        "You are a friendly voice assistant at a kiosk. Answer in one or two short sentences."
    )
    """Put first in every prompt."""
    context_tokens: int = 2048
    max_tokens: int = 120
    temperature: float = 0.3
    threads: int = 2
    seed: int = 7


@dataclass(frozen=True)
class TtsConfig:
    voice: str = "joe-medium"
    """Piper voice: a name from `edge-agent models list` or a path to a voice .onnx file."""
    length_scale: float = 1.0
    """Speaking rate: above 1 slower, below 1 faster."""


@dataclass(frozen=True)
class TurnsConfig:
    greeting: str = "Hello! How can I help you?"
    """Spoken when a session starts; "" for none."""
    history_turns: int = 20
    """Verbatim turns sent to the language model; past this, a block of the oldest is folded
    into the running summary (see [memory] fold_turns)."""
    language: str = "en"
    """Conversation language for the backchannel lexicon: en, es, hi, fr, de, or "any"."""
    pause_on_speech: bool = True
    """Pause playback at the onset of user speech over the agent; resume after a backchannel."""
    barge_in_min_ms: int = 200
    """User speech over the agent must last this long before it can interrupt."""
    barge_in_min_words: int = 2
    """...and have this many recognized words that are not a backchannel."""
    barge_in_force_ms: int = 2500
    """Speech over the agent this long interrupts whatever the words (unless it is echo)."""
    backchannel_classifier: str = "lexicon"
    """"lexicon", or a dotted path "package.module:Name" to your own classifier."""
    echo_min_match: float = 0.6
    """Share of recognized words matching the agent's own words (in order) that makes it echo."""
    echo_coherence: float = 0.5
    """Correlation of the microphone with the audio just played at which speech is echo."""


@dataclass(frozen=True)
class SessionConfig:
    start: str = "immediate"
    """"immediate": greet at start-up; "speech": the first speech opens a session (answered,
    no greeting); "wake": an utterance holding wake_phrase opens it (then the greeting)."""
    wake_phrase: str = "hello kiosk"
    """For start = "wake": the words that open a session."""
    idle_end_s: float = 0.0
    """End a session after this many seconds with nothing said or played (0: never). The next
    session starts with an empty history."""


@dataclass(frozen=True)
class MemoryConfig:
    identity: str = "anonymous"
    """Whose profile, facts and last-session summary this agent keeps and preloads: the
    kiosk's id, or "anonymous"."""
    fold_turns: int = 8
    """Oldest turns folded into the running summary in one step when the window is full: the
    prompt's start changes once per step, so llama.cpp reuses the prefix in between."""
    max_facts: int = 24
    """Facts carried in every prompt (the newest value of each key)."""
    summarizer: str = "llm"
    """"llm" (llama.cpp, the reply model or summarizer_model), "extractive" (no model: the
    user's sentences, trimmed), or "package.module:factory"."""
    summarizer_model: str = ""
    """GGUF for "llm" summaries: a name from `edge-agent models list` or a path; "" = llm.model."""
    summary_chars: int = 600
    """Longest running or end-of-session summary."""
    session_ttl_s: float = 1800.0
    """A restarted agent resumes an open session active this recently; older ones are closed."""
    retention_days: float = 30.0
    """Event and request logs of sessions older than this are deleted (turns, summaries and
    facts stay until `edge-agent sessions delete`)."""
    checkpoint_ms: int = 250
    """How often the playing unit's heard position is saved, for recovery after a crash."""
    prefix_state: bool = True
    """Save llama.cpp's state of the stable prompt prefix in the data dir: a restart does not
    evaluate it again."""


@dataclass(frozen=True)
class ToolsConfig:
    enabled: list[str] = field(default_factory=list)
    """Tools the model may call: built-in names ("book_table") or "package.module:factory"."""
    max_hops: int = 3
    """Rounds of tool calls one reply may make before it is ended."""


@dataclass(frozen=True)
class HeardConfig:
    policy: str = "completed"
    """"completed": a word counts once fully played; "started": once it began."""
    marker: str = " [interrupted]"
    """Appended in prompts to an assistant turn that was cut; "" to disable."""


@dataclass(frozen=True)
class Config:
    data_dir: str = "~/.local/share/edge-agent"
    """Where fetched models and session data live."""
    audio: AudioConfig = field(default_factory=AudioConfig)
    vad: VadConfig = field(default_factory=VadConfig)
    stt: SttConfig = field(default_factory=SttConfig)
    llm: LlmConfig = field(default_factory=LlmConfig)
    tts: TtsConfig = field(default_factory=TtsConfig)
    turns: TurnsConfig = field(default_factory=TurnsConfig)
    heard: HeardConfig = field(default_factory=HeardConfig)
    session: SessionConfig = field(default_factory=SessionConfig)
    tools: ToolsConfig = field(default_factory=ToolsConfig)
    memory: MemoryConfig = field(default_factory=MemoryConfig)
    source: str = "(built-in defaults)"
    """The file this came from (not a TOML key)."""

    @property
    def data_path(self) -> Path:
        return Path(os.path.expanduser(self.data_dir))

    @property
    def db_path(self) -> Path:
        """The memory database (bookings share it)."""
        return self.data_path / "edge-agent.db"

    @property
    def models_dir(self) -> Path:
        return self.data_path / "models"

    @property
    def stt_engine(self) -> str:
        """The recognizer this config picks ("auto" decided)."""
        if self.stt.engine == "auto":
            return "vosk" if self.stt.vosk_model else "moonshine"
        if self.stt.engine == "vosk" and not self.stt.vosk_model:
            raise ConfigError(self.source, "stt.vosk_model",
                              'must name a Vosk model when engine = "vosk"')
        return self.stt.engine

    def models_in_use(self, with_llm: bool = True) -> list[ModelUse]:
        """Every model this config needs, with the key that names it."""
        stt = {
            "vosk": ModelUse("stt", self.stt.vosk_model, "stt.vosk_model"),
            "moonshine": ModelUse("stt", self.stt.moonshine_model, "stt.moonshine_model"),
            "pocketsphinx": ModelUse("stt", POCKETSPHINX_MODEL, "stt.engine"),
        }[self.stt_engine]
        uses = [ModelUse("vad", self.vad.model, "vad.model"), stt,
                ModelUse("tts", self.tts.voice, "tts.voice")]
        if with_llm and self.llm.engine == "llama":
            uses.append(ModelUse("llm", self.llm.model, "llm.model"))
        return uses


POCKETSPHINX_MODEL = "pocketsphinx-en-us"
STT_ENGINES = ("moonshine", "pocketsphinx", "vosk")
"""The recognizers `[stt] engine` names (besides "auto")."""


@dataclass(frozen=True)
class ModelUse:
    """One model a config refers to."""

    kind: str
    """"vad", "stt", "llm" or "tts"."""
    reference: str
    """A model name from the manifest, or a path."""
    key: str
    """The config key that names it (for error messages)."""


_CHOICES: dict[str, tuple[str, ...]] = {
    "stt.engine": ("auto", *STT_ENGINES),
    "llm.engine": ("llama", "scripted"),
    "heard.policy": ("completed", "started"),
    "turns.language": ("en", "es", "hi", "fr", "de", "any"),
    "session.start": ("immediate", "speech", "wake"),
}
_RANGES: dict[str, tuple[float, float]] = {
    "vad.threshold": (0.0, 1.0),
    "vad.min_speech_ms": (32, 2000),
    "vad.end_silence_ms": (64, 10000),
    "vad.end_silence_complete_ms": (64, 10000),
    "vad.end_silence_incomplete_ms": (64, 10000),
    "vad.speculate_after_ms": (32, 10000),
    "tools.max_hops": (0, 20),
    "vad.preroll_ms": (0, 2000),
    "llm.context_tokens": (256, 131072),
    "llm.max_tokens": (1, 8192),
    "llm.temperature": (0.0, 2.0),
    "llm.threads": (1, 64),
    "stt.threads": (1, 64),
    "tts.length_scale": (0.3, 3.0),
    "turns.barge_in_min_ms": (0, 5000),
    "turns.barge_in_min_words": (0, 20),
    "turns.barge_in_force_ms": (100, 60000),
    "turns.echo_min_match": (0.0, 1.0),
    "turns.echo_coherence": (0.0, 1.0),
    "session.idle_end_s": (0.0, 86400.0),
    "turns.history_turns": (1, 1000),
    "memory.fold_turns": (1, 1000),
    "memory.max_facts": (0, 500),
    "memory.summary_chars": (80, 20000),
    "memory.session_ttl_s": (0.0, 31536000.0),
    "memory.retention_days": (0.0, 36500.0),
    "memory.checkpoint_ms": (50, 5000),
}


def load_config(path: Path | None = None) -> Config:
    """Load `path`, else $EDGE_AGENT_CONFIG, else /etc/edge-agent/edge-agent.toml, else defaults."""
    if path is None:
        env = os.environ.get(CONFIG_ENV)
        path = Path(env) if env else next((p for p in SEARCH_PATHS if p.is_file()), None)
    if path is None:
        return Config()
    return parse_config(read_text(path, "config file"), str(path))


def parse_config(text: str, source: str) -> Config:
    data = parse_toml(text, source)
    config: Config = _build(Config, data, source, "")
    if config.session.start == "wake" and not config.session.wake_phrase.strip():
        raise ConfigError(source, "session.wake_phrase",
                          'must name the words that open a session when start = "wake"')
    vad = config.vad
    if vad.speculate_after_ms > min(vad.end_silence_ms, vad.end_silence_complete_ms):
        raise ConfigError(source, "vad.speculate_after_ms",
                          f"must not exceed the shortest end-of-turn silence "
                          f"({min(vad.end_silence_ms, vad.end_silence_complete_ms)} ms): the "
                          "answer is prepared before the turn may end")
    return dataclasses.replace(config, source=source)


def _build(cls: type[Any], table: dict[str, Any], source: str, prefix: str) -> Any:
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.name != "source"}
    values: dict[str, Any] = {}
    for key, value in table.items():
        dotted = f"{prefix}{key}"
        if key not in fields:
            valid = ", ".join(sorted(fields))
            raise ConfigError(source, dotted, f"unknown key (valid keys here: {valid})")
        expected = hints[key]
        if dataclasses.is_dataclass(expected):
            if not isinstance(value, dict):
                raise ConfigError(source, dotted, f"must be a table ([{dotted}])")
            values[key] = _build(expected, value, source, f"{dotted}.")  # type: ignore[arg-type]
        else:
            values[key] = check_value(expected, value, source, dotted)
    return cls(**values)


def check_value(expected: Any, value: Any, source: str, key: str) -> Any:
    """`value` as type `expected` (e.g. int, float, list[str]), within its range if `key` has
    one; ConfigError naming the file and key otherwise."""
    if isinstance(expected, types.UnionType):
        expected = expected.__args__[0]
    if typing.get_origin(expected) is list:
        (item,) = typing.get_args(expected)
        if not isinstance(value, list):
            raise ConfigError(source, key, f"must be a list, got {type(value).__name__} {value!r}")
        return [check_value(item, v, source, f"{key}[{i}]") for i, v in enumerate(value)]
    if expected is bool:
        ok = isinstance(value, bool)
    elif expected is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif expected is float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        value = float(value) if ok else value
    else:
        ok = isinstance(value, expected)
    if not ok:
        raise ConfigError(
            source, key, f"must be {_type_word(expected)}, got {type(value).__name__} {value!r}"
        )
    if key in _CHOICES and value not in _CHOICES[key]:
        choices = ", ".join(repr(c) for c in _CHOICES[key])
        raise ConfigError(source, key, f"must be one of {choices}, got {value!r}")
    if key in _RANGES:
        low, high = _RANGES[key]
        if not low <= value <= high:
            raise ConfigError(source, key, f"must be between {low:g} and {high:g}, got {value!r}")
    return value


def _type_word(expected: Any) -> str:
    return {bool: "true or false", int: "an integer", float: "a number", str: "a string"}.get(
        expected, getattr(expected, "__name__", str(expected))
    )
