"""`edge-agent sessions replay`: what it refuses, before any model loads (no models)."""

from __future__ import annotations

from pathlib import Path

import pytest

from edge_agent.app import conversation_settings
from edge_agent.cli import main
from edge_agent.clock import VirtualClock
from edge_agent.config import Config
from edge_agent.events import EventLog
from edge_agent.memory.conversation_memory import ConversationMemory
from edge_agent.memory.store import MemoryStore
from edge_agent.memory.writer import StoreWriter
from tests.cli import write_config
from tests.fakes import InlineOwner


async def _session_without_events(tmp_path: Path) -> tuple[str, str]:
    clock = VirtualClock()
    store = MemoryStore.open(tmp_path / "data" / "edge-agent.db")
    writer = StoreWriter(store, InlineOwner("store"), clock, warn=print)
    memory = ConversationMemory(conversation_settings(Config()).memory, EventLog(clock),
                                writer=writer)
    memory.open_session("speech")
    memory.add_user("Hello?")
    await writer.flushed()
    store.close()
    config = write_config(tmp_path)
    assert memory.session_id is not None
    return str(config), memory.session_id


async def test_replay_refuses_what_it_cannot_replay(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    config, session_id = await _session_without_events(tmp_path)
    assert main(["-c", config, "sessions", "replay", "nosuchid"]) == 2
    assert "nosuchid: no such session" in capsys.readouterr().err
    assert main(["-c", config, "sessions", "replay", session_id, "--echo-gain", "1.5"]) == 2
    assert "--echo-gain: must be between 0 and 1 (got 1.5)" in capsys.readouterr().err
    # The turns are there, the event log is not (retention deleted it, or nothing was said).
    assert main(["-c", config, "sessions", "replay", session_id[:6]]) == 2
    error = capsys.readouterr().err
    assert f"session {session_id}: events: nothing to replay" in error
    assert "retention_days" in error
