"""The doctor's memory-database check: the SQLite file read (never written, never migrated),
checked for damage, its schema version and its owner's access."""

from __future__ import annotations

import os
import sqlite3
import urllib.parse
from pathlib import Path

from edge_agent.doctor import MB, CheckRecord, check
from edge_agent.memory.schema import SCHEMA_VERSION

_DAMAGED_FIX = ("move it away (edge-agent then starts a new memory) or restore a backup; "
                "`sqlite3 FILE .recover` may save its rows")


def database_line(path: Path, quick: bool) -> CheckRecord:
    name = "memory db"
    if not path.exists():
        return check(name, "ok", f"no database yet at {path} (created on the first run)")
    wal = path.with_name(path.name + "-wal")
    size = path.stat().st_size + (wal.stat().st_size if wal.exists() else 0)
    pragma = "quick_check" if quick else "integrity_check"
    try:
        found, version, sessions = _inspect(path, wal.exists(), pragma)
    except sqlite3.DatabaseError as exc:
        text = str(exc)
        if "not a database" in text or "malformed" in text:
            return check(name, "FAIL", f"{path}: not a SQLite database, or damaged ({text})",
                         _DAMAGED_FIX)
        return check(name, "FAIL", f"{path}: cannot be read ({text})",
                     "check that the file and the data dir are readable by this user")
    if found != ["ok"]:
        shown = "; ".join(found[:3]) + (f" (and {len(found) - 3} more)" if len(found) > 3 else "")
        return check(name, "FAIL", f"{path} is damaged ({pragma}: {shown})", _DAMAGED_FIX)
    if version > SCHEMA_VERSION:
        return check(name, "FAIL", f"{path} was written by a newer edge-agent (schema "
                     f"{version}; this one knows up to {SCHEMA_VERSION})",
                     "upgrade edge-agent, or point data_dir at another directory")
    if not os.access(path, os.R_OK | os.W_OK):
        return check(name, "FAIL", f"{path} is not writable by this user (uid {os.geteuid()})",
                     "give it to the agent's user (chown), or run the agent as its owner")
    schema = (f"schema {version}" if version == SCHEMA_VERSION
              else f"schema {version}, upgraded to {SCHEMA_VERSION} on the next run")
    return check(name, "ok", f"{path}: {pragma} ok, {schema}, {size / MB:.1f} MB, "
                 f"{sessions} session{'s' if sessions != 1 else ''}")


def _inspect(path: Path, has_wal: bool, pragma: str) -> tuple[list[str], int, int]:
    """(check result lines, schema version, sessions), read without writing anything. With no
    -wal file the database file is whole: opened immutable, since a read-only open of a WAL
    database creates -wal and -shm files owned by whoever runs the doctor (root), which the
    agent's user could not write. With one, a live or crashed agent's last commits are in it."""
    mode = "mode=ro" if has_wal else "immutable=1"
    uri = f"file:{urllib.parse.quote(str(path))}?{mode}"
    connection = sqlite3.connect(uri, uri=True, timeout=5)
    try:
        found = [str(row[0]) for row in connection.execute(f"PRAGMA {pragma}")]
        version = int(connection.execute("PRAGMA user_version").fetchone()[0])
        tables = {row[0] for row in connection.execute("SELECT name FROM sqlite_master")}
        sessions = (int(connection.execute("SELECT count(*) FROM sessions").fetchone()[0])
                    if "sessions" in tables else 0)
    finally:
        connection.close()
    return found, version, sessions
