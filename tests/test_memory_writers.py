"""One writer per memory database, across real processes: `run`, `demo --db`, `sessions
delete`, `memory forget` and `memory consolidate` are refused while another process writes the
database, naming it; readers are never refused and never make the writer wait. And a database
path that is not ours (a symlink, a device, a FIFO, a newer edge-agent's file) is refused and
left exactly as it was."""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import stat
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from edge_agent.errors import AlreadyRunningError, StoreError
from edge_agent.memory.schema import SCHEMA_VERSION
from edge_agent.memory.store import MemoryStore
from edge_agent.memory.writer_lock import WriterLock, current_holder, lock_path
from tests.cli import command, edge_agent, environment, write_config

NOW = "2026-01-01T10:00:00.000+00:00"
HOLDER = textwrap.dedent("""
    import sys
    from pathlib import Path
    from edge_agent.memory.store import MemoryStore
    store = MemoryStore.open(Path(sys.argv[1]))
    print("holding", flush=True)
    sys.stdin.read()  # until the test closes our stdin
    store.close()
""")
LOCKED_BY_SQLITE = textwrap.dedent("""
    import sqlite3, sys
    connection = sqlite3.connect(sys.argv[1], isolation_level=None)
    connection.execute("BEGIN EXCLUSIVE")
    print("locked", flush=True)
    sys.stdin.read()
    connection.execute("ROLLBACK")
""")


def _edge_agent(config: Path, *args: str, timeout: float = 120
                ) -> subprocess.CompletedProcess[str]:
    return edge_agent(*args, config=config, timeout=timeout)


def _with_session(db: Path, session_id: str = "s1", identity: str = "anonymous") -> None:
    store = MemoryStore.open(db)
    with store.transaction(durable=True):
        store.insert_session({"id": session_id, "identity": identity, "run_id": "r",
                              "how": "speech", "state": "closed", "started_at": NOW,
                              "last_active_at": NOW, "engines": "{}"})
        store.put_turn({"session_id": session_id, "seq": 0, "role": "user", "heard": "hello",
                        "at": NOW})
    store.close()


def _child(script: str, *args: str, ready: str) -> subprocess.Popen[str]:
    """A Python child running `script`, returned once it printed `ready` (a pipe line, no
    sleep); it runs until its stdin is closed."""
    child = subprocess.Popen([sys.executable, "-c", script, *args], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONPATH": str(Path.cwd())})
    assert child.stdout is not None
    line = child.stdout.readline()
    assert line.strip() == ready, line
    return child


@pytest.fixture
def held(tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    """Another process holding tmp_path/data/edge-agent.db for writing."""
    db = tmp_path / "data" / "edge-agent.db"
    _with_session(db)
    holder = _child(HOLDER, str(db), ready="holding")
    yield holder
    _finish(holder)


def _finish(child: subprocess.Popen[str]) -> None:
    """Close the child's stdin (it then exits) and wait for it; done once."""
    if child.stdin is not None and not child.stdin.closed:
        child.stdin.close()
    assert child.wait(timeout=30) == 0
    if child.stdout is not None:
        child.stdout.close()


def test_every_writer_is_refused_while_another_process_writes_naming_it(
        tmp_path: Path, held: subprocess.Popen[str]) -> None:
    config = write_config(tmp_path)
    db = tmp_path / "data" / "edge-agent.db"
    before = hashlib.sha256(db.read_bytes()).hexdigest()
    for argv in (["demo", "--db", str(db)], ["run"], ["sessions", "delete", "s1"],
                 ["memory", "consolidate"], ["memory", "forget", "phone"]):
        done = _edge_agent(config, *argv)
        assert done.returncode == AlreadyRunningError.exit_code, (argv, done.stderr)
        assert f"is being written by another edge-agent (pid {held.pid}: " in done.stderr
        assert "-c" in done.stderr and "memory.store" in done.stderr  # its command line
        assert "Traceback" not in done.stderr
    assert hashlib.sha256(db.read_bytes()).hexdigest() == before
    # Readers are never refused: they do not take the lock.
    listing = _edge_agent(config, "sessions", "list")
    assert listing.returncode == 0 and "s1" in listing.stdout, listing.stderr
    shown = _edge_agent(config, "sessions", "show", "s1", "--json")
    assert shown.returncode == 0 and json.loads(shown.stdout)["turns"][0]["text"] == "hello"
    assert (current_holder(db) or "").startswith(f"pid {held.pid}: ")
    _finish(held)
    assert current_holder(db) is None
    deleted = _edge_agent(config, "sessions", "delete", "s1")
    assert deleted.returncode == 0, deleted.stderr


def test_the_lock_names_its_holder_and_goes_with_it(tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    with WriterLock.acquire(db):
        holder = current_holder(db)
        assert holder is not None and holder.startswith(f"pid {os.getpid()}: ")
        with pytest.raises(AlreadyRunningError, match=f"pid {os.getpid()}"):
            MemoryStore.open(db)  # a second store in the same process is a second writer
    assert current_holder(db) is None
    assert stat.S_IMODE(lock_path(db).stat().st_mode) == 0o600
    MemoryStore.open(db).close()


def test_a_reader_never_makes_the_writer_wait(tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    _with_session(db)
    writer = MemoryStore.open(db)
    reader = MemoryStore.open_reader(db)
    reader.db.conn.execute("BEGIN")  # a long read transaction, as a slow export holds
    assert reader.sessions()[0]["turns"] == 1
    writer.db.conn.execute("PRAGMA busy_timeout = 0")  # waiting at all would fail at once
    with writer.transaction(durable=True):
        writer.put_turn({"session_id": "s1", "seq": 1, "role": "user", "heard": "more",
                         "at": NOW})
    assert reader.sessions()[0]["turns"] == 1  # its snapshot
    reader.db.conn.execute("COMMIT")
    assert reader.sessions()[0]["turns"] == 2
    with pytest.raises(sqlite3.OperationalError, match="readonly"):
        reader.db.execute("DELETE FROM turns")  # a reader cannot write, by construction
    reader.close()
    writer.close()


def test_sessions_delete_under_another_programs_transaction_says_what_to_do(
        tmp_path: Path) -> None:
    db = tmp_path / "data" / "edge-agent.db"
    _with_session(db)
    locker = _child(LOCKED_BY_SQLITE, str(db), ready="locked")
    try:
        done = _edge_agent(write_config(tmp_path), "sessions", "delete", "s1")
    finally:
        _finish(locker)
    assert done.returncode == StoreError.exit_code, done.stderr
    assert "the database is locked" in done.stderr and "Traceback" not in done.stderr
    assert "another program holds a write transaction on it" in done.stderr
    assert MemoryStore.open_reader(db).session("s1") is not None  # nothing was deleted


# -- files that are not ours -------------------------------------------------------------


def _fingerprint(path: Path) -> tuple[str, int]:
    return hashlib.sha256(path.read_bytes()).hexdigest(), os.stat(path).st_mode


def test_a_database_symlink_is_refused_and_its_target_untouched(tmp_path: Path) -> None:
    target = tmp_path / "someone-elses.db"
    _with_session(target)
    os.remove(lock_path(target))
    target.chmod(0o644)
    before = _fingerprint(target)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "edge-agent.db").symlink_to(target)
    config = write_config(tmp_path)
    for argv in (["sessions", "list"], ["sessions", "delete", "s1"],
                 ["demo", "--db", str(tmp_path / "data" / "edge-agent.db")]):
        done = _edge_agent(config, *argv)
        assert done.returncode == StoreError.exit_code, (argv, done.stderr)
        assert "it is a symbolic link, not a database file" in done.stderr
    assert _fingerprint(target) == before  # mode 644 kept: never chmodded through the link
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("someone")) == [
        "someone-elses.db"]  # no -wal, -shm or lock made next to it


def test_a_fifo_or_a_device_as_the_database_is_refused_and_left_alone(
        tmp_path: Path) -> None:
    fifo = tmp_path / "fifo.db"
    os.mkfifo(fifo, 0o666)
    fifo_mode = os.stat(fifo).st_mode
    devnull_mode = os.stat("/dev/null").st_mode
    config = write_config(tmp_path)
    for path, kind in ((fifo, "a FIFO"), (Path("/dev/null"), "a character device")):
        done = _edge_agent(config, "demo", "--db", str(path))
        assert done.returncode == StoreError.exit_code, done.stderr
        assert f"it is {kind}, not a database file" in done.stderr
        with pytest.raises(StoreError, match=kind):
            MemoryStore.open(path)
    assert os.stat(fifo).st_mode == fifo_mode
    assert os.stat("/dev/null").st_mode == devnull_mode
    assert not lock_path(fifo).exists() and not lock_path(Path("/dev/null")).exists()


def test_a_newer_database_is_left_byte_for_byte_alone(tmp_path: Path) -> None:
    db = tmp_path / "data" / "edge-agent.db"
    db.parent.mkdir()
    with sqlite3.connect(db) as connection:  # rollback-journal mode, as a newer version might
        connection.execute("CREATE TABLE future (x)")
        connection.execute("INSERT INTO future VALUES (1)")
        connection.execute("PRAGMA user_version = 99")
    connection.close()
    db.chmod(0o644)
    before = _fingerprint(db)
    config = write_config(tmp_path)
    for argv in (["sessions", "list"], ["sessions", "delete", "x"],
                 ["demo", "--db", str(db)], ["doctor", "--quick"]):
        done = _edge_agent(config, *argv)
        assert done.returncode != 0, (argv, done.stdout)
        assert "newer edge-agent" in done.stdout + done.stderr, argv
        assert _fingerprint(db) == before, argv
    assert not any(db.with_name(db.name + end).exists() for end in ("-wal", "-shm", "-journal"))


def test_a_file_we_create_is_private_whatever_the_umask(tmp_path: Path) -> None:
    saved = os.umask(0o002)
    try:
        MemoryStore.open(tmp_path / "new" / "memory.db").close()
    finally:
        os.umask(saved)
    for made in (tmp_path / "new" / "memory.db", lock_path(tmp_path / "new" / "memory.db")):
        assert stat.S_IMODE(made.stat().st_mode) == 0o600, made
    assert stat.S_IMODE((tmp_path / "new").stat().st_mode) == 0o700


def test_an_older_schema_is_upgraded_for_a_reader_only_when_no_writer_holds_it(
        tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    MemoryStore.open(db, upto=SCHEMA_VERSION - 1).close()
    with WriterLock.acquire(db), pytest.raises(StoreError,
                                               match=r"must be upgraded first.*being written"):
        MemoryStore.open_reader(db)
    reader = MemoryStore.open_reader(db)
    assert reader.audio(["none"]) == []  # the newest table is there
    reader.close()


def _call(tmp_path: Path, name: str) -> Path:
    call = tmp_path / f"{name}.toml"
    call.write_text(textwrap.dedent(f"""
        [agent]
        greeting = "{name} here."
        replies = ["{name} reply one.", "{name} reply two."]

        [[caller]]
        say = "Hi from {name}."
        after_agent_done = true

        [[caller]]
        say = "Thanks from {name}."
        after_agent_done = true
    """), encoding="utf-8")
    return call


@pytest.mark.models
def test_two_demos_on_one_database_never_interleave(tmp_path: Path) -> None:
    """The issue's scenario: a second `demo --db` while the first runs wrote into the first's
    session. Now it is refused at once (before loading models), naming the first."""
    import time

    config = write_config(tmp_path)
    db = tmp_path / "shared.db"
    first = subprocess.Popen(
        command("demo", "--db", db, "--call", _call(tmp_path, "Alpha"), config=config),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environment())
    try:
        deadline = time.monotonic() + 60
        while not (current_holder(db) or "").startswith(f"pid {first.pid}: "):
            assert first.poll() is None, first.communicate()
            assert time.monotonic() < deadline, "the first demo never took the writer lock"
            time.sleep(0.05)  # polling a condition, with a deadline
        second = _edge_agent(config, "demo", "--db", str(db), "--call",
                             str(_call(tmp_path, "Bravo")))
        assert second.returncode == AlreadyRunningError.exit_code, second.stderr
        assert f"(pid {first.pid}: " in second.stderr and "loading models" in second.stdout
        _, err = first.communicate(timeout=300)
    finally:
        if first.poll() is None:
            first.kill()
            first.communicate()
    assert first.returncode == 0, err[-3000:]
    store = MemoryStore.open_reader(db)
    sessions = store.sessions()
    turns = [turn["heard"] for turn in store.turns(sessions[0]["id"])]
    units = [unit["heard"] for unit in store.units([sessions[0]["id"]], state="final")]
    store.close()
    assert len(sessions) == 1, sessions
    assert not any("Bravo" in text or "from B" in text for text in turns), turns
    assert units[:3] == ["Alpha here.", "Alpha reply one.", "Alpha reply two."], units
