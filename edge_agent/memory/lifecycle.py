"""Store-side steps of a session's life that run on the store's thread: recovering what a
crash left open, resuming or closing open sessions, and the preload for a new session."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

from edge_agent.engines.base import ToolCall
from edge_agent.memory.context import Fact, Preload
from edge_agent.memory.history import Turn
from edge_agent.memory.store import MemoryStore, Row
from edge_agent.memory.summarizer import ExtractiveSummarizer


@dataclass
class Resumed:
    """An open session a restarted agent continues."""

    session_id: str
    turns: list[Turn]
    """Its heard history, recovered units included."""
    summary: str
    """Its running summary."""
    window_start: int
    """The first turn after what the summary covers."""
    facts: list[Fact]
    """Its facts (source turns are indices into `turns`)."""
    units: int
    """The highest unit number it used (new units are numbered after it)."""
    finalized: int
    """How many of its units are final (the next Finalize's `seq`)."""
    recovered: list[str] = field(default_factory=list)
    """What was recovered from checkpoints, one line per unit."""


def recover_units(store: MemoryStore, session_id: str, now: str) -> list[str]:
    """Units still "playing" (the agent died while they played) become final with the heard
    prefix of their last checkpoint, never more, and their heard text becomes the assistant
    turn. Returns a line per recovered unit."""
    lines = []
    for unit in store.units([session_id], state="playing"):
        store.put_unit({"session_id": session_id, "unit_id": unit["unit_id"], "state": "final",
                        "generated": unit["generated"], "heard": unit["heard"],
                        "played_ms": unit["played_ms"], "inexact_words": unit["inexact_words"],
                        "words": unit["words"], "updated_at": now,
                        "seq": _next(store, "units", session_id)})
        if unit["heard"].strip():
            store.put_turn({"session_id": session_id, "seq": _next(store, "turns", session_id),
                            "role": "assistant", "heard": unit["heard"],
                            "generated": unit["generated"], "unit_id": unit["unit_id"], "at": now})
        lines.append(f"{unit['unit_id']}: recovered after a crash, heard "
                     f"{unit['heard']!r} ({unit['played_ms']} ms played)")
    return lines


def resume_or_close(store: MemoryStore, identity: str, now: str, oldest_active: str,
                    max_chars: int) -> Resumed | None:
    """Recover every open session of `identity`; the newest one active since `oldest_active`
    is resumed, the others are closed with an end-of-session summary."""
    resumed: Resumed | None = None
    for session in store.open_sessions(identity):
        recovered = recover_units(store, session["id"], now)
        if resumed is None and session["last_active_at"] >= oldest_active:
            resumed = _resumed(store, session["id"], identity, recovered)
            continue
        close_session(store, session, session["last_active_at"], max_chars)
    return resumed


def session_summary(running: str, lines: Sequence[tuple[str, str]], max_chars: int) -> str:
    """The end-of-session summary: the running summary with the turns after it (heard text
    only, no model: it is written at once, whatever the summarizer)."""
    return ExtractiveSummarizer(max_chars=max_chars).summarize(
        running, lines, threading.Event()).text


def close_session(store: MemoryStore, session: Row, ended_at: str, max_chars: int,
                  summary: str | None = None) -> None:
    """Close a session: its end-of-session summary (`summary`, or made from the database) and
    the profile's pointer to it."""
    turns = store.turns(session["id"])
    if summary is None:
        running = store.latest_summary(session["id"], "running")
        covered = running["last_seq"] if running else -1
        summary = session_summary(
            running["text"] if running else "",
            [(t["role"], t["heard"]) for t in turns if t["seq"] > covered and t["heard"].strip()],
            max_chars)
    if turns:
        store.add_summary({"session_id": session["id"], "kind": "session", "first_seq": 0,
                           "last_seq": turns[-1]["seq"], "text": summary, "at": ended_at})
    store.update_session(session["id"], {"state": "closed", "ended_at": ended_at})
    name = store.open_fact(session["identity"], "name")
    store.put_profile({"identity": session["identity"], "name": name["value"] if name else None,
                       "last_session_id": session["id"], "updated_at": ended_at})


def preload(store: MemoryStore, identity: str) -> Preload:
    """The profile, the last closed session's summary and the open facts of `identity`."""
    profile = store.profile(identity)
    last = store.last_closed_session(identity)
    summary = store.latest_summary(last["id"], "session") if last else None
    return Preload(
        name=(profile or {}).get("name") or "",
        last_session=summary["text"] if summary else "",
        facts=[Fact(f["key"], f["value"], None) for f in store.open_facts(identity)])


def _resumed(store: MemoryStore, session_id: str, identity: str, recovered: list[str]
             ) -> Resumed:
    rows = store.turns(session_id)
    running = store.latest_summary(session_id, "running")
    facts = [Fact(f["key"], f["value"], f["source_seq"]) for f in store.open_facts(identity)
             if f["session_id"] == session_id]
    units = store.units([session_id])
    numbers = [int(u["unit_id"][1:]) for u in units if u["unit_id"][1:].isdigit()]
    return Resumed(session_id, [_turn(row) for row in rows],
                   running["text"] if running else "",
                   running["last_seq"] + 1 if running else 0, facts,
                   max(numbers, default=0), _next(store, "units", session_id), recovered)


def _turn(row: Row) -> Turn:
    if row["role"] == "tool":
        call = ToolCall(row["tool_call_id"] or "", row["tool_name"] or "",
                        row["tool_arguments"] or "{}")
        return Turn("tool", row["heard"], tool_call=call)
    if row["role"] == "assistant":
        return Turn("assistant", row["heard"], row["generated"] or row["heard"], row["unit_id"])
    return Turn(row["role"], row["heard"])


def _next(store: MemoryStore, table: str, session_id: str) -> int:
    return store.next_seq(table, session_id)
