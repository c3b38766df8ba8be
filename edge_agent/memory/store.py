"""The memory database: one SQLite file (sqlite-utils) in the data dir, mode 0600, WAL.

A `MemoryStore` is used by one thread only (the store's owner thread, see `memory.writer`);
the loop never touches it. Writes are grouped into transactions by the writer: a batch that
holds a turn, a Finalize or a session change commits with `synchronous=FULL` (on disk before
the next model request, power loss included); a batch of playback checkpoints only commits
with `synchronous=NORMAL` (WAL: safe across a crash of the process; after a power cut the last
checkpoint may be an older one, which only makes the recovered heard prefix shorter).

Opening never deletes or rewrites a user's file to recover: a damaged, unreadable or newer
database is reported (`StoreError`) and left as it is.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sqlite_utils import Database

from edge_agent.errors import StoreError
from edge_agent.memory.schema import SCHEMA_VERSION, NewerSchemaError, migrate

Row = dict[str, Any]


class MemoryStore:
    def __init__(self, db: Database, path: Path) -> None:
        self.db = db
        self.path = path

    @classmethod
    def open(cls, path: Path, *, upto: int = SCHEMA_VERSION) -> MemoryStore:
        """Open (creating it if needed) and migrate the database at `path`; `upto` is for tests
        that build an older schema."""
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            os.close(os.open(path, os.O_RDWR | os.O_CREAT, 0o600))
            if path.stat().st_mode & 0o077:
                path.chmod(0o600)  # transcripts: nobody but the agent's user reads them
        except OSError as exc:
            raise StoreError(path, f"cannot create or open it ({exc.strerror or exc})",
                             "make the data dir a writable directory (config data_dir)") from None
        connection = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        try:
            return cls._prepare(connection, path, upto)
        except BaseException:
            connection.close()
            raise

    @classmethod
    def _prepare(cls, connection: sqlite3.Connection, path: Path, upto: int) -> MemoryStore:
        try:
            connection.execute("PRAGMA busy_timeout = 5000")
            check = connection.execute("PRAGMA quick_check").fetchone()[0]
            if check != "ok":
                raise StoreError(path, f"the database is damaged (quick_check: {check})",
                                 _DAMAGED_FIX)
            mode = connection.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if mode != "wal":
                raise StoreError(path, f"cannot switch it to WAL (journal mode stays {mode})",
                                 "check that the data dir is writable")
            connection.execute("PRAGMA foreign_keys = ON")
            connection.execute("PRAGMA synchronous = FULL")
            migrate(connection, upto)
        except NewerSchemaError as exc:
            raise StoreError(path, f"it was written by a newer edge-agent ({exc})",
                             "upgrade edge-agent, or point data_dir at another directory; the "
                             "file was left untouched") from None
        except sqlite3.DatabaseError as exc:
            raise StoreError(path, _reason(exc), _fix(exc)) from None
        return cls(Database(connection), path)

    def close(self) -> None:
        self.db.close()

    # -- writing (the writer wraps calls in transactions) -------------------------------------

    def transaction(self, durable: bool) -> _Transaction:
        return _Transaction(self.db.conn, durable)

    def insert_session(self, row: Row) -> None:
        self.db.table("sessions").insert(row)

    def update_session(self, session_id: str, fields: Row) -> None:
        self.db.table("sessions").update(session_id, fields)

    def put_turn(self, row: Row) -> None:
        """Insert or replace the turn at (session_id, seq): a user turn that continues the
        previous one replaces it."""
        self.db.execute(
            "INSERT INTO turns (session_id, seq, role, heard, generated, unit_id, tool_call_id, "
            "tool_name, tool_arguments, at) VALUES (:session_id, :seq, :role, :heard, "
            ":generated, :unit_id, :tool_call_id, :tool_name, :tool_arguments, :at) "
            "ON CONFLICT (session_id, seq) DO UPDATE SET role = excluded.role, "
            "heard = excluded.heard, generated = excluded.generated, unit_id = excluded.unit_id, "
            "tool_call_id = excluded.tool_call_id, tool_name = excluded.tool_name, "
            "tool_arguments = excluded.tool_arguments, at = excluded.at",
            {"generated": None, "unit_id": None, "tool_call_id": None, "tool_name": None,
             "tool_arguments": None, **row})

    def put_unit(self, row: Row) -> None:
        """A checkpoint (state "playing") or the Finalize (state "final") of a unit; a
        checkpoint never overwrites a final row."""
        self.db.execute(
            "INSERT INTO units (session_id, unit_id, state, seq, generated, heard, played_ms, "
            "inexact_words, words, updated_at) VALUES (:session_id, :unit_id, :state, :seq, "
            ":generated, :heard, :played_ms, :inexact_words, :words, :updated_at) "
            "ON CONFLICT (session_id, unit_id) DO UPDATE SET state = excluded.state, "
            "seq = excluded.seq, generated = excluded.generated, heard = excluded.heard, "
            "played_ms = excluded.played_ms, inexact_words = excluded.inexact_words, "
            "words = excluded.words, updated_at = excluded.updated_at "
            "WHERE units.state = 'playing'",
            {"seq": None, "inexact_words": 0, "words": "[]", **row})

    def add_event(self, row: Row) -> None:
        self.db.table("events").insert(row)

    def add_audio(self, row: Row) -> None:
        self.db.table("audio").insert(row)

    def add_llm_request(self, row: Row) -> None:
        self.db.table("llm_requests").insert(row)

    def add_summary(self, row: Row) -> None:
        self.db.table("summaries").insert(row)

    def add_fact(self, row: Row) -> int:
        """Record a fact; the open fact with the same identity and key (if its value differs)
        is superseded by it, and kept. The same value again adds nothing."""
        current = self.open_fact(row["identity"], row["key"])
        if current is not None and current["value"] == row["value"]:
            return int(current["id"])
        inserted = self.db.table("facts").insert({"superseded_by": None, "expires_at": None, **row})
        fact_id = int(inserted.last_pk or 0)
        if current is not None:
            self.db.table("facts").update(current["id"], {"superseded_by": fact_id})
        return fact_id

    def put_profile(self, row: Row) -> None:
        self.db.table("profiles").upsert(row, pk="identity")

    # -- reading ------------------------------------------------------------------------------

    def session(self, session_id: str) -> Row | None:
        rows = list(self.db.query("SELECT * FROM sessions WHERE id = ?", [session_id]))
        return rows[0] if rows else None

    def find_session(self, prefix: str) -> Row | None:
        """A session by its id or an unambiguous prefix of it."""
        rows = list(self.db.query("SELECT * FROM sessions WHERE id LIKE ? || '%' ESCAPE '\\'",
                                  [prefix.replace("%", "\\%").replace("_", "\\_")]))
        return rows[0] if len(rows) == 1 else None

    def sessions(self) -> list[Row]:
        return list(self.db.query(
            "SELECT s.*, (SELECT count(*) FROM turns t WHERE t.session_id = s.id) AS turns "
            "FROM sessions s ORDER BY s.started_at, s.rowid"))

    def open_sessions(self, identity: str) -> list[Row]:
        return list(self.db.query(
            "SELECT * FROM sessions WHERE state = 'open' AND identity = ? "
            "ORDER BY last_active_at DESC", [identity]))

    def last_closed_session(self, identity: str) -> Row | None:
        rows = list(self.db.query(
            "SELECT * FROM sessions WHERE identity = ? AND state = 'closed' "
            "ORDER BY ended_at DESC LIMIT 1", [identity]))
        return rows[0] if rows else None

    def turns(self, session_id: str) -> list[Row]:
        return list(self.db.query("SELECT * FROM turns WHERE session_id = ? ORDER BY seq",
                                  [session_id]))

    def units(self, session_ids: Sequence[str], state: str | None = None) -> list[Row]:
        marks = ",".join("?" * len(session_ids))
        where = "AND state = ?" if state else ""
        args: list[Any] = [*session_ids, *([state] if state else [])]
        return list(self.db.query(
            f"SELECT * FROM units WHERE session_id IN ({marks}) {where} "
            "ORDER BY seq IS NULL, seq, rowid", args))

    def events(self, session_ids: Sequence[str]) -> list[Row]:
        marks = ",".join("?" * len(session_ids))
        return list(self.db.query(
            f"SELECT * FROM events WHERE session_id IN ({marks}) ORDER BY id", list(session_ids)))

    def audio(self, session_ids: Sequence[str]) -> list[Row]:
        marks = ",".join("?" * len(session_ids))
        return list(self.db.query(
            f"SELECT * FROM audio WHERE session_id IN ({marks}) ORDER BY id", list(session_ids)))

    def llm_requests(self, session_ids: Sequence[str]) -> list[Row]:
        marks = ",".join("?" * len(session_ids))
        return list(self.db.query(
            f"SELECT * FROM llm_requests WHERE session_id IN ({marks}) ORDER BY id",
            list(session_ids)))

    def latest_summary(self, session_id: str, kind: str) -> Row | None:
        rows = list(self.db.query(
            "SELECT * FROM summaries WHERE session_id = ? AND kind = ? "
            "ORDER BY last_seq DESC, id DESC LIMIT 1", [session_id, kind]))
        return rows[0] if rows else None

    def open_fact(self, identity: str, key: str) -> Row | None:
        rows = list(self.db.query(
            "SELECT * FROM facts WHERE identity = ? AND key = ? AND superseded_by IS NULL "
            "ORDER BY id DESC LIMIT 1", [identity, key]))
        return rows[0] if rows else None

    def open_facts(self, identity: str | None = None) -> list[Row]:
        where, args = ("AND identity = ?", [identity]) if identity is not None else ("", [])
        return list(self.db.query(
            f"SELECT * FROM facts WHERE superseded_by IS NULL {where} ORDER BY id", args))

    def facts(self) -> list[Row]:
        return list(self.db.query("SELECT * FROM facts ORDER BY id"))

    def profile(self, identity: str) -> Row | None:
        rows = list(self.db.query("SELECT * FROM profiles WHERE identity = ?", [identity]))
        return rows[0] if rows else None

    def integrity(self) -> str:
        return str(self.db.execute("PRAGMA integrity_check").fetchone()[0])

    # -- maintenance --------------------------------------------------------------------------

    def delete_session(self, session_id: str) -> bool:
        """Forget a session: its turns, units, events, requests, summaries and the facts it
        gave (older values those facts superseded become current again)."""
        with self.db.atomic():
            found = self.session(session_id) is not None
            self.db.execute("DELETE FROM facts WHERE session_id = ?", [session_id])
            self.db.execute("UPDATE profiles SET last_session_id = NULL WHERE last_session_id = ?",
                            [session_id])
            self.db.execute("DELETE FROM sessions WHERE id = ?", [session_id])
        return found

    def forget_fact(self, key: str, identity: str | None = None) -> int:
        """Delete every value (current and superseded) of `key`; returns how many rows."""
        where, args = ("AND identity = ?", [identity]) if identity is not None else ("", [])
        with self.db.atomic():
            cursor = self.db.execute(f"DELETE FROM facts WHERE key = ? {where}", [key, *args])
        return int(cursor.rowcount)

    def expire_events(self, before: str) -> int:
        """Delete the event logs, request logs and kept audio of sessions last active before
        `before` (ISO time); their turns, summaries and facts stay."""
        with self.db.atomic():
            old = "SELECT id FROM sessions WHERE last_active_at < ? AND state = 'closed'"
            cursor = self.db.execute(f"DELETE FROM events WHERE session_id IN ({old})", [before])
            self.db.execute(f"DELETE FROM llm_requests WHERE session_id IN ({old})", [before])
            self.db.execute(f"DELETE FROM audio WHERE session_id IN ({old})", [before])
        return int(cursor.rowcount)


_DAMAGED_FIX = ("it was left untouched: move it away (edge-agent then starts a new memory) or "
                "restore a backup; `sqlite3 FILE .recover` may save its rows")


def _reason(exc: sqlite3.DatabaseError) -> str:
    text = str(exc)
    if "not a database" in text or "malformed" in text:
        return f"it is not a SQLite database or it is damaged ({text})"
    if "readonly" in text or "unable to open" in text:
        return f"it cannot be written ({text})"
    if "full" in text:
        return f"the disk is full ({text})"
    return text


def _fix(exc: sqlite3.DatabaseError) -> str:
    text = str(exc)
    if "not a database" in text or "malformed" in text:
        return _DAMAGED_FIX
    if "full" in text:
        return "free some space on the data dir's disk"
    return "check that the data dir and the database file are writable by this user"


class _Transaction:
    """BEGIN ... COMMIT (ROLLBACK on error), with the durability the batch needs."""

    def __init__(self, connection: sqlite3.Connection, durable: bool) -> None:
        self._connection = connection
        self._durable = durable

    def __enter__(self) -> None:
        self._connection.execute(f"PRAGMA synchronous = {'FULL' if self._durable else 'NORMAL'}")
        self._connection.execute("BEGIN IMMEDIATE")

    def __exit__(self, kind: object, error: object, _trace: object) -> None:
        if error is None:
            self._connection.execute("COMMIT")
        elif self._connection.in_transaction:
            self._connection.execute("ROLLBACK")


def dumps(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
