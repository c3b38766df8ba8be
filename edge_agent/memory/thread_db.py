"""One sqlite-utils connection per calling thread on a file that is not the memory writer's:
the tables a tool or the timers keep beside the memory (bookings, timers).

sqlite3 connections belong to the thread that opened them. Such a table is written from its
owner thread ("tools", "timers"), but that thread is only known at the first call (and a
restarted conversation gets a new one), so each calling thread opens its own connection lazily,
in WAL mode (readers never block a write; the memory writer shares the file), and sets it up
once (`prepare`: its tables, with "IF NOT EXISTS").
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from sqlite_utils import Database


class ThreadDatabases:
    def __init__(self, path: Path, prepare: Callable[[Database], None]) -> None:
        self.path = path
        self._prepare = prepare
        self._local = threading.local()

    def get(self) -> Database:
        """This thread's connection, opened (and the file's tables made) at its first call."""
        db: Database | None = getattr(self._local, "db", None)
        if db is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            db = Database(self.path)
            db.enable_wal()
            self._prepare(db)
            self._local.db = db
        return db

    def close(self) -> None:
        """Close this thread's connection (others close when their thread ends)."""
        db: Database | None = getattr(self._local, "db", None)
        if db is not None:
            db.close()
            self._local.db = None
