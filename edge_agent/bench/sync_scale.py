"""`edge-agent bench sync`: many kiosks copying their memory to one venue PostgreSQL.

N simulated kiosks (processes, `bench.sync_kiosk`) replay recorded sessions (a memory
database's, by default the built-in demo call recorded first, with scripted replies) at the
pace they were recorded, each into its own SQLite database, while each kiosk's real sync
thread sends them to a PostgreSQL the benchmark starts on 127.0.0.1 (Debian's server, fsync
on, as a venue runs it). For each N it measures, over a steady window: the rows the kiosks
sent per second, the sync lag (a row's last change on its kiosk to its commit in the venue,
p50/p95) and the server's CPU (all its processes, % of one core); then PostgreSQL is stopped,
each kiosk writes the sessions of `outage_s` of its talk at once (unpaced: the backlog of an
outage that long), PostgreSQL is started again, and the time until every kiosk's queue is
empty is the drain time (it includes the kiosks' growing wait between attempts while the
server was away, up to a minute).

Not part of `edge-agent bench` (it starts a PostgreSQL): run on its own.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, TypedDict

from edge_agent.bench.postgres_rig import PASSWORD, LocalPostgres, local_postgres
from edge_agent.bench.stats import summarize
from edge_agent.bench.sync_kiosk import PASSWORD_VARIABLE, KioskResult, PlannedWrite
from edge_agent.memory.store import MemoryStore

CHECKPOINT_MS = 250
"""A playing unit's checkpoint interval, as recorded units are replayed."""


class SyncLevel(TypedDict):
    kiosks: int
    sessions: int
    """Sessions the kiosks replayed in all."""
    sent_rows_per_s: float
    """Rows the kiosks sent per second in the steady window (a changed row counts each time)."""
    stored_rows_per_s: float
    """New rows in the venue per second in that window."""
    lag_s: dict[str, Any]
    """Sync lag in the window (stats: n, p50, p95, max)."""
    postgres_cpu_percent: float
    """The server's CPU in the window, % of one core."""
    outage_s: float
    """The outage, as traffic: the sessions of this many seconds of each kiosk's talk were
    written while the server was down."""
    backlog_rows: int
    """Rows waiting on all kiosks when the server came back."""
    reconnect_s: float
    """From the server's start to the first kiosk's successful send."""
    drain_s: float
    """From the server's start to every kiosk's queue empty."""
    failed_passes: int
    """Passes that failed in the steady window (should be 0)."""
    venue_bytes_per_session: int
    """The venue's tables and indexes at the end, divided by the sessions in them."""


class SyncScaleResult(TypedDict):
    benchmark: str
    source: str
    """Where the replayed sessions came from."""
    session_writes: int
    """Writes in one replayed session (inserts and updates)."""
    session_s: float
    """How long one session lasts at its recorded pace."""
    interval_ms: int
    """Each kiosk's `[sync] interval_ms`."""
    levels: list[SyncLevel]


@dataclass(frozen=True)
class SyncPlan:
    kiosks: Sequence[int] = (1, 10, 50)
    steady_s: float = 30.0
    outage_s: float = 600.0
    """The outage, as the kiosks' traffic while it lasts."""
    interval_ms: int = 2000


def recorded_plan(db: Path) -> list[PlannedWrite]:
    """The writes of the sessions in the memory database `db`, placed on their session's
    clock, one session after the other (the first session that has turns, and the rest)."""
    store = MemoryStore.open_reader(db)
    try:
        plan: list[PlannedWrite] = []
        offset = 0.0
        for session in store.sessions():
            if not session["turns"]:
                continue
            writes = _session_writes(store, session)
            plan += [{**w, "t": w["t"] + offset} for w in writes]
            offset = plan[-1]["t"] + 1.0
    finally:
        store.close()
    if not plan:
        raise ValueError(f"{db} holds no session with turns to replay")
    return plan


def _session_writes(store: MemoryStore, session: dict[str, Any]) -> list[PlannedWrite]:
    start = _seconds(session["started_at"])
    sid = session["id"]
    writes: list[PlannedWrite] = [{"t": 0.0, "table": "sessions", "row": {
        k: session[k] for k in ("identity", "run_id", "how", "state", "started_at",
                                "last_active_at", "ended_at", "engines")}}]
    events = store.events([sid])
    first_at = events[0]["at"] if events else 0.0
    writes += [{"t": max(0.0, e["at"] - first_at), "table": "events",
                "row": {k: e[k] for k in ("run_id", "at", "type", "data")}} for e in events]
    for turn in store.turns(sid):
        row = {k: v for k, v in turn.items() if k not in ("id", "session_id")}
        writes.append({"t": _seconds(turn["at"]) - start, "table": "turns", "row": row})
    for unit in store.units([sid], "final"):
        row = {k: v for k, v in unit.items() if k != "session_id"}
        final_t = _seconds(unit["updated_at"]) - start
        for played in range(CHECKPOINT_MS, int(unit["played_ms"]), CHECKPOINT_MS):
            writes.append({"t": final_t - (unit["played_ms"] - played) / 1000, "table": "units",
                           "row": {**row, "state": "playing", "seq": None, "played_ms": played}})
        writes.append({"t": final_t, "table": "units", "row": row})
    for summary in store.summaries(sid):
        writes.append({"t": _seconds(summary["at"]) - start, "table": "summaries",
                       "row": dict(summary)})
    for fact in store.session_facts(sid):
        row = {k: fact[k] for k in ("key", "value", "source", "source_seq", "at")}
        writes.append({"t": _seconds(fact["at"]) - start, "table": "facts",
                       "row": {**row, "identity": session["identity"], "expires_at": None}})
    end = max(w["t"] for w in writes) + 0.5
    writes.append({"t": end, "table": "closed", "row": {"at": session["last_active_at"]}})
    writes.sort(key=lambda w: (w["t"], w["table"] != "sessions"))
    return [{**w, "t": max(0.0, w["t"])} for w in writes]


def record_demo_call(data_dir: Path, db: Path) -> None:
    """The built-in demo call, recorded into `db` (the models in `data_dir`; scripted replies,
    extractive summaries: the same call every time)."""
    config = db.with_suffix(".toml")
    config.write_text(f"data_dir = {json.dumps(str(data_dir))}\n[llm]\nengine = \"scripted\"\n"
                      "[memory]\nsummarizer = \"extractive\"\n", encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "edge_agent", "-c", str(config), "demo", "--db",
                           str(db)], capture_output=True, text=True, timeout=600, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"recording the demo call failed (exit {done.returncode}): "
                           f"{done.stderr[-1000:]}")


def _seconds(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


def run_scale(plan: SyncPlan, writes: list[PlannedWrite], source: str,
              say: Callable[[str], None]) -> SyncScaleResult:
    levels = []
    with local_postgres(durable=True) as server, tempfile.TemporaryDirectory(
            prefix="edge-agent-bench-sync-") as work:
        plan_file = Path(work) / "plan.json"
        plan_file.write_text(json.dumps(writes), encoding="utf-8")
        for count in plan.kiosks:
            say(f"{count} kiosk(s): replaying, a {plan.steady_s:g} s window, then an outage "
                f"of {plan.outage_s:g} s of traffic")
            levels.append(_level(server, plan, count, plan_file, _length(writes),
                                 Path(work) / f"n{count}", say))
    return {"benchmark": "sync", "source": source, "session_writes": len(writes),
            "session_s": round(_length(writes), 1), "interval_ms": plan.interval_ms,
            "levels": levels}


def _level(server: LocalPostgres, plan: SyncPlan, count: int, plan_file: Path,
           session_s: float, work: Path, say: Callable[[str], None]) -> SyncLevel:
    import psycopg

    from edge_agent.sync import central

    with psycopg.connect(server.admin_url, autocommit=True) as admin:
        admin.execute("DROP SCHEMA IF EXISTS edge_agent CASCADE")
    homes = [work / f"kiosk-{i:03d}" for i in range(count)]
    children = []
    env = {**_environment(), PASSWORD_VARIABLE: PASSWORD}
    for index, home in enumerate(homes):
        home.mkdir(parents=True)
        _steer(home, speed=1.0)
        children.append(subprocess.Popen(
            [sys.executable, "-m", "edge_agent.bench.sync_kiosk", str(plan_file), str(home),
             server.url, f"kiosk-{index:03d}", str(plan.interval_ms)],
            env=env, stdout=subprocess.DEVNULL, stderr=(home / "stderr").open("w")))
    try:
        deadline = time.time() + 300
        while not all(_has_sent(home) for home in homes):  # every kiosk up and sending
            if time.time() > deadline or any(c.poll() is not None for c in children):
                raise RuntimeError("the simulated kiosks did not all start sending within 5 "
                                   "minutes (or one died): see their stderr files")
            time.sleep(0.5)
        with psycopg.connect(server.admin_url) as admin:
            stored_before = sum(central.counts(admin).values())
        cpu_before, began = server.cpu_seconds(), time.time()
        time.sleep(plan.steady_s)
        cpu_after, ended = server.cpu_seconds(), time.time()
        with psycopg.connect(server.admin_url) as admin:
            stored_after = sum(central.counts(admin).values())
        server.stop()
        burst = max(1, round(plan.outage_s / session_s))
        say(f"  steady window done; PostgreSQL stopped; each kiosk writes {burst} sessions")
        for home in homes:
            _steer(home, burst=burst)  # then the talk pauses: the drain is the backlog's alone
        deadline = time.time() + 1800
        while not all((home / "burst.done").exists() for home in homes):
            if time.time() > deadline:
                raise RuntimeError("the kiosks did not write the outage's sessions in 30 min")
            time.sleep(0.5)
        backlog = sum(_waiting(home) for home in homes)
        server.start()
        restarted = time.time()
        say(f"  {backlog} rows waiting; PostgreSQL started again")
        while any(_waiting(home) for home in homes):
            if time.time() - restarted > 600:
                raise RuntimeError("the kiosks' queues did not drain within 10 minutes")
            time.sleep(0.2)
        drained = time.time()
        with psycopg.connect(server.admin_url) as admin:
            size = admin.execute(
                "SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c JOIN pg_namespace n "
                "ON n.oid = c.relnamespace WHERE n.nspname = 'edge_agent' AND c.relkind = 'r'"
            ).fetchone()
            stored_sessions = central.counts(admin)["sessions"]
    finally:
        for home in homes:
            _steer(home, stop=True)
        for child in children:
            try:
                child.wait(timeout=60)
            except subprocess.TimeoutExpired:
                child.kill()
    results = [_result(home) for home in homes]
    passes = [p for result in results for p in result["passes"]]
    window = [p for p in passes if began <= p[0] <= ended]
    after = [p[0] for p in passes if p[0] >= restarted and p[3] is None and p[1] > 0]
    window_s = ended - began
    return {
        "kiosks": count, "sessions": sum(r["sessions"] for r in results),
        "sent_rows_per_s": round(sum(p[1] for p in window) / window_s, 1),
        "stored_rows_per_s": round((stored_after - stored_before) / window_s, 1),
        "lag_s": {k: v for k, v in summarize([lag for p in window for lag in p[2]],
                                             digits=3).items() if k != "values"},
        "postgres_cpu_percent": round(100 * (cpu_after - cpu_before) / window_s, 1),
        "outage_s": plan.outage_s, "backlog_rows": backlog,
        "reconnect_s": round(min(after) - restarted, 2) if after else -1.0,
        "drain_s": round(drained - restarted, 2),
        "failed_passes": sum(1 for p in window if p[3] is not None),
        "venue_bytes_per_session": int(size[0] or 0) // max(1, stored_sessions) if size else 0,
    }


def _length(writes: list[PlannedWrite]) -> float:
    return max(w["t"] for w in writes)


def _environment() -> dict[str, str]:
    import os
    return {k: v for k, v in os.environ.items() if k != PASSWORD_VARIABLE}


def _steer(home: Path, **control: float | bool) -> None:
    temporary = home / "control.json.new"
    temporary.write_text(json.dumps(control), encoding="utf-8")
    temporary.replace(home / "control.json")


def _has_sent(home: Path) -> bool:
    try:
        return bool(_kiosk_value(home, "SELECT last_success_at FROM sync_control"))
    except sqlite3.Error:
        return False  # not made yet


def _waiting(home: Path) -> int:
    return int(_kiosk_value(home, "SELECT count(*) FROM outbox WHERE refused IS NULL") or 0)


def _kiosk_value(home: Path, query: str) -> Any:
    """One value from a simulated kiosk's database, read-only beside its writers."""
    with sqlite3.connect(f"file:{home / 'edge-agent.db'}?mode=ro", uri=True, timeout=10) as db:
        row = db.execute(query).fetchone()
    return row[0] if row else None


def _result(home: Path) -> KioskResult:
    try:
        found: KioskResult = json.loads((home / "result.json").read_text(encoding="utf-8"))
        return found
    except (OSError, ValueError):
        error = (home / "stderr").read_text(encoding="utf-8", errors="replace")[-2000:]
        raise RuntimeError(f"a simulated kiosk ({home.name}) left no result: {error}") from None


def table(result: SyncScaleResult) -> str:
    lines = [f"bench sync: sessions replayed from {result['source']} ({result['session_writes']} "
             f"writes over {result['session_s']:g} s each), interval {result['interval_ms']} ms",
             f"{'kiosks':>6} {'sent rows/s':>11} {'stored/s':>8} {'lag p50':>8} {'lag p95':>8} "
             f"{'pg cpu':>7} {'backlog':>8} {'reconnect':>9} {'drain':>7}"]
    for level in result["levels"]:
        lag = level["lag_s"]
        lines.append(
            f"{level['kiosks']:>6} {level['sent_rows_per_s']:>11.1f} "
            f"{level['stored_rows_per_s']:>8.1f} {lag.get('p50', 0):>7.2f}s "
            f"{lag.get('p95', 0):>7.2f}s {level['postgres_cpu_percent']:>6.1f}% "
            f"{level['backlog_rows']:>8} {level['reconnect_s']:>8.1f}s {level['drain_s']:>6.1f}s")
    return "\n".join(lines)
