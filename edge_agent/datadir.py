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
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from edge_agent.config import Config
from edge_agent.errors import AlreadyRunningError, ConfigError

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
    if not path.is_dir():
        raise ConfigError(config.source, "data_dir", f"{path} is not a directory: point "
                          "data_dir at a directory")
    if not os.access(path, os.W_OK | os.X_OK):
        raise ConfigError(config.source, "data_dir", f"{path} is not writable by this user "
                          f"(uid {os.geteuid()}): fix its owner or mode, or point data_dir "
                          "elsewhere")
    return path


@contextmanager
def data_dir_lock(config: Config) -> Iterator[None]:
    """Hold the data dir for one live agent; AlreadyRunningError if another holds it."""
    directory = ensure_data_dir(config)
    lock_path = directory / LOCK_NAME
    try:
        handle = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as exc:
        raise ConfigError(config.source, "data_dir", f"cannot create {lock_path} "
                          f"({exc.strerror or exc}): check the data dir's mode") from None
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(handle, 64, 0).decode("ascii", "replace").strip() or "unknown"
            raise AlreadyRunningError(
                f"another edge-agent (pid {holder}) is running on data dir {directory}: stop "
                "it first (systemctl stop edge-agent, or Ctrl-C), or give this one another "
                "data_dir") from None
        os.ftruncate(handle, 0)
        os.pwrite(handle, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(handle)  # releases the lock
