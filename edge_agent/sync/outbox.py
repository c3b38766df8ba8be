"""The kiosk's side of the venue sync: the queue of changed rows in its own memory database.

Triggers (schema migration 4) put a row's table and key in `outbox` when it is inserted,
updated or deleted, while `sync_control.queue` says so. A row is queued once, at the place of
its first change since it was last sent (a playing unit's checkpoints do not grow the queue);
what is sent is its state when the batch is read, or its deletion if it is gone. A row that
changed again while its batch was on the way stays queued (`changes` differs) and goes again.

The queue is read and trimmed on a connection of its own, beside the agent's writer (WAL: the
batch is read in one snapshot; the trims are short write transactions SQLite serialises with
the writer's). Rows from the venue (another kiosk's facts and profile of this identity) are
written on it too, newest first as in consolidation.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edge_agent.memory.schema import (
    KEY_COLUMNS,
    QUEUE_DELETIONS,
    QUEUE_OFF,
    QUEUE_ON,
    SYNCED_KEYS,
)
from edge_agent.memory.store import MemoryStore, Row

Wall = Callable[[], float]
"""Unix time now (the queue's `changed_at` is SQLite's wall clock)."""


@dataclass(frozen=True)
class Change:
    """One queued row and what to send for it."""

    outbox_id: int
    """Its place in the queue (the order of first changes)."""
    table: str
    key: str
    """The row's key as queued: its id, or for a unit [session_id, unit_id] as JSON."""
    changes: int
    """Changes counted when it was read: the queue entry is taken off only if still so."""
    changed_at: float
    """Unix time of the last change the sent state holds."""
    row: Row | None
    """The row as it is now (every column), or None: it was deleted."""


@dataclass(frozen=True)
class Backlog:
    """The queue, as `sync status` shows it."""

    waiting: int
    """Rows waiting to be sent."""
    refused: int
    """Rows the venue's store refused (kept; sent again by `sync --once --resend-refused`)."""
    oldest_at: float | None
    """Unix time of the oldest waiting change."""
    queue: int
    """`sync_control.queue`: off, on, or deletions only (the backlog was over its bound)."""
    control: Row
    """The `sync_control` row (last attempt, success, error, counts)."""


@dataclass(frozen=True)
class VenueFact:
    """An open fact of this identity, written at another kiosk."""

    key: str
    value: str
    at: str
    kiosk_id: str
    expires_at: str | None


@dataclass(frozen=True)
class VenueProfile:
    """The newest profile of this identity at another kiosk."""

    name: str | None
    updated_at: str
    kiosk_id: str


def key_values(table: str, key: str) -> tuple[str, ...]:
    """A queued key's values, in `KEY_COLUMNS[table]`'s order."""
    return tuple(json.loads(key)) if len(KEY_COLUMNS[table]) > 1 else (key,)


class Outbox:
    def __init__(self, store: MemoryStore, wall: Wall = time.time) -> None:
        self.store = store
        self._wall = wall

    @classmethod
    def open(cls, path: Path, wall: Wall = time.time) -> Outbox:
        """Beside whoever writes the database (StoreError if it cannot be used)."""
        return cls(MemoryStore.open_reader(path, query_only=False), wall)

    def close(self) -> None:
        self.store.close()

    @property
    def _db(self) -> Any:
        return self.store.db

    # -- switching the queue ------------------------------------------------------------------

    def switch_on(self, url: str, kiosk_id: str) -> bool:
        """Queue every change from now on, for the store at `url` as `kiosk_id`. When the queue
        was off, or was for another store or kiosk id, every row is queued (the new store gets
        all of it); True then."""
        with self.store.transaction(durable=True):
            control = self.control()
            if (control["queue"] == QUEUE_ON and control["url"] == url
                    and control["kiosk_id"] == kiosk_id):
                return False
            if control["url"] != url or control["kiosk_id"] != kiosk_id:
                self._db.execute("DELETE FROM outbox")
                self._db.execute("UPDATE sync_control SET sent_rows = 0, last_success_at = NULL, "
                                 "last_error = NULL, last_error_at = NULL, failures = 0")
            self._queue_everything()
            self._db.execute("UPDATE sync_control SET queue = ?, url = ?, kiosk_id = ?, "
                             "database_id = coalesce(database_id, ?)",
                             [QUEUE_ON, url, kiosk_id, uuid.uuid4().hex])
        return True

    @property
    def database_id(self) -> str:
        """This database's id in the venue (made when the queue was first switched on)."""
        return str(self.control()["database_id"] or "")

    def switch_off(self) -> None:
        """No [sync] url any more: nothing is queued and the queue is emptied."""
        with self.store.transaction(durable=True):
            self._db.execute("UPDATE sync_control SET queue = ?", [QUEUE_OFF])
            self._db.execute("DELETE FROM outbox")

    def bound(self, max_backlog: int) -> bool:
        """Over `max_backlog` waiting rows, queue deletions only (True when it switches);
        once the queue is empty again, every row is queued (nothing was lost)."""
        control = self.control()
        waiting = self.waiting()
        if control["queue"] == QUEUE_ON and waiting >= max_backlog:
            self._db.execute("UPDATE sync_control SET queue = ?", [QUEUE_DELETIONS])
            return True
        if control["queue"] == QUEUE_DELETIONS and waiting == 0:
            with self.store.transaction(durable=True):
                self._queue_everything()
                self._db.execute("UPDATE sync_control SET queue = ?", [QUEUE_ON])
        return False

    def _queue_everything(self) -> None:
        now = self._wall()
        for table, key in SYNCED_KEYS.items():
            self._db.execute(
                f"INSERT INTO outbox (tbl, key, changed_at) SELECT '{table}', "
                f"{key.format(row=table)}, ? FROM {table} ORDER BY rowid "
                "ON CONFLICT (tbl, key) DO UPDATE SET changes = changes + 1", [now])

    # -- sending ------------------------------------------------------------------------------

    def batch(self, limit: int) -> list[Change]:
        """The first `limit` queued rows (not refused), each with its state now, read in one
        snapshot."""
        changes = []
        with self.store.transaction(durable=False, write=False):
            queued = list(self._db.query(
                "SELECT id, tbl, key, changes, changed_at FROM outbox WHERE refused IS NULL "
                "ORDER BY id LIMIT ?", [limit]))
            for entry in queued:
                changes.append(Change(entry["id"], entry["tbl"], entry["key"], entry["changes"],
                                      entry["changed_at"], self._row(entry["tbl"], entry["key"])))
        return changes

    def _row(self, table: str, key: str) -> Row | None:
        columns = KEY_COLUMNS[table]
        where = " AND ".join(f"{column} = ?" for column in columns)
        rows = list(self._db.query(f"SELECT * FROM {table} WHERE {where}",
                                   list(key_values(table, key))))
        return rows[0] if rows else None

    def sent(self, changes: Sequence[Change], at: str) -> None:
        """`changes` are in the venue's store: off the queue, unless changed again since."""
        with self.store.transaction(durable=False):
            self._db.conn.executemany("DELETE FROM outbox WHERE id = ? AND changes = ?",
                                      [(c.outbox_id, c.changes) for c in changes])
            self._db.execute(
                "UPDATE sync_control SET sent_rows = sent_rows + ?, last_success_at = ?, "
                "last_attempt_at = ?, failures = 0, last_error = NULL, last_error_at = NULL",
                [len(changes), at, at])

    def refuse(self, change: Change, reason: str) -> None:
        """The store refused this row (bad data): it stays queued, set aside."""
        self._db.execute("UPDATE outbox SET refused = ? WHERE id = ?", [reason, change.outbox_id])

    def resend_refused(self) -> int:
        """Put the refused rows back in line; how many."""
        cursor = self._db.execute("UPDATE outbox SET refused = NULL WHERE refused IS NOT NULL")
        return int(cursor.rowcount)

    def failed(self, error: str, at: str) -> None:
        self._db.execute(
            "UPDATE sync_control SET failures = failures + 1, last_error = ?, last_error_at = ?, "
            "last_attempt_at = ?", [error, at, at])

    def attempted(self, at: str) -> None:
        self._db.execute("UPDATE sync_control SET last_attempt_at = ?", [at])

    # -- reading the state --------------------------------------------------------------------

    def control(self) -> Row:
        return dict(next(iter(self._db.query("SELECT * FROM sync_control WHERE id = 1"))))

    def waiting(self) -> int:
        return int(self._db.execute(
            "SELECT count(*) FROM outbox WHERE refused IS NULL").fetchone()[0])

    def backlog(self) -> Backlog:
        waiting, refused, oldest = self._db.execute(
            "SELECT count(*) FILTER (WHERE refused IS NULL), count(refused), "
            "min(changed_at) FILTER (WHERE refused IS NULL) FROM outbox").fetchone()
        control = self.control()
        return Backlog(int(waiting), int(refused), oldest, int(control["queue"]), control)

    def refusals(self, limit: int = 5) -> list[Row]:
        return list(self._db.query(
            "SELECT tbl, key, refused FROM outbox WHERE refused IS NOT NULL ORDER BY id LIMIT ?",
            [limit]))

    # -- what comes back ----------------------------------------------------------------------

    def take_venue_memory(self, identity: str, facts: Sequence[VenueFact],
                          profile: VenueProfile | None, at: str) -> int:
        """Another kiosk's facts and profile of `identity`, newest wins: a fact whose key has
        no open value here, or an older one, is added (the older one is kept, superseded).
        Returns how many facts were taken. They are queued like any change: the venue learns
        that this kiosk knows them, and the kiosk that said them finds nothing newer."""
        taken = 0
        with self.store.transaction(durable=True):
            for fact in facts:
                current = self.store.open_fact(identity, fact.key)
                if current is not None and (current["value"] == fact.value
                                            or current["at"] >= fact.at):
                    continue
                self.store.add_fact({
                    "identity": identity, "session_id": None, "key": fact.key,
                    "value": fact.value, "source": f"venue:{fact.kiosk_id}",
                    "source_seq": None, "at": fact.at, "expires_at": fact.expires_at})
                taken += 1
            mine = self.store.profile(identity)
            if profile is not None and (mine is None or mine["updated_at"] < profile.updated_at):
                self.store.put_profile({
                    "identity": identity, "name": profile.name,
                    "last_session_id": mine["last_session_id"] if mine else None,
                    "updated_at": profile.updated_at})
            self._db.execute("UPDATE sync_control SET pulled_at = ?", [at])
        return taken
