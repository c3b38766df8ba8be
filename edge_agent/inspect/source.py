"""Where `edge-agent inspect` gets a session: the memory database, or a record file (the JSON
`demo --json`, `run --json` and `sessions show --json` write).

Either way the record is checked before anything is drawn (`record_check`): a field the page
reads that is missing, of the wrong type or out of range is a ConfigError naming the file (or
the session) and the field (a record file is user input: it may have been edited, cut short or
come from another program).
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from edge_agent.config.tomlfile import read_text
from edge_agent.errors import ConfigError
from edge_agent.files import RECORD_FILE_LIMIT
from edge_agent.memory.database_file import database_error
from edge_agent.memory.kept_audio import AudioClip, kept_audio
from edge_agent.memory.record import SessionRecord, named_session, require_database, session_record
from edge_agent.memory.record_check import DATABASE_HINT, checked, checked_clips
from edge_agent.memory.store import MemoryStore


def read_session(db_path: Path, session_id: str) -> tuple[SessionRecord, list[AudioClip]]:
    """The session `session_id` (or an unambiguous prefix) of the memory database at `db_path`,
    and its kept audio."""
    require_database(db_path, session_id)
    store = MemoryStore.open_reader(db_path)
    try:
        session = named_session(store, session_id)
        record = session_record(store, [session["id"]])
        clips = kept_audio(store, [session["id"]])
    except sqlite3.Error as exc:  # a table dropped, or locked by another program
        raise database_error(db_path, exc) from None
    finally:
        store.close()
    where = f"{db_path}: session {session['id']}"
    return checked(record, where, DATABASE_HINT), checked_clips(clips, where)


def read_record_file(path: Path, session_id: str | None = None) -> SessionRecord:
    """The session record in the JSON file at `path`; `session_id`, if given, must be (a
    prefix of) the session it records."""
    text = read_text(path, "the session record", RECORD_FILE_LIMIT)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(str(path), "", f"not JSON ({exc.msg} at line {exc.lineno}, column "
                          f"{exc.colno}): pass a file written by `demo --json` or "
                          "`sessions show --json`") from None
    except ValueError as exc:  # an integer of thousands of digits
        raise ConfigError(str(path), "", f"not a session record: {exc}") from None
    except RecursionError:
        raise ConfigError(str(path), "", "not a session record: arrays or objects nested "
                          "thousands deep (a record nests a few levels)") from None
    record = checked(data, str(path))
    if session_id and not any(s.startswith(session_id)
                              for s in [record["session_id"], *record["sessions"]]):
        raise ConfigError(str(path), "session_id", f"the file records session "
                          f"{record['session_id']!r}, not {session_id!r}: leave the id out, or "
                          "pass the file of that session")
    return record
