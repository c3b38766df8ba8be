"""The doctor's memory-database check: the SQLite file read (never written, never migrated)
through the same checks a writer (`run`, `demo --db`) makes before it opens it
(`memory.database_file`), so that the doctor says "ok" only for a database `run` accepts, plus
its owner's access."""

from __future__ import annotations

import os
from pathlib import Path

from edge_agent.doctor.report import MB, CheckRecord, check
from edge_agent.errors import StoreError
from edge_agent.memory.database_file import check_state, exists_as_file, read_state
from edge_agent.memory.schema import SCHEMA_VERSION
from edge_agent.memory.writer_lock import current_holder


def database_line(path: Path, quick: bool) -> CheckRecord:
    name = "memory db"
    pragma = "quick_check" if quick else "integrity_check"
    try:
        if not exists_as_file(path):
            return check(name, "ok", f"no database yet at {path} (created on the first run)")
        state = read_state(path, pragma)
        check_state(path, state, pragma)
    except StoreError as exc:
        return check(name, "FAIL", f"{path}: {exc.reason}", exc.fix)
    if not os.access(path, os.R_OK | os.W_OK):
        return check(name, "FAIL", f"{path} is not writable by this user (uid {os.geteuid()})",
                     "give it to the agent's user (chown), or run the agent as its owner")
    wal = path.with_name(path.name + "-wal")
    size = path.stat().st_size + (wal.stat().st_size if wal.exists() else 0)
    version = state.version
    schema = (f"schema {version}" if version == SCHEMA_VERSION
              else f"schema {version}, upgraded to {SCHEMA_VERSION} on the next run")
    holder = current_holder(path)
    writing = f"; being written by an edge-agent ({holder})" if holder else ""
    return check(name, "ok", f"{path}: {pragma} ok, {schema}, {size / MB:.1f} MB, "
                 f"{state.sessions} session{'s' if state.sessions != 1 else ''}{writing}")
