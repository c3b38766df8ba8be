"""The live agent's memory with `[sync] url`: its sessions reach the venue's PostgreSQL from the
sync's own thread while the conversation goes on, and what another kiosk learned of the same
identity is in the preload of its next session."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import psycopg
import pytest

from edge_agent.app import close_memory, conversation_parts, open_memory
from edge_agent.bench.postgres_rig import PASSWORD, LocalPostgres
from edge_agent.clock import MonotonicClock
from edge_agent.config import Config, MemoryConfig, SyncConfig
from edge_agent.events import EventLog, Notice
from edge_agent.memory.store import MemoryStore
from edge_agent.memory.summarizer import ExtractiveSummarizer
from tests.test_sync import fill, make_sync

pytestmark = pytest.mark.postgres


async def _until(done: object, what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"not within {timeout_s} s: {what}"
        await asyncio.sleep(0.05)


def _venue_turns(venue: LocalPostgres, kiosk: str) -> list[str]:
    with psycopg.connect(venue.admin_url) as admin:
        return [row[0] for row in admin.execute(
            "SELECT heard FROM edge_agent.turns WHERE kiosk_id = %s ORDER BY seq", [kiosk])]


async def test_the_agent_syncs_while_it_talks_and_learns_from_the_venue(
        tmp_path: Path, venue: LocalPostgres, monkeypatch: pytest.MonkeyPatch) -> None:
    other = MemoryStore.open(tmp_path / "other.db")
    fill(other, "elsewhere", identity="ana", at="2026-12-03T08:00:00.000+00:00")
    other.add_fact({"identity": "ana", "session_id": "elsewhere", "key": "phone",
                    "value": "555 0142", "source": "user", "source_seq": 0,
                    "at": "2026-12-03T08:00:00.000+00:00", "expires_at": None})
    other.close()
    elsewhere = make_sync(tmp_path / "other.db", venue.url, "kiosk-b", identity="ana")
    assert elsewhere.run_once().error is None
    elsewhere.close()

    monkeypatch.setenv("EDGE_AGENT_SYNC_PASSWORD", PASSWORD)
    (tmp_path / "data").mkdir()
    config = Config(data_dir=str(tmp_path / "data"),
                    memory=MemoryConfig(identity="ana", summarizer="extractive"),
                    sync=SyncConfig(url=venue.url, kiosk_id="kiosk-a", interval_ms=100))
    log = EventLog(MonotonicClock())
    notes: list[str] = []
    log.listen(lambda entry: notes.append(entry.event.text)
               if isinstance(entry.event, Notice) else None)
    memory = await open_memory(config, conversation_parts(config), log, {"llm": "scripted"},
                               ExtractiveSummarizer(max_chars=200), venue=True)
    conversation = memory.conversation
    try:
        await conversation.start()
        await _until(lambda: any(f.key == "phone" for f in conversation.context.preload.facts),
                     "kiosk-b's phone number in the preload")
        conversation.open_session("start-up")
        conversation.add_user("I would like a table for four.")
        conversation.add_user("At seven, please.")
        await _until(lambda: _venue_turns(venue, "kiosk-a") == [
            "I would like a table for four. At seven, please."], "the turn in the venue")
        conversation.end_session()
        await memory.writer.flushed()
    finally:
        await close_memory(memory)
    assert not [note for note in notes if note.startswith("sync:")], notes
    phone = [f.value for f in conversation.context.preload.facts if f.key == "phone"]
    assert phone == ["555 0142"]
