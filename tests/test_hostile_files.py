"""Files that are not ours (issue 24): a symlink or a device where edge-agent writes a record,
a page, an export, results or a unit's audio is refused with a clear message and left exactly
as it was (the link still a link, what it points to unchanged); the refusal comes before a
session or a benchmark runs, never after it.

The devices are FIFOs made here (`os.mkfifo`): a test never touches a system device.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import pytest

from edge_agent.audio.pcm import read_wav, write_wav
from edge_agent.audio.unit_audio import UnitAudioWriter
from edge_agent.errors import OutputError, UnsafePathError
from edge_agent.heard.ledger import Finalize
from tests.cli import edge_agent, write_config
from tests.inspect_sessions import SessionBuilder, store_record

OUTPUT_ERROR = 7
TIMEOUT_S = 120
VICTIM_TEXT = "someone else's file\n"


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """A file a link points to: it must never change."""
    path = tmp_path / "victim.txt"
    path.write_text(VICTIM_TEXT, encoding="utf-8")
    path.chmod(0o644)
    return path


def _untouched(victim: Path, link: Path) -> None:
    assert link.is_symlink() and os.readlink(link) == str(victim)
    assert victim.read_text(encoding="utf-8") == VICTIM_TEXT
    assert stat.S_IMODE(victim.stat().st_mode) == 0o644


def _targets(tmp_path: Path, victim: Path) -> dict[str, tuple[Path, str]]:
    """Each kind of target that is not ours: (path, what the message calls it)."""
    link = tmp_path / "linked.json"
    link.symlink_to(victim)
    stdout = tmp_path / "stdout.json"
    stdout.symlink_to("/proc/self/fd/1")
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    return {"link": (link, "a symbolic link"), "stdout": (stdout, "a symbolic link"),
            "fifo": (fifo, "a FIFO")}


def _check_left_alone(kind: str, path: Path, victim: Path) -> None:
    if kind == "link":
        _untouched(victim, path)
    elif kind == "stdout":
        assert path.is_symlink() and os.readlink(path) == "/proc/self/fd/1"
    else:
        assert stat.S_ISFIFO(path.lstat().st_mode)


def _edge_agent(*args: str) -> subprocess.CompletedProcess[str]:
    return edge_agent(*args, timeout=TIMEOUT_S)


def _refused(result: subprocess.CompletedProcess[str], path: Path, what: str) -> None:
    assert result.returncode == OUTPUT_ERROR, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    assert result.stderr.splitlines() == [
        f"edge-agent: error: cannot write {path}: {path} is {what}; edge-agent writes only "
        "regular files it can replace: pass a path to a new or regular file"]


def _stored_session(tmp_path: Path) -> str:
    built = SessionBuilder()
    built.agent("hello how can I help", 0.2)
    built.caller("book a table", 2.0, 1.0)
    record = built.record()
    store_record(tmp_path / "data" / "edge-agent.db", record)
    return record["session_id"]


# --------------------------------------------------------------------------- records and pages

@pytest.mark.parametrize("kind", ["link", "stdout", "fifo"])
def test_exports_and_pages_refuse_a_target_that_is_not_a_regular_file(
        tmp_path: Path, victim: Path, kind: str) -> None:
    config = str(write_config(tmp_path))
    session = _stored_session(tmp_path)
    path, what = _targets(tmp_path, victim)[kind]
    for command in (["sessions", "export", session, "-o", str(path)],
                    ["inspect", session, "-o", str(path)]):
        result = _edge_agent("-c", config, *command)
        _refused(result, path, what)
        assert result.stdout == ""  # nothing went to stdout through /proc/self/fd/1 either
        _check_left_alone(kind, path, victim)
    written = tmp_path / "export.json"  # a new file is written, readable by its owner only
    assert _edge_agent("-c", config, "sessions", "export", session, "-o",
                       str(written)).returncode == 0
    assert json.loads(written.read_text(encoding="utf-8"))["session_id"] == session
    assert stat.S_IMODE(written.stat().st_mode) == 0o600


@pytest.mark.parametrize("kind", ["link", "stdout", "fifo"])
@pytest.mark.parametrize("command", [
    ["demo"], ["bench", "--json", "{path}", "engines"], ["bench", "engines", "--json", "{path}"],
    ["bench", "--quick"], ["doctor", "--quick"], ["sessions", "replay", "5e55"],
], ids=["demo", "bench-before", "bench-after", "bench", "doctor", "replay"])
def test_a_record_target_is_refused_before_anything_runs(
        tmp_path: Path, victim: Path, kind: str, command: list[str]) -> None:
    """The refusal is the first thing said: no model loads, no session or benchmark runs."""
    path, what = _targets(tmp_path, victim)[kind]
    _stored_session(tmp_path)
    args = [a.replace("{path}", str(path)) for a in command]
    if "{path}" not in command:
        args += ["--json", str(path)]
    result = _edge_agent("-c", str(write_config(tmp_path)), *args)
    _refused(result, path, what)
    assert result.stdout == ""
    _check_left_alone(kind, path, victim)


# --------------------------------------------------------------------------- unit audio

def test_wav_files_are_created_private_and_never_written_through_a_link(
        tmp_path: Path, victim: Path) -> None:
    fresh = tmp_path / "u1.wav"
    write_wav(fresh, b"\x01\x00" * 100, 16000)
    assert read_wav(fresh) == (b"\x01\x00" * 100, 16000)
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o600
    link = tmp_path / "u2.wav"
    link.symlink_to(victim)
    with pytest.raises(UnsafePathError, match="is a symbolic link"):
        write_wav(link, b"\x00\x00", 16000)
    _untouched(victim, link)
    fifo = tmp_path / "u3.wav"
    os.mkfifo(fifo)
    with pytest.raises(UnsafePathError, match="is a FIFO"):  # refused, not blocked on
        write_wav(fifo, b"\x00\x00", 16000)


def _finalize(unit_id: str, samples: int) -> Finalize:
    return Finalize(unit_id=unit_id, generated="hi", heard="hi", played_samples=samples,
                    sample_rate=16000, words=(), inexact_words=0)


def test_unit_audio_refuses_a_link_and_writes_every_other_unit(
        tmp_path: Path, victim: Path) -> None:
    directory = tmp_path / "units"
    directory.mkdir()
    (directory / "u1.wav").symlink_to(victim)
    writer = UnitAudioWriter(directory)
    for unit_id in ("u1", "u2"):
        writer.add(unit_id, b"\x02\x00" * 50)
        writer.finish(_finalize(unit_id, 50))
    with pytest.raises(OutputError) as refused:
        writer.close()
    assert str(refused.value) == (
        f"cannot write {directory / 'u1.wav'}: {directory / 'u1.wav'} is a symbolic link; "
        "edge-agent does not write through links: remove it or pass another path")
    _untouched(victim, directory / "u1.wav")
    assert read_wav(directory / "u2.wav") == (b"\x02\x00" * 50, 16000)


@pytest.mark.models
def test_demo_audio_dir_with_a_link_inside_keeps_the_record_and_the_linked_file(
        tmp_path: Path, victim: Path) -> None:
    units = tmp_path / "units"
    units.mkdir()
    (units / "u1.wav").symlink_to(victim)
    call = tmp_path / "call.toml"
    call.write_text('[agent]\ngreeting = "Hello."\nreplies = ["Fine."]\n'
                    '[[caller]]\nsay = "How are you?"\nafter_agent_done = true\n',
                    encoding="utf-8")
    record = tmp_path / "session.json"
    result = edge_agent("demo", "--call", call, "--audio-dir", units, "--json", record,
                        config=write_config(tmp_path), timeout=300)
    assert result.returncode == OUTPUT_ERROR, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.splitlines()[-1] == (
        f"edge-agent: error: cannot write {units / 'u1.wav'}: {units / 'u1.wav'} is a symbolic "
        "link; edge-agent does not write through links: remove it or pass another path")
    _untouched(victim, units / "u1.wav")
    kept = json.loads(record.read_text(encoding="utf-8"))  # the session is not lost
    assert [u["unit_id"] for u in kept["units"]] == ["u1", "u2"]
    assert read_wav(units / "u2.wav")[1] > 0
