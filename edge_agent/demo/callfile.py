"""Call files (TOML): scripted caller lines and, optionally, the agent's scripted replies.

```toml
[agent]                      # optional: makes the run reproducible with the scripted LLM
greeting = "Hi, Luigi's. How can I help?"
replies = [
  "Sure. For how many people?",
  # a tool call (say is optional); the next entry answers once the result is in
  { say = "Let me book that.", tool = "book_table", arguments = { time = "7 PM", people = 4 } },
  "You're booked.",
]
echo_gain = 0.3              # optional: the microphone hears the agent at this level
timers = true                # optional: timers on for this call, in the call's database
start = "wake"               # optional: "immediate", "speech" or "wake" ([session] start)

[room]                       # optional: how that echo reaches the microphone
delay_ms = 40                # device buffers plus the sound's flight (0..500, default 10)
reverb_ms = 150              # the reverberation's decay by 60 dB (0..1000, default 0: none)
clip = 0.5                   # a small speaker saturates at this fraction of full scale
seed = 7                     # the room's random reflections and noise (default 0): same seed, same room
noise_db = -40               # steady background noise, dBFS (-90..-10; default: none)
noise_kind = "pink"          # its spectrum: "pink" (default; fans, traffic), "white" (hiss), "brown" (rumble)
# A room where everyone has a place (needs `pip install 'edge-agent[rooms]'`): every path,
# the echo's too, is the room's own (image sources); reverb_ms is then the room's RT60, and
# with [audio] array the microphones are the array's. Positions are metres from the kiosk's
# microphones: to the side, in front, up.
size_m = [6, 5, 3]           # length, depth, height
array_at_m = [3, 0.5, 1.2]   # the microphones in the room (default: mid-wall, 0.5 m out, 1.2 m up)
caller_at_m = [0, 0.5, 0.3]  # the caller's mouth (default)
speaker_at_m = [0, -0.05, -0.15]  # the kiosk's loudspeaker (default)

[[talker]]                   # optional: someone else talking nearby, over and over (not the caller)
say = ["Did you see the game last night?", "No, I was working late again."]
level_db = -10               # their speech level against the caller's, dB (-40..0, default -10)
voice = "espeak-us-f3"       # an espeak-ng voice (`bench stt`'s), or "agent"; default: the next one
start = 0                    # seconds from the start of the call (default 0)
pause = 0.8                  # seconds between their sentences (default 0.8)
reverb_ms = 400              # the room on their voice: they are farther away (0..1000, default 400)
at_m = [1.8, 2.2, 0.4]       # where they stand, in a room with size_m (default: spots 2.8-4.4 m away)

[[caller]]
say = "Hi, I want to book a table for tonight."
at = 0.5                     # seconds from the start of the call
[[caller]]
say = "Four people."
after_agent_done = true      # when the agent has finished speaking
pause = 0.5                  # optional, seconds after that
[[caller]]
say = "7 PM is perfect."
barge_in_after = 3.2         # seconds after the agent's current reply started playing
```
"""

from __future__ import annotations

import dataclasses
import importlib.resources
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edge_agent.audio.room import (
    MAX_DELAY_MS,
    MAX_REVERB_MS,
    NOISE_DB_RANGE,
    NOISE_KINDS,
    Room,
)
from edge_agent.audio.room_acoustics import SIZE_RANGE_M, RoomLayout
from edge_agent.config import SESSION_STARTS, Config
from edge_agent.config.tomlfile import parse_toml, read_text
from edge_agent.config.validate import Bounds, TextRule, check_value, warn
from edge_agent.conversation.builtin_tools import BUILTIN
from edge_agent.demo.talkers import AGENT_VOICE, LEVEL_DB_RANGE, TALKER_VOICES, Talker
from edge_agent.engines.llm.scripted import ScriptedReply, parse_replies
from edge_agent.errors import ConfigError

DEFAULT_CALL = "luigis.toml"
_TRIGGERS = ("at", "after_agent_done", "barge_in_after")
WAKE_CALL_IDLE_END_S = 30.0
"""A call with [agent] start = "wake" ends an idle session after this long when the config's
`[session] idle_end_s` is 0 (never: waking needs an end)."""
_SECONDS = Bounds(0.0, 3600.0)
_SAID = TextRule(required=True, why="write what the caller says")
_ROOM_KEYS = {
    "delay_ms": (float, Bounds(0.0, MAX_DELAY_MS)),
    "reverb_ms": (float, Bounds(0.0, MAX_REVERB_MS)),
    "clip": (float, Bounds(0.0, 1.0, open_low=True,
                           why="a speaker clipping at 0 plays nothing; leave clip out for a "
                           "clean speaker")),
    "seed": (int, Bounds(0, 2**32 - 1)),
    "noise_db": (float, Bounds(*NOISE_DB_RANGE)),
    "noise_kind": (str, None),
}
_PLACES = ("size_m", "array_at_m", "caller_at_m", "speaker_at_m")
"""[room] keys that give the room places (each [x, y, z], metres)."""
_METRES = Bounds(-30.0, 30.0)
_ROOM_CHOICES = {"noise_kind": NOISE_KINDS}
_TALKER_KEYS = {
    "level_db": Bounds(*LEVEL_DB_RANGE),
    "start": _SECONDS,
    "pause": Bounds(0.0, 60.0),
    "reverb_ms": Bounds(0.0, MAX_REVERB_MS),
}
MAX_TALKERS = 8
"""[[talker]] tables in one call file: a crowded café is a handful of voices at once."""
MAX_TALKER_SENTENCES = 50
"""Sentences one talker says before starting over (each is synthesized before the call)."""
MAX_CALLER_LINES = 500
"""[[caller]] lines in one call file: every line is synthesized before the call starts, and
the longest real call is a few dozen turns (tens of thousands kept `demo` "loading" for
minutes)."""
MAX_SAY_CHARS = 2000
"""Characters in one caller line: about two minutes of speech, far past anything said in one
breath (a longer line is heard as one growing utterance, transcribed again and again)."""


@dataclass(frozen=True)
class CallerLine:
    say: str
    """What the caller says."""
    at: float | None = None
    """Seconds from the start of the call."""
    after_agent_done: bool = False
    """Wait until the agent has finished its next reply."""
    pause: float = 0.4
    """Seconds to wait after the agent finished (with after_agent_done)."""
    barge_in_after: float | None = None
    """Seconds after the agent's next reply started playing: cut in."""


@dataclass(frozen=True)
class CallScript:
    source: str
    lines: tuple[CallerLine, ...]
    greeting: str | None
    """None: use the configured greeting."""
    replies: tuple[ScriptedReply, ...] | None
    """None: the configured language model answers."""
    tools: tuple[str, ...] | None = None
    """Tools the model may call in this call (None: those of the config)."""
    room: Room = field(default_factory=Room)
    """How the agent's own voice comes back into the microphone ([agent] echo_gain, [room])."""
    talkers: tuple[Talker, ...] = ()
    """Other people talking near the kiosk ([[talker]])."""
    timers: bool = False
    """Timers on for this call ([agent] timers), in the call's database."""
    start: str | None = None
    """How the call's session opens ([agent] start; None: as the config says)."""

    @property
    def echo_gain(self) -> float:
        """How loud the agent's own voice comes back into the microphone (0: not at all)."""
        return self.room.echo_gain


def load_call(path: Path | None) -> CallScript:
    """A call file, or a built-in call by name ("turns", "echo"; None: the default call)."""
    if path is None or (not path.exists() and path.name == str(path) and path.suffix == ""):
        name = DEFAULT_CALL if path is None else f"{path}.toml"
        built_in = importlib.resources.files("edge_agent.demo").joinpath(name)
        if not built_in.is_file():
            calls = sorted(p.name.removesuffix(".toml") for p in
                           importlib.resources.files("edge_agent.demo").iterdir()
                           if p.name.endswith(".toml"))
            raise ConfigError(str(path), "--call",
                              f"no such file, nor a built-in call (built-in: {', '.join(calls)})")
        return parse_call(built_in.read_text(encoding="utf-8"), f"(built-in) {name}")
    return parse_call(read_text(path, "call file"), str(path))


def parse_call(text: str, source: str) -> CallScript:
    data = parse_toml(text, source)
    unknown = set(data) - {"agent", "caller", "room", "talker"}
    if unknown:
        raise ConfigError(source, sorted(unknown)[0],
                          "unknown key (expected [agent], [room], [[caller]] and [[talker]])")
    agent = data.get("agent", {})
    if not isinstance(agent, dict):
        raise ConfigError(source, "agent", "must be a table ([agent])")
    extra = set(agent) - {"greeting", "replies", "tools", "echo_gain", "timers", "start"}
    if extra:
        raise ConfigError(source, f"agent.{sorted(extra)[0]}",
                          "unknown key (greeting, replies, tools, echo_gain, timers, start)")
    timers = check_value(bool, agent.get("timers", False), source, "agent.timers")
    start = agent.get("start")
    if start is not None and start not in SESSION_STARTS:
        raise ConfigError(source, "agent.start",
                          f"must be one of {', '.join(map(repr, SESSION_STARTS))}, not {start!r}")
    tools = agent.get("tools")
    if tools is not None:
        check_value(list[str], tools, source, "agent.tools", text=TextRule(required=True))
    echo_gain = check_value(float, agent.get("echo_gain", 0.0), source, "agent.echo_gain",
                            bounds=Bounds(0.0, 1.0))
    greeting = agent.get("greeting")
    if greeting is not None:
        check_value(str, greeting, source, "agent.greeting")
    replies = agent.get("replies")
    scripted = None if replies is None else parse_replies(replies, source, "agent.replies")
    callers = data.get("caller", [])
    if not isinstance(callers, list) or not callers:
        raise ConfigError(source, "caller", "needs at least one [[caller]] line with `say`")
    if len(callers) > MAX_CALLER_LINES:
        raise ConfigError(source, "caller", f"{len(callers)} [[caller]] lines; a call file holds "
                          f"at most {MAX_CALLER_LINES} (every line is synthesized before the "
                          "call starts): split the call into several files")
    lines = tuple(_line(entry, source, f"caller[{i + 1}]") for i, entry in enumerate(callers))
    return CallScript(source, lines, greeting, scripted,
                      tuple(tools) if tools is not None else None,
                      *_placed(_room(data.get("room"), float(echo_gain), source),
                               _talkers(data.get("talker", []), source), source),
                      timers=bool(timers), start=start)


def _placed(room: Room, talkers: tuple[Talker, ...], source: str
            ) -> tuple[Room, tuple[Talker, ...]]:
    """The room and its talkers, every position inside the room (a room with places)."""
    layout = room.layout
    if layout is None:
        where = next((i for i, t in enumerate(talkers) if t.at_m is not None), None)
        if where is not None:
            raise ConfigError(source, f"talker[{where + 1}].at_m",
                              "places a talker in a room without places: give the room's "
                              "size ([room] size_m = [6, 5, 3])")
        return room, talkers
    placed = tuple(dataclasses.replace(t, at_m=layout.talker_at(i, t.at_m))
                   for i, t in enumerate(talkers))
    spots = [("room.array_at_m", "the kiosk's microphones", (0.0, 0.0, 0.0)),
             ("room.caller_at_m", "the caller", layout.caller_at_m),
             ("room.speaker_at_m", "the loudspeaker", layout.speaker_at_m),
             *((f"talker[{i + 1}].at_m", f"talker {i + 1}", layout.talker_at(i, t.at_m))
               for i, t in enumerate(talkers))]
    for key, what, position in spots:
        try:
            layout.check(position, what)
        except ValueError as exc:
            raise ConfigError(source, key, f"{exc}; positions are metres from the kiosk's "
                              "microphones (to the side, in front, up); the array's place "
                              "is room.array_at_m") from None
    return room, placed


def _talkers(tables: Any, source: str) -> tuple[Talker, ...]:
    if not isinstance(tables, list):
        raise ConfigError(source, "talker", "must be an array of tables ([[talker]])")
    if len(tables) > MAX_TALKERS:
        raise ConfigError(source, "talker", f"{len(tables)} [[talker]] tables; a call holds at "
                          f"most {MAX_TALKERS} background talkers")
    return tuple(_talker(table, source, f"talker[{i + 1}]") for i, table in enumerate(tables))


def _talker(table: Any, source: str, key: str) -> Talker:
    _check_table(table, source, key, "talker", {"say", "voice", "at_m", *_TALKER_KEYS})
    said = table.get("say")
    sentences = [said] if isinstance(said, str) else said
    if not isinstance(sentences, list) or not sentences:
        raise ConfigError(source, f"{key}.say", "write what the talker says: a sentence, or a "
                          'list of them (say = ["One.", "Two."])')
    if len(sentences) > MAX_TALKER_SENTENCES:
        raise ConfigError(source, f"{key}.say", f"{len(sentences)} sentences; a talker says at "
                          f"most {MAX_TALKER_SENTENCES} before starting over")
    for i, sentence in enumerate(sentences):
        where = f"{key}.say[{i}]" if isinstance(said, list) else f"{key}.say"
        _said(sentence, source, where, "a sentence", "split it into several")
    voice = ("" if "voice" not in table else
             check_value(str, table["voice"], source, f"{key}.voice",
                         choices=(AGENT_VOICE, *TALKER_VOICES)))
    values: dict[str, Any] = {
        name: check_value(float, table[name], source, f"{key}.{name}", bounds=bounds)
        for name, bounds in _TALKER_KEYS.items() if name in table}
    if "at_m" in table:
        values["at_m"] = _position(table["at_m"], source, f"{key}.at_m")
    return Talker(say=tuple(sentences), voice=voice, **values)


def _room(table: Any, echo_gain: float, source: str) -> Room:
    if table is None:
        return Room(echo_gain=echo_gain)
    if not isinstance(table, dict):
        raise ConfigError(source, "room", "must be a table ([room])")
    extra = set(table) - set(_ROOM_KEYS) - set(_PLACES)
    if extra:
        raise ConfigError(source, f"room.{sorted(extra)[0]}",
                          f"unknown key ({', '.join([*_ROOM_KEYS, *_PLACES])}; the echo's "
                          "level is [agent] echo_gain)")
    values: dict[str, Any] = {
        key: check_value(kind, table[key], source, f"room.{key}", bounds=bounds,
                         choices=_ROOM_CHOICES.get(key, ()))
        for key, (kind, bounds) in _ROOM_KEYS.items() if key in table}
    places = {key: _position(table[key], source, f"room.{key}")
              for key in _PLACES if key in table}
    if places:
        values["layout"] = _layout(places, source)
    if "noise_kind" in values and "noise_db" not in values:
        raise ConfigError(source, "room.noise_kind",
                          "needs room.noise_db, the noise's level (e.g. -40)")
    echo_only = {"delay_ms", "clip"} | ({"reverb_ms"} if "layout" not in values else set())
    if set(values) & echo_only and not echo_gain:
        warn(source, "room", "the microphone does not hear the agent ([agent] echo_gain is 0), "
             "so the room's echo path changes nothing")
    return Room(echo_gain=echo_gain, **values)


def _layout(places: dict[str, tuple[float, float, float]], source: str) -> RoomLayout:
    if "size_m" not in places:
        raise ConfigError(source, f"room.{sorted(places)[0]}",
                          "places things in a room of no size: give room.size_m "
                          "([length, depth, height] in metres, e.g. [6, 5, 3])")
    size = places["size_m"]
    for axis, (value, (low, high)) in enumerate(zip(size, SIZE_RANGE_M, strict=True)):
        if not low <= value <= high:
            raise ConfigError(source, "room.size_m", f"{['length', 'depth', 'height'][axis]} "
                              f"{value:g} m is outside {low:g}..{high:g} m")
    return RoomLayout(size_m=size, array_at_m=places.get("array_at_m"),
                      **{key: places[key] for key in ("caller_at_m", "speaker_at_m")
                         if key in places})


def _position(value: Any, source: str, key: str) -> tuple[float, float, float]:
    numbers = check_value(list[float], value, source, key, bounds=_METRES)
    if len(numbers) != 3:
        raise ConfigError(source, key, f"give [x, y, z] in metres, got {len(numbers)} numbers")
    return (numbers[0], numbers[1], numbers[2])


def _check_table(table: Any, source: str, key: str, kind: str, allowed: set[str]) -> None:
    """`table` is one [[kind]] entry holding only `allowed` keys."""
    if not isinstance(table, dict):
        raise ConfigError(source, key, f"must be a table ([[{kind}]])")
    extra = set(table) - allowed
    if extra:
        raise ConfigError(source, f"{key}.{sorted(extra)[0]}",
                          f"unknown key (allowed: {', '.join(sorted(allowed))})")


def _said(value: Any, source: str, where: str, what: str, split: str) -> str:
    """Something said in a call (a caller's line, a talker's sentence): text, not too long."""
    said: str = check_value(str, value, source, where, text=_SAID)
    if len(said) > MAX_SAY_CHARS:
        raise ConfigError(source, where, f"{len(said)} characters; {what} holds at most "
                          f"{MAX_SAY_CHARS} (about two minutes of speech): {split}")
    return said


def _line(entry: Any, source: str, key: str) -> CallerLine:
    _check_table(entry, source, key, "caller", {"say", "pause", *_TRIGGERS})
    say = _said(entry.get("say", ""), source, f"{key}.say", "a caller line",
                "split it into several [[caller]] lines")
    triggers = [t for t in _TRIGGERS if t in entry]
    if len(triggers) != 1:
        raise ConfigError(source, key,
                          "needs exactly one of at, after_agent_done, barge_in_after "
                          f"(got {', '.join(triggers) or 'none'})")
    seconds = {name: check_value(float, entry[name], source, f"{key}.{name}", bounds=_SECONDS)
               for name in ("at", "barge_in_after", "pause") if name in entry}
    if "after_agent_done" in entry and entry["after_agent_done"] is not True:
        raise ConfigError(source, f"{key}.after_agent_done", "must be true (or left out)")
    if "pause" in entry and "after_agent_done" not in entry:
        raise ConfigError(source, f"{key}.pause", "only goes with after_agent_done = true")
    return CallerLine(
        say=say,
        at=seconds.get("at"),
        after_agent_done="after_agent_done" in entry,
        pause=seconds.get("pause", 0.4),
        barge_in_after=seconds.get("barge_in_after"),
    )


def call_tools(call: CallScript, enabled: list[str], config_source: str) -> list[str] | None:
    """The tools a call may use: those it names, each a built-in tool or one the config enabled
    (a call file is data people share: it never names code to load). None: the config's."""
    if call.tools is None:
        return None
    for i, name in enumerate(call.tools):
        if name not in BUILTIN and name not in enabled:
            raise ConfigError(call.source, f"agent.tools[{i}]",
                              f"{name!r} is neither a built-in tool ({', '.join(BUILTIN)}) nor "
                              f"enabled in [tools] enabled of {config_source}; a call file may "
                              "only pick tools, enable code in the config")
    return list(call.tools)


def call_config(call: CallScript, config: Config) -> Config:
    """`config` with what the call's [agent] asks for: its timers on, its session's start."""
    if call.timers:
        config = dataclasses.replace(config, timers=dataclasses.replace(config.timers,
                                                                        enabled=True))
    if call.start is not None:
        session = dataclasses.replace(config.session, start=call.start)
        if call.start == "wake" and not session.idle_end_s:
            session = dataclasses.replace(session, idle_end_s=WAKE_CALL_IDLE_END_S)
        config = dataclasses.replace(config, session=session)
    return config


def check_reachable(call: CallScript, max_seconds: float) -> None:
    """Refuse a line timed after the call's end: it could never be said."""
    for i, line in enumerate(call.lines):
        if line.at is not None and line.at >= max_seconds:
            raise ConfigError(call.source, f"caller[{i + 1}].at",
                              f"{line.at:g} s is after the end of the call ({max_seconds:g} s "
                              "at most): the line could never be said")
