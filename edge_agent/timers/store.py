"""The `timers` table of the memory database: timers, alarms and reminders, kept on disk.

Each row is committed before the caller is told it is set, so a timer survives a restart and a
power cut; one that came due while the agent was down is found at the next start. Moments are
stored as UTC ISO text (the wall clock, not a monotonic one: they must mean the same after a
reboot). A row is "set" until it rings, "ringing" while it does, then "done" (stopped by the
listener), "unanswered" (it rang for `[timers] ring_for_s` and nobody stopped it) or
"cancelled". Ended rows are deleted after the memory's retention (a reminder's words are the
caller's).

It is written from the agent's "timers" owner thread, with a connection of its own
(`ThreadDatabases`): SQLite's WAL lets it and the memory writer share the file.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Literal, cast

from sqlite_utils import Database

from edge_agent.memory.thread_db import ThreadDatabases
from edge_agent.timers.commands import Kind

State = Literal["set", "ringing", "done", "unanswered", "cancelled"]
ACTIVE: tuple[State, ...] = ("set", "ringing")
"""States of a timer that has not ended."""
_ACTIVE_SQL = "(" + ", ".join(f"'{state}'" for state in ACTIVE) + ")"
"""`ACTIVE` as SQL's list: "('set', 'ringing')"."""


@dataclass(frozen=True)
class Timer:
    """One timer, alarm or reminder as stored."""

    timer_id: int
    """Its row id (the number events and records give it)."""
    kind: Kind
    """"timer", "alarm" or "reminder"."""
    label: str
    """The caller's name for it, or what a reminder is about ("" if none)."""
    due: datetime
    """When it rings (aware, UTC)."""
    set_at: datetime
    """When it was set (aware, UTC)."""
    seconds: float | None
    """A timer's length as asked ("a 10 minute timer"); None for a time of day."""
    state: State
    """Where it is in its life (see the module)."""


class TimerStore:
    def __init__(self, db_path: Path, retention_days: float) -> None:
        self.db_path = db_path
        self._retention = timedelta(days=retention_days)
        self._databases = ThreadDatabases(db_path, _timers_table)

    def _db(self) -> Database:
        return self._databases.get()

    def add(self, kind: Kind, label: str, due: datetime, now: datetime,
            seconds: float | None) -> Timer:
        """A new timer, on disk when this returns."""
        db = self._db()
        with db.conn:
            cursor = db.execute(
                "INSERT INTO timers (kind, label, due, set_at, seconds, state) "
                "VALUES (?, ?, ?, ?, ?, 'set')",
                [kind, label, _iso(due), _iso(now), seconds])
        return Timer(cast(int, cursor.lastrowid), kind, label, _utc(due), _utc(now), seconds,
                     "set")

    def active(self) -> list[Timer]:
        """Every timer not ended, soonest first."""
        return self._select(f"state IN {_ACTIVE_SQL} ORDER BY due, id")

    def due(self, now: datetime) -> list[Timer]:
        """Timers set to ring at `now` or before, soonest first (not those already ringing)."""
        return self._select("state = 'set' AND due <= ? ORDER BY due, id", [_iso(now)])

    def unfinished(self, now: datetime) -> list[Timer]:
        """At start: timers due by `now`, ringing ones too (the agent stopped while they
        rang: nobody stopped them)."""
        return self._select(f"state IN {_ACTIVE_SQL} AND due <= ? ORDER BY due, id",
                            [_iso(now)])

    def move(self, timer_ids: list[int], state: State, now: datetime, by: str = "") -> None:
        """`timer_ids` into `state` (an ended state records when and how)."""
        if not timer_ids:
            return
        db = self._db()
        marks = ", ".join("?" for _ in timer_ids)
        ended = state not in ACTIVE
        with db.conn:
            db.execute(f"UPDATE timers SET state = ?, ended_at = ?, ended_by = ? "
                       f"WHERE id IN ({marks})",
                       [state, _iso(now) if ended else None, by if ended else None, *timer_ids])

    def put_off(self, timer_ids: list[int], due: datetime) -> None:
        """`timer_ids` set again, to ring at `due` (a snooze)."""
        db = self._db()
        marks = ", ".join("?" for _ in timer_ids)
        with db.conn:
            db.execute(f"UPDATE timers SET state = 'set', due = ? WHERE id IN ({marks})",
                       [_iso(due), *timer_ids])

    def forget_ended(self, now: datetime) -> int:
        """Delete timers that ended longer ago than the retention; how many went."""
        db = self._db()
        with db.conn:
            cursor = db.execute(f"DELETE FROM timers WHERE state NOT IN {_ACTIVE_SQL} "
                                "AND ended_at < ?", [_iso(now - self._retention)])
        return cursor.rowcount

    def _select(self, where: str, values: list[object] | None = None) -> list[Timer]:
        rows = self._db().execute(
            f"SELECT id, kind, label, due, set_at, seconds, state FROM timers WHERE {where}",
            values or []).fetchall()
        return [Timer(row[0], row[1], row[2], datetime.fromisoformat(row[3]),
                      datetime.fromisoformat(row[4]), row[5], row[6]) for row in rows]

    def close(self) -> None:
        """Close this thread's connection (others close when their thread ends)."""
        self._databases.close()


def _timers_table(db: Database) -> None:
    db.execute("CREATE TABLE IF NOT EXISTS timers (id INTEGER PRIMARY KEY, kind TEXT NOT NULL, "
               "label TEXT NOT NULL, due TEXT NOT NULL, set_at TEXT NOT NULL, seconds REAL, "
               "state TEXT NOT NULL, ended_at TEXT, ended_by TEXT)")
    db.execute("CREATE INDEX IF NOT EXISTS timers_state_due ON timers (state, due)")


def _utc(moment: datetime) -> datetime:
    return moment.astimezone(UTC)


def _iso(moment: datetime) -> str:
    """Sortable text: every moment in UTC with the same precision."""
    return _utc(moment).isoformat(timespec="milliseconds")

