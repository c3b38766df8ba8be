"""Kill -9 a real `edge-agent demo` at chosen moments of a scripted call (mid-reply among
them), restart it on the same database: nothing committed is lost, a cut unit is recovered
no further than it had played, and the database is intact."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from edge_agent.bench.durability import kill_trial
from tests.cli import command, edge_agent, environment, write_config

pytestmark = [pytest.mark.models, pytest.mark.realtime]

# Seconds after the session starts, on the default call (greeting, two answers, a long reply
# cut by the caller, a last answer): during the greeting, between turns, mid-reply twice.
KILL_POINTS = (1.5, 4.2, 11.8, 16.9)
MID_LONG_REPLY = 11.8
"""The long reply plays from ~10.6 s until the caller cuts it at ~14.1 s: a kill here always
finds it playing."""


@pytest.mark.parametrize("kill_after_s", KILL_POINTS)
def test_a_sigkill_loses_no_committed_turn_and_never_overstates_what_was_heard(
        tmp_path: Path, kill_after_s: float) -> None:
    config = write_config(tmp_path)
    trial = kill_trial(config, tmp_path / "data" / "edge-agent.db", None, kill_after_s, tmp_path)
    assert trial.integrity == "ok"
    assert trial.missing == [], trial
    assert trial.overheard == [], trial.recovered
    if kill_after_s > 4:
        assert trial.printed  # the kill came after turns that must have survived
    for unit in trial.recovered:
        assert unit["generated"].startswith(unit["heard"])
    if kill_after_s == MID_LONG_REPLY:
        (unit,) = trial.recovered  # the checkpoint was there: recovered, never past what played
        assert unit["heard"] and unit["heard"] != unit["generated"]
        assert unit["played_ms"] <= unit["limit_ms"]


def test_a_sigkilled_run_leaves_a_readable_record_of_everything_committed(
        tmp_path: Path) -> None:
    """The session record is the database, written as the call goes: after a SIGKILL,
    `sessions show ID --json` gives every turn committed. A turn is committed before the next
    model request, so every turn printed before the latest answer must be there."""
    import signal
    import subprocess

    config = write_config(tmp_path)
    db = tmp_path / "data" / "edge-agent.db"
    agent = subprocess.Popen(command("demo", "--db", db, config=config), stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True,
                             env=environment({"PYTHONUNBUFFERED": "1"}))
    assert agent.stdout is not None
    printed: list[str] = []
    answers = 0
    for line in agent.stdout:  # the greeting, then caller and agent turns
        if "agent said" in line or "agent heard" in line:
            printed.append(line.split(": ", 1)[1].strip())
            answers += "agent said" in line and len(printed) > 1
        if answers == 2:
            break
    agent.send_signal(signal.SIGKILL)
    agent.wait()
    agent.stdout.close()
    listing = edge_agent("sessions", "list", config=config, timeout=60).stdout
    session_id = listing.splitlines()[1].split()[0]
    shown = edge_agent("sessions", "show", session_id, "--json", config=config,
                       timeout=60).stdout
    record = json.loads(shown)
    texts = [turn.get("text", "") for turn in record["turns"]]
    assert len(printed) >= 4
    for said in printed[:-1]:
        assert any(said in text for text in texts), (said, texts)
