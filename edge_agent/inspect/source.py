"""Where `edge-agent inspect` gets a session: the memory database, or a record file (the JSON
`demo --json`, `run --json` and `sessions show --json` write).

Either way the record is checked before anything is drawn: a field the page reads that is
missing or of the wrong type is a ConfigError naming the file and the field (a record file is
user input: it may have been edited, cut short or come from another program).
"""

from __future__ import annotations

import json
import math
import sqlite3
from pathlib import Path
from typing import Any, cast

from edge_agent.errors import ConfigError
from edge_agent.files import RECORD_FILE_LIMIT
from edge_agent.memory.database_file import database_error
from edge_agent.memory.kept_audio import AudioClip, kept_audio
from edge_agent.memory.store import MemoryStore
from edge_agent.session import SessionRecord, named_session, require_database, session_record
from edge_agent.tomlfile import read_text

_NUMBER, _TEXT, _FLAG, _WHOLE, _OBJECT, _LIST = "a number", "text", "true or false", \
    "a whole number", "an object", "a list"
_TEXT_OR_NONE = "text or null"

EVENT_FIELDS: dict[str, dict[str, str]] = {
    "UserSpeechStarted": {"audio_time": _NUMBER},
    "UserSpeechEnded": {"audio_time": _NUMBER, "silence_ms": _NUMBER},
    "UserTurn": {"text": _TEXT},
    "PlaybackStarted": {"unit_id": _TEXT},
    "PlaybackPaused": {"unit_id": _TEXT_OR_NONE},
    "PlaybackResumed": {"unit_id": _TEXT_OR_NONE},
    "BargeIn": {"unit_id": _TEXT_OR_NONE, "words": _TEXT},
    "UnitFinalized": {"finalize": _OBJECT},
    "ToolUsed": {"turn": _WHOLE, "call": _OBJECT, "result": _TEXT},
    "Backchannel": {"text": _TEXT, "speech_ms": _NUMBER},
    "EchoIgnored": {"text": _TEXT, "playing": _TEXT},
    "SessionStarted": {"session": _WHOLE, "how": _TEXT},
    "SessionEnded": {"session": _WHOLE},
    "TurnStage": {"turn": _WHOLE, "stage": _TEXT, "speculative": _FLAG},
    "SpeculationCancelled": {"turn": _WHOLE, "reason": _TEXT},
    "ReplyFailed": {"turn": _WHOLE, "stage": _TEXT, "error": _TEXT, "recovery": _TEXT},
    "Notice": {"text": _TEXT},
}
"""The fields the page reads, per event type (other types and fields are kept, unread)."""

_UNIT_FIELDS = {"unit_id": _TEXT, "generated": _TEXT, "heard": _TEXT, "played_ms": _NUMBER,
                "words": _LIST}
_WORD_FIELDS = {"text": _TEXT, "start_ms": _NUMBER, "end_ms": _NUMBER}
_NESTED = {("UnitFinalized", "finalize"): {"unit_id": _TEXT},
           ("ToolUsed", "call"): {"name": _TEXT, "arguments": _TEXT}}


def read_session(db_path: Path, session_id: str) -> tuple[SessionRecord, list[AudioClip]]:
    """The session `session_id` (or an unambiguous prefix) of the memory database at `db_path`,
    and its kept audio."""
    require_database(db_path, session_id)
    store = MemoryStore.open_reader(db_path)
    try:
        session = named_session(store, session_id)
        record = session_record(store, [session["id"]])
        clips = kept_audio(store, [session["id"]])
    except sqlite3.Error as exc:  # a table dropped, or locked by another program
        raise database_error(db_path, exc) from None
    finally:
        store.close()
    return checked(record, str(db_path)), clips


def read_record_file(path: Path, session_id: str | None = None) -> SessionRecord:
    """The session record in the JSON file at `path`; `session_id`, if given, must be (a
    prefix of) the session it records."""
    text = read_text(path, "the session record", RECORD_FILE_LIMIT)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(str(path), "", f"not JSON ({exc.msg} at line {exc.lineno}, column "
                          f"{exc.colno}): pass a file written by `demo --json` or "
                          "`sessions show --json`") from None
    except RecursionError:
        raise ConfigError(str(path), "", "not a session record: arrays or objects nested "
                          "thousands deep (a record nests a few levels)") from None
    record = checked(data, str(path))
    if session_id and not any(s.startswith(session_id)
                              for s in [record["session_id"], *record["sessions"]]):
        raise ConfigError(str(path), "session_id", f"the file records session "
                          f"{record['session_id']!r}, not {session_id!r}: leave the id out, or "
                          "pass the file of that session")
    return record


def checked(data: object, where: str) -> SessionRecord:
    """`data` if it has the shape of a session record (every field the page reads), with the
    optional fields filled in; else a ConfigError naming the first bad field."""
    record = _require(data, "", _OBJECT, where)
    for key, kind in {"units": _LIST, "events": _LIST}.items():
        _require(record.get(key), key, kind, where)
    session_id = _require(record.get("session_id", ""), "session_id", _TEXT, where)
    sessions = _require(record.get("sessions", [session_id]), "sessions", _LIST, where)
    for i, value in enumerate(sessions):
        _require(value, f"sessions[{i}]", _TEXT, where)
    engines = _require(record.get("engines", {}), "engines", _OBJECT, where)
    for i, unit in enumerate(record["units"]):
        _fields(unit, f"units[{i}]", _UNIT_FIELDS, where)
        for j, word in enumerate(unit["words"]):
            _fields(word, f"units[{i}].words[{j}]", _WORD_FIELDS, where)
    for i, event in enumerate(record["events"]):
        name = f"events[{i}]"
        _fields(event, name, {"at": _NUMBER, "type": _TEXT}, where)
        wanted = EVENT_FIELDS.get(event["type"], {})
        _fields(event, name, wanted, where)
        for key in wanted:
            if (event["type"], key) in _NESTED:
                _fields(event[key], f"{name}.{key}", _NESTED[event["type"], key], where)
    return cast(SessionRecord, {**record, "session_id": session_id, "sessions": sessions,
                                "engines": {str(k): str(v) for k, v in engines.items()},
                                "turns": record.get("turns", []),
                                "llm_requests": record.get("llm_requests", [])})


def _fields(value: object, name: str, fields: dict[str, str], where: str) -> None:
    item = _require(value, name, _OBJECT, where)
    for key, kind in fields.items():
        _require(item.get(key), f"{name}.{key}" if name else key, kind, where)


def _require(value: Any, name: str, kind: str, where: str) -> Any:
    fits = {
        _NUMBER: lambda v: isinstance(v, int | float) and not isinstance(v, bool)
        and math.isfinite(v),
        _WHOLE: lambda v: isinstance(v, int) and not isinstance(v, bool),
        _TEXT: lambda v: isinstance(v, str),
        _TEXT_OR_NONE: lambda v: v is None or isinstance(v, str),
        _FLAG: lambda v: isinstance(v, bool),
        _OBJECT: lambda v: isinstance(v, dict),
        _LIST: lambda v: isinstance(v, list),
    }[kind](value)
    if not fits:
        got = "nothing" if value is None else f"{type(value).__name__} {json.dumps(value)[:60]}"
        raise ConfigError(where, name, f"must be {kind}, got {got}: not a session record as "
                          "`demo --json` or `sessions show --json` writes it")
    return value
