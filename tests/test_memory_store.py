"""The memory database: migrations, refusals, file mode, writes that fail and recover."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from sqlite_utils import Database

from edge_agent.clock import VirtualClock
from edge_agent.errors import StoreError
from edge_agent.memory.consolidate import consolidate
from edge_agent.memory.schema import MIGRATIONS, SCHEMA_VERSION
from edge_agent.memory.store import MemoryStore
from edge_agent.memory.writer import StoreWriter
from edge_agent.owner import OwnerThread
from tests.fakes import InlineOwner

NOW = "2026-11-30T10:00:00.000+00:00"


def _session(store: MemoryStore, session_id: str = "s1", identity: str = "anonymous") -> None:
    store.insert_session({"id": session_id, "identity": identity, "run_id": "r", "how": "speech",
                          "state": "open", "started_at": NOW, "last_active_at": NOW,
                          "engines": "{}"})


def _tables(path: Path) -> set[str]:
    with sqlite3.connect(path) as connection:
        return {r[0] for r in connection.execute("SELECT name FROM sqlite_master WHERE type='table'")}


@pytest.mark.parametrize("older", range(SCHEMA_VERSION))
def test_every_older_schema_migrates_and_keeps_its_rows(tmp_path: Path, older: int) -> None:
    path = tmp_path / "memory.db"
    store = MemoryStore.open(path, upto=older)
    if older >= 1:
        with store.transaction(durable=True):
            _session(store)
            store.put_turn({"session_id": "s1", "seq": 0, "role": "user", "heard": "hello",
                            "at": NOW})
    store.close()
    assert _tables(path) >= ({"sessions", "turns"} if older >= 1 else set())

    store = MemoryStore.open(path)
    version = store.db.execute("PRAGMA user_version").fetchone()[0]
    assert version == SCHEMA_VERSION == len(MIGRATIONS)
    assert _tables(path) >= {"sessions", "turns", "units", "events", "llm_requests", "summaries",
                             "facts", "profiles"}
    if older >= 1:
        assert [t["heard"] for t in store.turns("s1")] == ["hello"]
    assert store.integrity() == "ok"
    store.close()


def test_the_database_file_is_created_private_and_in_wal_mode(tmp_path: Path) -> None:
    path = tmp_path / "data" / "edge-agent.db"
    saved = os.umask(0)  # the mode is given at creation: no umask needed to make it private
    try:
        store = MemoryStore.open(path)
    finally:
        os.umask(saved)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert store.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    store.close()


def test_opening_a_second_connection_keeps_the_writers_locks(tmp_path: Path) -> None:
    """The agent's writer, then a second connection in the same process (the sync's queue):
    another process that opens and closes the database (`sessions list`, `sync --once`) must
    still see it in use and leave its WAL alone. (A descriptor of our own on the file, closed,
    would drop every POSIX lock of this process on it: that process's close then deleted the
    WAL under the writer, whose next write failed with "disk I/O error".)"""
    path = tmp_path / "edge-agent.db"
    writer = MemoryStore.open(path)
    queue = MemoryStore.open_reader(path, query_only=False)
    writer.insert_session({"id": "s1", "identity": "anonymous", "run_id": "r1",
                           "how": "start-up", "state": "open", "started_at": "2026-12-04T10:00:00",
                           "last_active_at": "2026-12-04T10:00:00", "ended_at": None,
                           "engines": "{}"})
    other = subprocess.run([sys.executable, "-c", "import sqlite3, sys; db = sqlite3.connect("
                            "sys.argv[1]); db.execute('SELECT count(*) FROM sessions'); "
                            "db.close()", str(path)], capture_output=True, text=True, timeout=60,
                           check=False)
    assert other.returncode == 0, other.stderr
    assert path.with_name("edge-agent.db-wal").exists()
    writer.put_turn({"session_id": "s1", "seq": 0, "role": "user", "heard": "still here",
                     "at": "2026-12-04T10:00:01"})
    assert queue.db.execute("SELECT heard FROM turns").fetchall() == [("still here",)]
    queue.close()
    writer.close()


def test_a_database_we_did_not_create_keeps_its_mode(tmp_path: Path) -> None:
    """Permissions are set only on files we create: a chmod after the fact would change a
    file that is not ours (the path could have been swapped)."""
    path = tmp_path / "edge-agent.db"
    path.touch(mode=0o644)
    path.chmod(0o644)
    MemoryStore.open(path).close()
    assert stat.S_IMODE(path.stat().st_mode) == 0o644


def test_a_database_from_a_newer_edge_agent_is_refused_untouched(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    MemoryStore.open(path).close()
    with sqlite3.connect(path) as connection:
        connection.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    before = path.read_bytes()
    with pytest.raises(StoreError, match="newer edge-agent") as error:
        MemoryStore.open(path)
    assert "upgrade edge-agent" in str(error.value)
    assert path.read_bytes() == before


def test_a_file_that_is_not_a_database_is_refused_untouched(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    path.write_bytes(b"this is not sqlite" * 300)
    before = path.read_bytes()
    with pytest.raises(StoreError, match="not a SQLite database") as error:
        MemoryStore.open(path)
    assert "left untouched" in str(error.value) and "move it away" in str(error.value)
    assert path.read_bytes() == before


def test_a_damaged_database_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    store = MemoryStore.open(path)
    with store.transaction(durable=True):
        _session(store)
        for seq in range(400):
            store.put_turn({"session_id": "s1", "seq": seq, "role": "user",
                            "heard": "words " * 40, "at": NOW})
    store.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    store.close()
    data = bytearray(path.read_bytes())
    page = 4096
    for offset in range(2 * page, len(data) - page, page):  # keep the header page readable
        data[offset:offset + 64] = b"\xff" * 64
    path.write_bytes(bytes(data))
    with pytest.raises(StoreError, match=r"damaged|not a SQLite"):
        MemoryStore.open(path)


def test_a_data_dir_that_is_a_file_is_reported(tmp_path: Path) -> None:
    (tmp_path / "data").write_text("oops")
    with pytest.raises(StoreError, match="cannot create or open") as error:
        MemoryStore.open(tmp_path / "data" / "edge-agent.db")
    assert "data_dir" in str(error.value)


def test_a_newer_fact_supersedes_and_keeps_the_older(tmp_path: Path) -> None:
    store = MemoryStore.open(tmp_path / "memory.db")
    row = {"identity": "anonymous", "session_id": None, "source": "user", "source_seq": 1,
           "at": NOW}
    with store.transaction(durable=True):
        first = store.add_fact({**row, "key": "time", "value": "7 PM"})
        again = store.add_fact({**row, "key": "time", "value": "7 PM"})
        second = store.add_fact({**row, "key": "time", "value": "8 PM"})
    assert again == first
    assert [(f["value"], f["superseded_by"]) for f in store.facts()] == [
        ("7 PM", second), ("8 PM", None)]
    assert [f["value"] for f in store.open_facts()] == ["8 PM"]


def test_consolidation_merges_resolves_and_expires(tmp_path: Path) -> None:
    store = MemoryStore.open(tmp_path / "memory.db")
    base = {"identity": "anonymous", "session_id": None, "source": "user", "source_seq": None,
            "at": NOW, "superseded_by": None}
    with store.transaction(durable=True):
        # Rows as another writer (or an older version) could leave them: several open values.
        for key, value, expires in [("name", "maria garcia", None), ("name", "Maria  Garcia", None),
                                    ("phone", "5551234", None), ("phone", "5559999", None),
                                    ("time", "7 PM", "2026-11-01T00:00:00.000+00:00")]:
            store.db["facts"].insert({**base, "key": key, "value": value, "expires_at": expires})
        report = consolidate(store, NOW)
    assert (report.merged, report.resolved, report.expired) == (1, 1, 1)
    assert {f["key"]: f["value"] for f in store.open_facts()} == {
        "name": "Maria  Garcia", "phone": "5559999"}
    assert len(store.facts()) == 4  # superseded rows are kept


def test_consolidation_is_safe_while_another_connection_writes(tmp_path: Path) -> None:
    """SQLite's side: a consolidation and the agent's writes on two connections at once (a
    program that bypasses the writer lock, e.g. an older edge-agent) commit both, intact."""
    path = tmp_path / "memory.db"
    agent = MemoryStore.open(path)
    with agent.transaction(durable=True):
        _session(agent)
    connection = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
    connection.execute("PRAGMA busy_timeout = 5000")
    operator = MemoryStore(Database(connection), path)
    errors: list[BaseException] = []

    def write_turns() -> None:
        try:
            for seq in range(200):
                with agent.transaction(durable=False):
                    agent.put_turn({"session_id": "s1", "seq": seq, "role": "user",
                                    "heard": f"turn {seq}", "at": NOW})
                    agent.add_fact({"identity": "anonymous", "session_id": "s1", "key": "number",
                                    "value": str(seq % 3), "source": "user", "source_seq": seq,
                                    "at": NOW})
        except BaseException as exc:  # handed to the test thread
            errors.append(exc)

    import threading
    writer = threading.Thread(target=write_turns)
    writer.start()
    for _ in range(20):
        with operator.transaction(durable=True):
            consolidate(operator, NOW)
    writer.join()
    assert errors == []
    assert len(agent.turns("s1")) == 200
    assert len(agent.open_facts()) == 1
    assert agent.integrity() == "ok"


async def test_failed_writes_are_kept_retried_and_the_loop_goes_on(tmp_path: Path) -> None:
    clock = VirtualClock()
    store = MemoryStore.open(tmp_path / "memory.db")
    warnings: list[str] = []
    writer = StoreWriter(store, InlineOwner("store"), clock, warn=warnings.append)
    writer.submit(lambda s: _session(s), durable=True, what="session")
    await writer.flushed()
    pages = store.db.execute("PRAGMA page_count").fetchone()[0]
    store.db.execute(f"PRAGMA max_page_count = {pages}")  # the disk is full from now on
    for seq in range(50):
        writer.submit(lambda s, seq=seq: s.put_turn(
            {"session_id": "s1", "seq": seq, "role": "user", "heard": "x" * 2000, "at": NOW}),
            durable=True, what=f"turn {seq}")
    await clock.advance(0.01)
    assert writer.failing
    await asyncio.wait_for(writer.flushed(), 1)  # does not hang the conversation
    assert len(warnings) == 1 and "failed" in warnings[0]
    await clock.advance(3.0)
    assert len(warnings) == 1  # once per failure spell
    store.db.execute("PRAGMA max_page_count = 1073741823")  # space again
    await clock.advance(6.0)
    assert not writer.failing
    assert "succeed again" in warnings[-1]
    assert len(store.turns("s1")) == 50


async def test_reads_see_every_write_queued_before_them(tmp_path: Path) -> None:
    store = MemoryStore.open(tmp_path / "memory.db")
    owner = OwnerThread("store")
    writer = StoreWriter(store, owner, VirtualClock(), warn=print)
    writer.submit(lambda s: _session(s), durable=True, what="session")
    for seq in range(30):
        writer.submit(lambda s, seq=seq: s.put_turn(
            {"session_id": "s1", "seq": seq, "role": "user", "heard": str(seq), "at": NOW}),
            durable=seq % 2 == 0, what="turn")
    turns = await writer.read(lambda s: s.turns("s1"))
    assert [t["heard"] for t in turns] == [str(n) for n in range(30)]
    owner.close()


def test_retention_expires_old_event_logs_and_audio_and_keeps_the_turns(tmp_path: Path) -> None:
    store = MemoryStore.open(tmp_path / "memory.db")
    with store.transaction(durable=True):
        for session_id, active, state in [("old", "2026-01-01T00:00:00.000+00:00", "closed"),
                                          ("open", "2026-01-01T00:00:00.000+00:00", "open"),
                                          ("new", NOW, "closed")]:
            store.insert_session({"id": session_id, "identity": "anonymous", "run_id": "r",
                                  "how": "speech", "state": state, "started_at": active,
                                  "last_active_at": active, "engines": "{}"})
            store.add_event({"session_id": session_id, "run_id": "r", "at": 1.0, "type": "X",
                             "data": "{}"})
            store.add_audio({"session_id": session_id, "run_id": "r", "kind": "caller",
                             "ref": "c1", "at": 1.0, "sample_rate": 16000, "pcm": b"\0\0"})
            store.put_turn({"session_id": session_id, "seq": 0, "role": "user", "heard": "hi",
                            "at": active})
    assert store.expire_events("2026-06-01T00:00:00.000+00:00") == 1
    assert [r["session_id"] for r in store.events(["old", "open", "new"])] == ["open", "new"]
    assert [r["session_id"] for r in store.audio(["old", "open", "new"])] == ["open", "new"]
    assert len(store.turns("old")) == 1
