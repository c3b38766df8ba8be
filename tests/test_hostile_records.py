"""Hostile records, call files and command lines (issue 24): numbers that would size a page or a
replay without end, JSON nested or sized past reason, inputs that never end, a damaged event
in the memory database, a call file of tens of thousands of lines, and `bench` arguments.

Each must end the command quickly with its exit code and one clear line on stderr naming the
file (or the session) and the field; the CLI behaviours run as real subprocesses with a
timeout, so a command that grows or reads forever fails the test instead of hanging it.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from edge_agent.cli.bench import results_path
from edge_agent.cli.main import _parser
from edge_agent.config.file import load_config
from edge_agent.demo.callfile import MAX_CALLER_LINES, MAX_SAY_CHARS, load_call
from edge_agent.errors import ConfigError
from edge_agent.inspect.layout import MAX_STRIPS, AxisTooLongError, strips
from edge_agent.memory.record import SessionRecord
from edge_agent.memory.record_check import MAX_MS
from edge_agent.replay.run import MAX_REPLAY_S, replay_timeline
from tests.cli import edge_agent, write_config
from tests.inspect_sessions import SessionBuilder, store_record

CONFIG_ERROR, OUTPUT_ERROR, STORE_ERROR = 2, 7, 8
QUICK_S = 60
"""A refused input ends well within this (the interpreter's start-up included)."""


def _record() -> SessionRecord:
    built = SessionBuilder()
    built.agent("hello how can I help", 0.2)
    answer = built.caller("book a table", 2.0, 1.0)
    built.agent("we have a table at seven and one at eight", answer, cut_at=answer + 1.0)
    return built.record()


def _edge_agent(*args: str) -> subprocess.CompletedProcess[str]:
    return edge_agent(*args, timeout=QUICK_S)


def _one_line(result: subprocess.CompletedProcess[str], code: int) -> str:
    assert result.returncode == code, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, lines
    return lines[0]


# --------------------------------------------------------------------------- record files

def _edited(change: Any) -> SessionRecord:
    record = _record()
    change(record)
    return record


def _event(record: SessionRecord, kind: str) -> dict[str, Any]:
    return next(e for e in record["events"] if e["type"] == kind)


@pytest.mark.parametrize(("edit", "field", "reason"), [
    (lambda r: r["units"][0].update(played_ms=1e18), "units[0].played_ms",
     f"must be from 0 to {MAX_MS} (milliseconds, an hour at most), got 1e+18"),
    (lambda r: r["units"][1]["words"][2].update(start_ms=-5), "units[1].words[2].start_ms",
     "must be from 0 to"),
    (lambda r: _event(r, "PlaybackStarted").update(at=1e18), "events[0].at",
     "must be from -1000000000 to 1000000000 (seconds on the run's clock), got 1e+18 "
     "(a PlaybackStarted event)"),
    (lambda r: _event(r, "UserSpeechEnded").update(silence_ms=10**400), "silence_ms",
     "got a 401-digit number (a UserSpeechEnded event)"),
    (lambda r: _event(r, "TurnStage").update(turn=-1), ".turn", "must be from 0 to"),
    (lambda r: r.update(llm_requests=[{"turn": 1, "hop": 2**70}]), "llm_requests[0].hop",
     "got a 22-digit number"),
    (lambda r: _event(r, "UserTurn").pop("text"), ".text",
     "must be text, got nothing (a UserTurn event)"),
], ids=["played_ms", "word", "at", "digits", "turn", "hop", "lost"])
def test_every_number_of_a_record_file_is_range_checked(
        tmp_path: Path, edit: Any, field: str, reason: str) -> None:
    record = tmp_path / "session.json"
    record.write_text(json.dumps(_edited(edit)), encoding="utf-8")
    line = _one_line(_edge_agent("-c", str(write_config(tmp_path)), "inspect", "--json",
                                 str(record), "-o", str(tmp_path / "page.html")), CONFIG_ERROR)
    assert line.startswith(f"edge-agent: error: {record}: ") and field in line, line
    assert reason in line, line
    assert not (tmp_path / "page.html").exists()


def test_a_run_too_long_to_draw_is_refused_not_laid_out(tmp_path: Path) -> None:
    """Every number in range, but the caller's speech spans 28 years: the page would need
    10^8 strips. It is refused at the strip past the limit (shared by all runs)."""
    record = _record()
    _event(record, "UserSpeechEnded").update(at=9e8)
    path = tmp_path / "session.json"
    path.write_text(json.dumps(record), encoding="utf-8")
    line = _one_line(_edge_agent("-c", str(write_config(tmp_path)), "inspect", "--json", str(path),
                                 "-o", str(tmp_path / "page.html")), CONFIG_ERROR)
    assert f"{path}: events: too long to draw on one page" in line
    assert f"more than the {MAX_STRIPS} strips" in line
    assert len(strips([(0.0, 10.0 * 50), (1000.0, 1000.0 + 10.0 * 50)], limit=100)) == 100
    with pytest.raises(AxisTooLongError, match="more than the 100 strips of 10 s"):
        strips([(0.0, 10.0 * 50), (1000.0, 1000.0 + 10.0 * 51)], limit=100)


@pytest.mark.parametrize(("content", "reason"), [
    ("[" * 100_000 + "]" * 100_000, "nested thousands deep"),
    ('{"units": [], "events": [], "x": ' + "9" * 5000 + "}", "not a session record"),
], ids=["nested-deep", "number-too-long"])  # the content as an id: 200 kB in every child's env
def test_json_nested_or_sized_past_reason_is_one_line(
        tmp_path: Path, content: str, reason: str) -> None:
    path = tmp_path / "session.json"
    path.write_text(content, encoding="utf-8")
    line = _one_line(_edge_agent("-c", str(write_config(tmp_path)), "inspect", "--json", str(path)),
                     CONFIG_ERROR)
    assert line.startswith(f"edge-agent: error: {path}: ") and reason in line, line


@pytest.mark.parametrize(("args", "what"), [
    (("inspect", "--json", "/dev/zero"), "the session record"),
    (("demo", "--call", "/dev/zero"), "call file"),
    (("--config", "/dev/zero", "demo"), "config file"),
], ids=["inspect", "demo-call", "config"])
def test_inputs_that_never_end_are_refused_quickly(tmp_path: Path, args: tuple[str, ...],
                                                   what: str) -> None:
    config = ("-c", str(write_config(tmp_path))) if args[0] != "--config" else ()
    began = time.monotonic()
    line = _one_line(_edge_agent(*config, *args), CONFIG_ERROR)
    assert time.monotonic() - began < QUICK_S
    assert f"/dev/zero: cannot read {what}: larger than" in line, line


# --------------------------------------------------------------------------- the database

def _damage(db: Path, sql: str, *values: object) -> None:
    with sqlite3.connect(db) as connection:
        connection.execute(sql, values)
    connection.close()


def test_replay_of_an_event_that_lost_its_fields_names_it(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    db = tmp_path / "data" / "edge-agent.db"
    record = _record()
    store_record(db, record)
    _damage(db, "UPDATE events SET data = '{}' WHERE type = 'UserTurn'")
    turn = next(i for i, e in enumerate(record["events"]) if e["type"] == "UserTurn")
    line = _one_line(_edge_agent("-c", str(config), "sessions", "replay", "5e55"), CONFIG_ERROR)
    assert f"{db}: session {record['session_id']}: events[{turn}].text: must be text, got " \
           "nothing (a UserTurn event): the database's record of the session is damaged" in line
    # inspect reads the same record through the same check
    line = _one_line(_edge_agent("-c", str(config), "inspect", "5e55"), CONFIG_ERROR)
    assert f"events[{turn}].text: must be text, got nothing (a UserTurn event)" in line


@pytest.mark.parametrize(("sql", "where"), [
    ("UPDATE events SET data = 'not json' WHERE type = 'UserTurn'", "its data is not a JSON dict"),
    ("UPDATE events SET data = '[1]' WHERE type = 'UserTurn'", "its data is not a JSON dict"),
    ("UPDATE units SET words = '{' WHERE unit_id = 'u1'", "unit 'u1': its words"),
    ("UPDATE sessions SET engines = 'x'", "its engines is not a JSON dict"),
], ids=["not-json", "not-object", "words", "engines"])
def test_stored_json_that_is_not_json_is_a_store_error(tmp_path: Path, sql: str,
                                                      where: str) -> None:
    config = write_config(tmp_path)
    db = tmp_path / "data" / "edge-agent.db"
    store_record(db, _record())
    _damage(db, sql)
    for command in (("sessions", "replay", "5e55"), ("sessions", "show", "5e55", "--json"),
                    ("inspect", "5e55")):
        line = _one_line(_edge_agent("-c", str(config), *command), STORE_ERROR)
        assert f"memory database {db}: " in line and where in line, line
        assert "sessions delete" in line


def test_kept_audio_that_cannot_be_drawn_is_named(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    db = tmp_path / "data" / "edge-agent.db"
    store_record(db, _record(), audio=True)
    _damage(db, "UPDATE audio SET sample_rate = 0 WHERE ref = 'c1'")
    line = _one_line(_edge_agent("-c", str(config), "inspect", "5e55"), STORE_ERROR)
    assert "kept audio row id" in line and "sample_rate is 0, not a rate in 1000..384000" in line
    _damage(db, "UPDATE audio SET sample_rate = 16000, at = 1e18 WHERE ref = 'c1'")
    line = _one_line(_edge_agent("-c", str(config), "inspect", "5e55"), CONFIG_ERROR)
    assert "kept audio caller c1.at: must be from" in line


def test_a_replay_longer_than_its_limit_is_refused_before_any_model_loads(
        tmp_path: Path) -> None:
    config = load_config(write_config(tmp_path))
    record = _record()
    assert replay_timeline(config, record).end < 10
    _event(record, "UserTurn").update(at=MAX_REPLAY_S + 100)
    with pytest.raises(ConfigError, match=r"session 5e55101d0000: events: spans 24\.\d+ hours "
                                          r"on the replay's timeline .* at most 24 hours"):
        replay_timeline(config, record)


# --------------------------------------------------------------------------- call files

def _call_file(tmp_path: Path, lines: int, say: str = "Hello there.") -> Path:
    call = tmp_path / "call.toml"
    call.write_text("".join(f'[[caller]]\nsay = "{say}"\nat = {i * 0.5}\n' for i in range(lines)),
                    encoding="utf-8")
    return call


def test_a_call_file_holds_a_bounded_number_of_lines(tmp_path: Path) -> None:
    call = _call_file(tmp_path, 20_000)
    line = _one_line(_edge_agent("-c", str(write_config(tmp_path)), "demo", "--call", str(call)),
                     CONFIG_ERROR)
    assert f"{call}: caller: 20000 [[caller]] lines; a call file holds at most " \
           f"{MAX_CALLER_LINES}" in line, line
    began = time.monotonic()
    loaded = load_call(_call_file(tmp_path, MAX_CALLER_LINES))
    assert len(loaded.lines) == MAX_CALLER_LINES
    assert time.monotonic() - began < 5.0  # parsing, not synthesis: milliseconds


def test_a_caller_line_holds_a_bounded_number_of_characters(tmp_path: Path) -> None:
    words = "word " * (MAX_SAY_CHARS // 5)
    assert len(load_call(_call_file(tmp_path, 1, words.strip())).lines[0].say) < MAX_SAY_CHARS
    call = _call_file(tmp_path, 2, words + "more")
    line = _one_line(_edge_agent("-c", str(write_config(tmp_path)), "demo", "--call", str(call)),
                     CONFIG_ERROR)
    assert f"{call}: caller[1].say: {MAX_SAY_CHARS + 4} characters; a caller line holds at " \
           f"most {MAX_SAY_CHARS}" in line, line


# --------------------------------------------------------------------------- bench arguments

@pytest.mark.parametrize(("argv", "path"), [
    (["bench", "--json", "mine.json", "engines"], "mine.json"),
    (["bench", "engines", "--json", "mine.json"], "mine.json"),
    (["bench", "--json", "first.json", "engines", "--json", "last.json"], "last.json"),
    (["bench", "engines"], "bench-engines.json"),
    (["bench", "--json", "mine.json"], "mine.json"),
    (["bench"], "bench.json"),
])
def test_bench_keeps_the_results_path_given_before_or_after_the_part(
        argv: list[str], path: str) -> None:
    assert results_path(_parser().parse_args(argv)) == Path(path)


def test_bench_checks_the_path_given_before_the_part_before_running(tmp_path: Path) -> None:
    blocked = tmp_path / "a-file"
    blocked.write_text("", encoding="utf-8")
    line = _one_line(_edge_agent("-c", str(write_config(tmp_path)), "bench", "--json",
                                 str(blocked / "out.json"), "engines"), OUTPUT_ERROR)
    assert f"cannot write {blocked / 'out.json'}" in line


@pytest.mark.parametrize(("engines", "reason"), [
    (",", "name at least one recognizer (known: moonshine, pocketsphinx, vosk), got ','"),
    (" , ,", "name at least one recognizer"),
    ("moonshine,whisper", "unknown recognizer 'whisper'"),
])
def test_bench_stt_engines_must_name_recognizers(tmp_path: Path, engines: str,
                                                 reason: str) -> None:
    result = _edge_agent("-c", str(write_config(tmp_path)), "bench", "stt", "--engines", engines)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert f"argument --engines: {reason}" in result.stderr.splitlines()[-1]
    args = _parser().parse_args(["bench", "stt", "--engines", "vosk, moonshine,vosk"])
    assert args.engines == ["vosk", "moonshine"]
