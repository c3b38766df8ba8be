"""A misbehaving LAN server through the whole kiosk (`edge-agent demo` on the real voice,
recognizer, VAD and on-device model; a hostile chat server on 127.0.0.1): a reply with text no
database can store is kept (made storable) in memory and the record, a reply past max_tokens is
cut at the kiosk's own count, and a server that drips its answer is given up on within
`server_timeout_ms`, the on-device model answering in its place."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from edge_agent.engines.llm.server import CHARS_PER_TOKEN
from edge_agent.events import Notice, TurnStage
from tests.cli import run_demo
from tests.logged import read_events
from tests.sse_server import ScriptedChatServer, piece, sse
from tests.test_llm_server_hostile import HEAD, trickle

pytestmark = [pytest.mark.models, pytest.mark.realtime]

TIMEOUT_MS = 1500
MAX_TOKENS = 16
CALL = """
[agent]
greeting = ""

[[caller]]
say = "Is the cafe open?"
at = 0.5
[[caller]]
say = "Tell me about the tours."
after_agent_done = true
pause = 0.5
[[caller]]
say = "And the parking?"
after_agent_done = true
pause = 0.5
"""


def test_the_kiosk_keeps_its_voice_and_its_memory_whatever_the_server_sends(
        tmp_path: Path) -> None:
    answers = [sse(piece("The caf\ud800 is open"), piece(" until nine.")),
               sse(*(piece("tour ") for _ in range(20_000))),
               trickle(b'data: {"choices": [{"delta": {"content": "Parking"}}]}\n\n', 0.05,
                       HEAD)]
    with ScriptedChatServer(answers) as server:
        demo = run_demo(tmp_path, CALL, f'[llm]\nserver = "{server.url}"\n'
                        f'server_timeout_ms = {TIMEOUT_MS}\nmax_tokens = {MAX_TOKENS}\n'
                        '[audio]\necho_cancel = "off"\n')
    record = demo.record
    said = [unit["generated"] for unit in record["units"]]
    assert said[0] == "The caf\ufffd is open until nine."
    allowed = (MAX_TOKENS + MAX_TOKENS // 4 + 8) * CHARS_PER_TOKEN
    assert said[1].startswith("tour tour") and len(said[1]) <= allowed
    assert len(said) == 3 and "tour" not in said[2] and said[2].strip()  # the device's words
    with sqlite3.connect(demo.database) as db:
        kept = [row[0] for row in db.execute(
            "SELECT generated FROM turns WHERE role = 'assistant' ORDER BY id")]
    assert kept[0].startswith("The caf\ufffd is open") and len(kept) == 3
    events = read_events(record["events"])
    notices = [e.event.text for e in events if isinstance(e.event, Notice)]
    assert sum("cannot be stored" in n for n in notices) == 1, notices
    assert sum("max_tokens" in n for n in notices) == 1, notices
    assert any("replies come from the on-device model" in n for n in notices), notices
    third = [(e.event.stage, e.at) for e in events
             if isinstance(e.event, TurnStage) and e.event.turn == 3]
    # Given up on within the timeout: when the kiosk said so, not when the on-device model's
    # first token came (that is the device's speed, which a busy machine slows).
    gave_up = min(e.at for e in events if isinstance(e.event, Notice)
                  and "replies come from the on-device model" in e.event.text)
    asked = max(at for stage, at in third if stage == "request" and at <= gave_up)
    assert gave_up - asked < TIMEOUT_MS / 1000 + 0.5, (third, gave_up)
    assert any(stage == "first_token" and at >= gave_up for stage, at in third), third
