"""JSON a user asked for (a session record, benchmark results, an export): one format, and a
file that cannot be written is an OutputError naming it."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from edge_agent.errors import OutputError
from edge_agent.files import refuse_unsafe_target


def json_text(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def write_json(data: dict[str, Any], path: Path) -> None:
    """Write `data` to `path` whole or not at all (see `write_private`)."""
    write_private(json_text(data), path)


def write_private(text: str, path: Path) -> None:
    """Write `text` to `path` whole or not at all: a private temporary file renamed over it
    (records and pages hold transcripts, so the file is readable by its owner only). A target
    that is a symlink or a device is refused, never replaced."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        refuse_unsafe_target(path)
        handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    except OSError as exc:
        raise OutputError(path, exc) from None
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
        refuse_unsafe_target(path)  # again: it may have been swapped while we wrote
        os.replace(temporary, path)
    except OSError as exc:
        Path(temporary).unlink(missing_ok=True)
        raise OutputError(path, exc) from None


def check_writable(path: Path) -> None:
    """Fail now, before a session runs, if `path` could not be written at its end: a record
    found unwritable after the session would be lost."""
    try:
        if refuse_unsafe_target(path) and not os.access(path, os.W_OK):
            raise PermissionError(f"{path} is read-only")
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, prefix=f".{path.name}."):
            pass
    except OSError as exc:
        raise OutputError(path, exc) from None
