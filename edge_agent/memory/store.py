"""The memory database: one SQLite file (sqlite-utils) in the data dir, mode 0600, WAL, with one
writer at a time (`writer_lock`) and any number of read-only readers.

A `MemoryStore` is used by one thread only (the store's owner thread, see `memory.writer`);
the loop never touches it. Writes are grouped into transactions by the writer: a batch that
holds a turn, a Finalize or a session change commits with `synchronous=FULL` (on disk before
the next model request, power loss included); a batch of playback checkpoints only commits
with `synchronous=NORMAL` (WAL: safe across a crash of the process; after a power cut the last
checkpoint may be an older one, which only makes the recovered heard prefix shorter).

Opening never deletes or rewrites a user's file to recover: a damaged, unreadable or newer
database is reported (`StoreError`) and left byte-for-byte as it is (`database_file` reads it
read-only before anything writes), and a path that is not a regular file is never opened.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sqlite_utils import Database

from edge_agent.errors import AlreadyRunningError, StoreError
from edge_agent.files import NotRegularFileError, open_regular
from edge_agent.memory.database_file import (
    BUSY_TIMEOUT_MS,
    checked_state,
    database_error,
    exists_as_file,
)
from edge_agent.memory.schema import (
    SCHEMA_VERSION,
    AudioRow,
    EventRow,
    FactRow,
    LlmRequestRow,
    NewerSchemaError,
    ProfileRow,
    SessionRow,
    SummaryRow,
    TurnRow,
    UnitRow,
    migrate,
)
from edge_agent.memory.writer_lock import WriterLock

Row = dict[str, Any]
"""A row as read (every column); rows written have their table's shape (`schema.ROWS`)."""


class MemoryStore:
    def __init__(self, db: Database, path: Path, lock: WriterLock | None = None) -> None:
        self.db = db
        self.path = path
        self.lock = lock
        """The writer lock this store took (and releases on close); None for a reader, or a
        writer whose lock its caller holds."""

    @classmethod
    def open(cls, path: Path, *, upto: int = SCHEMA_VERSION,
             lock: WriterLock | None = None) -> MemoryStore:
        """Open for writing (creating it if needed) and migrate the database at `path`, holding
        its writer lock: `lock` if the caller took it already (before loading models, say),
        else one taken here and released on close. `upto` is for tests that build an older
        schema."""
        exists = exists_as_file(path)  # a symlink or a device: refused before anything
        owned = WriterLock.acquire(path) if lock is None else None
        try:
            if exists:
                checked_state(path)  # read only: a refused file is left byte-for-byte alone
            connection = _connect_own(path)
            try:
                return cls._prepare(connection, path, upto, owned)
            except BaseException:
                connection.close()
                raise
        except BaseException:
            if owned is not None:
                owned.release()
            raise

    @classmethod
    def open_reader(cls, path: Path, *, query_only: bool = True) -> MemoryStore:
        """Open the existing database at `path` for queries only, without its writer lock: a
        reader never waits for the writer nor makes it wait (WAL). An older schema is upgraded first,
        which takes the writer lock for a moment. `query_only=False` is for the venue sync,
        which writes only its queue and what comes back from the venue, in short transactions
        beside the writer (SQLite serialises them)."""
        if not exists_as_file(path):
            raise StoreError(path, "it does not exist", "check the config's data_dir")
        state = checked_state(path)
        if state.version < SCHEMA_VERSION:
            try:
                cls.open(path).close()
            except AlreadyRunningError as exc:
                raise StoreError(path, f"its schema (version {state.version}) must be upgraded "
                                 f"first, and {exc}", "try again when it stops") from None
        # Read-write but query-only, not SQLite's read-only mode: a read-only connection leaves
        # the -wal and -shm files it made behind, owned by whoever read (root, say), where the
        # agent's user may not open them; the last connection to close removes them.
        connection = _connect_own(path)
        try:
            connection.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            connection.execute(f"PRAGMA query_only = {'ON' if query_only else 'OFF'}")
            connection.execute("PRAGMA foreign_keys = ON")
        except sqlite3.DatabaseError as exc:
            connection.close()
            raise database_error(path, exc) from None
        return cls(Database(connection), path)

    @classmethod
    def _prepare(cls, connection: sqlite3.Connection, path: Path, upto: int,
                 lock: WriterLock | None) -> MemoryStore:
        try:
            connection.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
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
            raise database_error(path, exc) from None
        return cls(Database(connection), path, lock)

    def close(self) -> None:
        try:
            self.db.close()
        finally:
            if self.lock is not None:
                self.lock.release()

    # -- writing (the writer wraps calls in transactions) -------------------------------------

    def transaction(self, durable: bool, write: bool = True) -> _Transaction:
        """A write transaction (BEGIN IMMEDIATE), or with `write=False` a read snapshot."""
        return _Transaction(self.db.conn, durable, write)

    def insert_session(self, row: SessionRow) -> None:
        self.db.table("sessions").insert(dict(row))

    def update_session(self, session_id: str, fields: Row) -> None:
        self.db.table("sessions").update(session_id, fields)

    def put_turn(self, row: TurnRow) -> None:
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

    def put_unit(self, row: UnitRow) -> None:
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

    def add_event(self, row: EventRow) -> None:
        self.db.table("events").insert(dict(row))

    def add_audio(self, row: AudioRow) -> None:
        self.db.table("audio").insert(dict(row))

    def add_llm_request(self, row: LlmRequestRow) -> None:
        self.db.table("llm_requests").insert(dict(row))

    def add_summary(self, row: SummaryRow) -> None:
        self.db.table("summaries").insert(dict(row))

    def add_fact(self, row: FactRow) -> int:
        """Record a fact; the open fact with the same identity and key (if its value differs)
        is superseded by it, and kept. The same value again adds nothing."""
        current = self.open_fact(row["identity"], row["key"])
        if current is not None and current["value"] == row["value"]:
            return int(current["id"])
        inserted = self.db.table("facts").insert({"superseded_by": None, "expires_at": None, **row})
        fact_id = int(inserted.last_pk or 0)
        if current is not None:
            self.supersede_fact(current["id"], fact_id)
        return fact_id

    def supersede_fact(self, fact_id: int, by: int) -> None:
        """Fact `fact_id` is no longer current: fact `by` replaced it (it is kept)."""
        self.db.table("facts").update(fact_id, {"superseded_by": by})

    def put_profile(self, row: ProfileRow) -> None:
        self.db.table("profiles").upsert(dict(row), pk="identity")

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

    def session_facts(self, session_id: str) -> list[Row]:
        """The facts a session gave, current and superseded, oldest first (an export's)."""
        return list(self.db.query(
            "SELECT key, value, source, source_seq, at, superseded_by FROM facts "
            "WHERE session_id = ? ORDER BY id", [session_id]))

    def summaries(self, session_id: str) -> list[Row]:
        """A session's summaries, running and final, oldest first."""
        return list(self.db.query(
            "SELECT kind, first_seq, last_seq, text, at FROM summaries WHERE session_id = ? "
            "ORDER BY id", [session_id]))

    def identities(self) -> list[str]:
        """Every identity the memory knows something of (a profile or a fact), sorted."""
        return sorted(str(row["identity"]) for row in self.db.query(
            "SELECT identity FROM profiles UNION SELECT identity FROM facts"))

    def next_seq(self, table: str, session_id: str) -> int:
        """The next `seq` of a session in `table` ("turns" or "units"): one past the largest."""
        if table not in ("turns", "units"):
            raise ValueError(f"no seq column in {table!r}")
        found = self.db.execute(f"SELECT max(seq) FROM {table} WHERE session_id = ?",
                                [session_id]).fetchone()[0]
        return 0 if found is None else int(found) + 1

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

    def delete_expired_facts(self, now: str) -> int:
        """Delete the facts whose `expires_at` is before `now` (ISO time); how many."""
        cursor = self.db.execute(
            "DELETE FROM facts WHERE expires_at IS NOT NULL AND expires_at < ?", [now])
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


def _connect_own(path: Path) -> sqlite3.Connection:
    """A read-write connection to `path`, created 0600 if missing (the mode given at creation,
    never a chmod: a file we did not create keeps its mode). A file that is there must be a
    regular file (never followed: `exists_as_file`), and SQLite's own open by name must find
    that same file.

    An existing database is never opened here with a descriptor of our own: closing any
    descriptor of a file drops every POSIX lock this process holds on it, the locks of its other
    SQLite connections included (the agent's writer, the sync's queue). Another process (`sync
    --once`, `sessions`) would then find the database unused, and on its close delete the WAL
    the agent still writes: "disk I/O error", and its turns lost."""
    if not exists_as_file(path):
        try:
            os.close(open_regular(path, os.O_RDWR | os.O_CREAT | os.O_EXCL))
        except FileExistsError:
            pass  # made a moment ago by another process: checked below like any other
        except NotRegularFileError as exc:
            raise StoreError(path, f"it is {exc.kind}, not a database file",
                             "point data_dir (or --db) at a regular file or a new path") from None
        except OSError as exc:
            raise StoreError(path, f"cannot create or open it ({exc.strerror or exc})",
                             "make the data dir a writable directory (config data_dir)") from None
    exists_as_file(path)
    before = os.lstat(path)
    connection = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
    after = os.lstat(path)
    if (before.st_dev, before.st_ino) != (after.st_dev, after.st_ino):
        connection.close()
        raise StoreError(path, "it was replaced while it was being opened",
                         "check who else writes in the data dir, then try again")
    return connection


class _Transaction:
    """BEGIN ... COMMIT (ROLLBACK on error), with the durability the batch needs."""

    def __init__(self, connection: sqlite3.Connection, durable: bool, write: bool = True) -> None:
        self._connection = connection
        self._durable = durable
        self._write = write

    def __enter__(self) -> None:
        self._connection.execute(f"PRAGMA synchronous = {'FULL' if self._durable else 'NORMAL'}")
        self._connection.execute("BEGIN IMMEDIATE" if self._write else "BEGIN")

    def __exit__(self, kind: object, error: object, _trace: object) -> None:
        if error is None:
            self._connection.execute("COMMIT")
        elif self._connection.in_transaction:
            self._connection.execute("ROLLBACK")


def dumps(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
