"""`edge-agent sessions` and `edge-agent memory` on a real database, and the start-up errors
of a database that cannot be used."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from edge_agent.app import conversation_settings
from edge_agent.cli import main
from edge_agent.clock import VirtualClock
from edge_agent.config import Config
from edge_agent.events import EventLog
from edge_agent.heard.ledger import Finalize
from edge_agent.memory.conversation_memory import ConversationMemory
from edge_agent.memory.schema import SCHEMA_VERSION
from edge_agent.memory.store import MemoryStore
from edge_agent.memory.writer import StoreWriter
from tests.cli import write_config
from tests.fakes import InlineOwner

CUT = "Your table is at 8 PM. We also have a terrace with heaters"


async def _recorded(tmp_path: Path) -> str:
    clock = VirtualClock()
    log = EventLog(clock)
    store = MemoryStore.open(tmp_path / "data" / "edge-agent.db")
    writer = StoreWriter(store, InlineOwner("store"), clock, warn=print)
    memory = ConversationMemory(conversation_settings(Config()).memory, log, writer=writer)
    memory.open_session("speech")
    memory.add_user("My name is Maria Garcia, my phone number is 555 123 4567.")
    memory.add_finalize(Finalize("u1", CUT + " and blankets.", CUT, 1000, 16000, (), 0))
    memory.add_user("Thanks \x1b[2J bye.")
    await writer.flushed()
    store.close()
    assert memory.session_id is not None
    return memory.session_id


async def test_sessions_list_show_export_delete(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    session_id = await _recorded(tmp_path)
    config = str(write_config(tmp_path))
    assert main(["-c", config, "sessions", "list"]) == 0
    assert session_id in capsys.readouterr().out

    assert main(["-c", config, "sessions", "show", session_id[:6]]) == 0
    shown = capsys.readouterr().out
    assert f"agent  {CUT} [cut; never heard:  and blankets.]" in shown
    assert "\x1b" not in shown and "\\x1b[2J" in shown  # the terminal is never driven

    assert main(["-c", config, "sessions", "show", session_id, "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert [t["text"] for t in record["turns"]][1] == CUT
    assert record["turns"][1]["interrupted"] is True

    out = tmp_path / "export.json"
    assert main(["-c", config, "sessions", "export", session_id, "-o", str(out)]) == 0
    exported = json.loads(out.read_text())
    assert {f["key"] for f in exported["facts"]} == {"name", "phone"}
    assert "8 PM" not in json.dumps(exported["facts"])  # heard, but never confirmed

    assert main(["-c", config, "memory", "show"]) == 0
    assert "phone: 5551234567" in capsys.readouterr().out
    assert main(["-c", config, "memory", "forget", "phone"]) == 0
    assert "forgot 1 value(s)" in capsys.readouterr().out
    assert main(["-c", config, "memory", "consolidate"]) == 0
    assert "consolidated" in capsys.readouterr().out

    assert main(["-c", config, "sessions", "delete", session_id]) == 0
    capsys.readouterr()
    assert main(["-c", config, "sessions", "show", session_id]) == 2
    assert "no such session" in capsys.readouterr().err
    store = MemoryStore.open(tmp_path / "data" / "edge-agent.db")
    assert store.sessions() == [] and store.facts() == []
    assert store.db.execute("SELECT count(*) FROM turns").fetchone()[0] == 0


def test_without_a_database_the_commands_say_so(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["-c", str(write_config(tmp_path)), "sessions", "list"]) == 0
    assert "no memory database yet" in capsys.readouterr().out
    for action in ("show", "export", "delete", "replay"):  # a named session is not there
        assert main(["-c", str(write_config(tmp_path)), "sessions", action, "4e4a2d"]) == 2
        assert "no memory database here yet, so no such session" in capsys.readouterr().err
    assert not (tmp_path / "data").exists()


@pytest.mark.parametrize("damage", ["garbage", "newer"])
def test_a_database_that_cannot_be_used_is_one_line_and_exit_8(
        tmp_path: Path, damage: str, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "data" / "edge-agent.db"
    db.parent.mkdir()
    if damage == "garbage":
        db.write_bytes(b"\x00not a database" * 500)
    else:
        MemoryStore.open(db).close()
        with sqlite3.connect(db) as connection:
            connection.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 3}")
    before = db.read_bytes()
    assert main(["-c", str(write_config(tmp_path)), "sessions", "list"]) == 8
    error = capsys.readouterr().err.strip()
    assert error.count("\n") == 0 and error.startswith("edge-agent: error: memory database")
    assert db.read_bytes() == before
