"""The data directory: checked before anything runs, and held by one live agent at a time.

A data dir that is a file or unwritable would otherwise be found only when the first booking
or turn is written (and lost). Two live agents on one data dir would both answer, their voices
mixed, and write one database: the second is refused while the first holds the lock (an
advisory `flock`, released by the kernel when the holder dies, so a crash never leaves a stale
lock behind).
"""

from __future__ import annotations

import fcntl
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from edge_agent.config import Config
from edge_agent.errors import AlreadyRunningError, ConfigError
from edge_agent.files import kind_of
from edge_agent.memory.writer_lock import lock_path, open_lock_file
from edge_agent.printable import shown

LOCK_NAME = "edge-agent.lock"


def ensure_data_dir(config: Config) -> Path:
    """The data dir, created if missing (mode 0700), or a ConfigError on `data_dir` saying
    what is wrong with it."""
    path = config.data_path
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
    except FileExistsError:
        raise ConfigError(config.source, "data_dir", f"{path} is a file, not a directory: point "
                          "data_dir at a directory (it is created if missing)") from None
    except OSError as exc:
        raise ConfigError(config.source, "data_dir", f"cannot create {path} "
                          f"({exc.strerror or exc}): point data_dir at a writable place") from None
    check_data_dir(config)
    return path


def check_data_dir(config: Config) -> None:
    """ConfigError if the existing data dir cannot be used: not a directory, not writable, or
    holding something that is not a regular file where edge-agent keeps its database and its
    locks (never followed: the service runs as root). `ensure_data_dir` and the doctor both
    ask here, so the doctor says "ok" only for a data dir the agent accepts."""
    path = config.data_path
    if not path.is_dir():
        raise ConfigError(config.source, "data_dir", f"{path} is not a directory: point "
                          "data_dir at a directory")
    if not os.access(path, os.W_OK | os.X_OK):
        raise ConfigError(config.source, "data_dir", f"{path} is not writable by this user "
                          f"(uid {os.geteuid()}): fix its owner or mode, or point data_dir "
                          "elsewhere")
    for own in (config.db_path, path / LOCK_NAME, lock_path(config.db_path)):
        try:
            mode = os.lstat(own).st_mode
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise ConfigError(config.source, "data_dir", f"cannot look at {own} "
                              f"({exc.strerror or exc}): check the data dir's owner") from None
        if not stat.S_ISREG(mode):
            raise ConfigError(config.source, "data_dir", f"{own} is {kind_of(mode)}, where "
                              "edge-agent keeps a file of its own: remove it (nothing was "
                              "followed or changed), or point data_dir elsewhere")


@contextmanager
def data_dir_lock(config: Config) -> Iterator[None]:
    """Hold the data dir for one live agent; AlreadyRunningError if another holds it."""
    directory = ensure_data_dir(config)
    lock_file = directory / LOCK_NAME
    try:
        handle = open_lock_file(lock_file)
    except OSError as exc:
        raise ConfigError(config.source, "data_dir", f"cannot create {lock_file} "
                          f"({exc.strerror or exc}): check the data dir's mode") from None
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(handle, 64, 0).decode("ascii", "replace").strip() or "unknown"
            raise AlreadyRunningError(
                f"another edge-agent (pid {shown(holder, 64)}) is running on data dir "
                f"{directory}: stop it first (systemctl stop edge-agent, or Ctrl-C), or give "
                "this one another data_dir") from None
        os.ftruncate(handle, 0)
        os.pwrite(handle, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(handle)  # releases the lock
