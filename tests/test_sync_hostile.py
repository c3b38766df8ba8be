"""The venue sync against a real PostgreSQL that misbehaves: a row it refuses for its size, a
schema edited by hand, the server killed in the middle of a batch, `sync --once` beside the
agent's own sync. The queue never jams, nothing is lost or stored twice, and every failure is
a message with the right advice (chosen by SQLSTATE), never a traceback."""

from __future__ import annotations

import random
import string
import threading
import time
from pathlib import Path

import psycopg
import pytest

from edge_agent.bench.postgres_rig import PASSWORD, LocalPostgres
from edge_agent.errors import SyncError
from edge_agent.memory.store import MemoryStore
from edge_agent.sync.worker import SyncPass
from tests.cli import edge_agent
from tests.test_sync import fill, local_counts, local_counts_total, make_sync, venue_counts
from tests.test_sync_cli import _kiosk

pytestmark = pytest.mark.postgres


def _incompressible(length: int) -> str:
    """Text PostgreSQL cannot shrink below its index entry's limit (~2 700 bytes)."""
    return "".join(random.Random(6000).choices(string.ascii_letters, k=length))


def test_a_row_over_the_index_limit_is_set_aside_and_the_queue_moves(
        venue: LocalPostgres, tmp_path: Path) -> None:
    path = tmp_path / "edge-agent.db"
    store = MemoryStore.open(path)
    for number in range(5):
        fill(store, f"s{number}")
    store.add_fact({"identity": "anonymous", "session_id": "s2", "key": _incompressible(6000),
                    "value": "x", "source": "model", "source_seq": 0,
                    "at": "2026-12-03T10:00:00.000+00:00", "expires_at": None})
    store.close()
    sync = make_sync(path, venue.url, batch_rows=20)
    try:
        first = sync.run_once()
        again = sync.run_once()  # the set-aside row is not tried again: nothing left to do
        refusals = sync.outbox.refusals()
    finally:
        sync.close()
    total = local_counts_total(path)
    assert first.error is None and first.refused == 1 and first.sent == total - 1
    assert again.error is None and again.sent == 0 and again.waiting == 0
    assert [r["tbl"] for r in refusals] == ["facts"]
    assert refusals[0]["refused"].startswith("54000: index row size")
    counts = venue_counts(venue, "k1")
    assert sum(counts.values()) == total - 1
    assert counts["facts"] == local_counts(path)["facts"] - 1


def _edited_schema_refused(venue: LocalPostgres, tmp_path: Path, edit: str, says: str) -> None:
    path = tmp_path / "edge-agent.db"
    store = MemoryStore.open(path)
    fill(store)
    sync = make_sync(path, venue.url)
    try:
        assert sync.run_once().error is None
        with psycopg.connect(venue.admin_url, autocommit=True) as admin:
            admin.execute(edit)
        fill(store, "s2")
        refused = sync.run_once()
    finally:
        sync.close()
        store.close()
    assert isinstance(refused.error, SyncError) and refused.error.exit_code == 12
    assert says in str(refused.error), refused.error
    assert "changed the venue's edge_agent schema by hand" in str(refused.error)
    assert "create the database" not in str(refused.error)
    with psycopg.connect(venue.admin_url) as admin:
        sessions = admin.execute("SELECT count(*) FROM edge_agent.sessions").fetchone()
    assert refused.waiting > 0 and sessions == (1,)  # s2 waits here


@pytest.mark.parametrize(("edit", "says"), [
    ("UPDATE edge_agent.schema_version SET version = -3",
     "schema_version holds -3, which no edge-agent writes"),
    ("ALTER TABLE edge_agent.schema_version ALTER COLUMN version TYPE text; "
     "UPDATE edge_agent.schema_version SET version = '1.0'",
     "schema_version holds '1.0', which no edge-agent writes"),
    ("ALTER TABLE edge_agent.turns DROP COLUMN heard", "(SQLSTATE 42703)"),
    ("ALTER TABLE edge_agent.turns RENAME TO old_turns", "(SQLSTATE 42P01)"),
])
def test_a_schema_edited_by_hand_is_a_message_with_the_right_advice(
        venue: LocalPostgres, tmp_path: Path, edit: str, says: str) -> None:
    _edited_schema_refused(venue, tmp_path, edit, says)


def test_the_cli_says_so_without_a_traceback(venue: LocalPostgres, tmp_path: Path) -> None:
    config = _kiosk(tmp_path, venue.url)
    env = {"EDGE_AGENT_SYNC_PASSWORD": PASSWORD}
    assert edge_agent("sync", "--once", config=config, env=env).returncode == 0
    with psycopg.connect(venue.admin_url, autocommit=True) as admin:
        admin.execute("UPDATE edge_agent.schema_version SET version = -3")
    refused = edge_agent("sync", "--once", config=config, env=env)
    assert refused.returncode == 12 and "Traceback" not in refused.stderr
    assert "schema_version holds -3" in refused.stderr
    missing = _kiosk(tmp_path / "other", venue.url.replace("/venue", "/no_such_venue"))
    absent = edge_agent("sync", "--once", config=missing, env=env)
    assert absent.returncode == 12 and 'database "no_such_venue" does not exist' in absent.stderr
    assert "Fix: create the database on the venue's PostgreSQL" in absent.stderr


_SLOW_TURN = """
CREATE FUNCTION edge_agent.slow_disk() RETURNS trigger AS $$
BEGIN
    IF NEW.heard = 'slow' THEN PERFORM pg_sleep(60); END IF;
    RETURN NEW;
END $$ LANGUAGE plpgsql;
CREATE TRIGGER slow_disk BEFORE INSERT ON edge_agent.turns
    FOR EACH ROW EXECUTE FUNCTION edge_agent.slow_disk();
"""


def _wait_for_sleeping_backend(venue: LocalPostgres, deadline_s: float = 30.0) -> None:
    until = time.monotonic() + deadline_s
    with psycopg.connect(venue.admin_url, autocommit=True) as admin:
        while time.monotonic() < until:
            row = admin.execute("SELECT count(*) FROM pg_stat_activity "
                                "WHERE wait_event = 'PgSleep'").fetchone()
            if row and row[0]:
                return
            time.sleep(0.05)
    raise AssertionError("the kiosk's batch never reached the slow row")


def test_postgresql_killed_mid_batch_loses_and_doubles_nothing(
        venue: LocalPostgres, tmp_path: Path) -> None:
    """The server stops without a shutdown (pg_ctl -m immediate: every server process is
    killed, and the next start recovers from its log) while a batch is inside its transaction:
    the batches before it are there, that batch is not, and the next pass sends the rest. The
    run's server has `synchronous_commit = off` (for speed), as a venue may: the kiosk's
    session asks for it on, or the batches it had let go of were lost with the server (76 turns
    there before the kill, 56 after)."""
    path = tmp_path / "edge-agent.db"
    store = MemoryStore.open(path)
    for number in range(4):
        fill(store, f"s{number}", turns=20)
    store.put_turn({"session_id": "s2", "seq": 20, "role": "user", "heard": "slow",
                    "at": "2026-12-03T10:00:00.000+00:00"})
    MemoryStore.open(tmp_path / "empty.db").close()
    setup = make_sync(tmp_path / "empty.db", venue.url, kiosk="setup")
    assert setup.run_once(pull=False).error is None  # the schema exists: the trigger can go on
    setup.close()
    with psycopg.connect(venue.admin_url, autocommit=True) as admin:
        admin.execute(_SLOW_TURN)
    sync = make_sync(path, venue.url, batch_rows=20, timeout_ms=90_000)
    result: list[SyncPass] = []
    sending = threading.Thread(target=lambda: result.append(sync.run_once(pull=False)))
    sending.start()
    try:
        _wait_for_sleeping_backend(venue)
        partial = venue_counts(venue, "k1")
        venue.stop("immediate")
        sending.join(60)
        assert not sending.is_alive()
    finally:
        venue.start()
    killed = result[0]
    assert killed.error is not None and killed.waiting > 0
    assert 0 < sum(partial.values()) < local_counts_total(path)
    assert venue_counts(venue, "k1") == partial  # the killed batch never committed
    with psycopg.connect(venue.admin_url, autocommit=True) as admin:
        admin.execute("DROP TRIGGER slow_disk ON edge_agent.turns")
    healed = sync.run_once(pull=False)
    sync.close()
    store.close()
    assert healed.error is None and healed.waiting == 0
    assert venue_counts(venue, "k1") == local_counts(path)
    assert venue_counts(venue, "k1")["turns"] == 4 * 20 + 1


def test_sync_once_beside_the_agents_sync_sends_everything_once(
        venue: LocalPostgres, tmp_path: Path) -> None:
    """`edge-agent sync --once` (a child process) while the agent's own sync thread sends the
    same queue and the agent keeps writing: both send, the venue stores each row once, and the
    queue ends empty."""
    config = _kiosk(tmp_path, venue.url)
    path = tmp_path / "data" / "edge-agent.db"
    running = make_sync(path, venue.url, kiosk="front-door")
    running.start()
    store = MemoryStore.open(path)
    try:
        for number in range(3):
            fill(store, f"live{number}", turns=30)
            once = edge_agent("sync", "--once", config=config,
                              env={"EDGE_AGENT_SYNC_PASSWORD": PASSWORD})
            assert once.returncode == 0, once.stderr
    finally:
        running.close()
    final = make_sync(path, venue.url, kiosk="front-door")
    last = final.run_once(pull=False)
    final.close()
    store.close()
    assert last.error is None and last.waiting == 0
    assert venue_counts(venue, "front-door") == local_counts(path)
