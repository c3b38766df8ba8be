"""The venue sync against a real PostgreSQL (Debian's server, started for the run on
127.0.0.1): what arrives, in what shape, and the faults: a connection cut mid-batch, the server
restarted, a schema from a newer edge-agent, wrong credentials; nothing lost, nothing twice
(rows counted on both sides)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from edge_agent.bench.postgres_rig import PASSWORD, LocalPostgres
from edge_agent.config.lan import parse_database_url
from edge_agent.errors import SyncError
from edge_agent.memory.schema import QUEUE_DELETIONS, QUEUE_ON
from edge_agent.memory.store import MemoryStore
from edge_agent.sync import central
from edge_agent.sync.central import Credentials
from edge_agent.sync.outbox import Outbox
from edge_agent.sync.worker import SyncSettings, VenueSync
from tests.tcp_proxy import TcpProxy

pytestmark = pytest.mark.postgres
SYNCED = ("sessions", "turns", "units", "events", "summaries", "facts", "profiles")


def fill(store: MemoryStore, session: str = "s1", turns: int = 3, at: str = "2026-12-03T10:00:00.000+00:00",
         identity: str = "anonymous") -> None:
    """A session as the agent records one: turns, a unit checkpointed then finalized, events,
    a summary, a fact and the profile."""
    store.insert_session({"id": session, "identity": identity, "run_id": "r1", "how": "start-up",
                          "state": "open", "started_at": at, "last_active_at": at,
                          "ended_at": None, "engines": '{"llm": "scripted"}'})
    for seq in range(turns):
        role = "user" if seq % 2 == 0 else "assistant"
        store.put_turn({"session_id": session, "seq": seq, "role": role, "heard": f"turn {seq}",
                        "generated": f"turn {seq} and more" if role == "assistant" else None,
                        "at": at})
        store.add_event({"session_id": session, "run_id": "r1", "at": float(seq), "type": "Notice",
                         "data": json.dumps({"type": "Notice", "t": float(seq), "text": "x"})})
    for played in (250, 500, 750):
        store.put_unit({"session_id": session, "unit_id": "u1", "state": "playing",
                        "generated": "We have three tables free tonight.",
                        "heard": "We have three", "played_ms": played, "updated_at": at})
    store.put_unit({"session_id": session, "unit_id": "u1", "state": "final", "seq": 0,
                    "generated": "We have three tables free tonight.", "heard": "We have three",
                    "played_ms": 900, "words": '[{"word": "We", "start_ms": 0, "end_ms": 200}]',
                    "updated_at": at})
    store.add_summary({"session_id": session, "kind": "running", "first_seq": 0, "last_seq": 1,
                       "text": "a table", "at": at})
    store.add_fact({"identity": identity, "session_id": session, "key": "party_size",
                    "value": "4", "source": "user", "source_seq": 0, "at": at, "expires_at": None})
    store.put_profile({"identity": identity, "name": None, "last_session_id": session,
                       "updated_at": at})


def local_counts(path: Path) -> dict[str, int]:
    with sqlite3.connect(path) as db:
        return {t: db.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in SYNCED}


def venue_counts(venue: LocalPostgres, kiosk: str | None = None) -> dict[str, int]:
    try:
        with psycopg.connect(venue.admin_url) as admin:
            return central.counts(admin, kiosk)
    except psycopg.errors.UndefinedTable:
        return dict.fromkeys(SYNCED, 0)


def make_sync(path: Path, url: str, kiosk: str = "k1", *, password: str | None = PASSWORD,
              identity: str = "anonymous", max_backlog: int = 200000, batch_rows: int = 500,
              notes: list[str] | None = None, timeout_ms: int = 3000) -> VenueSync:
    credentials = Credentials(parse_database_url(url), password, kiosk, timeout_ms)
    settings = SyncSettings(credentials, identity, 0.05, batch_rows, max_backlog)
    sync = VenueSync(settings, Outbox.open(path),
                     notify=(notes.append if notes is not None else lambda text: None))
    sync.prepare_queue()
    return sync


@pytest.fixture
def kiosk(tmp_path: Path) -> Iterator[tuple[Path, MemoryStore]]:
    path = tmp_path / "edge-agent.db"
    store = MemoryStore.open(path)
    yield path, store
    store.close()


def test_every_row_arrives_with_its_heard_truth(venue: LocalPostgres,
                                                kiosk: tuple[Path, MemoryStore]) -> None:
    path, store = kiosk
    fill(store)
    sync = make_sync(path, venue.url)
    done = sync.run_once()
    sync.close()
    assert done.error is None and done.waiting == 0
    assert venue_counts(venue, "k1") == local_counts(path) == {
        "sessions": 1, "turns": 3, "units": 1, "events": 3, "summaries": 1, "facts": 1,
        "profiles": 1}
    with psycopg.connect(venue.admin_url) as admin:
        unit = admin.execute("SELECT state, heard, generated, played_ms, words->0->>'word' "
                             "FROM edge_agent.units WHERE kiosk_id = 'k1'").fetchone()
        turn = admin.execute("SELECT heard, generated, at FROM edge_agent.turns "
                             "WHERE kiosk_id = 'k1' AND seq = 1").fetchone()
        kiosks = admin.execute("SELECT kiosk_id FROM edge_agent.kiosks").fetchall()
    assert unit == ("final", "We have three", "We have three tables free tonight.", 900, "We")
    assert turn[:2] == ("turn 1", "turn 1 and more") and turn[2].isoformat().startswith("2026-12-03T10")
    assert kiosks == [("k1",)]


def test_a_row_is_queued_once_however_often_it_changes(venue: LocalPostgres,
                                                       kiosk: tuple[Path, MemoryStore]) -> None:
    path, store = kiosk
    sync = make_sync(path, venue.url)
    fill(store)  # the unit was written four times
    waiting = sync.outbox.batch(1000)
    assert [c.table for c in waiting].count("units") == 1
    assert next(c.table for c in waiting) == "sessions"  # before the rows that refer to it
    # A change while the batch is on its way: the row stays queued and goes again.
    store.put_turn({"session_id": "s1", "seq": 0, "role": "user", "heard": "turn 0, again",
                    "at": "2026-12-03T10:00:01.000+00:00"})
    with psycopg.connect(venue.url, password=PASSWORD) as connection:
        central.prepare(connection, sync.settings.credentials.address, "k1",
                        sync.outbox.database_id, "test")
        central.send(connection, "k1", waiting)
    sync.outbox.sent(waiting, "2026-12-03T10:00:02.000+00:00")
    again = sync.outbox.batch(1000)
    assert [(c.table, c.row["heard"] if c.row else None) for c in again] == [
        ("turns", "turn 0, again")]
    sync.run_once()
    sync.close()
    with psycopg.connect(venue.admin_url) as admin:
        assert admin.execute("SELECT heard FROM edge_agent.turns WHERE seq = 0").fetchone() == (
            "turn 0, again",)


def test_deletions_reach_the_venue(venue: LocalPostgres, kiosk: tuple[Path, MemoryStore]) -> None:
    path, store = kiosk
    fill(store, "s1")
    fill(store, "s2")
    store.add_fact({"identity": "anonymous", "session_id": "s2", "key": "phone",
                    "value": "555 0100", "source": "user", "source_seq": 0,
                    "at": "2026-12-03T10:00:00.000+00:00", "expires_at": None})
    sync = make_sync(path, venue.url)
    sync.run_once()
    assert venue_counts(venue)["sessions"] == 2 and venue_counts(venue)["facts"] == 2
    store.delete_session("s1")  # its turns, units, events... go by cascade: each is queued
    assert store.forget_fact("phone") == 1
    sync.run_once()
    sync.close()
    assert venue_counts(venue) == local_counts(path)
    assert venue_counts(venue)["sessions"] == 1 and venue_counts(venue)["facts"] == 0


def test_sending_twice_stores_once(venue: LocalPostgres, kiosk: tuple[Path, MemoryStore]) -> None:
    path, store = kiosk
    fill(store)
    sync = make_sync(path, venue.url)
    batch = sync.outbox.batch(1000)
    sync.run_once()
    with psycopg.connect(venue.url, password=PASSWORD) as connection:
        central.send(connection, "k1", batch)  # the same batch again (a lost acknowledgement)
        central.send(connection, "k1", batch)
    sync.close()
    assert venue_counts(venue) == local_counts(path)


def test_a_connection_cut_mid_batch_loses_and_doubles_nothing(
        venue: LocalPostgres, kiosk: tuple[Path, MemoryStore]) -> None:
    path, store = kiosk
    proxy = TcpProxy(venue.port)
    notes: list[str] = []
    sync = make_sync(path, proxy.url(venue.url, venue.port), batch_rows=50, notes=notes)
    try:
        assert sync.run_once(pull=False).error is None  # connected, the schema made
        for number in range(4):
            fill(store, f"s{number}", turns=20)
        before = proxy.client_bytes
        first = sync.run_once(pull=False)  # connected; everything sent
        assert first.error is None and first.batches >= 3
        per_batch = (proxy.client_bytes - before) // first.batches
        for number in range(4, 8):
            fill(store, f"s{number}", turns=20)
        proxy.cut_after(per_batch * 3 // 2)  # inside the second batch of 50 rows
        cut = sync.run_once(pull=False)
        assert proxy.cuts == 1 and cut.error is not None
        assert cut.sent >= 50 and cut.waiting > 0  # the first batch committed, the rest waits
        assert "cannot be used" in notes[-1] and f"{cut.waiting} change(s) wait" in notes[-1]
        partial = venue_counts(venue)
        assert partial["sessions"] < 8
        # The batch that was cut never committed: nothing of it is in the venue twice later.
        healed = sync.run_once(pull=False)
        assert healed.error is None and healed.waiting == 0
        assert "answers again" in notes[-1] and len(notes) == 2
    finally:
        sync.close()
        proxy.close()
    assert venue_counts(venue) == local_counts(path)
    assert venue_counts(venue)["turns"] == 8 * 20


def test_the_server_restarted_between_and_during_sends(
        venue: LocalPostgres, kiosk: tuple[Path, MemoryStore]) -> None:
    path, store = kiosk
    fill(store, "s1")
    notes: list[str] = []
    sync = make_sync(path, venue.url, notes=notes)
    try:
        assert sync.run_once().error is None
        venue.restart()  # the kiosk's connection is gone; it finds out when it sends
        fill(store, "s2")
        first = sync.run_once()
        if first.error is not None:  # the old connection's failure, then a new one
            assert "terminat" in str(first.error) or "closed" in str(first.error)
            assert sync.run_once().error is None
        assert sync.outbox.waiting() == 0
    finally:
        sync.close()
    assert venue_counts(venue) == local_counts(path)


def test_the_server_down_then_up_sends_the_backlog(
        venue: LocalPostgres, kiosk: tuple[Path, MemoryStore]) -> None:
    path, store = kiosk
    proxy = TcpProxy(venue.port)
    notes: list[str] = []
    sync = make_sync(path, proxy.url(venue.url, venue.port), notes=notes, timeout_ms=1000)
    try:
        proxy.down = True
        fill(store, "s1")
        down = sync.run_once()
        assert down.error is not None and down.waiting == local_counts_total(path)
        assert sync.run_once().error is not None and len(notes) == 1  # one note per change
        status = sync.outbox.backlog().control
        assert status["failures"] == 2 and status["last_error"]
        proxy.down = False
        up = sync.run_once()
        assert up.error is None and up.sent == down.waiting and len(notes) == 2
        assert sync.outbox.backlog().control["failures"] == 0
    finally:
        sync.close()
        proxy.close()
    assert venue_counts(venue) == local_counts(path)


def local_counts_total(path: Path) -> int:
    return sum(local_counts(path).values())


def test_a_newer_venue_schema_is_refused_and_left_alone(
        venue: LocalPostgres, kiosk: tuple[Path, MemoryStore]) -> None:
    path, store = kiosk
    fill(store)
    sync = make_sync(path, venue.url)
    assert sync.run_once().error is None
    with psycopg.connect(venue.admin_url, autocommit=True) as admin:
        admin.execute("UPDATE edge_agent.schema_version SET version = 99")
    fill(store, "s2")
    refused = sync.run_once()
    sync.close()
    assert isinstance(refused.error, SyncError) and refused.error.exit_code == 12
    assert "schema is version 99, from a newer edge-agent" in str(refused.error)
    assert "upgrade edge-agent on this kiosk" in str(refused.error)
    assert refused.waiting > 0 and venue_counts(venue)["sessions"] == 1  # s2 waits here
    with psycopg.connect(venue.admin_url, autocommit=True) as admin:
        assert admin.execute("SELECT version FROM edge_agent.schema_version").fetchone() == (99,)
        admin.execute("UPDATE edge_agent.schema_version SET version = 1")  # as if downgraded
    later = make_sync(path, venue.url)
    assert later.run_once().error is None
    later.close()
    assert venue_counts(venue) == local_counts(path)  # nothing was lost meanwhile


def test_wrong_credentials_are_a_clear_error_without_the_password(
        venue: LocalPostgres, kiosk: tuple[Path, MemoryStore]) -> None:
    path, store = kiosk
    fill(store)
    notes: list[str] = []
    sync = make_sync(path, venue.url, password="not-the-password-123", notes=notes)
    wrong = sync.run_once()
    control = sync.outbox.backlog().control
    sync.close()
    assert isinstance(wrong.error, SyncError)
    text = f"{wrong.error} {notes} {control['last_error']}"
    assert 'password authentication failed for user "kiosk"' in text
    assert "sync.password_file" in str(wrong.error)
    assert "not-the-password-123" not in text
    assert wrong.waiting == sum(local_counts(path).values())
    assert venue_counts(venue)["sessions"] == 0


def test_another_database_cannot_take_a_kiosk_id(venue: LocalPostgres, tmp_path: Path) -> None:
    first, second = MemoryStore.open(tmp_path / "a.db"), MemoryStore.open(tmp_path / "b.db")
    fill(first)
    fill(second)
    one = make_sync(tmp_path / "a.db", venue.url, "kiosk-1")
    two = make_sync(tmp_path / "b.db", venue.url, "kiosk-1")
    assert one.run_once().error is None
    taken = two.run_once()
    one.close()
    two.close()
    first.close()
    second.close()
    assert taken.error is not None and "kiosk id 'kiosk-1' is taken by another database" in str(
        taken.error)
    assert venue_counts(venue)["turns"] == 3


def test_a_refused_row_is_set_aside_and_the_rest_go(venue: LocalPostgres,
                                                     kiosk: tuple[Path, MemoryStore]) -> None:
    path, store = kiosk
    fill(store)
    store.put_turn({"session_id": "s1", "seq": 3, "role": "tool", "heard": "bad\x00byte",
                    "at": "2026-12-03T10:00:00.000+00:00"})
    fill(store, "s2")
    sync = make_sync(path, venue.url)
    done = sync.run_once()
    refusals = sync.outbox.refusals()
    waiting = sync.outbox.backlog()
    sync.close()
    assert done.error is None and done.refused == 1
    assert [(r["tbl"], "NUL" in r["refused"]) for r in refusals] == [("turns", True)]
    assert waiting.refused == 1 and waiting.waiting == 0
    counts = venue_counts(venue)
    assert counts["sessions"] == 2 and counts["turns"] == local_counts(path)["turns"] - 1


def test_over_the_bound_only_deletions_queue_then_everything_is_sent(
        venue: LocalPostgres, kiosk: tuple[Path, MemoryStore]) -> None:
    path, store = kiosk
    proxy = TcpProxy(venue.port)
    proxy.down = True
    notes: list[str] = []
    sync = make_sync(path, proxy.url(venue.url, venue.port), max_backlog=20, notes=notes,
                     timeout_ms=1000)
    try:
        fill(store, "s1", turns=10)
        sync.run_once()
        assert sync.outbox.backlog().queue == QUEUE_DELETIONS
        assert "changes wait" in notes[-1] and "nothing is lost" in notes[-1]
        fill(store, "s2", turns=10)  # not queued one by one...
        assert sync.outbox.waiting() < local_counts_total(path)
        proxy.down = False
        for _ in range(3):  # ...yet all of it arrives once the store answers
            sync.run_once()
        assert sync.outbox.backlog().queue == QUEUE_ON
    finally:
        sync.close()
        proxy.close()
    assert venue_counts(venue) == local_counts(path)


def test_facts_and_profiles_come_back_newest_wins(venue: LocalPostgres, tmp_path: Path) -> None:
    stores = {name: MemoryStore.open(tmp_path / f"{name}.db") for name in ("a", "b")}
    syncs = {name: make_sync(tmp_path / f"{name}.db", venue.url, f"kiosk-{name}",
                             identity="ana") for name in stores}
    early, late = "2026-12-03T10:00:00.000+00:00", "2026-12-03T11:00:00.000+00:00"
    fill(stores["a"], "sa", identity="ana", at=early)
    stores["a"].add_fact({"identity": "ana", "session_id": "sa", "key": "phone",
                          "value": "555 0100", "source": "user", "source_seq": 0, "at": early,
                          "expires_at": None})
    stores["a"].put_profile({"identity": "ana", "name": "Ana", "last_session_id": "sa",
                             "updated_at": early})
    fill(stores["b"], "sb", identity="ana", at=late)
    stores["b"].add_fact({"identity": "ana", "session_id": "sb", "key": "phone",
                          "value": "555 0199", "source": "user", "source_seq": 0, "at": late,
                          "expires_at": None})
    try:
        assert syncs["a"].run_once().taken == 0  # nothing of b's in the venue yet
        b_took = syncs["b"].run_once().taken  # a's phone is older than b's: not taken
        a_took = syncs["a"].run_once().taken  # b's phone is newer: a takes it
        assert syncs["b"].run_once().taken == 0  # and nothing bounces back
    finally:
        for sync in syncs.values():
            sync.close()
    assert (a_took, b_took) == (1, 0)
    phone_a = stores["a"].open_fact("ana", "phone")
    assert phone_a is not None and (phone_a["value"], phone_a["source"]) == (
        "555 0199", "venue:kiosk-b")
    assert stores["b"].open_fact("ana", "phone")["value"] == "555 0199"  # type: ignore[index]
    profile_b = stores["b"].profile("ana")
    assert profile_b is not None and profile_b["updated_at"] == late  # b's own is newer
    for store in stores.values():
        store.close()


def test_status_reads_the_kiosk_alone(venue: LocalPostgres, kiosk: tuple[Path, MemoryStore],
                                      tmp_path: Path) -> None:
    from edge_agent.config import Config, SyncConfig
    from edge_agent.sync.status import status_record
    path, store = kiosk
    fill(store)
    config = Config(data_dir=str(path.parent), sync=SyncConfig(url=venue.url, kiosk_id="k1"))
    assert status_record(config)["queue"] == "off"
    sync = make_sync(path, venue.url)
    before = status_record(config)
    sync.run_once()
    sync.close()
    after = status_record(config)
    assert (before["queue"], before["waiting"]) == ("on", local_counts_total(path))
    assert after["waiting"] == 0 and after["sent_rows"] == local_counts_total(path)
    assert after["last_success_at"] and after["last_error"] is None


def test_anonymous_callers_facts_stay_at_their_kiosk(venue: LocalPostgres, tmp_path: Path) -> None:
    stores = {name: MemoryStore.open(tmp_path / f"{name}.db") for name in ("a", "b")}
    fill(stores["a"], "sa")
    stores["a"].add_fact({"identity": "anonymous", "session_id": "sa", "key": "phone",
                          "value": "555 0100", "source": "user", "source_seq": 0,
                          "at": "2026-12-03T10:00:00.000+00:00", "expires_at": None})
    syncs = {name: make_sync(tmp_path / f"{name}.db", venue.url, f"kiosk-{name}")
             for name in stores}
    try:
        assert syncs["a"].run_once().error is None
        taken = syncs["b"].run_once()
    finally:
        for sync in syncs.values():
            sync.close()
    assert taken.error is None and taken.taken == 0
    assert stores["b"].open_fact("anonymous", "phone") is None
    assert venue_counts(venue, "kiosk-a")["facts"] == 2  # staff still see it in the venue
    for store in stores.values():
        store.close()
