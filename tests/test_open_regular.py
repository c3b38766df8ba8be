"""`files.open_regular`: the one open that the record writer, the writer lock and the memory
store share. Anything but a regular file is refused with NotRegularFileError naming what it is,
without following a link, blocking on a FIFO or leaving a descriptor open."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

import pytest

from edge_agent.errors import UnsafePathError
from edge_agent.files import NotRegularFileError, open_regular


def _open_descriptors() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def _refused(path: Path, flags: int) -> NotRegularFileError:
    before = _open_descriptors()
    with pytest.raises(NotRegularFileError) as refused:
        open_regular(path, flags)
    assert _open_descriptors() <= before  # nothing left open
    return refused.value


def test_a_regular_file_is_opened_blocking_and_a_new_one_is_created_private(
        tmp_path: Path) -> None:
    existing = tmp_path / "existing"
    existing.write_bytes(b"kept")
    existing.chmod(0o644)
    handle = open_regular(existing, os.O_RDWR)
    try:
        assert os.get_blocking(handle)
        assert os.pread(handle, 16, 0) == b"kept"
    finally:
        os.close(handle)
    assert stat.S_IMODE(existing.stat().st_mode) == 0o644  # a file we did not create keeps it
    created = tmp_path / "created"
    os.close(open_regular(created, os.O_WRONLY | os.O_CREAT))
    assert stat.S_IMODE(created.stat().st_mode) == 0o600


def test_a_symlink_is_refused_and_its_target_untouched(tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.write_bytes(b"someone else's")
    link = tmp_path / "link"
    link.symlink_to(target)
    refused = _refused(link, os.O_RDWR | os.O_CREAT)
    assert (refused.kind, refused.is_link, refused.errno) == ("a symbolic link", True,
                                                              errno.ELOOP)
    assert str(refused) == f"{link} is a symbolic link"
    assert isinstance(refused, UnsafePathError)
    assert target.read_bytes() == b"someone else's"


@pytest.mark.parametrize("flags", [os.O_RDONLY, os.O_WRONLY, os.O_RDWR | os.O_CREAT])
def test_a_fifo_is_refused_without_blocking(tmp_path: Path, flags: int) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # no reader nor writer: a blocking open would hang here
    refused = _refused(fifo, flags)
    assert (refused.kind, refused.is_link, refused.strerror) == ("a FIFO", False, "it is a FIFO")
    assert stat.S_ISFIFO(fifo.lstat().st_mode)


@pytest.mark.parametrize("flags", [os.O_RDONLY, os.O_RDWR])
def test_a_directory_is_refused(tmp_path: Path, flags: int) -> None:
    refused = _refused(tmp_path, flags)
    assert refused.kind == "a directory"
    assert str(refused) == f"{tmp_path} is a directory"


def test_a_device_is_refused() -> None:
    refused = _refused(Path("/dev/null"), os.O_RDWR | os.O_CREAT)
    assert str(refused) == "/dev/null is a character device"
    assert refused.errno == errno.EINVAL


def test_other_failures_come_as_they_were(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        open_regular(tmp_path / "missing" / "file", os.O_RDWR | os.O_CREAT)
    with pytest.raises(FileNotFoundError):
        open_regular(tmp_path / "absent", os.O_RDONLY)
