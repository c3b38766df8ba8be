"""Reading a config file into `Config`: where it is looked for, who may write it, each key's
bounds, choices and text rules, and the checks across keys. Errors name the file, the key and
what is wrong. The keys and their defaults are `config`'s dataclasses.
"""

from __future__ import annotations

import dataclasses
import os
import re
import stat
import string
import typing
from pathlib import Path
from typing import Any

from edge_agent.audio.adaptive_beamformer import BEAMFORMERS
from edge_agent.audio.array import MAX_APERTURE_MM, ArrayError
from edge_agent.audio.realtime import PRIORITY_RANGE
from edge_agent.config import (
    SCREEN_TOKEN_MIN,
    SESSION_STARTS,
    STT_ENGINES,
    Config,
    LlmConfig,
    MqttConfig,
    ScreenConfig,
    validate,
)
from edge_agent.config.lan import (
    parse_broker_url,
    parse_database_url,
    parse_listen,
    parse_server_url,
)
from edge_agent.config.tomlfile import parse_toml, read_text
from edge_agent.config.validate import Bounds, TextRule
from edge_agent.errors import ConfigError

CONFIG_ENV = "EDGE_AGENT_CONFIG"
SEARCH_PATHS = (Path("/etc/edge-agent/edge-agent.toml"),)

_CHOICES: dict[str, tuple[str, ...]] = {
    "audio.echo_cancel": ("auto", "on", "off"),
    "audio.noise_suppression": ("auto", "on", "off"),
    "audio.talker_gate": ("auto", "level", "off"),
    "audio.beamformer": BEAMFORMERS,
    "stt.engine": ("auto", *STT_ENGINES),
    "llm.engine": ("llama", "scripted"),
    "heard.policy": ("completed", "started"),
    "turns.language": ("en", "es", "hi", "fr", "de", "any"),
    "session.start": SESSION_STARTS,
    "log.level": ("debug", "info", "warning", "error"),
    "knowledge.direct": ("all", "faq", "off"),
    "llm.server_tools": ("auto", "native", "json"),
    "knowledge.clock": ("12h", "24h"),
}
_SILENCE = Bounds(64, 10000, advised=(150, 3000),
                  advice="the agent answers too soon (cutting people off) or waits seconds")
_BOUNDS: dict[str, Bounds] = {
    "audio.talker_margin_db": Bounds(1.0, 40.0),
    "audio.talker_floor_db": Bounds(-90.0, -10.0),
    "audio.mic_positions_mm": Bounds(-MAX_APERTURE_MM, MAX_APERTURE_MM),
    "audio.mic_channels": Bounds(0, 63),
    "audio.input_channels": Bounds(0, 64),
    "audio.realtime_priority": Bounds(*PRIORITY_RANGE),
    "audio.output_period": Bounds(64, 4096),
    "audio.look_azimuth_deg": Bounds(-360.0, 360.0),
    "audio.look_elevation_deg": Bounds(-90.0, 90.0),
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
    "vad.end_silence_sound_ms": Bounds(0, 10000, advised=(96, 3000),
                                       advice="the agent answers before the caller could go on"),
    "vad.end_model_threshold": Bounds(
        0.0, 1.0, open_low=True, open_high=True,
        why="at 0 every turn sounds finished, at 1 none does",
        advised=(0.2, 0.9), advice="pauses are taken for ends, or the model is never believed"),
    "vad.end_model_hold_below": Bounds(
        0.0, 1.0, advised=(0.0, 0.5),
        advice="finished sentences are held for the long silence whenever the model doubts"),
    "vad.end_model_sure_above": Bounds(
        0.0, 1.0, open_low=True, why="at 0 every turn sounds surely finished",
        advised=(0.7, 1.0), advice="pauses after a finished phrase are taken for its end"),
    "vad.end_silence_sure_ms": Bounds(0, 10000, advised=(64, 3000),
                                      advice="the agent answers before the caller could go on"),
    "vad.preroll_ms": Bounds(0, 2000),
    "tools.max_hops": Bounds(0, 20),
    "timers.ring_for_s": Bounds(5.0, 3600.0),
    "timers.ring_pause_s": Bounds(1.0, 120.0),
    "timers.snooze_s": Bounds(30.0, 3600.0),
    "mqtt.timeout_ms": Bounds(100, 30000, advised=(300, 5000),
                              advice="a busy broker is given up on at once, or a caller waits "
                              "seconds for a tool that cannot reach the house"),
    "llm.context_tokens": Bounds(256, 131072),
    "llm.max_tokens": Bounds(1, 8192, advised=(16, 512),
                             advice="replies are cut very short or run for minutes"),
    "llm.temperature": Bounds(0.0, 2.0, advised=(0.0, 1.2),
                              advice="replies above ~1.2 turn incoherent"),
    "llm.threads": Bounds(0, 64),
    "llm.seed": Bounds(0, 2**32 - 1),  # llama.cpp's seed is a uint32
    "llm.server_timeout_ms": Bounds(50, 60000, advised=(200, 5000),
                                    advice="the server is given up on while it is still "
                                    "starting its reply, or a caller waits seconds before the "
                                    "on-device model answers"),
    "llm.server_slot": Bounds(-1, 1024),
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
    "sync.interval_ms": Bounds(100, 3600000, advised=(200, 600000),
                               advice="the kiosk asks the store many times a second, or staff "
                               "see a call long after it ended"),
    "sync.batch_rows": Bounds(1, 100000),
    "sync.max_backlog": Bounds(1000, 100000000),
    "sync.timeout_ms": Bounds(100, 600000),
    "knowledge.direct_above": Bounds(
        0.0, 1.0, open_low=True, why="at 0 any entry would be said as the answer to anything",
        advised=(0.35, 0.95), advice="entries that answer another question are said as answers "
        "(too low), or nothing is ever answered directly (too high)"),
    "knowledge.margin": Bounds(0.0, 1.0, advised=(0.02, 0.5),
                               advice="one of two entries that answer a question equally is said "
                               "(too low), or few answers are direct (too high)"),
    "knowledge.relevant_above": Bounds(
        0.0, 1.0, open_low=True, why="at 0 every question would reach the model with passages "
        "that do not answer it", advised=(0.2, 0.9),
        advice="the model is shown entries that do not answer the question (too low), or "
        "questions get the fallback line (too high)"),
    "knowledge.passages": Bounds(1, 20),
    "knowledge.prompt_tokens": Bounds(16, 8192, advised=(64, 2048),
                                      advice="passages are cut short, or crowd out the "
                                      "conversation"),
    "knowledge.reload_s": Bounds(0.2, 86400.0),
    "screen.clear_after_s": Bounds(1.0, 86400.0, advised=(5.0, 3600.0),
                                   advice="the caption is gone before it is read, or a "
                                   "caller's words stay up for the next person to read"),
    "screen.partials_ms": Bounds(0, 10_000, off=0, advised=(100, 2000),
                                 advice="the recognizer is read more often than the screen "
                                 "can show (too low), or the words lag far behind the caller "
                                 "(too high)"),
}
KEY_TEXT_MAX = 200
"""The longest identity or kiosk id, in characters: the venue's PostgreSQL indexes them, and an
index entry holds at most ~2 700 bytes (200 characters are at most 800 bytes of UTF-8)."""
_KEY = "it names rows in the venue's database, whose index entries are bounded: use a short name"
_MODEL = "name a model from `edge-agent models list` or a path to its file"
_TEXT: dict[str, TextRule] = {
    "data_dir": TextRule(required=True, why="name the directory for models and session data"),
    "vad.model": TextRule(required=True, why=_MODEL),
    "stt.moonshine_model": TextRule(required=True, why=_MODEL),
    "llm.model": TextRule(required=True, why=_MODEL),
    "tts.voice": TextRule(required=True, why=_MODEL),
    "turns.backchannel_classifier": TextRule(required=True, why='use "lexicon"'),
    "memory.identity": TextRule(required=True, why='use "anonymous" for a shared kiosk',
                                max_chars=KEY_TEXT_MAX, max_chars_why=_KEY),
    "sync.kiosk_id": TextRule(max_chars=KEY_TEXT_MAX, max_chars_why=_KEY),
    "memory.summarizer": TextRule(required=True, why='use "llm" or "extractive"'),
    "turns.greeting": TextRule(max_words=40,
                               advice="every session starts with a long wait for the caller"),
    "knowledge.fallback": TextRule(required=True, why="a question the knowledge does not cover "
                                   "must get an answer: write what the caller should do "
                                   "(\"Please ask at the front desk.\")", max_words=40,
                                   advice="every unknown question gets a long speech"),
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
    config = _check_wake(config, data.get("session", {}), source)
    vad = config.vad
    if vad.speculate_after_ms > min(vad.end_silence_ms, vad.end_silence_complete_ms):
        raise ConfigError(source, "vad.speculate_after_ms",
                          f"must not exceed the shortest end-of-turn silence "
                          f"({min(vad.end_silence_ms, vad.end_silence_complete_ms)} ms): the "
                          "answer is prepared before the turn may end")
    _check_llm_room(config.llm, source)
    if config.llm.server:
        parse_server_url(config.llm.server, source)
    if config.sync.url:
        parse_database_url(config.sync.url, source)
    _check_knowledge(config, source)
    _check_mqtt(config.mqtt, source)
    _check_screen(config.screen, source)
    _check_array(config, source)
    if config.memory.fold_turns > config.turns.history_turns:
        validate.warn(source, "memory.fold_turns",
                      f"{config.memory.fold_turns} is more than turns.history_turns "
                      f"({config.turns.history_turns}): each fold empties the whole window")
    return dataclasses.replace(config, source=source)


def _check_knowledge(config: Config, source: str) -> None:
    knowledge = config.knowledge
    if knowledge.timezone:
        import zoneinfo

        try:
            zoneinfo.ZoneInfo(knowledge.timezone)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError):
            raise ConfigError(source, "knowledge.timezone",
                              f"{knowledge.timezone!r} is not a time zone: use an IANA name such "
                              "as \"Europe/Amsterdam\" or \"America/New_York\" (\"\": the "
                              "device's)") from None
    for index, name in enumerate(knowledge.files):
        if not validate.has_visible_text(name):
            raise ConfigError(source, f"knowledge.files[{index}]", "an empty file name")


TOOL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
"""A tool's name as function-calling models accept it."""
_SCHEMA_KEYS = {"type", "enum", "minimum", "maximum", "maxLength", "description"}
_SCHEMA_TYPES: dict[str, type | tuple[type, ...]] = {
    "string": str, "integer": int, "number": (int, float), "boolean": bool}


def _check_mqtt(mqtt: MqttConfig, source: str) -> None:
    if not mqtt.url:
        if mqtt.tools:
            raise ConfigError(source, "mqtt.tools", "needs mqtt.url: the broker they publish to")
        return
    address = parse_broker_url(mqtt.url, source)
    if mqtt.ca_file and not address.tls:
        raise ConfigError(source, "mqtt.ca_file", "is for an mqtts:// broker (TLS); mqtt.url is "
                          "mqtt://, which sends everything in the clear")
    if mqtt.topic:
        _check_topic(mqtt.topic, source, "mqtt.topic")
    names: set[str] = set()
    for index, tool in enumerate(mqtt.tools):
        key = f"mqtt.tools[{index}]"
        if not TOOL_NAME.fullmatch(tool.name):
            raise ConfigError(source, f"{key}.name", "must be 1-64 letters, digits or '_', not "
                              f"starting with a digit (models call tools by it), got "
                              f"{tool.name!r}")
        if tool.name in names:
            raise ConfigError(source, f"{key}.name", f"{tool.name!r} names two tools; name "
                              "each once")
        names.add(tool.name)
        if not validate.has_visible_text(tool.description):
            raise ConfigError(source, f"{key}.description", "must say when to use the tool: the "
                              "model reads it to decide")
        _check_topic(tool.topic, source, f"{key}.topic")
        for name, schema in tool.parameters.items():
            _check_schema(schema, source, f"{key}.parameters.{name}")
        try:
            fields = {field for _, field, _, _ in string.Formatter().parse(tool.payload)
                      if field is not None}
        except ValueError as exc:
            raise ConfigError(source, f"{key}.payload", f"is not a template ({exc}); write "
                              "{{ and }} for braces") from None
        unknown = sorted(fields - set(tool.parameters))
        if unknown:
            declared = ", ".join(tool.parameters) or "none"
            raise ConfigError(source, f"{key}.payload", f"names {{{unknown[0]}}}, which is not "
                              f"one of the tool's parameters ({declared}); a brace of the payload's own "
                              "is written {{ or }}")


def _check_topic(topic: str, source: str, key: str) -> None:
    if not topic or "+" in topic or "#" in topic or "\0" in topic or len(topic) > 256:
        raise ConfigError(source, key, "must be a topic to publish to, 1-256 characters without "
                          f"the wildcards + and #, like home/kitchen/light/set, got {topic!r}")


def _check_schema(schema: dict[str, Any], source: str, key: str) -> None:
    """One tool parameter's JSON schema: a type a voice can give, and bounds that fit it."""
    extra = sorted(set(schema) - _SCHEMA_KEYS)
    if extra:
        raise ConfigError(source, f"{key}.{extra[0]}", "unknown key (valid keys here: "
                          f"{', '.join(sorted(_SCHEMA_KEYS))})")
    kind = schema.get("type")
    if kind not in _SCHEMA_TYPES:
        raise ConfigError(source, f"{key}.type", "must be one of 'string', 'integer', "
                          f"'number', 'boolean', got {kind!r}")
    python = _SCHEMA_TYPES[kind]
    enum = schema.get("enum")
    if enum is not None and (not isinstance(enum, list) or not enum or any(
            not isinstance(v, python) or isinstance(v, bool) != (kind == "boolean")
            for v in enum)):
        raise ConfigError(source, f"{key}.enum", f"must be a list of {kind} values")
    for bound in ("minimum", "maximum"):
        if bound in schema and (kind not in ("integer", "number") or isinstance(
                schema[bound], bool) or not isinstance(schema[bound], int | float)):
            raise ConfigError(source, f"{key}.{bound}", "is a number, for an integer or number")
    if "maxLength" in schema and (kind != "string" or isinstance(schema["maxLength"], bool)
                                  or not isinstance(schema["maxLength"], int)
                                  or schema["maxLength"] < 1):
        raise ConfigError(source, f"{key}.maxLength", "is a positive integer, for a string")
    if "description" in schema and not isinstance(schema["description"], str):
        raise ConfigError(source, f"{key}.description", "must be text")


def _check_array(config: Config, source: str) -> None:
    audio = config.audio
    try:
        array = audio.mic_array()
    except ArrayError as exc:
        raise ConfigError(source, f"audio.{exc.key}", exc.reason) from None
    if array is None and audio.input_channels > 1:
        raise ConfigError(source, "audio.input_channels",
                          f"{audio.input_channels} channels but no array: name the array "
                          "(array or mic_positions_mm), or leave input_channels at 0")


def _check_screen(screen: ScreenConfig, source: str) -> None:
    address = parse_listen(screen.listen, source)
    token = screen.token
    if token and (len(token) < SCREEN_TOKEN_MIN or not token.isascii() or not token.isprintable()
                  or " " in token or "#" in token):
        raise ConfigError(source, "screen.token",
                          f"must be at least {SCREEN_TOKEN_MIN} printable ASCII characters, "
                          "without spaces or '#' (make one: openssl rand -hex 16)")
    if not address.loopback and not token:
        raise ConfigError(source, "screen.token",
                          f"is needed to serve the screen on {address.shown}, which other "
                          "machines can reach: the page shows what callers say (make one: "
                          "openssl rand -hex 16), or listen on 127.0.0.1")


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


def _check_wake(config: Config, written: dict[str, Any], source: str) -> Config:
    """One way to wake: a wake_phrase written without a wake_word means the phrase."""
    session = config.session
    if "wake_phrase" in written and "wake_word" not in written:
        session = dataclasses.replace(session, wake_word="")
    if session.start == "wake" and not session.wake_word and not validate.has_visible_text(
            session.wake_phrase):
        raise ConfigError(source, "session.wake_phrase",
                          'must name the words that open a session when start = "wake" and '
                          'wake_word = "" (or set wake_word to a wake word model, e.g. '
                          '"okay-nabu")')
    if session.start == "wake" and session.wake_word and not session.idle_end_s:
        raise ConfigError(source, "session.idle_end_s",
                          "must end a session opened by the wake word (0 never ends it, and "
                          "the room would be transcribed from the first wake on): set it, "
                          "e.g. idle_end_s = 30")
    if session.wake_word and validate.has_visible_text(session.wake_phrase):
        raise ConfigError(source, "session.wake_phrase",
                          f"wake_word = {session.wake_word!r} hears the wake word itself: "
                          "remove wake_phrase, or set wake_word = \"\" to wake on the phrase")
    return dataclasses.replace(config, session=session)


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
        item = typing.get_args(expected)[0] if typing.get_origin(expected) is list else None
        if item is not None and dataclasses.is_dataclass(item):
            if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
                raise ConfigError(source, dotted, f"must be tables ([[{dotted}]])")
            values[key] = [_build(item, v, source, f"{dotted}[{i}].")  # type: ignore[arg-type]
                           for i, v in enumerate(value)]
        elif dataclasses.is_dataclass(expected):
            if not isinstance(value, dict):
                raise ConfigError(source, dotted, f"must be a table ([{dotted}])")
            values[key] = _build(expected, value, source, f"{dotted}.")  # type: ignore[arg-type]
        else:
            values[key] = check_value(expected, value, source, dotted)
    return cls(**values)
