"""The configuration: frozen dataclasses, every key with its default and what it means.

Every key has a default here, the one source of them; `config/edge-agent.toml` documents them
all (a test keeps the two in step). Reading and checking a file is `config.file`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edge_agent.audio.array import MicArray, mic_array
from edge_agent.audio.device import OUTPUT_PERIOD
from edge_agent.errors import ConfigError

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
    talker_gate: str = "auto"
    """Keep other people's voices out: "level" (speech well below the person at the kiosk is
    someone else in the room: it opens no turn and does not keep one open; in a quiet room it
    mutes nothing of the caller's; with a microphone array, sound the beam places away from
    the caller is the room's too; see `edge_agent.audio.talker_gate`), "off", or "auto" (the
    default: "level" with a microphone array, "off" with one microphone, where over a
    loudspeaker it lost an interruption's first word a little more often; without it, people
    talking nearby keep a turn open as long as they talk). With an array a caller standing
    more than ~30 degrees to the side of the look direction is taken for someone else."""
    talker_margin_db: float = 6.0
    """How far below the near talker's level speech still counts as theirs (dB), and how far
    above the room's it must be: 6 keeps out two talkers 10 dB down; at 8 their loudest
    moments came through."""
    talker_floor_db: float = -60.0
    """Speech quieter than this (dBFS, 190 ms smoothed) is never the caller: set between the
    room's talk and your callers' speech where callers are always far louder than the room
    (then background speech alone opens no turn); -60 lets everything speech-like through."""
    array: str = ""
    """A microphone array the input device is ("" none: one microphone): a preset of
    `edge_agent.audio.array` ("respeaker-4mic-hat", "respeaker-6mic", "respeaker-usb-4mic"),
    or leave it empty and give mic_positions_mm. The agent listens toward look_azimuth_deg
    with a beamformer; everything after it hears that one steered channel."""
    mic_positions_mm: list[list[float]] = field(default_factory=list)
    """Another board's microphones: one [x, y, z] (or [x, y]) per microphone, millimetres, in
    the board's axes (x to the side, y toward the person in front, z up)."""
    mic_channels: list[int] = field(default_factory=list)
    """The input channel of each microphone, counted from 0 ([]: the preset's, or 0, 1, ...)."""
    input_channels: int = 0
    """Channels to open the input device with (0: what the array needs; 1 without one)."""
    output_period: int = OUTPUT_PERIOD
    """Frames the speaker is handed per callback (the device queues ~2.5 of them ahead of what
    plays): 512 (23 ms at 22.05 kHz) keeps the voice whole on a busy machine; 256 starts every
    answer ~30 ms sooner where the CPU is free (a laptop, a kiosk with no browser), but
    underruns (gaps in the voice) when every core is busy. See `audio.device.OUTPUT_PERIOD`."""
    realtime_priority: int = 10
    """The sound device's callback threads ask for real-time scheduling (SCHED_FIFO) at this
    priority, 1-99, so a busy machine cannot starve them (the kiosk unit allows it with
    LimitRTPRIO=; elsewhere where the system grants it, else they stay at normal priority
    and the agent says why); 0: never ask."""
    beamformer: str = "adaptive"
    """How the array listens toward the caller: "adaptive" (learns where the people who are not
    the caller are and takes them out, while the agent is silent), "superdirective" (a fixed
    beam: rejects voices from other directions down to a few hundred Hz) or "delay-and-sum"
    (rejects uncorrelated noise, other directions only at high frequencies); see
    `edge_agent.audio.adaptive_beamformer` and `edge_agent.audio.beamformer`."""
    look_azimuth_deg: float = 0.0
    """Where the person at the kiosk stands, seen from the array: degrees from the board's +y
    axis toward +x (0: straight in front along +y)."""
    look_elevation_deg: float = 0.0
    """How far above the board's plane the caller's mouth is, degrees (a board lying flat
    under a face half a metre away and 30 cm up: ~30)."""

    def mic_array(self) -> MicArray | None:
        """The microphone array these keys describe (None: one microphone); ArrayError, naming
        the key, where it cannot be listened with (a loaded config was checked already)."""
        return mic_array(self.array, self.mic_positions_mm, self.mic_channels,
                         self.input_channels)


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
    speculate_after_ms: int = 32
    """Silence after which the words are transcribed, the end-of-turn model asked and the
    answer prepared (not played)."""
    end_model: str = "smart-turn-v3.2"
    """Audio end-of-turn model, asked whether a turn sounds finished: a name from `edge-agent
    models list`, a path to a Smart Turn v3 .onnx file, or "off" (the words alone decide)."""
    end_model_threshold: float = 0.5
    """Its probability at or above which a turn sounds finished (0..1)."""
    end_model_hold_below: float = 0.2
    """Under this probability even a finished sentence ("Can we sit outside?" said as the
    start of more) is held for end_silence_incomplete_ms (0..1; meant to be at most
    end_model_threshold: the words are evidence too)."""
    end_silence_sound_ms: int = 250
    """Silence that ends a turn whose words say nothing when it sounds finished (as long as
    end_silence_complete_ms: Piper's comma pauses are 240-450 ms, and a finished-sounding
    "Six people," may still go on)."""
    end_model_sure_above: float = 0.9
    """At or above this probability the sound is sure the turn is finished (0..1)."""
    end_silence_sure_ms: int = 96
    """Silence that ends a turn when the sound is sure it is finished and the words allow it:
    a finished sentence, or words that say nothing (two or more, not a lead-in), and not over
    the agent's voice. Never longer than the turn would wait otherwise: at
    end_silence_complete_ms it changes nothing."""
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
    threads: int = 0
    """At most this many CPU threads (0: every core). While it runs the LLM uses only the
    cores nobody else needs: not those another program keeps busy, nor the voice's or the
    recognizer's while they work (llama.cpp's threads wait for each other: one without a core
    stalls every token)."""
    seed: int = 7
    """llama.cpp's sampling seed (0..4294967295, a 32-bit unsigned number)."""
    server: str = ""
    """An OpenAI-compatible chat server on the LAN ("http://10.0.0.5:8080/v1": llama.cpp's
    llama-server, `python -m llama_cpp.server`, Ollama, vLLM) that answers while it can; the
    on-device model answers when it cannot. "" for the on-device model only."""
    server_timeout_ms: int = 1500
    """How long a reply may wait for the server's first word before the on-device model
    answers it instead."""
    server_model: str = ""
    """The model the server should use ("": its default; Ollama and vLLM need a name)."""
    server_slot: int = -1
    """llama-server's slot for this kiosk (`id_slot`: started with --parallel N, each kiosk
    keeps its prompt cached in its own); -1: any free one."""
    server_key_file: str = ""
    """A file whose first line is the server's API key ("": $EDGE_AGENT_LLM_API_KEY, if set).
    The key is never written to a log or a record."""
    server_tools: str = "auto"
    """How tools are asked of the server: "native" (the chat API's own tool calling: `tools`,
    `tool_calls`), "json" (the kiosk's JSON reply format, by schema: for a server that takes
    `tools` but never calls them) or "auto" (native, unless the server refuses it; then json)."""
    server_ca_file: str = ""
    """For an https:// server with a private certificate authority: its CA certificate(s),
    PEM ("": the system's)."""


@dataclass(frozen=True)
class TtsConfig:
    voice: str = "joe-medium"
    """Piper voice: a name from `edge-agent models list` or a path to a voice .onnx file."""
    length_scale: float = 1.0
    """Speaking rate: above 1 slower, below 1 faster."""
    threads: int = 2
    """CPU threads for the voice (onnxruntime; its idle threads sleep, they do not spin)."""


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
    no greeting); "wake": the wake word opens it (then the greeting, or the answer to what
    followed the word). While waiting for it, only the VAD and the wake word model hear the
    room: nothing is transcribed."""
    wake_word: str = "okay-nabu"
    """For start = "wake": the wake word model, a name from `edge-agent models list` (okay-nabu,
    hey-jarvis, alexa, hey-mycroft) or the path of a microWakeWord model (.json or .tflite);
    "" to wake on wake_phrase in the transcripts instead (any words, but the recognizer then
    hears the room all the time). A file that sets wake_phrase and not wake_word means "". """
    wake_phrase: str = ""
    """For start = "wake" with wake_word = "": the words that open a session."""
    idle_end_s: float = 0.0
    """End a session after this many seconds with nothing said or played (0: never; not allowed
    with start = "wake" and a wake_word: the room would be transcribed from the first wake on).
    The next session starts with an empty history."""


ANONYMOUS = "anonymous"
"""`[memory] identity` of a shared kiosk: its callers are nobody in particular (their facts
are never read back from the venue's other kiosks)."""


@dataclass(frozen=True)
class MemoryConfig:
    identity: str = ANONYMOUS
    """Whose profile, facts and last-session summary this agent keeps and preloads: the
    kiosk's id, or "anonymous". With [sync] url, kiosks that share an identity other than
    "anonymous" share its facts and profile through the venue's store."""
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
class TimersConfig:
    enabled: bool = False
    """Timers, alarms and reminders by voice ("set a timer for ten minutes"), kept in the
    memory database and rung through the speaker; off by default: a public kiosk sets none."""
    ring_for_s: float = 300.0
    """A ring repeats for this long at most; then it ends unanswered."""
    ring_pause_s: float = 6.0
    """Silence between two rings (time to say "stop")."""
    snooze_s: float = 300.0
    """"snooze" rings again after this long."""


@dataclass(frozen=True)
class MqttTool:
    name: str = ""
    """What the model calls it: letters, digits and "_" ("kitchen_light")."""
    description: str = ""
    """When to use it, for the model ("Switch the kitchen light on or off.")."""
    topic: str = ""
    """Where the payload is published ("home/kitchen/light/set"); no wildcards."""
    payload: str = ""
    """What is published: text, each {argument} replaced by the call's value ("{state}")."""
    parameters: dict[str, dict[str, Any]] = field(default_factory=dict)
    """The arguments, each a JSON schema of type string, integer, number or boolean, with
    enum, minimum, maximum, maxLength and description as it needs; all are required
    ({ state = { type = "string", enum = ["ON", "OFF"] } })."""
    retain: bool = False
    """The broker keeps the last payload for devices that connect later."""


@dataclass(frozen=True)
class MqttConfig:
    url: str = ""
    """The house's MQTT broker: "mqtt://host:1883", "mqtts://host:8883" (TLS); "" for none."""
    username: str = ""
    """The agent's user on the broker ("" : anonymous)."""
    password_file: str = ""
    """A file whose first line is that user's password, readable by the agent only."""
    ca_file: str = ""
    """mqtts:// only: the CA certificate that signed the broker's ("" : the system's CAs)."""
    topic: str = ""
    """The agent's own topics start with this ("" : "edge-agent/" and this machine's name)."""
    discovery_prefix: str = "homeassistant"
    """Home Assistant's MQTT discovery prefix: the agent announces itself as a device there
    ("" : no announcement)."""
    publish_transcripts: bool = False
    """Also publish what the caller said and what the listener heard of the agent (not
    retained); off: a house's broker is read by every device on it."""
    announcements: bool = False
    """Say what the house publishes to `<topic>/say` (plain text, with the chime, when nobody
    is talking); off: whoever may publish there may make the agent speak."""
    timeout_ms: int = 2000
    """A tool waits at most this long for the broker; then it answers that the house could
    not be reached (a reply is never held longer)."""
    tools: list[MqttTool] = field(default_factory=list)
    """Tools the model may call that publish to the house ([[mqtt.tools]])."""


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
class SyncConfig:
    url: str = ""
    """The venue's PostgreSQL ("postgresql://kiosk@10.0.0.5:5432/venue"; libpq's options after
    "?", such as sslmode=verify-full&sslrootcert=/etc/edge-agent/venue-ca.pem, are passed
    through): sessions, turns, units, events, summaries, facts and profiles are copied there,
    and the facts and profile of this kiosk's identity come back. "" for none."""
    kiosk_id: str = ""
    """This kiosk's name in the venue's store: its rows are keyed by it and their local ids,
    so two kiosks must never share one ("": the machine's host name)."""
    password_file: str = ""
    """A file whose first line is the database password ("": $EDGE_AGENT_SYNC_PASSWORD, else
    libpq's own ~/.pgpass). Never written to a log; a password in `url` is refused."""
    interval_ms: int = 2000
    """How often the kiosk looks for changes to send once its backlog is sent (and how soon
    after a failure it tries again, at first; up to a minute while it keeps failing)."""
    batch_rows: int = 500
    """Changes sent in one transaction."""
    max_backlog: int = 200000
    """Changed rows kept waiting while the store cannot be reached. Past this, new changes
    are no longer queued one by one (deletions still are) and a warning says so; once the
    store answers again every row is sent again (idempotent), so nothing is lost."""
    timeout_ms: int = 5000
    """Connecting and each statement give up after this long (then tried again later)."""


KNOWLEDGE_FALLBACK = "I'm not sure about that. Please ask at the front desk."


@dataclass(frozen=True)
class KnowledgeConfig:
    files: list[str] = field(default_factory=list)
    """The venue's knowledge files: Markdown (a heading per topic), CSV (question,answer) or
    TOML (hours, facts, FAQ, synonyms); relative to the config file. Indexed in the memory
    database and read again when one changes. [] for none: the model answers alone."""
    fallback: str = KNOWLEDGE_FALLBACK
    """Said to a question the knowledge does not cover, instead of letting the model guess."""
    direct: str = "all"
    """Which entries are said as written, with no model call, when they answer a question
    surely: "all" (FAQ answers, facts, the matching sentences of a section), "faq" (FAQ
    answers and facts; sections go to the model) or "off" (the model always answers, with
    the entries in its prompt)."""
    direct_above: float = 0.5
    """How surely (0..1) an entry must answer a question to be said directly (see
    docs/measurements.md, "The venue's knowledge, measured": chosen on a measured curve of
    right and wrong direct answers)."""
    margin: float = 0.1
    """...and by how much it must beat any entry that says something else."""
    relevant_above: float = 0.35
    """From this score entries are put in the model's prompt (below it, a question gets the
    fallback line)."""
    passages: int = 3
    """Entries put in the model's prompt at most."""
    prompt_tokens: int = 250
    """Their budget in the prompt (tokens, estimated at four characters each)."""
    timezone: str = ""
    """The venue's time zone for opening hours ("Europe/Amsterdam"); "" for the device's."""
    clock: str = "12h"
    """How answers say times: "12h" ("5:30 PM") or "24h" ("17:30")."""
    reload_s: float = 2.0
    """How often the files are checked for changes (seconds)."""


SCREEN_TOKEN_MIN = 16
"""Least length of `[screen] token`: a token a passer-by at the kiosk cannot guess."""


@dataclass(frozen=True)
class ScreenConfig:
    enabled: bool = False
    """Serve the kiosk's screen: a page with live captions of what the caller said and what
    the listener heard of the agent, word by word as the device plays it, and a stop button
    (see docs/kiosk.md)."""
    listen: str = "127.0.0.1:8780"
    """Where the page is served ("host:port"; "[::1]:8780" for IPv6). An address other than
    loopback needs `token`: the page shows what callers say."""
    token: str = ""
    """What a page must present to be shown anything (at least 16 characters; required for
    an address other than loopback). Open the page as http://HOST:PORT/#token=TOKEN: after
    "#", the token is never sent in a request line, so no server or proxy logs it."""
    clear_after_s: float = 60.0
    """The screen forgets: its captions clear when a session ends or after this many seconds
    in which nothing was said."""
    push_to_talk: bool = False
    """For very loud rooms: the page shows a Talk button, and the microphone is heard only
    while it is held (letting go ends the turn at once; holding it while the agent speaks
    stops the agent, as the Stop button does)."""
    partials_ms: int = 500
    """While the caller speaks, how often their words so far are read for the screen, with a
    recognizer that decodes as it hears (vosk, pocketsphinx: a reading costs next to nothing).
    Moonshine transcribes the whole utterance for each reading, which would delay the answer:
    with it the screen shows the words at each pause, when the agent reads them anyway
    (so it does with 0)."""


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
    timers: TimersConfig = field(default_factory=TimersConfig)
    mqtt: MqttConfig = field(default_factory=MqttConfig)
    memory: MemoryConfig = field(default_factory=MemoryConfig)
    log: LogConfig = field(default_factory=LogConfig)
    sync: SyncConfig = field(default_factory=SyncConfig)
    knowledge: KnowledgeConfig = field(default_factory=KnowledgeConfig)
    screen: ScreenConfig = field(default_factory=ScreenConfig)
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
    def knowledge_files(self) -> list[Path]:
        """`[knowledge] files`, a relative one taken relative to the config file."""
        base = Path(self.source).parent if Path(self.source).is_file() else Path.cwd()
        return [base / os.path.expanduser(f) for f in self.knowledge.files]

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
        if self.vad.end_model != END_MODEL_OFF:
            uses.append(ModelUse("turn", self.vad.end_model, "vad.end_model"))
        if self.session.start == "wake" and self.session.wake_word:
            uses.append(ModelUse("wake", self.session.wake_word, "session.wake_word"))
        return uses


POCKETSPHINX_MODEL = "pocketsphinx-en-us"
END_MODEL_OFF = "off"
"""`[vad] end_model` when no end-of-turn model is asked."""
STT_ENGINES = ("moonshine", "pocketsphinx", "vosk")
"""The recognizers `[stt] engine` names (besides "auto")."""
SESSION_STARTS = ("immediate", "speech", "wake")
"""`[session] start`'s choices (and a call file's `[agent] start`)."""
INCREMENTAL_RECOGNIZERS = ("pocketsphinx", "vosk")
"""Recognizers that decode as they hear: their words so far are read at next to no cost."""


@dataclass(frozen=True)
class ModelUse:
    """One model a config refers to."""

    kind: str
    """"vad", "stt", "llm", "tts", "turn" (the end-of-turn model) or "wake"."""
    reference: str
    """A model name from the manifest, or a path."""
    key: str
    """The config key that names it (for error messages)."""
