"""The venue's knowledge through `edge-agent demo` on the real engines (Silero, Moonshine,
Piper): the config's files are indexed in the memory database and answer the caller; a caller
who cuts the answer keeps only what was heard."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from edge_agent.events import KnowledgeUsed
from tests.cli import run_demo
from tests.logged import read_events

pytestmark = [pytest.mark.models, pytest.mark.realtime]

VENUE = Path(__file__).resolve().parents[1] / "edge_agent" / "bench" / "venue"
CALL = """[agent]
greeting = ""
replies = ["Hello! Ask me anything about the museum."]

[[caller]]
say = "How much are the tickets?"
at = 0.5
[[caller]]
say = "Wait, hello there."
barge_in_after = 2.0
[[caller]]
say = "What is the wifi password?"
after_agent_done = true
"""


def test_the_knowledge_answers_and_a_cut_answer_keeps_what_was_heard(tmp_path: Path) -> None:
    files = ", ".join(json.dumps(str(VENUE / n)) for n in ("museum.toml", "museum.md", "faq.csv"))
    demo = run_demo(tmp_path, CALL, f'[audio]\necho_cancel = "off"\n[knowledge]\nfiles = '
                                    f'[{files}]\ntimezone = "Europe/Amsterdam"\n')
    record = demo.record
    used = [e for e in read_events(record["events"]) if isinstance(e.event, KnowledgeUsed)]
    assert [u.event.how for u in used] == ["direct", "chat", "fallback"], demo.stdout
    prices, hello, fallback = record["units"]
    assert prices["generated"].startswith("An adult ticket costs 14 euros.")
    assert prices["interrupted"] and prices["generated"].startswith(prices["heard"])
    assert hello["generated"] == "Hello! Ask me anything about the museum."
    assert fallback["generated"] == "I'm not sure about that. Please ask at the front desk."
    # One model request, for the small talk; it knew the prices were cut.
    (request,) = record["llm_requests"]
    assert {"role": "assistant", "content": prices["heard"] + " [interrupted]"} in \
        request["messages"]
    assert "from the venue's knowledge (score" in demo.stdout
    with sqlite3.connect(demo.database) as db:
        indexed = dict(db.execute("SELECT path, entries FROM knowledge_files").fetchall())
    assert indexed == {str(VENUE / "museum.toml"): 14, str(VENUE / "museum.md"): 17,
                       str(VENUE / "faq.csv"): 7}
