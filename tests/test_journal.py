"""Log lines for journald: a priority prefix only on the stream systemd announced, and the open
session's id on every line of a run (conversation lines and logger warnings alike)."""

from __future__ import annotations

import io
import logging
import os
import sys
from pathlib import Path

import pytest

from edge_agent.service.journal import (
    StderrLines,
    journal_line,
    priority,
    session_tagged,
    to_journal,
)


def _announced(path: Path) -> dict[str, str]:
    status = os.stat(path)
    return {"JOURNAL_STREAM": f"{status.st_dev}:{status.st_ino}"}


def test_only_the_announced_stream_is_the_journal(tmp_path: Path) -> None:
    journal, other = tmp_path / "journal", tmp_path / "other"
    with open(journal, "w") as stream, open(other, "w") as elsewhere:
        assert to_journal(stream, _announced(journal))
        assert not to_journal(elsewhere, _announced(journal))  # stderr redirected elsewhere
        assert not to_journal(stream, {})  # not under systemd
        assert not to_journal(io.StringIO(), _announced(journal))  # not a file at all


@pytest.mark.parametrize(("level", "expected"), [
    (logging.CRITICAL, 3), (logging.ERROR, 3), (logging.WARNING, 4), (logging.INFO, 6),
    (logging.DEBUG, 7)])
def test_levels_map_to_syslog_priorities(level: int, expected: int) -> None:
    assert priority(level) == expected


def test_a_line_is_tagged_with_its_session_and_under_journald_its_priority() -> None:
    assert journal_line("you: 5 words", logging.INFO, "a1b2", False) == "[session a1b2] you: 5 words"
    assert journal_line("you: 5 words", logging.INFO, "a1b2", True) == "<6>[session a1b2] you: 5 words"
    assert journal_line("loading", logging.INFO, None, True) == "<6>loading"


def test_logger_warnings_carry_the_open_session_and_their_priority(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "stderr"
    monkeypatch.setenv("JOURNAL_STREAM", _announced_after_create(path))
    logger = logging.getLogger("edge_agent")
    handler = StderrLines()
    saved = logger.propagate
    logger.addHandler(handler)
    logger.propagate = False
    session: list[str | None] = [None]
    try:
        with open(path, "w") as stream:
            monkeypatch.setattr(sys, "stderr", stream)
            logging.getLogger("edge_agent.engines.llm").warning("before: %s", "none open")
            with session_tagged(lambda: session[0]):
                session[0] = "7f3a"
                logging.getLogger("edge_agent.engines.llm").warning("prompt trimmed")
                logging.getLogger("edge_agent").error("bad\x1b[2Jturn")
            logging.getLogger("edge_agent").warning("after")
    finally:
        logger.removeHandler(handler)
        logger.propagate = saved
    assert path.read_text().splitlines() == [
        "<4>edge-agent: warning: before: none open",
        "<4>[session 7f3a] edge-agent: warning: prompt trimmed",
        "<3>[session 7f3a] edge-agent: error: bad\\x1b[2Jturn",
        "<4>edge-agent: warning: after",
    ]


def _announced_after_create(path: Path) -> str:
    path.touch()
    return _announced(path)["JOURNAL_STREAM"]


_NATIVE = """
import logging, os, sys
from edge_agent.service.journal import StderrLines, native_lines_logged, session_tagged
logger = logging.getLogger("edge_agent")
logger.addHandler(StderrLines())
logger.setLevel(logging.INFO)
logger.propagate = False
with session_tagged(lambda: "s1"), native_lines_logged():
    os.write(2, b"ALSA lib pcm.c:8526:(snd_pcm_recover) underrun occurred\\n")
    logger.warning("own line")
print("after", file=sys.stderr)
"""


def test_what_native_code_prints_becomes_a_line_with_priority_and_session(
        tmp_path: Path) -> None:
    import subprocess

    path = tmp_path / "journal"
    path.touch()
    with open(path, "w") as stream:
        done = subprocess.run([sys.executable, "-c", _NATIVE], stderr=stream, timeout=60,
                              env={**os.environ, **_announced(path)}, check=False)
    assert done.returncode == 0, path.read_text()
    lines = path.read_text().splitlines()
    assert sorted(lines[:2]) == [
        "<4>[session s1] edge-agent: warning: own line",
        "<6>[session s1] edge-agent: info: ALSA lib pcm.c:8526:(snd_pcm_recover) underrun occurred",
    ]
    assert lines[2:] == ["after"]  # the real stream is back as it was
