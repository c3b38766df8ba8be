"""The venue's knowledge through `edge-agent demo` on the real engines (Silero, Moonshine,
Piper): the config's files are indexed in the memory database and answer the caller; a caller
who cuts the answer keeps only what was heard."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from edge_agent.events import KnowledgeUsed
from tests.cli import edge_agent, write_config
from tests.logged import read_events

pytestmark = pytest.mark.models

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
    config = write_config(tmp_path, f'[audio]\necho_cancel = "off"\n[knowledge]\nfiles = '
                                    f'[{files}]\ntimezone = "Europe/Amsterdam"\n')
    call = tmp_path / "call.toml"
    call.write_text(CALL, encoding="utf-8")
    database, out = tmp_path / "memory.db", tmp_path / "session.json"
    done = edge_agent("demo", "--call", call, "--json", out, "--db", database, config=config,
                      timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    record = json.loads(out.read_text(encoding="utf-8"))
    used = [e for e in read_events(record["events"]) if isinstance(e.event, KnowledgeUsed)]
    assert [u.event.how for u in used] == ["direct", "chat", "fallback"], done.stdout
    prices, hello, fallback = record["units"]
    assert prices["generated"].startswith("An adult ticket costs 14 euros.")
    assert prices["interrupted"] and prices["generated"].startswith(prices["heard"])
    assert hello["generated"] == "Hello! Ask me anything about the museum."
    assert fallback["generated"] == "I'm not sure about that. Please ask at the front desk."
    # One model request, for the small talk; it knew the prices were cut.
    (request,) = record["llm_requests"]
    assert {"role": "assistant", "content": prices["heard"] + " [interrupted]"} in \
        request["messages"]
    assert "said ticket" in done.stdout or "from the venue's knowledge" in done.stdout
    with sqlite3.connect(database) as db:
        indexed = dict(db.execute("SELECT path, entries FROM knowledge_files").fetchall())
    assert indexed == {str(VENUE / "museum.toml"): 14, str(VENUE / "museum.md"): 17,
                       str(VENUE / "faq.csv"): 7}
