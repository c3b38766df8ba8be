"""A memory database another program changed (a table dropped, a JSON column that is not JSON,
a kept-audio row with no sample rate, a session row deleted under a running agent) and stored
strings that would drive a terminal: clear errors, escaped output and a loop that goes on,
never a traceback or a flood."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from edge_agent.cli import main
from edge_agent.config.file import load_config
from edge_agent.errors import ConfigError, StoreError
from edge_agent.events import Notice, UnitFinalized
from edge_agent.memory.kept_audio import kept_audio
from edge_agent.memory.store import MemoryStore
from tests.cli import write_config
from tests.fakes import speech
from tests.timeline import Harness, stop

NOW = "2026-01-01T10:00:00.000+00:00"


def _database(tmp_path: Path, identity: str = "anonymous") -> Path:
    """tmp_path/data/edge-agent.db with one session "s1": a turn, an event, a kept clip."""
    db = tmp_path / "data" / "edge-agent.db"
    store = MemoryStore.open(db)
    with store.transaction(durable=True):
        store.insert_session({"id": "s1", "identity": identity, "run_id": "r", "how": "speech",
                              "state": "closed", "started_at": NOW, "last_active_at": NOW,
                              "engines": '{"stt": "fake"}'})
        store.put_turn({"session_id": "s1", "seq": 0, "role": "user", "heard": "hello",
                        "at": NOW})
        store.add_event({"session_id": "s1", "run_id": "r", "at": 0.5, "type": "Notice",
                         "data": json.dumps({"at": 0.5, "type": "Notice", "text": "hi"})})
        store.add_audio({"session_id": "s1", "run_id": "r", "kind": "caller", "ref": "c1",
                         "at": 0.1, "sample_rate": 16000, "pcm": b"\0\0" * 160})
    store.close()
    return db


def _tamper(db: Path, statement: str) -> None:
    with sqlite3.connect(db) as connection:
        connection.execute(statement)
    connection.close()


def _fails(capsys: pytest.CaptureFixture[str], argv: list[str], code: int) -> str:
    assert main(argv) == code, argv
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err


@pytest.mark.parametrize("command", [["sessions", "list"], ["sessions", "show", "s1"],
                                     ["sessions", "export", "s1"], ["inspect", "s1"]])
def test_a_missing_table_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                          command: list[str]) -> None:
    db = _database(tmp_path)
    _tamper(db, "DROP TABLE turns")
    err = _fails(capsys, ["-c", str(write_config(tmp_path)), *command], StoreError.exit_code)
    assert "its table(s) turns are missing" in err and "restore a backup" in err


@pytest.mark.parametrize(("statement", "row"), [
    ("UPDATE events SET data = '{not json'", "events row"),
    ("UPDATE events SET data = '[1, 2]'", "events row"),
    ("UPDATE sessions SET engines = 'oops'", "session s1"),
])
@pytest.mark.parametrize("command", [["sessions", "show", "s1"],
                                     ["sessions", "show", "s1", "--json"],
                                     ["sessions", "export", "s1"], ["inspect", "s1"]])
def test_a_json_column_that_is_not_json_is_a_clear_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], statement: str, row: str,
        command: list[str]) -> None:
    db = _database(tmp_path)
    _tamper(db, statement)
    err = _fails(capsys, ["-c", str(write_config(tmp_path)), *command], StoreError.exit_code)
    assert row in err and "is not a JSON" in err
    assert "restore the database from a backup" in err


@pytest.mark.parametrize("rate", [0, -16000, 10**12, "'fast'"])
def test_kept_audio_with_an_impossible_sample_rate_is_a_clear_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], rate: object) -> None:
    db = _database(tmp_path)
    _tamper(db, f"UPDATE audio SET sample_rate = {rate}")
    err = _fails(capsys, ["-c", str(write_config(tmp_path)), "inspect", "s1",
                          "-o", str(tmp_path / "page.html")], StoreError.exit_code)
    assert "kept audio row id 1: sample_rate is" in err and "DELETE FROM audio WHERE id = 1" in err
    assert not (tmp_path / "page.html").exists()
    reader = MemoryStore.open_reader(db)
    with pytest.raises(StoreError, match=r"not a rate in 1000\.\.384000"):
        kept_audio(reader, ["s1"])
    reader.close()


def test_kept_audio_of_half_a_sample_is_a_clear_error(tmp_path: Path) -> None:
    db = _database(tmp_path)
    _tamper(db, "UPDATE audio SET pcm = x'000000'")
    reader = MemoryStore.open_reader(db)
    with pytest.raises(StoreError, match="not whole 16-bit samples"):
        kept_audio(reader, ["s1"])
    reader.close()


def test_sessions_list_escapes_every_stored_string(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    _database(tmp_path, identity="kiosk\x1b[2J\x1b]0;pwned\x07")
    assert main(["-c", str(write_config(tmp_path)), "sessions", "list"]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out
    assert "kiosk\\x1b[2J\\x1b]0;pwned\\x07" in out
    assert main(["-c", str(write_config(tmp_path)), "sessions", "show", "s1"]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "identity kiosk\\x1b[2J" in out


@pytest.mark.parametrize("given", ["", "   ", "\t"])
def test_sessions_delete_refuses_an_empty_id(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                             given: str) -> None:
    db = _database(tmp_path)
    err = _fails(capsys, ["-c", str(write_config(tmp_path)), "sessions", "delete", given],
                 ConfigError.exit_code)
    assert "is empty: give a session id" in err
    reader = MemoryStore.open_reader(db)
    assert reader.session("s1") is not None  # nothing was deleted
    reader.close()


def test_retention_days_zero_is_refused_not_read_as_delete_everything(tmp_path: Path) -> None:
    config = write_config(tmp_path, "[memory]\nretention_days = 0\n")
    with pytest.raises(ConfigError, match="0 would delete the event logs of every closed "
                                          "session") as error:
        load_config(config)
    assert "memory.retention_days" in str(error.value) and "leave the key out" in str(error.value)
    assert load_config(write_config(tmp_path, "[memory]\nretention_days = 0.5\n")
                       ).memory.retention_days == 0.5


async def test_a_session_deleted_under_the_writer_costs_one_warning_and_no_turn(
        tmp_path: Path) -> None:
    """Every later write of that session fails its foreign key; each failure used to publish a
    Notice whose own write failed too (155 000 lines in 38 s, every later turn lost)."""
    db = tmp_path / "memory.db"
    h = Harness(transcripts=["first question", "second question", "third question"],
                replies=["First answer.", "Second answer.", "Third answer."],
                greeting="Hello.", db_path=db)
    task = await h.start()
    await h.run_until(lambda: len(h.events(UnitFinalized)) == 1)  # the greeting
    assert h.writer is not None
    await h.writer.flushed()
    # Another program deletes the session row, bypassing the writer lock.
    _tamper(db, f"DELETE FROM sessions WHERE id = '{h.memory.session_id}'")
    for answers in (2, 3, 4):
        h.mic.say(speech(0.6))
        await h.run_until(lambda n=answers: len(h.events(UnitFinalized)) == n)  # type: ignore[misc]
    await h.clock.advance(2.0)
    await stop(task)
    await h.writer.flushed()
    notices = [e.text for e in h.events(Notice)]  # type: ignore[attr-defined]
    refused = [n for n in notices if n.startswith("memory: dropped a write the database refused")]
    assert len(refused) == 1, notices
    assert "FOREIGN KEY" in refused[0]
    assert len(notices) <= 2, notices
    assert h.writer.refused > 10  # every later write was refused, silently
    assert [e.finalize.heard for e in h.events(UnitFinalized)][1:] == [  # type: ignore[attr-defined]
        "First answer.", "Second answer.", "Third answer."]
