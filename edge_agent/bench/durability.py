"""Durability: a real `edge-agent demo` process SIGKILLed at a chosen moment of a scripted
call, restarted on the same database, and the database checked.

What must hold after the restart: every turn the killed agent had printed (a little before the
kill) is in the database, each unit that was playing is recovered with a heard prefix of its
text that is no longer than what had played when the process died, and
`PRAGMA integrity_check` is ok.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict

from edge_agent.console import label
from edge_agent.events import PlaybackStarted, SessionStarted
from edge_agent.memory.store import MemoryStore

COMMIT_GRACE_S = 0.1
"""A turn printed this long before the kill must be on disk (commits take milliseconds)."""
PLAYED_SLACK_MS = 100.0
"""Allowance for stdout latency when placing the kill on the agent's clock."""
RESTART_CALL = ('[agent]\ngreeting = ""\nreplies = ["Welcome back."]\n\n'
                '[[caller]]\nsay = "Hello again."\nat = 0.5\n')
_LINE = re.compile(r"^\[\s*([0-9.]+)\] (agent heard   |agent said    ): (.*?)"
                   r"( \[\d+ word\(s\) timed by safe bounds\])?$")


class RecoveredUnit(TypedDict):
    """A unit the restart recovered from its last checkpoint."""

    unit_id: str
    heard: str
    generated: str
    played_ms: int
    limit_ms: int
    """What had played when the process died (+ stdout slack): `played_ms` may not exceed it."""


@dataclass
class KillTrial:
    kill_after_s: float
    """When the process was killed, seconds after its session started."""
    printed: list[str] = field(default_factory=list)
    """Turns the agent printed before the kill (user transcripts, units heard whole)."""
    missing: list[str] = field(default_factory=list)
    """Printed turns not found in the database after the restart (must be none)."""
    recovered: list[RecoveredUnit] = field(default_factory=list)
    """Units recovered from checkpoints."""
    overheard: list[str] = field(default_factory=list)
    """Recovered units whose heard text is not a prefix or exceeds what had played."""
    integrity: str = ""
    turns: int = 0

    @property
    def ok(self) -> bool:
        return not self.missing and not self.overheard and self.integrity == "ok"


def _session_starts() -> str:
    started = label(SessionStarted(1, ""))
    assert started is not None  # the console names every session's start
    return started.text.split("(")[0]


SESSION_STARTS = _session_starts()
"""How the console's line for the first session's start reads ("session 1 starts "), whatever
opened it: the one labeller's words, not a copy of them."""

def kill_trial(config: Path, db: Path, call: str | None, kill_after_s: float,
               work: Path) -> KillTrial:
    """Run the call (`call`: a call file or built-in name; None for the default), SIGKILL the
    agent `kill_after_s` after its session starts, restart it on `db`, check the database."""
    trial = KillTrial(kill_after_s)
    lines: list[tuple[float, str]] = []
    command = [sys.executable, "-m", "edge_agent", "-c", str(config), "demo", "--db", str(db)]
    process = subprocess.Popen([*command, *(["--call", call] if call else [])],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "PYTHONUNBUFFERED": "1"})
    started = threading.Event()
    reader = threading.Thread(target=_read, args=(process, lines, started), daemon=True)
    reader.start()
    errors = threading.Thread(target=lambda: process.stderr and process.stderr.read(), daemon=True)
    errors.start()
    if not started.wait(120):
        process.kill()
        raise RuntimeError(f"the agent did not start its session: {lines[-5:]}")
    session_wall, session_at = _session_start(lines)
    time.sleep(max(0.0, session_wall + kill_after_s - time.monotonic()))
    kill_wall = time.monotonic()
    process.send_signal(signal.SIGKILL)
    process.wait()
    reader.join(5)
    kill_at = session_at + (kill_wall - session_wall)  # on the agent's log clock
    for wall, line in lines:
        match = _LINE.match(line)
        if match and wall <= kill_wall - COMMIT_GRACE_S:
            trial.printed.append(match.group(3))

    restart_call = work / "restart.toml"
    restart_call.write_text(RESTART_CALL, encoding="utf-8")
    restarted = subprocess.run([*command, "--call", str(restart_call)], capture_output=True,
                               text=True, timeout=240, check=False)
    if restarted.returncode != 0:
        raise RuntimeError(f"restart failed: {restarted.stderr[-2000:]}")
    _check(trial, db, restarted.stdout, kill_at)
    return trial


def _read(process: subprocess.Popen[str], lines: list[tuple[float, str]],
          started: threading.Event) -> None:
    assert process.stdout is not None
    for line in process.stdout:
        lines.append((time.monotonic(), line.rstrip("\n")))
        if SESSION_STARTS in line:
            started.set()


def _session_start(lines: list[tuple[float, str]]) -> tuple[float, float]:
    for wall, line in lines:
        if SESSION_STARTS in line:
            return wall, float(line[1:line.index("]")])
    raise RuntimeError("no session start line")


def _check(trial: KillTrial, db: Path, restart_stdout: str, kill_at: float) -> None:
    store = MemoryStore.open(db)
    try:
        trial.integrity = store.integrity()
        sessions = [row["id"] for row in store.sessions()]
        heard = [t["heard"] for s in sessions for t in store.turns(s)]
        trial.turns = len(heard)
        trial.missing = [text for text in trial.printed
                         if not any(text.strip() in turn for turn in heard)]
        started_at = {json.loads(row["data"]).get("unit_id"): row["at"]
                      for row in store.events(sessions)
                      if row["type"] == PlaybackStarted.__name__}
        units = {row["unit_id"]: row for row in store.units(sessions)}
        for unit_id in re.findall(r"note: (u\d+): recovered after a crash", restart_stdout):
            row = units[unit_id]
            limit = (kill_at - started_at.get(unit_id, kill_at)) * 1000 + PLAYED_SLACK_MS
            trial.recovered.append({"unit_id": unit_id, "heard": row["heard"],
                                    "generated": row["generated"],
                                    "played_ms": row["played_ms"], "limit_ms": round(limit)})
            if not row["generated"].startswith(row["heard"]) or row["played_ms"] > limit:
                trial.overheard.append(unit_id)
    finally:
        store.close()
