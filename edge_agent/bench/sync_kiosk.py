"""One simulated kiosk of `edge-agent bench sync`, a process of its own: it replays recorded
sessions into its own memory database, at the recorded pace times the speed the benchmark
asks for, while its venue sync (the real `VenueSync` thread) sends them to the venue's
PostgreSQL. Run by `bench sync`:

    python -m edge_agent.bench.sync_kiosk PLAN.json KIOSK_DIR URL KIOSK_ID INTERVAL_MS

The benchmark steers it through KIOSK_DIR/control.json, read every 0.1 s: {"speed": 1.0} (the
recorded pace times this), {"burst": N} (N more sessions at once, unpaced, then a pause:
KIOSK_DIR/burst.done says how many were written) or {"stop": true}; and reads
KIOSK_DIR/result.json when it exits: every pass's time and lags.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path
from typing import Any, TypedDict

from edge_agent.config import ANONYMOUS
from edge_agent.config.lan import parse_database_url
from edge_agent.memory.store import MemoryStore
from edge_agent.sync.central import Credentials
from edge_agent.sync.outbox import Outbox
from edge_agent.sync.worker import SyncPass, SyncSettings, VenueSync

PASSWORD_VARIABLE = "EDGE_AGENT_SYNC_PASSWORD"


class PlannedWrite(TypedDict):
    """One write of a recorded session, as a kiosk replays it."""

    t: float
    """Seconds from the session's start."""
    table: str
    """"sessions" (opened), "closed", "turns", "units", "events", "summaries" or "facts"."""
    row: dict[str, Any]
    """The row as recorded (its session id is replaced by the replayed session's)."""


class KioskResult(TypedDict):
    sessions: int
    """Sessions replayed."""
    writes: int
    passes: list[tuple[float, int, list[float], str | None]]
    """Each sync pass: its end (unix time), rows sent, their lags (s) and its error."""


def main(argv: list[str]) -> int:
    plan_file, directory, url, kiosk_id, interval_ms = argv
    plan: list[PlannedWrite] = json.loads(Path(plan_file).read_text(encoding="utf-8"))
    home = Path(directory)
    store = MemoryStore.open(home / "edge-agent.db")
    passes: list[tuple[float, int, list[float], str | None]] = []
    lock = threading.Lock()

    def passed(done: SyncPass) -> None:
        with lock:
            passes.append((time.time(), done.sent, [round(lag, 4) for lag in done.lags_s],
                           done.error.reason if done.error else None))

    import os
    credentials = Credentials(parse_database_url(url), os.environ.get(PASSWORD_VARIABLE),
                              kiosk_id, 5000)
    sync = VenueSync(SyncSettings(credentials, ANONYMOUS, int(interval_ms) / 1000, 500,
                                  10_000_000), Outbox.open(home / "edge-agent.db"),
                     on_pass=passed)
    sync.start()
    control = home / "control.json"
    sessions = writes = 0
    try:
        while not (settings := _read(control)).get("stop"):
            if settings.get("burst"):
                for _ in range(int(settings["burst"])):
                    sessions += 1
                    writes += _replay(store, plan, f"{kiosk_id}-{sessions}", None)
                (home / "burst.done").write_text(str(settings["burst"]), encoding="utf-8")
                while not _read(control).get("stop"):
                    time.sleep(0.1)
                break
            sessions += 1
            writes += _replay(store, plan, f"{kiosk_id}-{sessions}", control)
    finally:
        store.close()
        sync.close()
    with lock:
        result: KioskResult = {"sessions": sessions, "writes": writes, "passes": passes}
    (home / "result.json").write_text(json.dumps(result), encoding="utf-8")
    return 0


def _read(control: Path) -> dict[str, Any]:
    try:
        found: dict[str, Any] = json.loads(control.read_text(encoding="utf-8"))
        return found
    except (OSError, ValueError):
        return {}


def _replay(store: MemoryStore, plan: list[PlannedWrite], session_id: str,
            control: Path | None) -> int:
    """One session, its writes at their recorded times (scaled by the control's speed; with
    no control, at once). A control that says burst ends it early (the burst follows)."""
    if control is None:
        for write in plan:
            _apply(store, write, session_id)
        return len(plan)
    position = 0.0
    last = read_at = time.monotonic()
    done = 0
    settings = _read(control)
    for write in plan:
        while position < write["t"]:
            if settings.get("stop") or settings.get("burst"):
                return done
            time.sleep(0.02)
            now = time.monotonic()
            if now - read_at > 0.1:
                settings, read_at = _read(control) or settings, now
            position += (now - last) * float(settings.get("speed", 1.0))
            last = now
        _apply(store, write, session_id)
        done += 1
    return done


def _apply(store: MemoryStore, write: PlannedWrite, session_id: str) -> None:
    row = {**write["row"], "session_id": session_id}
    table = write["table"]
    if table == "sessions":
        store.insert_session({**write["row"], "id": session_id})  # type: ignore[typeddict-item]
    elif table == "closed":
        store.update_session(session_id, {"state": "closed", "ended_at": row["at"]})
    elif table == "turns":
        store.put_turn(row)  # type: ignore[arg-type]
    elif table == "units":
        store.put_unit(row)  # type: ignore[arg-type]
    elif table == "events":
        store.add_event(row)  # type: ignore[arg-type]
    elif table == "summaries":
        store.add_summary(row)  # type: ignore[arg-type]
    elif table == "facts":
        store.add_fact(row)  # type: ignore[arg-type]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
