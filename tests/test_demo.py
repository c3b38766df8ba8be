"""`edge-agent demo` end to end on the real engines."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from edge_agent.audio.pcm import read_wav
from edge_agent.bench.wer import normalize
from tests.cli import edge_agent, run_demo, write_config

pytestmark = [pytest.mark.models, pytest.mark.realtime]


def _demo(tmp_path: Path, *args: str) -> tuple[dict, str]:  # type: ignore[type-arg]
    out = tmp_path / "session.json"
    result = edge_agent("demo", "--json", out, *args, timeout=240)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    return json.loads(out.read_text()), result.stdout


def test_default_demo_records_heard_truth(tmp_path: Path) -> None:
    db = tmp_path / "data" / "edge-agent.db"
    record, stdout = _demo(tmp_path, "--audio-dir", str(tmp_path / "units"), "--db", str(db))
    assert "agent was cut" in stdout
    users = [" ".join(normalize(t["text"])) for t in record["turns"] if t["role"] == "user"]
    assert len(users) == 3
    assert "book a table for tonight" in users[0]
    assert "people" in users[1]
    assert "perfect" in users[2]
    units = record["units"]
    assert [u["unit_id"] for u in units] == ["u1", "u2", "u3", "u4"]
    greeting, _, cut, last = units
    assert greeting["heard"] == greeting["generated"] == "Hi, Luigi's. How can I help?"
    # The barge-in cut the table list: heard is a strict verbatim prefix ending on a word.
    assert cut["interrupted"] and cut["generated"].startswith(cut["heard"]) and cut["heard"]
    assert cut["heard"] != cut["generated"]
    # Every word that ended before the played position, none that ended after it. The record
    # keeps milliseconds, the cut is exact to the sample: a word ending in the same millisecond
    # as the cut may fall on either side.
    heard_words = cut["heard"].split()
    surely_heard = [w["text"] for w in cut["words"] if w["end_ms"] < cut["played_ms"]]
    maybe_heard = [w["text"] for w in cut["words"] if w["end_ms"] <= cut["played_ms"]]
    assert heard_words in (surely_heard, maybe_heard)
    assert not last["interrupted"]
    # The cut turn is in history as heard, and the next request marks it.
    assistant = [t for t in record["turns"] if t["role"] == "assistant"]
    assert assistant[2]["text"] == cut["heard"]
    last_request = record["llm_requests"][-1]["messages"]
    assert {"role": "assistant", "content": cut["heard"] + " [interrupted]"} in last_request
    for request in record["llm_requests"]:
        for message in request["messages"]:
            assert "Which one would you like" not in message["content"]
    # --audio-dir: per unit, the audio that reached the device, ending where playback stopped.
    assert "unit audio: 4 file(s)" in stdout
    for unit in units:
        pcm, rate = read_wav(tmp_path / "units" / f"{unit['unit_id']}.wav")
        assert rate == 22050
        assert abs(len(pcm) / 2 * 1000 / rate - unit["played_ms"]) <= 1, unit["unit_id"]
    # --db: the call is in the memory database; `sessions show --json` gives the same record.
    config = write_config(tmp_path, data_dir=db.parent)
    shown = edge_agent("sessions", "show", record["session_id"], "--json", config=config,
                       timeout=60)
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout) == record
    listed = edge_agent("sessions", "list", config=config, timeout=60).stdout
    assert record["session_id"] in listed and "1 session(s)" in listed
    whole = max(w["end_ms"] for w in cut["words"])
    assert cut["played_ms"] < whole - 1000  # the cut file is well short of the whole reply


def test_demo_with_the_real_language_model(tmp_path: Path) -> None:
    call = tmp_path / "call.toml"
    call.write_text('[agent]\ngreeting = ""\n\n[[caller]]\nsay = "What time do you open?"\nat = 0.3\n')
    record, _ = _demo(tmp_path, "--call", str(call))
    assert record["engines"]["llm"].startswith("llama.cpp")
    assert "open" in record["turns"][0]["text"]
    assert record["turns"][1]["role"] == "assistant" and record["turns"][1]["text"].strip()
    assert record["units"][0]["heard"] == record["units"][0]["generated"]
    assert record["units"][0]["words"]


def test_a_barge_in_on_a_long_reply_as_the_last_line_ends_the_call(tmp_path: Path) -> None:
    """A scripted reply of minutes, cut by the caller's last line, which the script has no
    answer for: the call ends when the conversation falls quiet (it went on saying the long
    reply again, silent on the console, until killed)."""
    long_reply = " ".join(["tomato"] * 3000)
    call = (f'[agent]\ngreeting = ""\nreplies = ["{long_reply}"]\n'
            '[[caller]]\nsay = "Tell me everything on the menu."\nat = 0.5\n'
            '[[caller]]\nsay = "Stop, that is enough."\nbarge_in_after = 2.0\n')
    demo = run_demo(tmp_path, call, "", timeout=90)
    [cut] = [u for u in demo.record["units"] if u["interrupted"]]
    assert cut["generated"] == long_reply and 0 < len(cut["heard"].split()) < 30
    assert [u["generated"] for u in demo.record["units"]].count(long_reply) == 1
    assert max(event["at"] for event in demo.record["events"]) < 30  # seconds of the call
