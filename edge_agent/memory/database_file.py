"""What must be true of a memory database file before anything opens it for writing: it is a
regular file (never a symlink, a device or a FIFO: the service runs as root), SQLite can read
it, it is not damaged, not from a newer edge-agent and has every table its version should have.

All of it is read through a read-only connection (immutable when no -wal or -journal file says a
writer may have more), so that a database we refuse is left byte-for-byte as it was: the
read-write connection that switches it to WAL and migrates it comes only after. `run`, the
`sessions`/`memory` commands and the doctor ask the same questions here, so they agree.
"""

from __future__ import annotations

import os
import sqlite3
import stat
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

from edge_agent.errors import StoreError
from edge_agent.files import kind_of
from edge_agent.memory.schema import SCHEMA_VERSION, tables_at

DAMAGED_FIX = ("it was left untouched: move it away (edge-agent then starts a new memory) or "
               "restore a backup; `sqlite3 FILE .recover` may save its rows")
LOCKED_FIX = ("another program holds a write transaction on it (an open `sqlite3` shell, "
              "Datasette or a script writing to it): let it commit or close it, then try again; "
              "an edge-agent writer is reported by name instead")
BUSY_TIMEOUT_MS = 5000


@dataclass(frozen=True)
class DatabaseState:
    found: list[str]
    """The integrity check's lines (["ok"] when sound)."""
    version: int
    """Its schema version (`PRAGMA user_version`)."""
    sessions: int
    """How many sessions it holds."""
    tables: frozenset[str]


def exists_as_file(path: Path) -> bool:
    """Whether the database exists; StoreError if it is there but not a regular file (a
    symlink is refused whatever it points to: nothing is followed, opened or chmodded)."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return False
    except NotADirectoryError:
        raise StoreError(path, f"cannot create or open it: {path.parent} is not a directory",
                         "make the data dir a writable directory (config data_dir)") from None
    except OSError as exc:
        raise StoreError(path, f"cannot look at it ({exc.strerror or exc})",
                         "check the data dir's owner and mode") from None
    if not stat.S_ISREG(mode):
        raise StoreError(path, f"it is {kind_of(mode)}, not a database file",
                         "edge-agent keeps its memory only in a regular file of its own: remove "
                         "it or point data_dir (or --db) at another path; nothing was changed")
    return True


def read_only_uri(path: Path) -> str:
    """A read-only SQLite URI for `path`: immutable when no -wal or -journal file says a writer
    may have more (an immutable open creates no -wal or -shm file either, which a read-only
    open of a WAL database would leave behind, owned by whoever ran it)."""
    settled = not any(path.with_name(path.name + end).exists() for end in ("-wal", "-journal"))
    mode = "mode=ro&immutable=1" if settled else "mode=ro"
    return f"file:{urllib.parse.quote(str(path))}?{mode}"


def read_state(path: Path, pragma: str = "quick_check") -> DatabaseState:
    """The database's check result, version and tables, read without writing a byte of it;
    StoreError if SQLite cannot read it."""
    try:
        connection = sqlite3.connect(read_only_uri(path), uri=True,
                                     timeout=BUSY_TIMEOUT_MS / 1000)
        try:
            found = [str(row[0]) for row in connection.execute(f"PRAGMA {pragma}")]
            version = int(connection.execute("PRAGMA user_version").fetchone()[0])
            tables = frozenset(str(row[0]) for row in connection.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'"))
            sessions = (int(connection.execute("SELECT count(*) FROM sessions").fetchone()[0])
                        if "sessions" in tables else 0)
        finally:
            connection.close()
    except sqlite3.DatabaseError as exc:
        raise database_error(path, exc) from None
    return DatabaseState(found, version, sessions, tables)


def check_state(path: Path, state: DatabaseState, pragma: str = "quick_check") -> None:
    """StoreError if the database is damaged, newer than this edge-agent or lacks a table."""
    if state.found != ["ok"]:
        lines = "; ".join(state.found[:3]) + (
            f" (and {len(state.found) - 3} more)" if len(state.found) > 3 else "")
        raise StoreError(path, f"the database is damaged ({pragma}: {lines})", DAMAGED_FIX)
    if state.version > SCHEMA_VERSION:
        raise StoreError(path, f"it was written by a newer edge-agent (its schema is version "
                         f"{state.version}; this edge-agent knows up to {SCHEMA_VERSION})",
                         "upgrade edge-agent, or point data_dir at another directory; the "
                         "file was left untouched")
    missing = sorted(tables_at(state.version) - state.tables)
    if missing:
        raise StoreError(path, f"its table(s) {', '.join(missing)} are missing (schema version "
                         f"{state.version} has them: it was changed by another program)",
                         "restore a backup, or move it away (edge-agent then starts a new "
                         "memory); the file was left untouched")


def checked_state(path: Path, pragma: str = "quick_check") -> DatabaseState:
    """`read_state` and `check_state`: the database as a writer would find it."""
    state = read_state(path, pragma)
    check_state(path, state, pragma)
    return state


def database_error(path: Path, exc: sqlite3.Error) -> StoreError:
    """A SQLite error on the memory database, as a StoreError saying what to do."""
    text = str(exc)
    if "locked" in text or "busy" in text:
        return StoreError(path, f"the database is locked ({text})", LOCKED_FIX)
    if "not a database" in text or "malformed" in text:
        return StoreError(path, f"it is not a SQLite database or it is damaged ({text})",
                          DAMAGED_FIX)
    if "no such table" in text or "no such column" in text:
        return StoreError(path, f"it lacks part of its schema ({text}: it was changed by "
                          "another program)", "restore a backup, or move it away (edge-agent "
                          "then starts a new memory)")
    if "full" in text:
        return StoreError(path, f"the disk is full ({text})",
                          "free some space on the data dir's disk")
    if "readonly" in text or "unable to open" in text:
        return StoreError(path, f"it cannot be written ({text})",
                          "check that the data dir and the database file are writable by this "
                          "user")
    return StoreError(path, text, "check that the data dir and the database file are readable "
                      "and writable by this user")
