"""Timers end to end on the real engines (the okay-nabu wake word model, Silero, Moonshine,
Piper) through `edge-agent demo` processes: the built-in `timer` call wakes, sets two timers,
stops the ring of one by voice and hears what is left; a timer set by one agent process that
came due while none ran rings in the next one, "While I was off"."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from edge_agent.events import BargeIn, SessionStarted, TimerChanged
from tests.cli import edge_agent, run_demo, write_config
from tests.logged import events_of

pytestmark = [pytest.mark.models, pytest.mark.realtime]


def _rows(database: Path) -> list[tuple[str, str, str | None]]:
    with sqlite3.connect(database) as db:
        return db.execute("SELECT label, state, ended_by FROM timers ORDER BY id").fetchall()


def _changes(record: dict[str, Any]) -> list[tuple[int, str]]:
    return [(e.timer, e.change) for e in events_of(record["events"], TimerChanged)]


def test_the_timer_call_wakes_sets_rings_and_is_stopped_by_voice(tmp_path: Path) -> None:
    out, database = tmp_path / "session.json", tmp_path / "memory.db"
    done = edge_agent("demo", "--call", "timer", "--json", out, "--db", database,
                      config=write_config(tmp_path), timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    record = json.loads(out.read_text(encoding="utf-8"))
    assert [e.how for e in events_of(record["events"], SessionStarted)][:1] == ["wake"]
    assert _changes(record)[:4] == [(1, "set"), (2, "set"), (2, "ringing"), (2, "done")], (
        done.stdout)
    units = record["units"]
    said = [u["generated"] for u in units]
    assert said[:2] == ["Egg timer set for 1 minute.", "Pasta timer set for 5 seconds."], said
    ring = units[2]
    assert ring["generated"] == "Your pasta timer is done."
    # "Stop." cut the ring: what is kept as heard is what had played of it, and no more.
    assert [b.by for b in events_of(record["events"], BargeIn)] == ["voice"], done.stdout
    assert ring["interrupted"] and ring["generated"].startswith(ring["heard"])
    assert said[-1].startswith("You have 1 timer: the egg timer with "), said
    assert _rows(database) == [("egg", "set", None), ("pasta", "done", "voice")]
    assert record["llm_requests"] == []  # no timer command reached the model


RESTART_CONFIG = '[session]\nstart = "wake"\nidle_end_s = 20\n[timers]\nenabled = true\n'


def test_a_timer_due_while_no_agent_ran_rings_at_the_next_start(tmp_path: Path) -> None:
    set_call = ('[agent]\ngreeting = ""\nreplies = []\n'
                '[[caller]]\nsay = "Okay Nabu, set an egg timer for ten seconds."\nat = 0.5\n')
    (tmp_path / "first").mkdir()
    first = run_demo(tmp_path / "first", set_call, RESTART_CONFIG)
    set_at = time.monotonic()
    assert _changes(first.record) == [(1, "set")], first.stdout
    assert _rows(first.database) == [("egg", "set", None)]

    time.sleep(max(0.0, 10.0 - (time.monotonic() - set_at)))
    (tmp_path / "second").mkdir()
    database = tmp_path / "second" / "memory.db"
    database.write_bytes(first.database.read_bytes())  # the same house, after a restart
    stop_call = ('[agent]\ngreeting = ""\nreplies = []\n'
                 '[[caller]]\nsay = "Stop."\nbarge_in_after = 3.0\n')
    second = run_demo(tmp_path / "second", stop_call, RESTART_CONFIG)
    # The record is the session's, which the second agent resumed: the first one's events too.
    changes = [(e.change, e.late) for e in events_of(second.record["events"], TimerChanged)]
    assert changes == [("set", False), ("ringing", True), ("done", False)], second.stdout
    assert [e.how for e in events_of(second.record["events"], SessionStarted)][-1] == "resumed"
    ring = second.record["units"][-1]
    assert ring["generated"].startswith("While I was off, your egg timer went off at ")
    assert ring["interrupted"] and ring["generated"].startswith(ring["heard"])
    assert _rows(database) == [("egg", "done", "voice")]
