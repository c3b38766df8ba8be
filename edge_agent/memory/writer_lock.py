"""One writer per memory database, whoever opens it: `run` (and the service), `demo --db`,
`sessions delete`, `memory forget` and `memory consolidate`.

Two writers on one database interleave their sessions: a second `demo --db` resumed the first
one's open session and wrote its turns into it, and a `sessions delete` under a live agent made
every later write of that agent fail. The writer holds an advisory `flock` on a lock file next
to the database (`edge-agent.db.writer`) for its whole life; the kernel releases it when the
holder exits or dies, so a crash never leaves a stale lock. The holder writes its pid and
command line into the file, for the message the next writer gets.

Readers (`sessions list/show/export/replay`, `memory show`, `inspect`) never take it: SQLite's
WAL lets them read while the writer writes, and the writer never waits for them.
"""

from __future__ import annotations

import fcntl
import os
import sys
from pathlib import Path
from types import TracebackType

from edge_agent.errors import AlreadyRunningError, StoreError
from edge_agent.files import open_regular
from edge_agent.memory.database_file import exists_as_file
from edge_agent.printable import shown

SUFFIX = ".writer"
_HOLDER_LIMIT = 4096


def lock_path(database: Path) -> Path:
    return database.with_name(database.name + SUFFIX)


class WriterLock:
    """The writer's hold on one database; released by `release` (or by the process ending)."""

    def __init__(self, database: Path, handle: int) -> None:
        self.database = database
        self._handle: int | None = handle

    @classmethod
    def acquire(cls, database: Path) -> WriterLock:
        """Hold `database` for writing; AlreadyRunningError naming the holder if another
        process (or another store in this one) holds it."""
        exists_as_file(database)  # no lock file made next to a device (`--db /dev/null`)
        path = lock_path(database)
        try:
            database.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            handle = open_lock_file(path)
        except OSError as exc:
            raise StoreError(database, f"cannot create its writer lock {path} "
                             f"({exc.strerror or exc})",
                             "make the data dir a writable directory (config data_dir), and "
                             f"remove {path} if it is not a regular file") from None
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(handle)
            os.close(handle)
            raise AlreadyRunningError(
                f"memory database {database} is being written by another edge-agent "
                f"({holder}): one writer at a time, or their sessions would interleave. Wait "
                "for it to finish or stop it (systemctl stop edge-agent, or Ctrl-C), or give "
                "this one another database (--db, or another data_dir)") from None
        except BaseException:
            os.close(handle)
            raise
        command = " ".join(sys.orig_argv) or sys.executable
        os.ftruncate(handle, 0)
        os.pwrite(handle, f"{os.getpid()}\n{command}\n".encode(errors="replace"), 0)
        return cls(database, handle)

    @property
    def held(self) -> bool:
        return self._handle is not None

    def release(self) -> None:
        if self._handle is not None:
            os.close(self._handle)  # releases the flock
            self._handle = None

    def __enter__(self) -> WriterLock:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.release()


def current_holder(database: Path) -> str | None:
    """Who holds `database` for writing ("pid N: command"), or None if nobody does. Takes
    nothing: a probe that finds the lock free lets it go at once."""
    try:
        handle = open_regular(lock_path(database), os.O_RDONLY)
    except OSError:  # none, or not a lock file of ours: nobody holds it
        return None
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _holder(handle)
        return None
    finally:
        os.close(handle)


def open_lock_file(path: Path) -> int:
    """A lock file, created 0600 if missing, never through a symlink and never a device or
    FIFO (`files.NotRegularFileError`, whose strerror says what it is); not truncated here (the
    holder's pid is in it until we hold the lock)."""
    return open_regular(path, os.O_RDWR | os.O_CREAT)


def _holder(handle: int) -> str:
    text = os.pread(handle, _HOLDER_LIMIT, 0).decode("utf-8", "replace")
    pid, _, command = text.partition("\n")
    if not pid.strip().isdigit():
        return "pid unknown: it is still starting"
    command = command.strip()
    return f"pid {pid.strip()}" + (f": {shown(command, 300)}" if command else "")
