"""Configuration: one TOML file -> frozen dataclasses.

Every key has a default here; `config/edge-agent.toml` documents them all (a test keeps the two
in step). Errors name the file, the key and what is wrong.
"""

from __future__ import annotations

import dataclasses
import os
import stat
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edge_agent import validate
from edge_agent.errors import ConfigError
from edge_agent.tomlfile import parse_toml, read_text
from edge_agent.validate import Bounds, TextRule

CONFIG_ENV = "EDGE_AGENT_CONFIG"
SEARCH_PATHS = (Path("/etc/edge-agent/edge-agent.toml"),)


NOISE_SUPPRESSION_AUTO = False
"""What `[audio] noise_suppression = "auto"` means: off, because measured it does not lower the
recognizer's WER where rooms are. Moonshine base on 20 Piper sentences (speech ~-19 dBFS),
WebRTC NS off / on: clean 3.1 / 3.1 %; pink noise at -45 dBFS 0.6-3.1 / 2.5-3.7 %, -35 dBFS
1.2-1.9 / 1.2-3.1 %, -30 dBFS 1.9-3.1 / 1.2-3.7 %; white at -35 dBFS 1.9-2.5 / 1.2-2.5 %
(two noise seeds). Only near 6 dB SNR did it help (pink -25 dBFS 7.5 -> 3.7 %, white 10.6 ->
6.8 %, one seed), and at 1 dB not (pink -20 dBFS 18 -> 19 %): the recognizer copes with
steady noise better than with what the suppressor leaves. "on" is there for a loud room."""


@dataclass(frozen=True)
class AudioConfig:
    input_device: str = ""
    """PyAudio input device: "" for the default, else an index or part of its name."""
    output_device: str = ""
    """PyAudio output device: "" for the default, else an index or part of its name."""
    echo_cancel: str = "auto"
    """Take the agent's own voice out of the microphone (WebRTC AEC3, fed the samples that
    reached the speaker): "auto" (on wherever the microphone can hear the speaker: a live
    device, a call with an echo path), "on", or "off" (a headset, where nothing leaks)."""
    noise_suppression: str = "auto"
    """Suppress steady noise (fans, traffic) in the microphone (WebRTC's noise suppressor, in
    the same module as the echo canceller): "auto" (off: measured, it does not lower the
    recognizer's WER at a fan's or a street's level; see `NOISE_SUPPRESSION_AUTO`), "on" (a
    very loud room, ~6 dB below the caller's voice) or "off"."""


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
    """llama.cpp's sampling seed (0..4294967295, a 32-bit unsigned number)."""


@dataclass(frozen=True)
class TtsConfig:
    voice: str = "joe-medium"
    """Piper voice: a name from `edge-agent models list` or a path to a voice .onnx file."""
    length_scale: float = 1.0
    """Speaking rate: above 1 slower, below 1 faster."""
    threads: int = 1
    """CPU threads for the voice (onnxruntime)."""


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
    keep_audio: bool = False
    """Keep the audio of each caller speech segment and of each agent unit (as far as it
    played) in the memory database, for `edge-agent inspect` waveforms and `sessions replay`.
    Off by default: a public kiosk keeps no recordings of its callers."""


@dataclass(frozen=True)
class ToolsConfig:
    enabled: list[str] = field(default_factory=list)
    """Tools the model may call: built-in names ("book_table") or "package.module:factory"."""
    max_hops: int = 3
    """Tool calls one reply may run, exactly (0: tools are neither offered nor run); a call
    past this is not run and the reply ends."""


@dataclass(frozen=True)
class HeardConfig:
    policy: str = "completed"
    """"completed": a word counts once fully played; "started": once it began."""
    marker: str = " [interrupted]"
    """Appended in prompts to an assistant turn that was cut; "" to disable."""


@dataclass(frozen=True)
class LogConfig:
    level: str = "info"
    """Least important messages logged: "debug", "info", "warning" or "error"."""
    transcripts: bool = False
    """Log what callers and the agent said (`run`); off, a log line says only how many words:
    a public kiosk's journal should not hold its callers' words."""


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
    log: LogConfig = field(default_factory=LogConfig)
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
    "audio.echo_cancel": ("auto", "on", "off"),
    "audio.noise_suppression": ("auto", "on", "off"),
    "stt.engine": ("auto", *STT_ENGINES),
    "llm.engine": ("llama", "scripted"),
    "heard.policy": ("completed", "started"),
    "turns.language": ("en", "es", "hi", "fr", "de", "any"),
    "session.start": ("immediate", "speech", "wake"),
    "log.level": ("debug", "info", "warning", "error"),
}
_SILENCE = Bounds(64, 10000, advised=(150, 3000),
                  advice="the agent answers too soon (cutting people off) or waits seconds")
_BOUNDS: dict[str, Bounds] = {
    "vad.threshold": Bounds(
        0.0, 1.0, open_low=True, open_high=True,
        why="at 0 every frame is speech (no turn ever ends), at 1 none is (the agent is deaf)",
        advised=(0.15, 0.9), advice="the agent may take noise for speech or miss quiet voices"),
    "vad.min_speech_ms": Bounds(32, 2000, advised=(64, 600),
                                advice="clicks start turns, or short answers are missed"),
    "vad.end_silence_ms": _SILENCE,
    "vad.end_silence_complete_ms": _SILENCE,
    "vad.end_silence_incomplete_ms": _SILENCE,
    "vad.speculate_after_ms": Bounds(32, 10000),
    "vad.preroll_ms": Bounds(0, 2000),
    "tools.max_hops": Bounds(0, 20),
    "llm.context_tokens": Bounds(256, 131072),
    "llm.max_tokens": Bounds(1, 8192, advised=(16, 512),
                             advice="replies are cut very short or run for minutes"),
    "llm.temperature": Bounds(0.0, 2.0, advised=(0.0, 1.2),
                              advice="replies above ~1.2 turn incoherent"),
    "llm.threads": Bounds(1, 64),
    "llm.seed": Bounds(0, 2**32 - 1),  # llama.cpp's seed is a uint32
    "stt.threads": Bounds(1, 64),
    "tts.threads": Bounds(1, 64),
    "tts.length_scale": Bounds(0.3, 3.0, advised=(0.6, 1.8),
                               advice="speech becomes hard to follow"),
    "turns.barge_in_min_ms": Bounds(0, 5000, advised=(0, 1500),
                                    advice="the caller must talk over the agent for seconds"),
    "turns.barge_in_min_words": Bounds(0, 20, advised=(0, 5),
                                       advice="few interruptions have that many words"),
    "turns.barge_in_force_ms": Bounds(100, 60000, advised=(800, 10000),
                                      advice="a long backchannel interrupts, or nothing does"),
    "turns.echo_min_match": Bounds(
        0.0, 1.0, open_low=True, why="at 0 any speech over the agent would be its echo",
        advised=(0.3, 1.0), advice="real interruptions that repeat a few of the agent's words "
        "are taken for its echo"),
    "turns.echo_coherence": Bounds(
        0.0, 1.0, open_low=True, why="at 0 every interruption would be taken for echo",
        advised=(0.2, 0.95), advice="a caller is taken for echo (too low) or no echo is "
        "recognized by sound (too high)"),
    "session.idle_end_s": Bounds(0.0, 86400.0, advised=(10.0, 86400.0), off=0.0,
                                 advice="a session ends while a caller is still thinking"),
    "turns.history_turns": Bounds(1, 1000),
    "memory.fold_turns": Bounds(1, 1000),
    "memory.max_facts": Bounds(0, 500),
    "memory.summary_chars": Bounds(80, 20000),
    "memory.session_ttl_s": Bounds(0.0, 31536000.0),
    "memory.retention_days": Bounds(
        0.0, 36500.0, open_low=True, why="0 would delete the event logs of every closed session "
        "at the next start (to keep them, leave the key out for the default 30 days, or set up "
        "to 36500)"),
    "memory.checkpoint_ms": Bounds(50, 5000),
}
_MODEL = "name a model from `edge-agent models list` or a path to its file"
_TEXT: dict[str, TextRule] = {
    "data_dir": TextRule(required=True, why="name the directory for models and session data"),
    "vad.model": TextRule(required=True, why=_MODEL),
    "stt.moonshine_model": TextRule(required=True, why=_MODEL),
    "llm.model": TextRule(required=True, why=_MODEL),
    "tts.voice": TextRule(required=True, why=_MODEL),
    "turns.backchannel_classifier": TextRule(required=True, why='use "lexicon"'),
    "memory.identity": TextRule(required=True, why='use "anonymous" for a shared kiosk'),
    "memory.summarizer": TextRule(required=True, why='use "llm" or "extractive"'),
    "turns.greeting": TextRule(max_words=40,
                               advice="every session starts with a long wait for the caller"),
}


def check_value(expected: Any, value: Any, source: str, key: str) -> Any:
    """`value` for config key `key` (e.g. "vad.threshold") as type `expected`, with that key's
    bounds, choices and text rules; ConfigError naming the file and key otherwise."""
    return validate.check_value(expected, value, source, key, bounds=_BOUNDS.get(key),
                                choices=_CHOICES.get(key, ()), text=_TEXT.get(key))


def load_config(path: Path | None = None) -> Config:
    """Load `path`, else $EDGE_AGENT_CONFIG, else /etc/edge-agent/edge-agent.toml, else defaults."""
    if path is None:
        env = os.environ.get(CONFIG_ENV)
        path = Path(env) if env else next((p for p in SEARCH_PATHS if p.is_file()), None)
    if path is None:
        return Config()
    text = read_text(path, "config file")
    if os.environ.get("INVOCATION_ID") or os.geteuid() == 0:
        check_not_writable_by_others(path)
    return parse_config(text, str(path))


def check_not_writable_by_others(path: Path) -> None:
    """Under systemd (which sets INVOCATION_ID) or as root, a config that someone else could
    write is refused, like sshd's StrictModes: it may name code the agent runs (tools,
    classifiers, summarizers) and files it writes."""
    me = os.geteuid()
    for place in (path, path.parent):
        try:
            info = place.stat()
        except OSError:
            continue
        sticky_dir = place.is_dir() and info.st_mode & stat.S_ISVTX
        if info.st_uid not in (0, me):
            raise ConfigError(str(path), "", f"{place} is owned by uid {info.st_uid}, not root "
                              f"or this user (uid {me}); a service only reads a config that "
                              f"nobody else can change: chown root {place}")
        if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not sticky_dir:
            raise ConfigError(str(path), "", f"{place} is writable by others (mode "
                              f"{stat.S_IMODE(info.st_mode):04o}); a service only reads a "
                              f"config that nobody else can change: chmod go-w {place}")


def parse_config(text: str, source: str) -> Config:
    data = parse_toml(text, source)
    config: Config = _build(Config, data, source, "")
    if config.session.start == "wake" and not validate.has_visible_text(config.session.wake_phrase):
        raise ConfigError(source, "session.wake_phrase",
                          'must name the words that open a session when start = "wake"')
    vad = config.vad
    if vad.speculate_after_ms > min(vad.end_silence_ms, vad.end_silence_complete_ms):
        raise ConfigError(source, "vad.speculate_after_ms",
                          f"must not exceed the shortest end-of-turn silence "
                          f"({min(vad.end_silence_ms, vad.end_silence_complete_ms)} ms): the "
                          "answer is prepared before the turn may end")
    _check_llm_room(config.llm, source)
    if config.memory.fold_turns > config.turns.history_turns:
        validate.warn(source, "memory.fold_turns",
                      f"{config.memory.fold_turns} is more than turns.history_turns "
                      f"({config.turns.history_turns}): each fold empties the whole window")
    return dataclasses.replace(config, source=source)


PROMPT_ROOM = 128
"""Tokens of the context that must stay for the prompt (system prompt, the caller's turn)."""


def _check_llm_room(llm: LlmConfig, source: str) -> None:
    room = llm.context_tokens - llm.max_tokens
    if room < PROMPT_ROOM:
        raise ConfigError(source, "llm.max_tokens",
                          f"{llm.max_tokens} leaves {room} of llm.context_tokens "
                          f"({llm.context_tokens}) for the prompt; at least {PROMPT_ROOM} are "
                          "needed: lower max_tokens or raise context_tokens")
    if room < 4 * PROMPT_ROOM:
        validate.warn(source, "llm.context_tokens",
                      f"leaves {room} tokens for the prompt after llm.max_tokens: the system "
                      "prompt and the remembered turns are cut to fit")


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
