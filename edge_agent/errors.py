"""Domain errors. The library raises these; only the CLI turns them into messages and exit codes."""

from __future__ import annotations

from edge_agent.printable import clip, shown


class EdgeAgentError(Exception):
    """Base class for every error edge-agent reports to a user."""

    exit_code = 1


class ConfigError(EdgeAgentError):
    """A configuration file (or call file) is unreadable or holds a bad value."""

    exit_code = 2

    def __init__(self, path: str, key: str, reason: str) -> None:
        self.path = path
        self.key = key
        self.reason = reason
        # Keys and values come from the file: shown escaped and bounded, so that one line stays
        # one readable line whatever the file holds.
        where = f"{shown(path, 300)}: {shown(key, 80)}" if key else shown(path, 300)
        super().__init__(f"{where}: {clip(reason, 1500)}")


class ModelMissingError(EdgeAgentError):
    """A model the configuration names is not on disk."""

    exit_code = 3

    def __init__(self, name: str, looked_at: str, fetch_hint: str) -> None:
        self.name = name
        self.looked_at = looked_at
        self.fetch_hint = fetch_hint
        super().__init__(f"model '{name}' is missing (looked at {looked_at}). {fetch_hint}")


class ModelFileError(EdgeAgentError):
    """A model file is there but cannot be used (truncated, corrupt, the wrong kind)."""

    exit_code = 3

    def __init__(self, path: object, reason: str, fix: str = "") -> None:
        self.path = path
        self.reason = reason
        self.fix = fix
        super().__init__(f"cannot use model file {path}: {reason}" + (f". {fix}" if fix else ""))

    def with_fix(self, fix: str) -> ModelFileError:
        """The same error, naming how to get a good copy (the caller knows the model's name)."""
        return ModelFileError(self.path, self.reason, fix)


class ModelFetchError(EdgeAgentError):
    """A download failed or produced a file whose size or hash is wrong."""

    exit_code = 4


class AudioDeviceError(EdgeAgentError):
    """No usable audio device, or the named one does not exist."""

    exit_code = 5


class EngineError(EdgeAgentError):
    """An engine failed to load or to run."""

    exit_code = 6


class UnsafePathError(OSError):
    """A path we would write (or open as our own) is a symlink, a device, a FIFO or a directory
    (raised by `files`; its message says what the path is and what to do)."""


class OutputError(EdgeAgentError):
    """A file the user asked for (session record, unit audio, benchmark results) cannot be
    written."""

    exit_code = 7

    def __init__(self, path: object, reason: object) -> None:
        if isinstance(reason, UnsafePathError):  # it says what the path is and what to do
            super().__init__(f"cannot write {path}: {reason}")
            return
        super().__init__(f"cannot write {path}: {reason}. Check that the directory exists, is "
                         "writable and has free space, or pass another path")


class StoreError(EdgeAgentError):
    """The memory database cannot be used (unwritable, damaged, full, or from a newer version).
    Nothing is deleted or rewritten to recover: the message says what to do."""

    exit_code = 8

    def __init__(self, path: object, reason: str, fix: str) -> None:
        self.path = path
        self.reason = reason
        self.fix = fix
        super().__init__(f"memory database {path}: {reason}. Fix: {fix}")


class AlreadyRunningError(EdgeAgentError):
    """Another live agent holds the data directory, or another edge-agent is writing the memory
    database (one writer per database)."""

    exit_code = 9


class ServiceError(EdgeAgentError):
    """The service cannot be installed or removed here (not root, no systemd, a command
    failed)."""

    exit_code = 10


class SyncError(EdgeAgentError):
    """The venue's PostgreSQL cannot be used: unreachable, credentials refused, or its schema
    is from a newer edge-agent. Nothing waiting to be sent is lost: it stays queued."""

    exit_code = 12

    def __init__(self, where: str, reason: str, fix: str) -> None:
        self.where = where
        self.reason = reason
        self.fix = fix
        super().__init__(f"venue store {where}: {reason}. Fix: {fix}")
