"""A session record checked before anything is built from it (`inspect` draws it, `sessions
replay` plays it again).

A record file is user input (edited, cut short, from another program) and a database row can be
damaged: a field that is missing or of the wrong type is a ConfigError naming where the record
came from and the field, and every number is range-checked before it sizes anything (a unit
`played_ms` of 1e18 once laid out 10^14 strips of the page, growing until killed). The ranges
are far past any real session and still finite: what a time can size is bounded again where it
does (`inspect.layout.MAX_STRIPS`, `replay.run.MAX_REPLAY_S`).
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

from edge_agent.errors import ConfigError
from edge_agent.memory.kept_audio import AudioClip
from edge_agent.memory.record import SessionRecord
from edge_agent.printable import shown

MAX_CLOCK_S = 1e9
"""A moment on a run's clock (`at`, `audio_time`), in seconds either side of its start: 31
years of uptime."""
MAX_MS = 3_600_000
"""A length inside one unit or one speech (`played_ms`, word times, `silence_ms`): an hour."""
MAX_WHOLE = 10**9
"""A turn, hop or session number."""

FILE_HINT = "not a session record as `demo --json` or `sessions show --json` writes it"
DATABASE_HINT = ("the database's record of the session is damaged: `sessions show --json` "
                 "shows it as stored")


@dataclass(frozen=True)
class Kind:
    """What a field must hold: `name` says it in a message, `fits` is its type, `low`..`high`
    its range for a number (in `unit`)."""

    name: str
    fits: Callable[[Any], bool]
    low: float | None = None
    high: float | None = None
    unit: str = ""


def _is_number(value: Any) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    return _is_whole(value)  # any int, however long (its range is checked next)


def _is_whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


CLOCK = Kind("a number", _is_number, -MAX_CLOCK_S, MAX_CLOCK_S, "seconds on the run's clock")
MS = Kind("a number", _is_number, 0, MAX_MS, "milliseconds, an hour at most")
SECONDS = Kind("a number", _is_number, 0, MAX_MS / 1000, "seconds, an hour at most")
WHOLE = Kind("a whole number", _is_whole, 0, MAX_WHOLE)
TEXT = Kind("text", lambda v: isinstance(v, str))
TEXT_OR_NONE = Kind("text or null", lambda v: v is None or isinstance(v, str))
FLAG = Kind("true or false", lambda v: isinstance(v, bool))
OBJECT = Kind("an object", lambda v: isinstance(v, dict))
LIST = Kind("a list", lambda v: isinstance(v, list))

EVENT_FIELDS: dict[str, dict[str, Kind]] = {
    "UserSpeechStarted": {"audio_time": CLOCK},
    "UserSpeechEnded": {"audio_time": CLOCK, "silence_ms": MS},
    "UserTurn": {"text": TEXT},
    "CallerSpoke": {"text": TEXT, "speech_offset": SECONDS},
    "PlaybackStarted": {"unit_id": TEXT},
    "PlaybackPaused": {"unit_id": TEXT_OR_NONE},
    "PlaybackResumed": {"unit_id": TEXT_OR_NONE},
    "BargeIn": {"unit_id": TEXT_OR_NONE, "words": TEXT},
    "UnitFinalized": {"finalize": OBJECT},
    "ToolUsed": {"turn": WHOLE, "call": OBJECT, "result": TEXT},
    "Backchannel": {"text": TEXT, "speech_ms": MS},
    "EchoIgnored": {"text": TEXT, "playing": TEXT},
    "SessionStarted": {"session": WHOLE, "how": TEXT},
    "SessionEnded": {"session": WHOLE},
    "TurnStage": {"turn": WHOLE, "stage": TEXT, "speculative": FLAG},
    "SpeculationCancelled": {"turn": WHOLE, "reason": TEXT},
    "ReplyFailed": {"turn": WHOLE, "stage": TEXT, "error": TEXT, "recovery": TEXT},
    "Notice": {"text": TEXT},
}
"""The fields `inspect` and `replay` read, per event type (other types and fields are kept,
unread)."""

_NESTED = {("UnitFinalized", "finalize"): {"unit_id": TEXT, "generated": TEXT, "heard": TEXT},
           ("ToolUsed", "call"): {"name": TEXT, "arguments": TEXT}}
_UNIT_FIELDS = {"unit_id": TEXT, "generated": TEXT, "heard": TEXT, "played_ms": MS,
                "words": LIST}
_WORD_FIELDS = {"text": TEXT, "start_ms": MS, "end_ms": MS}
_REQUEST_FIELDS = {"turn": WHOLE, "hop": WHOLE}


@dataclass(frozen=True)
class _Where:
    """Where the record came from (a file, a session of a database) and what to say of it."""

    source: str
    hint: str


def checked(data: object, source: str, hint: str = FILE_HINT) -> SessionRecord:
    """`data` if it has the shape of a session record (every field `inspect` and `replay`
    read, every number in range), with the optional fields filled in; else a ConfigError
    naming `source` and the first bad field, ending with `hint`."""
    where = _Where(source, hint)
    record = _require(data, "", OBJECT, where)
    for key, kind in {"units": LIST, "events": LIST}.items():
        _require(record.get(key), key, kind, where)
    session_id = _require(record.get("session_id", ""), "session_id", TEXT, where)
    sessions = _require(record.get("sessions", [session_id]), "sessions", LIST, where)
    for i, value in enumerate(sessions):
        _require(value, f"sessions[{i}]", TEXT, where)
    engines = _require(record.get("engines", {}), "engines", OBJECT, where)
    for i, unit in enumerate(record["units"]):
        _fields(unit, f"units[{i}]", _UNIT_FIELDS, where)
        for j, word in enumerate(unit["words"]):
            _fields(word, f"units[{i}].words[{j}]", _WORD_FIELDS, where)
    requests = _require(record.get("llm_requests", []), "llm_requests", LIST, where)
    for i, request in enumerate(requests):
        _fields(request, f"llm_requests[{i}]", _REQUEST_FIELDS, where)
    for i, event in enumerate(record["events"]):
        _event(event, f"events[{i}]", where)
    return cast(SessionRecord, {**record, "session_id": session_id, "sessions": sessions,
                                "engines": {str(k): str(v) for k, v in engines.items()},
                                "turns": record.get("turns", []), "llm_requests": requests})


def checked_clips(clips: Sequence[AudioClip], source: str) -> list[AudioClip]:
    """Kept audio clips whose moment can be laid out; else a ConfigError naming the clip (a
    moment of 1e18 lays out a page forever). Their rates were checked as they were read."""
    where = _Where(source, DATABASE_HINT)
    for clip in clips:
        _require(clip.at, f"kept audio {clip.kind} {clip.ref}.at", CLOCK, where)
    return list(clips)


def _event(event: object, name: str, where: _Where) -> None:
    _fields(event, name, {"type": TEXT}, where)
    item = cast(dict[str, Any], event)
    kind = item["type"]
    wanted = EVENT_FIELDS.get(kind, {})
    _fields(item, name, {"at": CLOCK, **wanted}, where, f" (a {shown(kind, 40)} event)")
    for key in wanted:
        if (kind, key) in _NESTED:
            _fields(item[key], f"{name}.{key}", _NESTED[kind, key], where, f" (a {kind} event)")


def _fields(value: object, name: str, fields: dict[str, Kind], where: _Where,
            what: str = "") -> None:
    item = _require(value, name, OBJECT, where)
    for key, kind in fields.items():
        _require(item.get(key), f"{name}.{key}" if name else key, kind, where, what)


def _require(value: Any, name: str, kind: Kind, where: _Where, what: str = "") -> Any:
    if not kind.fits(value):
        raise ConfigError(where.source, name, f"must be {kind.name}, got {_seen(value)}{what}: "
                          f"{where.hint}")
    out_of_range = (kind.low is not None and value < kind.low) or (
        kind.high is not None and value > kind.high)
    if out_of_range:
        unit = f" ({kind.unit})" if kind.unit else ""
        raise ConfigError(where.source, name, f"must be from {_bound(kind.low)} to "
                          f"{_bound(kind.high)}{unit}, got {_preview(value)}{what}: "
                          f"{where.hint}")
    return value


def _bound(value: float | None) -> str:
    return f"{value:.0f}" if value is not None and float(value).is_integer() else f"{value}"


def _seen(value: Any) -> str:
    return "nothing" if value is None else f"{type(value).__name__} {_preview(value)}"


def _preview(value: Any, depth: int = 2) -> str:
    """`value` as JSON, cut short: never the whole of a list that may be the whole record."""
    if isinstance(value, str):
        return json.dumps(value[:60])
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**20:
        return f"a {len(str(abs(value)))}-digit number"  # (str() is capped at 4300 digits)
    if isinstance(value, list):
        if depth == 0:
            return "[...]"
        shown = [_preview(item, depth - 1) for item in value[:3]]
        return f"[{', '.join(shown)}{', ...' if len(value) > 3 else ''}]"
    if isinstance(value, dict):
        if depth == 0:
            return "{...}"
        shown = [f"{json.dumps(str(key)[:20])}: {_preview(item, depth - 1)}"
                 for key, item in itertools.islice(value.items(), 3)]
        return f"{{{', '.join(shown)}{', ...' if len(value) > 3 else ''}}}"
    return json.dumps(value)
