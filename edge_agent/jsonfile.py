"""JSON a user asked for (a session record, benchmark results, an export): one format, and a
file that cannot be written is an OutputError naming it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from edge_agent.errors import OutputError


def json_text(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def write_json(data: dict[str, Any], path: Path) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json_text(data), encoding="utf-8")
    except OSError as exc:
        raise OutputError(path, exc) from None
