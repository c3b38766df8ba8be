"""A call through a LAN server that speaks the chat API's own tool calling, end to end
(`edge-agent demo` on the real voice, recognizer and VAD, a scripted chat server on 127.0.0.1):
the tool runs once, the history carries the call and its result in the API's shape, and heard
truth is kept for the sentence around it."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from edge_agent.events import Notice, ToolUsed
from tests.cli import run_demo
from tests.logged import read_events
from tests.sse_server import ScriptedChatServer, http_error, piece, sse

pytestmark = [pytest.mark.models, pytest.mark.realtime]

CALL = """
[agent]
greeting = ""
tools = ["book_table"]

[[caller]]
say = "I would like a table for four at seven."
at = 0.5
[[caller]]
say = "Wait, can we sit outside?"
barge_in_after = 2.0
"""
DONE = ("All set: a table for four at seven tonight, booking one. We look forward to seeing "
        "you, and the terrace is heated in the evening.")


def _call(arguments: str) -> list[dict[str, Any]]:
    def delta(value: dict[str, Any]) -> dict[str, Any]:
        return {"choices": [{"index": 0, "delta": value, "finish_reason": None}]}

    return [delta({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                                   "function": {"name": "book_table", "arguments": ""}}]}),
            *(delta({"tool_calls": [{"index": 0, "function": {"arguments": part}}]})
              for part in (arguments[:10], arguments[10:]))]


def _demo(tmp_path: Path, server: ScriptedChatServer) -> dict[str, Any]:
    demo = run_demo(tmp_path, CALL, f'[llm]\nserver = "{server.url}"\nserver_timeout_ms = 5000\n'
                                    '[audio]\necho_cancel = "off"\n')
    with sqlite3.connect(demo.database) as db:
        booked = db.execute("SELECT name FROM sqlite_master WHERE name = 'bookings'").fetchone()
        bookings = db.execute("SELECT time, people FROM bookings").fetchall() if booked else []
    return {**demo.record, "bookings": bookings}


def test_a_native_tool_call_runs_once_and_heard_truth_holds(tmp_path: Path) -> None:
    answers = [sse(piece("Let me book that."), *_call('{"time": "7 PM", "people": 4}'),
                   finish="tool_calls"),
               sse(*(piece(word + " ") for word in DONE.split())),
               sse(piece("Yes, the terrace is open."))]
    with ScriptedChatServer(answers) as server:
        record = _demo(tmp_path, server)
    assert record["bookings"] == [("7 PM", 4)]  # once
    used = [e.event for e in read_events(record["events"]) if isinstance(e.event, ToolUsed)]
    assert [(u.call.call_id, u.call.name) for u in used] == [("call_1", "book_table")]
    first, second, third = server.requests
    assert first["tools"][0]["function"]["name"] == "book_table"
    assert "response_format" not in first
    # The call and its result go back in the API's own shape, matched by the call's id.
    assert second["messages"][-2:] == [
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "book_table", "arguments": '{"time": "7 PM", "people": 4}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": used[0].result}]
    cut = [u for u in record["units"] if u["interrupted"]]
    assert len(cut) == 1 and DONE.startswith(cut[0]["heard"]) and cut[0]["heard"] != DONE
    assistant = [m["content"] for m in third["messages"] if m["role"] == "assistant"]
    assert f"{cut[0]['heard']} [interrupted]" in assistant and DONE not in assistant
    notices = [e.event.text for e in read_events(record["events"])
               if isinstance(e.event, Notice)]
    assert any("tools through its own tool calling" in n for n in notices), notices


def test_a_server_that_ignores_the_json_form_is_still_heard(tmp_path: Path) -> None:
    answers = [http_error(400, "Bad Request", "tools are not supported"),
               sse(piece("Sure, we are open"), piece(" until nine tonight.")),
               sse(piece("Yes, outside is fine."))]
    with ScriptedChatServer(answers) as server:
        record = _demo(tmp_path, server)
    said = [u["generated"] for u in record["units"]]
    assert said[0] == "Sure, we are open until nine tonight."
    assert "response_format" in server.requests[1]  # the JSON form, which it ignored
    notices = [e.event.text for e in read_events(record["events"])
               if isinstance(e.event, Notice)]
    assert any("the JSON reply format" in n for n in notices), notices
    assert any("answered in its own words" in n for n in notices), notices
    assert record["bookings"] == []
