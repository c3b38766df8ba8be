"""Hostile inputs: every config key and call-file key with its invalid and suspicious values, code
named where it may not be, oversized and control-character input, unwritable outputs, a data
dir that cannot be used, two agents on one data dir.

Each bad input must end the command with its exit code and exactly one line on stderr naming
the file and the key (no traceback); each suspicious value must let the command run and say one
warning line naming the key. The commands run in-process (`edge_agent.cli.main`): an exception
escaping `main` fails the test just as a traceback would.
"""

from __future__ import annotations

import dataclasses
import json
import os
import stat
import subprocess
import sys
import typing
from pathlib import Path

import pytest

from edge_agent.cli import main
from edge_agent.config import Config
from edge_agent.config.file import _BOUNDS, _CHOICES, _TEXT, load_config
from edge_agent.console import CONSOLE_LINE_MAX, describe
from edge_agent.datadir import LOCK_NAME, data_dir_lock
from edge_agent.errors import AlreadyRunningError
from edge_agent.events import CallerSpoke, LoggedEvent
from tests.cli import edge_agent, write_config

CONFIG_ERROR = 2
OUTPUT_ERROR = 7
ALREADY_RUNNING = 9


def leaf_keys(cls: type = Config, prefix: str = "") -> dict[str, typing.Any]:
    """Every TOML key of the config with its type ("vad.threshold": float)."""
    hints = typing.get_type_hints(cls)
    keys: dict[str, typing.Any] = {}
    for f in dataclasses.fields(cls):
        if f.name == "source":
            continue
        if dataclasses.is_dataclass(hints[f.name]):
            keys |= leaf_keys(hints[f.name], f"{prefix}{f.name}.")
        else:
            keys[f"{prefix}{f.name}"] = hints[f.name]
    return keys


def toml_for(key: str, literal: str) -> str:
    section, _, name = key.rpartition(".")
    return f"[{section}]\n{name} = {literal}\n" if section else f"{name} = {literal}\n"


def _wrong_type(kind: typing.Any) -> str:
    if kind is str:
        return "5"
    if kind is bool:
        return '"yes"'
    if typing.get_origin(kind) is list:
        return '"book_table"'
    return '"many"'


def invalid_cases() -> list[tuple[str, str, str]]:
    """(key, TOML literal, a part of the reason) for every key: a wrong type for each, then the
    values each key's rules refuse."""
    cases = [(key, _wrong_type(kind), "must be") for key, kind in leaf_keys().items()]
    for key, bounds in _BOUNDS.items():
        kind, depth = leaf_keys()[key], 0
        while typing.get_origin(kind) is list:  # a list's items have the bounds
            (kind,), depth = typing.get_args(kind), depth + 1

        def literal(value: object, depth: int = depth) -> str:
            return "[" * depth + str(value) + "]" * depth

        step = 1 if kind is int else 0.5
        cases.append((key, literal(repr(bounds.low - step)), "must be between"))
        cases.append((key, literal(repr(bounds.high + step)), "must be between"))
        if bounds.open_low:
            cases.append((key, literal(repr(bounds.low)), bounds.why or "must be between"))
        if bounds.open_high:
            cases.append((key, literal(repr(bounds.high)), bounds.why or "must be between"))
        if kind is float:
            cases += [(key, literal("nan"), "finite"), (key, literal("inf"), "must be")]
    for key in _CHOICES:
        cases.append((key, '"nonsense"', "must be one of"))
    for key, rule in _TEXT.items():
        if rule.required:
            cases.append((key, '""', "must not be empty"))
            cases.append((key, '"   "', "must not be empty"))
    for key, kind in leaf_keys().items():
        if kind is str:
            cases.append((key, '"a\\u0000b"', "control character"))
            cases.append((key, '"\\u001b[2J"', "control character"))
    return cases


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[str], str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, [line for line in captured.err.splitlines() if line.strip()], captured.out


def _one_error_line(code: int, lines: list[str], expected: int) -> str:
    assert code == expected, lines
    assert len(lines) == 1, lines
    assert lines[0].startswith("edge-agent: error: "), lines
    assert len(lines[0]) < 2000
    return lines[0]


@pytest.mark.parametrize(("key", "literal", "reason"), invalid_cases(),
                         ids=lambda v: str(v)[:30])
def test_every_config_key_refuses_what_cannot_work(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], key: str, literal: str,
        reason: str) -> None:
    config = tmp_path / "bad.toml"
    config.write_text(toml_for(key, literal), encoding="utf-8")
    line = _one_error_line(*_run(capsys, "-c", str(config), "models", "list")[:2], CONFIG_ERROR)
    assert f"{config}: {key}" in line, line
    assert reason in line, line


def test_every_config_key_has_invalid_cases() -> None:
    covered = {key for key, _, _ in invalid_cases()}
    assert covered == set(leaf_keys())


def suspicious_cases() -> list[tuple[str, str]]:
    cases = []
    for key, bounds in _BOUNDS.items():
        if bounds.advised is None:
            continue
        low, high = bounds.advised
        integer = leaf_keys()[key] is int
        for value in (low - (1 if integer else 0.01), high + (1 if integer else 0.01)):
            if bounds.admits(value) and value != bounds.off:
                cases.append((key, repr(int(value) if integer else value)))
    cases.append(("turns.greeting", json.dumps("word " * 60)))
    cases.append(("llm.context_tokens", "300"))  # with max_tokens 120: 180 left for the prompt
    return cases


@pytest.mark.parametrize(("key", "literal"), suspicious_cases(), ids=lambda v: str(v)[:30])
def test_suspicious_values_run_with_one_warning(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], key: str, literal: str) -> None:
    config = write_config(tmp_path, toml_for(key, literal), name="odd.toml", data_dir=tmp_path)
    code, lines, _ = _run(capsys, "-c", str(config), "models", "list")
    assert code == 0, lines
    assert len(lines) == 1, lines
    assert lines[0].startswith("edge-agent: warning: ") and f": {key}: " in lines[0], lines


@pytest.mark.parametrize(("body", "key", "reason"), [
    ("[vad]\nthreshold = 1.0\n", "vad.threshold", "deaf"),
    ("[vad]\nthreshold = 0.0\n", "vad.threshold", "no turn ever ends"),
    ("[turns]\necho_coherence = 0.0\n", "turns.echo_coherence", "taken for echo"),
    ("[turns]\necho_min_match = 0.0\n", "turns.echo_min_match", "(0, 1]"),
    ('[tts]\nvoice = ""\n', "tts.voice", "must not be empty"),
    ('[vad]\nmodel = ""\n', "vad.model", "must not be empty"),
    ('[llm]\nmodel = ""\n', "llm.model", "must not be empty"),
    ('data_dir = ""\n', "data_dir", "must not be empty"),
    ("[llm]\ncontext_tokens = 256\nmax_tokens = 200\n", "llm.max_tokens", "for the prompt"),
    ('[turns]\ngreeting = "Hello\\u0000 there"\n', "turns.greeting", "control character"),
])
def test_probes_from_the_hostile_pass(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                      body: str, key: str, reason: str) -> None:
    config = tmp_path / "probe.toml"
    config.write_text(body, encoding="utf-8")
    line = _one_error_line(*_run(capsys, "-c", str(config), "demo")[:2], CONFIG_ERROR)
    assert f": {key}: " in line and reason in line, line


def test_deep_nesting_and_huge_keys_are_one_short_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    deep = tmp_path / "deep.toml"
    deep.write_text("x = " + "[" * 100_000 + "]" * 100_000 + "\n", encoding="utf-8")
    line = _one_error_line(*_run(capsys, "-c", str(deep), "demo")[:2], CONFIG_ERROR)
    assert "nested too deeply" in line
    huge = tmp_path / "huge.toml"
    huge.write_text(f'"{"k" * 1_000_000}" = 1\n', encoding="utf-8")
    line = _one_error_line(*_run(capsys, "-c", str(huge), "demo")[:2], CONFIG_ERROR)
    assert "unknown key" in line and "(1000000 characters)" in line
    assert len(line) < 1000


# --------------------------------------------------------------------------- call files

CALLER = '[[caller]]\nsay = "Hello there."\nat = 0.5\n'


def call_cases() -> list[tuple[str, str, str]]:
    """(call file, key, reason) for every call-file key."""
    cases = [
        ('[agent]\ngreeting = 5\n' + CALLER, "agent.greeting", "must be a string"),
        ('[agent]\ngreeting = "hi\\u001b[2J"\n' + CALLER, "agent.greeting", "control character"),
        ("[agent]\nreplies = 3\n" + CALLER, "agent.replies", "list of strings"),
        ('[agent]\ntools = "book_table"\n' + CALLER, "agent.tools", "must be a list"),
        ('[agent]\ntools = [""]\n' + CALLER, "agent.tools[0]", "must not be empty"),
        ('[agent]\ntools = ["os:remove"]\n' + CALLER, "agent.tools[0]", "call file may only pick"),
        ("[agent]\necho_gain = 2.0\n" + CALLER, "agent.echo_gain", "between 0 and 1"),
        ('[agent]\necho_gain = "loud"\n' + CALLER, "agent.echo_gain", "must be a number"),
        ("[agent]\necho_gain = nan\n" + CALLER, "agent.echo_gain", "finite"),
        ("room = 3\n" + CALLER, "room", "must be a table"),
        ("[room]\ndelay = 40\n" + CALLER, "room.delay", "unknown key"),
        ("[room]\necho_gain = 0.5\n" + CALLER, "room.echo_gain", "[agent] echo_gain"),
        ("[room]\ndelay_ms = 501\n" + CALLER, "room.delay_ms", "between 0 and 500"),
        ("[room]\ndelay_ms = -1\n" + CALLER, "room.delay_ms", "between 0 and 500"),
        ('[room]\ndelay_ms = "40 ms"\n' + CALLER, "room.delay_ms", "must be a number"),
        ("[room]\nreverb_ms = 1000.5\n" + CALLER, "room.reverb_ms", "between 0 and 1000"),
        ("[room]\nreverb_ms = nan\n" + CALLER, "room.reverb_ms", "finite"),
        ("[room]\nclip = 0\n" + CALLER, "room.clip", "leave clip out"),
        ("[room]\nclip = 1.5\n" + CALLER, "room.clip", "between 0 and 1"),
        ("[room]\nseed = -1\n" + CALLER, "room.seed", "between 0 and 4294967295"),
        ("[room]\nseed = 1.5\n" + CALLER, "room.seed", "must be an integer"),
        ('[[caller]]\nsay = 5\nat = 1.0\n', "caller[1].say", "must be a string"),
        ('[[caller]]\nsay = ""\nat = 1.0\n', "caller[1].say", "must not be empty"),
        ('[[caller]]\nsay = "a\\u0000b"\nat = 1.0\n', "caller[1].say", "control character"),
        ('[agent]\nreplies = ["fine\\u0000"]\n' + CALLER, "agent.replies[1]", "control character"),
        ('[agent]\nreplies = [{ say = "\\u001b[2J", tool = "book_table" }]\n' + CALLER,
         "agent.replies[1].say", "control character"),
    ]
    for key in ("at", "barge_in_after"):
        for literal, reason in (("-1.0", "between 0"), ("inf", "must be"), ("nan", "finite"),
                                ('"soon"', "must be a number"), ("100000", "between 0")):
            cases.append((f'[[caller]]\nsay = "hi"\n{key} = {literal}\n', f"caller[1].{key}",
                          reason))
    for literal, reason in (("-1.0", "between 0"), ("nan", "finite"), ('"x"', "a number")):
        cases.append((f'[[caller]]\nsay = "hi"\nafter_agent_done = true\npause = {literal}\n',
                      "caller[1].pause", reason))
    cases.append(('[[caller]]\nsay = "hi"\nat = 300\n', "caller[1].at", "never be said"))
    cases.append(('[[caller]]\nsay = "hi"\nafter_agent_done = 1\n',
                  "caller[1].after_agent_done", "must be true"))
    return cases


@pytest.mark.parametrize(("body", "key", "reason"), call_cases(), ids=lambda v: str(v)[:40])
def test_every_call_file_key_refuses_what_cannot_work(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], body: str, key: str,
        reason: str) -> None:
    config = write_config(tmp_path, name="good.toml")
    call = tmp_path / "call.toml"
    call.write_text(body, encoding="utf-8")
    code, lines, _ = _run(capsys, "-c", str(config), "demo", "--call", str(call))
    line = _one_error_line(code, lines, CONFIG_ERROR)
    assert f"{call}: {key}: " in line, line
    assert reason in line, line


def test_a_call_file_cannot_run_code_and_the_database_survives(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "data"
    data.mkdir()
    database = data / "edge-agent.db"
    database.write_bytes(b"bookings")
    config = write_config(tmp_path, name="good.toml", data_dir=data)
    for tool in ("os:remove", "shutil:rmtree", "builtins:exec", "book_table_but_not"):
        call = tmp_path / "call.toml"
        call.write_text(f'[agent]\ntools = ["{tool}"]\n' + CALLER, encoding="utf-8")
        code, lines, _ = _run(capsys, "-c", str(config), "demo", "--call", str(call))
        line = _one_error_line(code, lines, CONFIG_ERROR)
        assert "agent.tools[0]" in line and "enable code in the config" in line
        assert database.read_bytes() == b"bookings"


@pytest.mark.parametrize(("target", "reason"), [
    ("os:remove", "Python's own module 'os'"),
    ("os:system", "Python's own module 'os'"),
    ("shutil:rmtree", "Python's own module 'shutil'"),
    ("subprocess:call", "Python's own module 'subprocess'"),
    ("builtins:print", "Python's own module 'builtins'"),
    ("tests.test_hostile_inputs:REEXPORTED_REMOVE", "a built-in function from Python itself"),
    ("tests.test_hostile_inputs:REEXPORTED_RMTREE", "a function from Python itself"),
    ("tests.test_hostile_inputs:takes_two", "cannot be called with (PosixPath)"),
    ("tests.test_hostile_inputs:NOT_CALLABLE", "a str, not a tool factory"),
])
def test_config_code_must_be_a_factory_of_the_right_shape(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], target: str, reason: str) -> None:
    marker = tmp_path / "data" / "edge-agent.db"
    marker.parent.mkdir()
    marker.write_bytes(b"bookings")
    config = write_config(tmp_path, f'[tools]\nenabled = ["{target}"]\n', name="tools.toml",
                          data_dir=marker.parent)
    line = _one_error_line(*_run(capsys, "-c", str(config), "demo")[:2], CONFIG_ERROR)
    assert ": tools.enabled: " in line and reason in line, line
    assert marker.read_bytes() == b"bookings"


REEXPORTED_REMOVE = os.remove
import shutil  # noqa: E402 - re-exported below on purpose

REEXPORTED_RMTREE = shutil.rmtree
NOT_CALLABLE = "os.remove"


def takes_two(db_path: Path, other: str) -> None:
    raise AssertionError("never called: its shape is refused first")


def test_a_service_refuses_a_config_others_can_write(tmp_path: Path) -> None:
    config = write_config(tmp_path, name="shared.toml", data_dir=tmp_path)
    config.chmod(0o666)
    env = {"INVOCATION_ID": "0123456789abcdef"}
    result = edge_agent("models", "list", config=config, env=env, timeout=60)
    assert result.returncode == CONFIG_ERROR, result.stderr
    assert "Traceback" not in result.stderr
    assert "writable by others (mode 0666)" in result.stderr and "chmod go-w" in result.stderr
    config.chmod(0o644)
    result = edge_agent("models", "list", config=config, env=env, timeout=60)
    assert result.returncode == 0, result.stderr


# --------------------------------------------------------------------------- outputs, data dir


def test_unwritable_record_is_refused_before_the_session(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = write_config(tmp_path, name="good.toml")
    for command in ("run", "demo"):
        code, lines, out = _run(capsys, "-c", str(config), command, "--json",
                                "/proc/nope/s.json")
        line = _one_error_line(code, lines, OUTPUT_ERROR)
        assert "/proc/nope/s.json" in line
        assert "loading models" not in out  # refused before anything started
    blocker = tmp_path / "a-file"
    blocker.write_text("x", encoding="utf-8")
    code, lines, _ = _run(capsys, "-c", str(config), "demo", "--audio-dir", str(blocker / "d"))
    _one_error_line(code, lines, OUTPUT_ERROR)


@pytest.mark.parametrize("duration", ["-5", "nan", "0", "inf", "soon"])
def test_run_duration_must_be_seconds(capsys: pytest.CaptureFixture[str], duration: str) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["run", "--duration", duration])
    assert exited.value.code == CONFIG_ERROR
    assert "--duration" in capsys.readouterr().err


def test_a_data_dir_that_is_a_file_is_refused_at_start(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    not_a_dir = tmp_path / "data"
    not_a_dir.write_text("oops", encoding="utf-8")
    config = write_config(tmp_path, name="c.toml", data_dir=not_a_dir)
    for argv in (("run", "--duration", "1"), ("models", "fetch", "vosk-small-en-us")):
        line = _one_error_line(*_run(capsys, "-c", str(config), *argv)[:2], CONFIG_ERROR)
        assert ": data_dir: " in line and "is a file, not a directory" in line
    assert not_a_dir.read_text(encoding="utf-8") == "oops"


def test_a_read_only_data_dir_is_refused_at_start(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    if os.geteuid() == 0:
        pytest.skip("root writes into read-only directories")
    data = tmp_path / "data"
    data.mkdir()
    data.chmod(stat.S_IRUSR | stat.S_IXUSR)
    config = write_config(tmp_path, name="c.toml", data_dir=data)
    line = _one_error_line(*_run(capsys, "-c", str(config), "run", "--duration", "1")[:2],
                           CONFIG_ERROR)
    assert "not writable" in line


def test_a_data_dir_that_cannot_be_created_is_refused_at_start(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Runs as root too (root may write into read-only directories, not into /proc)."""
    config = tmp_path / "c.toml"
    config.write_text('data_dir = "/proc/edge-agent-data"\n', encoding="utf-8")
    line = _one_error_line(*_run(capsys, "-c", str(config), "run", "--duration", "1")[:2],
                           CONFIG_ERROR)
    assert ": data_dir: " in line and "cannot create /proc/edge-agent-data" in line


def test_a_second_live_agent_on_the_same_data_dir_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = write_config(tmp_path, name="c.toml")
    with data_dir_lock(load_config(config)):
        line = _one_error_line(*_run(capsys, "-c", str(config), "run", "--duration", "1")[:2],
                               ALREADY_RUNNING)
        assert f"another edge-agent (pid {os.getpid()})" in line
        with pytest.raises(AlreadyRunningError), data_dir_lock(load_config(config)):
            pass
    with data_dir_lock(load_config(config)):  # released with its holder
        pass


def test_a_killed_holder_leaves_no_stale_lock(tmp_path: Path) -> None:
    config = write_config(tmp_path, name="c.toml")
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys\nfrom edge_agent.config.file import load_config\n"
         "from edge_agent.datadir import data_dir_lock\n"
         f"with data_dir_lock(load_config(__import__('pathlib').Path({str(config)!r}))):\n"
         "    print('held', flush=True)\n    sys.stdin.read()\n"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    with pytest.raises(AlreadyRunningError, match=f"pid {holder.pid}"), \
            data_dir_lock(load_config(config)):
        pass
    holder.kill()
    holder.wait()
    with data_dir_lock(load_config(config)):
        assert (tmp_path / "data" / LOCK_NAME).read_text().strip() == str(os.getpid())


# --------------------------------------------------------------------------- the console


def test_the_console_shows_control_characters_escaped() -> None:
    line = describe(LoggedEvent(1.0, CallerSpoke("hi\x1b[2J\x07 there\x00")))
    assert line is not None
    assert "\x1b" not in line and "\x07" not in line and "\x00" not in line
    assert "hi\\x1b[2J\\x07 there\\x00" in line


def test_a_console_line_is_bounded_however_long_the_text() -> None:
    line = describe(LoggedEvent(1.0, CallerSpoke("word " * 1_000_000)))
    assert line is not None and len(line) < CONSOLE_LINE_MAX + 40
    assert line.endswith("characters)")


@pytest.mark.models
async def test_a_call_cut_by_its_time_limit_says_which_lines_were_never_said(
        tmp_path: Path) -> None:
    from edge_agent.demo.callfile import parse_call
    from edge_agent.runner import run_demo

    call = parse_call('[agent]\ngreeting = ""\nreplies = []\n'
                      '[[caller]]\nsay = "Hello there."\nat = 0.2\n'
                      '[[caller]]\nsay = "Are you there?"\nafter_agent_done = true\n', "call.toml")
    printed: list[str] = []
    await run_demo(Config(data_dir=str(tmp_path)), call, printer=printed.append, max_seconds=5.0)
    notes = [line for line in printed if "never said" in line]
    assert len(notes) == 1 and "1 caller line(s)" in notes[0] and "Are you there?" in notes[0]


def test_a_private_log_shows_how_much_was_said_not_what() -> None:
    from edge_agent.events import UserTurn

    entry = LoggedEvent(2.0, UserTurn("my phone is 555 0199", ()))
    private = describe(entry, transcripts=False)
    assert private is not None and "555" not in private and "(5 words)" in private
    assert "555 0199" in (describe(entry) or "")
