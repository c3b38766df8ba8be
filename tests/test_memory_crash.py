"""Kill -9 a real `edge-agent demo` at chosen moments of a scripted call (mid-reply among
them), restart it on the same database: nothing committed is lost, a cut unit is recovered
no further than it had played, and the database is intact."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from edge_agent.bench.durability import kill_trial

pytestmark = pytest.mark.models

# Seconds after the session starts, on the default call (greeting, two answers, a long reply
# cut by the caller, a last answer): during the greeting, between turns, mid-reply twice.
KILL_POINTS = (1.5, 4.2, 11.8, 16.9)
MID_LONG_REPLY = 11.8
"""The long reply plays from ~10.6 s until the caller cuts it at ~14.1 s: a kill here always
finds it playing."""


@pytest.mark.parametrize("kill_after_s", KILL_POINTS)
def test_a_sigkill_loses_no_committed_turn_and_never_overstates_what_was_heard(
        tmp_path: Path, kill_after_s: float) -> None:
    config = tmp_path / "edge-agent.toml"
    config.write_text(f"data_dir = {json.dumps(str(tmp_path / 'data'))}\n", encoding="utf-8")
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
