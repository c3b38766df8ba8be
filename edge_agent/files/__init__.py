"""Files edge-agent reads and writes, handled so that no input is unbounded and no file we did
not create is touched.

Reading: every file a user hands us (config, call file, manifest, session record) is read with a
cap. `/dev/zero`, a FIFO that never ends or a runaway file is refused after `limit` bytes with
a message naming the cap, instead of being read until memory runs out.

Writing: the service installer runs as root, so a path that is a symlink or a device must
never be followed or replaced: `--json /dev/null` must not replace the system's `/dev/null`
with a plain file, and a kept-audio file linked to `/etc/shadow` must not overwrite it. A target
that exists is accepted only if it is a regular file; new files are created private (mode 0600
at creation, through `os.open`'s mode: never a chmod after the fact on a path that could have
been swapped).
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from edge_agent.errors import UnsafePathError

KIB = 1024
MIB = 1024 * KIB

TEXT_FILE_LIMIT = 1 * MIB
"""Config, call file, manifest, script: hand-written TOML; the largest shipped is a few KB."""

RECORD_FILE_LIMIT = 256 * MIB
"""A session record (`demo --json`, `sessions show --json`): a day-long session with every
event is tens of MB."""


class TooLargeError(OSError):
    """A file we read is larger than its cap."""


def read_capped(path: Path, limit: int) -> bytes:
    """The bytes of `path`, or TooLargeError if it holds more than `limit` (or never ends)."""
    with open(path, "rb") as handle:
        if stat.S_ISDIR(os.fstat(handle.fileno()).st_mode):
            raise IsADirectoryError(f"{path} is a directory")
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise TooLargeError(f"larger than {describe_size(limit)}, the most edge-agent reads from "
                            "such a file (is it the right file? /dev/zero or a stream never "
                            "ends)")
    return data


def describe_size(size: int) -> str:
    if size >= MIB:
        return f"{size / MIB:g} MiB"
    if size >= KIB:
        return f"{size / KIB:g} KiB"
    return f"{size} bytes"


def kind_of(mode: int) -> str:
    """What a non-regular file is, in words."""
    for test, name in ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISDIR, "a directory"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def refuse_unsafe_target(path: Path) -> bool:
    """Whether `path` exists; UnsafePathError if it exists and is anything but a regular file
    (a symlink is refused, whatever it points to: following it would write elsewhere)."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return False
    if not stat.S_ISREG(mode):
        raise UnsafePathError(f"{path} is {kind_of(mode)}; edge-agent writes only regular "
                              "files it can replace: pass a path to a new or regular file")
    return True


class NotRegularFileError(UnsafePathError):
    """`open_regular` found something other than a regular file at a path: `kind` says what,
    in words ("a FIFO"), and `strerror` is "it is <kind>", for callers that fold it into their
    own message."""

    def __init__(self, path: Path, mode: int) -> None:
        self.kind = kind_of(mode)
        self.is_link = stat.S_ISLNK(mode)
        super().__init__(errno.ELOOP if self.is_link else errno.EINVAL, f"it is {self.kind}",
                         str(path))

    def __str__(self) -> str:
        return f"{self.filename} is {self.kind}"


def open_regular(path: Path, flags: int, mode: int = 0o600) -> int:
    """A blocking file descriptor of `path` opened with `flags` (and `mode` if it creates the
    file), or NotRegularFileError if `path` is a symlink, a directory, a device, a FIFO or a
    socket; any other OSError of the open as it came.

    The last component is never followed (O_NOFOLLOW) and the open never blocks (O_NONBLOCK: a
    FIFO with no writer would hang a read-only open forever); the descriptor is checked with
    fstat, so what is checked is what was opened, not a path that could be swapped after a
    look."""
    try:
        handle = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # the last component is a symlink
            raise NotRegularFileError(path, stat.S_IFLNK) from None
        if exc.errno in (errno.ENXIO, errno.EISDIR):  # a FIFO nobody reads, a device with
            # nothing behind it, a socket; a directory opened for writing
            raise NotRegularFileError(path, os.lstat(path).st_mode) from None
        raise
    try:
        found = os.fstat(handle).st_mode
        if not stat.S_ISREG(found):
            raise NotRegularFileError(path, found)
        os.set_blocking(handle, True)
    except BaseException:
        os.close(handle)
        raise
    return handle


def open_private(path: Path, *, exclusive: bool = False) -> int:
    """A file descriptor of `path` for writing (created 0600, truncated), never through a
    symlink and never a device or FIFO (UnsafePathError saying what it is and what to do)."""
    flags = os.O_WRONLY | os.O_CREAT | (os.O_EXCL if exclusive else 0)
    try:
        handle = open_regular(path, flags)
    except NotRegularFileError as exc:
        fix = ("edge-agent does not write through links: remove it or pass another path"
               if exc.is_link else
               "edge-agent writes only regular files: pass a path to a new or regular file")
        raise UnsafePathError(f"{exc}; {fix}") from None
    try:
        os.ftruncate(handle, 0)
    except BaseException:
        os.close(handle)
        raise
    return handle
