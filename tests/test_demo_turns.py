"""Turn-taking end to end on the real engines (Silero, PocketSphinx, Piper) through the
clock-paced virtual audio pair: the built-in `turns` and `echo` calls of `edge-agent demo`."""

from __future__ import annotations

import importlib.resources
import json
from pathlib import Path
from typing import Any

import pytest

from edge_agent.bench.wer import normalize
from edge_agent.events import (
    Backchannel,
    BargeIn,
    Event,
    PlaybackPaused,
    PlaybackResumed,
    UserSpeechStarted,
)
from tests.cli import edge_agent, write_config
from tests.logged import kinds

pytestmark = [pytest.mark.models, pytest.mark.realtime]

NO_CANCELLER = '[audio]\necho_cancel = "off"\n'


def _demo(tmp_path: Path, call: str, config: str = "", *options: str) -> dict[str, Any]:
    out = tmp_path / "session.json"
    settings = write_config(tmp_path, config)
    done = edge_agent("demo", "--call", call, "--json", out, *options, config=settings,
                      timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    record: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
    record["stdout"] = done.stdout
    return record


def _types(record: dict[str, Any]) -> list[type[Event]]:
    return kinds(record["events"])


def test_a_backchannel_is_not_answered_and_a_real_interruption_is(tmp_path: Path) -> None:
    record = _demo(tmp_path, "turns")
    types = _types(record)
    assert types.count(Backchannel) == 1, record["stdout"]
    assert types.count(BargeIn) == 1, record["stdout"]
    assert types.index(Backchannel) < types.index(BargeIn)
    # Paused at both onsets; resumed only after the backchannel.
    assert types.count(PlaybackPaused) == 2 and types.count(PlaybackResumed) == 1
    first, second, third = record["units"][:3]
    assert first["heard"] == first["generated"] and not first["interrupted"]
    assert second["interrupted"] and second["heard"]
    assert second["generated"].startswith(second["heard"])
    users = [" ".join(normalize(t["text"])) for t in record["turns"] if t["role"] == "user"]
    assert len(users) == 3 and "sunday" in users[2], users  # "okay" is not a turn
    assert third["heard"] == "Of course. On Sunday we open at ten."
    # The cut reply reached the model marked, and only as far as it was heard.
    last = record["llm_requests"][-1]["messages"]
    assert {"role": "assistant", "content": second["heard"] + " [interrupted]"} in last


def _loop_behind_s(record: dict[str, Any]) -> float:
    """How far the loop ran behind the microphone at worst: when it took each onset and end of
    speech against when that audio was heard (a demo's microphone starts with its run)."""
    return max(e["at"] - e["audio_time"] for e in record["events"] if "audio_time" in e)


@pytest.mark.parametrize(("pause_on_speech", "talker_gate"),
                         [(True, "level"), (False, "level"), (True, "off")])
def test_the_agents_own_echo_never_interrupts_it(tmp_path: Path, pause_on_speech: bool,
                                                 talker_gate: str) -> None:
    # The safety net behind the echo canceller (echo told by sound and by words): with the
    # canceller off, the microphone hears the agent as a kiosk without one does. The talker
    # gate ("level") takes the echo for a quieter talker and cuts it into pieces: each piece
    # must still be compared with the words that were playing as it was heard.
    config = (f"[turns]\npause_on_speech = {str(pause_on_speech).lower()}\n"
              f"{NO_CANCELLER}talker_gate = \"{talker_gate}\"\n")
    record = _demo(tmp_path, "echo", config)
    types = _types(record)
    # The microphone did hear the agent (speech beyond the caller's one question)...
    assert types.count(UserSpeechStarted) >= 2, record["stdout"]
    # ...and it cut nothing, paused nothing, answered nothing.
    assert BargeIn not in types, record["stdout"]
    assert PlaybackPaused not in types, record["stdout"]  # no stutter on its own voice
    (unit,) = record["units"]
    assert unit["heard"] == unit["generated"]
    assert [t["role"] for t in record["turns"]] == ["user", "assistant"]
    # Asking the recognizer about the echo every 96 ms of it, the loop fell 3.7 s behind.
    assert _loop_behind_s(record) <= 1.0, record["stdout"]


def test_the_agents_own_echo_through_a_room_never_interrupts_it(tmp_path: Path) -> None:
    # The built-in echo call in a kiosk's room: the echo 40 ms late and reverberating.
    built_in = importlib.resources.files("edge_agent.demo").joinpath("echo.toml")
    call = tmp_path / "echo-room.toml"
    call.write_text(built_in.read_text(encoding="utf-8")
                    + "\n[room]\ndelay_ms = 40\nreverb_ms = 150\nseed = 1\n", encoding="utf-8")
    record = _demo(tmp_path, str(call), NO_CANCELLER)
    types = _types(record)
    assert types.count(UserSpeechStarted) >= 2, record["stdout"]  # it heard itself...
    assert BargeIn not in types, record["stdout"]  # ...and took none of it for the caller
    (unit,) = record["units"]
    assert unit["heard"] == unit["generated"]
    assert [t["role"] for t in record["turns"]] == ["user", "assistant"]
    assert _loop_behind_s(record) <= 1.0, record["stdout"]


def test_a_booking_made_by_a_tool_stays_in_history_when_its_confirmation_is_cut(
        tmp_path: Path) -> None:
    import sqlite_utils

    database = tmp_path / "call.db"  # a demo's bookings go to its own database, never the data dir
    record = _demo(tmp_path, "booking", "", "--db", str(database))
    assert not (tmp_path / "data" / "edge-agent.db").exists()
    rows = list(sqlite_utils.Database(database)["bookings"].rows)
    assert [(r["time"], r["people"]) for r in rows] == [("7 PM", 4)]
    roles = [t["role"] for t in record["turns"]]
    assert roles[:2] == ["user", "tool"], record["turns"]
    tool = record["turns"][1]
    assert tool["name"] == "book_table" and tool["result"].startswith("booked:")
    confirmation = next(u for u in record["units"] if u["generated"].startswith("Done!"))
    assert confirmation["interrupted"] and "B1" not in confirmation["heard"]
    # The second hop was asked with the tool's result; the reply after the cut knows the
    # booking happened even though its confirmation was not heard in full.
    hops = [(r["turn"], r["hop"]) for r in record["llm_requests"]]
    assert hops[:2] == [(1, 1), (1, 2)]
    after_cut = record["llm_requests"][-1]["messages"]
    assert any(m["role"] == "tool" and "B1" in m["content"] for m in after_cut)
    assert {"role": "assistant",
            "content": confirmation["heard"] + " [interrupted]"} in after_cut
