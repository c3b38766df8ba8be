"""Lines for a terminal or for systemd's journal.

Under systemd, stderr is a stream to journald, which sets `$JOURNAL_STREAM` to that stream's
"device:inode"; a line that starts with `<N>` (a syslog priority: 3 error, 4 warning, 6 info,
7 debug) is stored at that priority, so `journalctl -u edge-agent -p warning` shows warnings
only. Every line of a run also names the open session (`[session ID]`), because a journal
holds many sessions one after another. Terminals get neither prefix decoration nor priorities.
"""

from __future__ import annotations

import contextlib
import faulthandler
import logging
import os
import sys
import threading
from collections.abc import Callable, Iterator
from typing import TextIO

from edge_agent.printable import escape_controls

_PRIORITIES = ((logging.ERROR, 3), (logging.WARNING, 4), (logging.INFO, 6))


def to_journal(stream: TextIO, environ: dict[str, str] | None = None) -> bool:
    """True when `stream` is the journald stream systemd connected (its `$JOURNAL_STREAM`)."""
    wanted = (os.environ if environ is None else environ).get("JOURNAL_STREAM", "")
    try:
        status = os.fstat(stream.fileno())
    except (OSError, ValueError, AttributeError):  # closed, or not a file (a test's StringIO)
        return False
    return wanted == f"{status.st_dev}:{status.st_ino}"


def priority(level: int) -> int:
    """The syslog priority of a logging level."""
    return next((value for floor, value in _PRIORITIES if level >= floor), 7)


def session_line(text: str, session: str | None) -> str:
    """`text` with `[session ID]` first while a session is open."""
    return f"[session {session}] {text}" if session else text


def journal_line(text: str, level: int, session: str | None, journal: bool) -> str:
    """One line: `<priority>` first under journald, then `[session ID]` while one is open."""
    tagged = session_line(text, session)
    return f"<{priority(level)}>{tagged}" if journal else tagged


class StderrLines(logging.Handler):
    """One line per record on whatever sys.stderr is at the time, tagged with the session of
    the record (`SessionTag`) and, under journald, its priority."""

    def emit(self, record: logging.LogRecord) -> None:
        text = f"edge-agent: {record.levelname.lower()}: {escape_controls(record.getMessage())}"
        session = getattr(record, "session", None)
        print(journal_line(text, record.levelno, session, to_journal(sys.stderr)),
              file=sys.stderr, flush=True)


class SessionTag(logging.Filter):
    """Gives each record the open session's id (`record.session`)."""

    def __init__(self, session: Callable[[], str | None]) -> None:
        super().__init__()
        self._session = session

    def filter(self, record: logging.LogRecord) -> bool:
        record.session = self._session()
        return True


@contextlib.contextmanager
def session_tagged(session: Callable[[], str | None]) -> Iterator[None]:
    """While inside, every record of the "edge_agent" loggers carries `session()`."""
    tag = SessionTag(session)
    logger = logging.getLogger("edge_agent")
    handlers = list(logger.handlers)
    for handler in handlers:  # on the handler: a child logger's records skip the parent's filters
        handler.addFilter(tag)
    try:
        yield
    finally:
        for handler in handlers:
            handler.removeFilter(tag)


@contextlib.contextmanager
def native_lines_logged() -> Iterator[None]:
    """While inside, what is written to file descriptor 2 by native code (ALSA, PortAudio) is
    read back line by line and logged at INFO on "edge_agent.native", so that it carries a
    priority and the session like every other line. Python's own stderr (and a crash dump)
    keeps writing to the real stream."""
    sys.stderr.flush()
    real = os.dup(2)
    read_fd, write_fd = os.pipe()
    saved_stderr = sys.stderr
    sys.stderr = open(real, "w", encoding="utf-8", errors="replace", buffering=1,  # noqa: SIM115
                      closefd=False)
    if faulthandler.is_enabled():
        faulthandler.enable(sys.stderr)
    os.dup2(write_fd, 2)
    os.close(write_fd)
    reader = threading.Thread(target=_log_lines, args=(read_fd,), name="native-stderr",
                              daemon=True)
    reader.start()
    try:
        yield
    finally:
        os.dup2(real, 2)  # the pipe's last write end closes: the reader sees its end
        reader.join(timeout=5)
        if faulthandler.is_enabled():
            faulthandler.enable(saved_stderr)
        sys.stderr.close()
        sys.stderr = saved_stderr
        os.close(real)


def _log_lines(read_fd: int) -> None:
    log = logging.getLogger("edge_agent.native")
    with open(read_fd, encoding="utf-8", errors="replace") as lines:
        for line in lines:
            if line.strip():
                log.info("%s", line.rstrip("\n"))
