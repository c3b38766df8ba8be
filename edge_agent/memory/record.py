"""The session record: what was said, what each unit generated and what was heard.

One shape for every consumer: `demo --json`, `run --json` and `sessions show --json` all
build it here, from the memory database.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NotRequired, TypedDict

from edge_agent.errors import ConfigError, StoreError
from edge_agent.events import LoggedEvent
from edge_agent.heard.ledger import Finalize
from edge_agent.memory.store import MemoryStore, Row
from edge_agent.printable import shown


class WordRecord(TypedDict):
    text: str
    """The word as written in the unit's text (punctuation attached)."""
    start_ms: int
    """Where its speech starts, in milliseconds of the unit's audio."""
    end_ms: int
    """Where its speech ends (pauses after it excluded)."""
    exact: NotRequired[bool]
    """Present (false) only for a token with safe bounds instead of exact phoneme timings."""


class UnitRecord(TypedDict):
    unit_id: str
    """The unit: one reply's speech, "u1", "u2"... in the order they were said."""
    generated: str
    """Everything the model generated for it."""
    heard: str
    """The prefix of `generated` that reached the listener (whole words)."""
    interrupted: bool
    """The listener cut it: `heard` is shorter than `generated`."""
    played_ms: int
    """How much of its audio reached the device."""
    inexact_words: int
    """Words timed by safe bounds instead of exact phoneme timings."""
    words: list[WordRecord]
    """Every word synthesized for it, with its timing."""


class TurnRecord(TypedDict, total=False):
    role: str
    """"user", "assistant" or "tool"."""
    text: str
    """User: the transcript; assistant: the heard prefix."""
    generated: str
    """Assistant: everything the model generated."""
    unit_id: str | None
    """Assistant: the unit that said it."""
    interrupted: bool
    """Assistant: the listener cut it."""
    name: str
    """Tool: the tool's name."""
    arguments: str
    """Tool: the arguments, as the model wrote them (JSON text)."""
    result: str
    """Tool: what it returned."""
    session: int
    """Which session of the record (1 = the first)."""


class LlmRequestRecord(TypedDict):
    turn: int
    """The user turn it answered (1 = the first of its run)."""
    hop: int
    """1 for a reply's first request; one more after each round of tool calls."""
    messages: list[dict[str, Any]]
    """The chat messages sent to the model, exactly."""


class SessionRecord(TypedDict):
    session_id: str
    """The (first) session's id."""
    sessions: list[str]
    """Every session the record covers (a run may open several)."""
    engines: dict[str, str]
    """The engines that ran it, by role ("stt", "llm", "tts", "echo_cancel"...)."""
    turns: list[TurnRecord]
    units: list[UnitRecord]
    llm_requests: list[LlmRequestRecord]
    events: list[dict[str, Any]]
    """Every event of the log as {"at", "type", "run_id", ...fields} (requests are in
    llm_requests); "at" is on the clock of the run "run_id" (a session resumed after a
    restart spans several runs)."""


def session_record(store: MemoryStore, session_ids: Sequence[str], run_id: str = ""
                   ) -> SessionRecord:
    """The record of `session_ids`, in order, read from the store."""
    ids = list(session_ids)
    first = store.session(ids[0]) if ids else None
    stored = _StoredJson(store.path)
    return {
        "session_id": ids[0] if ids else run_id,
        "sessions": ids,
        "engines": stored.parse(first["engines"], dict, f"session {first['id']}: its engines")
        if first else {},
        "turns": [{**_turn_record(row), "session": number}
                  for number, session_id in enumerate(ids, 1)
                  for row in store.turns(session_id)],
        "units": [_unit_record(row, stored) for session_id in ids
                  for row in store.units([session_id], state="final")],
        "llm_requests": [{"turn": r["turn"], "hop": r["hop"],
                          "messages": stored.parse(r["messages"], list,
                                                   f"llm_requests row {r['id']}: its messages")}
                         for r in (store.llm_requests(ids) if ids else [])],
        # The row's own at and type come first: an event whose data lost its fields is still
        # named by its type when the record is checked.
        "events": [{"at": r["at"], "type": r["type"],
                    **stored.parse(r["data"], dict, f"events row {r['id']}: its data"),
                    "run_id": r["run_id"]}
                   for r in (store.events(ids) if ids else [])],
    }


def record_events(record: SessionRecord) -> list[LoggedEvent]:
    """The record's events, typed (`LoggedEvent.from_json`), in order, with their runs; a type
    this version does not know is left out. The one reader of a record's events: `inspect`,
    `sessions replay` and the benchmarks read them here. A record from a file is checked first
    (`record_check.checked`); here a field that does not fit raises `shapes.ShapeError`."""
    return [entry for entry in map(LoggedEvent.from_json, record["events"])
            if entry is not None]


class _StoredJson:
    """JSON columns of the memory database, parsed: text that is not JSON of the right kind
    (a row changed outside edge-agent) is a StoreError naming the row, not a traceback."""

    def __init__(self, path: Path) -> None:
        self._path = path

    def parse(self, text: object, kind: type, what: str) -> Any:
        try:
            value = json.loads(text) if isinstance(text, str | bytes) else None
        except (ValueError, RecursionError):
            value = None
        if not isinstance(value, kind):
            raise StoreError(self._path, f"{what} is not a JSON {kind.__name__} (it holds "
                             f"{shown(str(text), 60)})", "the row was changed outside edge-agent: "
                             "restore the database from a backup, or `edge-agent sessions "
                             "delete` that session")
        return value


def unit_words(finalize: Finalize) -> list[WordRecord]:
    """A unit's word timings as recorded: milliseconds into its audio."""
    rate = finalize.sample_rate

    def ms(sample: int) -> int:
        return round(sample * 1000 / rate)

    words: list[WordRecord] = []
    for w in finalize.words:
        word: WordRecord = {"text": w.text, "start_ms": ms(w.start_sample),
                            "end_ms": ms(w.end_sample)}
        if not w.exact:
            word["exact"] = False
        words.append(word)
    return words


def _unit_record(row: Row, stored: _StoredJson) -> UnitRecord:
    return {"unit_id": row["unit_id"], "generated": row["generated"], "heard": row["heard"],
            "interrupted": row["heard"] != row["generated"], "played_ms": row["played_ms"],
            "inexact_words": row["inexact_words"],
            "words": stored.parse(row["words"], list, f"unit {row['unit_id']!r}: its words")}


def _turn_record(row: Row) -> TurnRecord:
    if row["role"] == "tool":
        return {"role": "tool", "name": row["tool_name"], "arguments": row["tool_arguments"],
                "result": row["heard"]}
    if row["role"] == "assistant":
        generated = row["generated"] or ""
        return {"role": "assistant", "text": row["heard"], "generated": generated,
                "unit_id": row["unit_id"], "interrupted": row["heard"] != generated}
    return {"role": row["role"], "text": row["heard"]}


def require_database(db_path: Path, session_id: str) -> None:
    """A session was named: that there is no database yet is an error (exit 2)."""
    if not db_path.exists():
        raise ConfigError(str(db_path), session_id, "no memory database here yet, so no such "
                          "session: check the config's data_dir")


def named_session(store: MemoryStore, prefix: str) -> Row:
    """The session `prefix` names (its id or an unambiguous prefix of it)."""
    session = store.find_session(prefix)
    if session is None:
        raise ConfigError("sessions", prefix, "no such session (or the prefix matches several): "
                          "`edge-agent sessions list` shows the ids")
    return session
