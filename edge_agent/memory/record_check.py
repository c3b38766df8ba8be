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

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

from edge_agent.errors import ConfigError
from edge_agent.events import CLOCK, COUNT_RANGE, MAX_MS, MS_RANGE, LoggedEvent
from edge_agent.memory.kept_audio import AudioClip
from edge_agent.memory.record import SessionRecord
from edge_agent.printable import shown
from edge_agent.shapes import LIST, NUMBER, OBJECT, TEXT, WHOLE, Kind, ShapeError, require

MS = NUMBER.bounded(MS_RANGE)
"""A length in a unit (`played_ms`, word times): a number, fractions allowed."""
COUNT = WHOLE.bounded(COUNT_RANGE)
__all__ = ["MAX_MS", "checked", "checked_clips"]

FILE_HINT = "not a session record as `demo --json` or `sessions show --json` writes it"
DATABASE_HINT = ("the database's record of the session is damaged: `sessions show --json` "
                 "shows it as stored")


_UNIT_FIELDS = {"unit_id": TEXT, "generated": TEXT, "heard": TEXT, "played_ms": MS,
                "words": LIST}
_WORD_FIELDS = {"text": TEXT, "start_ms": MS, "end_ms": MS}
_REQUEST_FIELDS = {"turn": COUNT, "hop": COUNT}


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
    """An event of the record, checked against its dataclass (`LoggedEvent.from_json`)."""
    item = _fields(event, name, {"type": TEXT}, where)
    what = f" (a {shown(item['type'], 40)} event)"
    try:
        LoggedEvent.from_json(item)
    except ShapeError as error:
        raise ConfigError(where.source, f"{name}.{error.path}",
                          f"{error.reason}{what}: {where.hint}") from None


def _fields(value: object, name: str, fields: dict[str, Kind], where: _Where) -> dict[str, Any]:
    item: dict[str, Any] = _require(value, name, OBJECT, where)
    for key, kind in fields.items():
        _require(item.get(key), f"{name}.{key}" if name else key, kind, where)
    return item


def _require(value: Any, name: str, kind: Kind, where: _Where) -> Any:
    try:
        return require(value, name, kind)
    except ShapeError as error:
        raise ConfigError(where.source, name, f"{error.reason}: {where.hint}") from None
