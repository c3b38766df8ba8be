"""`edge-agent sessions replay` on real recordings: `edge-agent demo` calls (the real engines,
in real time) recorded with their audio kept, replayed through the real engines on the virtual
clock; and a changed setting that the replay shows."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from edge_agent.replay import EXIT_DIFFERS
from tests.cli import edge_agent, write_config

pytestmark = [pytest.mark.models, pytest.mark.realtime]


def _config(tmp_path: Path, name: str, extra: str = "", keep_audio: bool = True) -> Path:
    return write_config(tmp_path, f"\n[memory]\nkeep_audio = {str(keep_audio).lower()}\n{extra}",
                        name=f"{name}.toml")


def _edge_agent(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return edge_agent(*args, config=config, timeout=300)


def _demo(tmp_path: Path, config: Path, *args: str) -> str:
    """Run a demo call into the data dir's database; its session id."""
    out = tmp_path / "session.json"
    done = _edge_agent(config, "demo", "--db", str(tmp_path / "data" / "edge-agent.db"),
                       "--json", str(out), *args)
    assert done.returncode == 0, done.stderr
    return str(json.loads(out.read_text())["session_id"])


def _compared(stdout: str) -> int:
    found = re.search(r"no differences: (\d+) decisions compared", stdout)
    assert found, stdout
    return int(found.group(1))


@pytest.mark.parametrize(("call", "decided"), [(None, "barge-in"), ("turns", "backchannel")])
def test_a_recorded_demo_is_replayed_with_the_same_decisions(
        tmp_path: Path, call: str | None, decided: str) -> None:
    config = _config(tmp_path, "edge-agent")
    session = _demo(tmp_path, config, *(["--call", call] if call else []))
    out = tmp_path / "replay.json"
    replay = _edge_agent(config, "sessions", "replay", session[:8], "--json", str(out))
    assert replay.returncode == 0, replay.stdout + replay.stderr
    assert "loading models" in replay.stdout and "on the virtual clock" in replay.stdout
    assert _compared(replay.stdout) >= 8
    result = json.loads(out.read_text())
    assert result["differences"] == 0 and result["caller_audio"] == "kept clips"
    kinds = {row["recorded"]["kind"] for row in result["rows"]}
    assert {decided, "barge-in", "paused", "heard", "answered"} <= kinds
    cut = [row["replay"] for row in result["rows"]
           if row["replay"]["kind"] == "heard" and row["replay"]["interrupted"]]
    assert len(cut) == 1 and cut[0]["text"]  # the barge-in cut a unit, heard up to a word
    # The caller cut in relative to the agent's reply, as a person would.
    assert any(line["barge_in_after"] is not None for line in result["lines"])


def test_a_changed_setting_shows_which_decisions_change(tmp_path: Path) -> None:
    config = _config(tmp_path, "edge-agent")
    session = _demo(tmp_path, config, "--call", "turns")
    # The same recording under a config that does not pause when someone starts to speak.
    changed = _config(tmp_path, "no-pause", "\n[turns]\npause_on_speech = false\n")
    replay = _edge_agent(changed, "sessions", "replay", session)
    assert replay.returncode == EXIT_DIFFERS, replay.stdout + replay.stderr
    lines = replay.stdout.splitlines()
    assert re.search(r"\d+ of \d+ decisions differ from the recording", lines[-1])
    gone = [line for line in lines if line.startswith("  - ") and "paused" in line]
    assert len(gone) == 2  # the backchannel's pause and the interruption's
    assert not any(line.startswith("  = ") and "paused" in line for line in lines)


def test_without_kept_audio_the_call_lines_are_spoken_again(tmp_path: Path) -> None:
    config = _config(tmp_path, "edge-agent", keep_audio=False)
    session = _demo(tmp_path, config, "--call", "turns")
    out = tmp_path / "replay.json"
    replay = _edge_agent(config, "sessions", "replay", session, "--json", str(out))
    # The demo and the replay both seed the voice and say the lines first: the same sound.
    assert replay.returncode == 0, replay.stdout + replay.stderr
    result = json.loads(out.read_text())
    assert result["caller_audio"] == "call lines"
    assert [line["text"] for line in result["lines"]] == [
        "What time do you open?", "Okay.", "Do you have a terrace?", "Wait, what about Sunday?"]
    assert any("keep_audio = true" in note for note in result["notes"])
    assert result["compared"] >= 8
