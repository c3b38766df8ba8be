"""`edge-agent sync status` and `edge-agent sync --once` as a user runs them (a child process),
against the run's PostgreSQL: what they print, their exit codes, the config's checks of
`[sync]`, and that a password is never shown."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from edge_agent.bench.postgres_rig import PASSWORD, LocalPostgres
from edge_agent.memory.store import MemoryStore
from edge_agent.sync.status import SyncStatusRecord
from tests.cli import edge_agent, write_config
from tests.test_sync import fill, local_counts, venue_counts

pytestmark = pytest.mark.postgres


def _kiosk(tmp_path: Path, venue_url: str, extra: str = "") -> Path:
    tmp_path.mkdir(exist_ok=True)
    config = write_config(tmp_path, f'[sync]\nurl = "{venue_url}"\nkiosk_id = "front-door"\n'
                          f"{extra}")
    (tmp_path / "data").mkdir()
    store = MemoryStore.open(tmp_path / "data" / "edge-agent.db")
    fill(store)
    store.close()
    return config


def test_once_sends_everything_and_status_says_so(tmp_path: Path, venue: LocalPostgres) -> None:
    (tmp_path / "pw").write_text(PASSWORD + "\n", encoding="utf-8")
    (tmp_path / "pw").chmod(0o600)
    config = _kiosk(tmp_path, venue.url, f'password_file = "{tmp_path / "pw"}"\n')
    before = edge_agent("sync", "status", config=config)
    assert before.returncode == 0 and "never switched on" in before.stdout
    once = edge_agent("sync", "--once", config=config)
    assert once.returncode == 0, once.stderr
    total = sum(local_counts(tmp_path / "data" / "edge-agent.db").values())
    assert f"sync: {total} row(s) sent to {venue.url} in 1 batch(es)" in once.stdout
    assert venue_counts(venue, "front-door") == local_counts(tmp_path / "data" / "edge-agent.db")
    status = edge_agent("sync", "status", config=config)
    assert status.returncode == 0
    assert f"venue store:   {venue.url} as kiosk front-door" in status.stdout
    assert "queue:         on, 0 row(s) waiting" in status.stdout
    record: SyncStatusRecord = json.loads(edge_agent("sync", "status", "--json",
                                                     config=config).stdout)
    assert set(record) == set(SyncStatusRecord.__annotations__)
    assert (record["waiting"], record["sent_rows"], record["last_error"]) == (0, total, None)


def test_wrong_credentials_exit_12_and_keep_the_queue(tmp_path: Path,
                                                      venue: LocalPostgres) -> None:
    config = _kiosk(tmp_path, venue.url)
    wrong = edge_agent("sync", "--once", config=config,
                       env={"EDGE_AGENT_SYNC_PASSWORD": "hunter2-not-it"})
    assert wrong.returncode == 12
    assert 'password authentication failed for user "kiosk"' in wrong.stderr
    assert "Fix: put the right password in the file sync.password_file names" in wrong.stderr
    assert "hunter2" not in wrong.stderr + wrong.stdout
    status = edge_agent("sync", "status", config=config)
    assert "hunter2" not in status.stdout and "password authentication failed" in status.stdout
    total = sum(local_counts(tmp_path / "data" / "edge-agent.db").values())
    assert f"{total} row(s) waiting" in status.stdout
    down = _kiosk(tmp_path / "down", venue.url.replace(f":{venue.port}/", ":1/"))
    refused = edge_agent("sync", "--once", config=down, env={"EDGE_AGENT_SYNC_PASSWORD": "x"})
    assert refused.returncode == 12 and "Connection refused" in refused.stderr
    assert "the changes stay queued" in refused.stderr


@pytest.mark.parametrize(("url", "message"), [
    ("postgresql://kiosk:secret99@10.0.0.6/venue", "must not hold the password"),
    ("postgresql://kiosk@10.0.0.6/venue?password=secret99", "must not hold the password"),
    ("mysql://kiosk@10.0.0.6/venue", "must be a postgresql:// address with a host"),
    ("postgresql://kiosk@10.0.0.6", "must name one database"),
    ("postgresql://kiosk@10.0.0.6:99999/venue", "has no valid port"),
])
def test_a_bad_sync_address_is_a_config_error(tmp_path: Path, url: str, message: str) -> None:
    config = write_config(tmp_path, f'[sync]\nurl = "{url}"\n')
    result = edge_agent("sync", "status", config=config)
    assert result.returncode == 2 and message in result.stderr and "sync.url" in result.stderr
    assert "secret99" not in result.stderr


def test_sync_needs_one_action(tmp_path: Path) -> None:
    result = edge_agent("sync", config=write_config(tmp_path))
    assert result.returncode == 2 and "`edge-agent sync status` or" in result.stderr


def test_libpq_options_in_the_address_are_passed_through(tmp_path: Path,
                                                         venue: LocalPostgres) -> None:
    # The run's server has no TLS: sslmode=require reaching libpq is what makes this fail.
    config = _kiosk(tmp_path, venue.url + "?sslmode=require&application_name=ignored")
    result = edge_agent("sync", "--once", config=config, env={"EDGE_AGENT_SYNC_PASSWORD": PASSWORD})
    assert result.returncode == 12 and "server does not support SSL" in result.stderr
    assert "sslmode and sslrootcert" in result.stderr  # the fix names the options
