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

KIB = 1024
MIB = 1024 * KIB

TEXT_FILE_LIMIT = 1 * MIB
"""Config, call file, manifest, script: hand-written TOML; the largest shipped is a few KB."""

RECORD_FILE_LIMIT = 256 * MIB
"""A session record (`demo --json`, `sessions show --json`): a day-long session with every
event is tens of MB."""


class UnsafePathError(OSError):
    """A path we would write (or open as our own) is a symlink, a device, a FIFO or a directory."""


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


def open_private(path: Path, *, exclusive: bool = False) -> int:
    """A file descriptor of `path` for writing (created 0600, truncated), never through a
    symlink and never a device or FIFO (opened non-blocking, checked, then made blocking)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    flags |= os.O_EXCL if exclusive else 0
    try:
        handle = os.open(path, flags, 0o600)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # the last component is a symlink
            raise UnsafePathError(f"{path} is a symbolic link; edge-agent does not write "
                                  "through links: remove it or pass another path") from None
        if exc.errno == errno.ENXIO:  # a FIFO nobody reads (or a device with nothing behind)
            raise UnsafePathError(f"{path} is {kind_of(os.lstat(path).st_mode)}; edge-agent "
                                  "writes only regular files: pass a path to a new or regular "
                                  "file") from None
        raise
    try:
        mode = os.fstat(handle).st_mode
        if not stat.S_ISREG(mode):
            raise UnsafePathError(f"{path} is {kind_of(mode)}; edge-agent writes only regular "
                                  "files: pass a path to a new or regular file")
        os.set_blocking(handle, True)
        os.ftruncate(handle, 0)
    except BaseException:
        os.close(handle)
        raise
    return handle
