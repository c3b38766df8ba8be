"""Audio start-up failures caused by a broken ALSA configuration: `edge-agent run` reports one
line (exit 5, AudioDeviceError) that quotes ALSA and says what to fix, with no traceback and no
crash, even where PortAudio itself aborts the process that initialises it.

The broken configurations are set through the environment of the subprocess only (ALSA_CONFIG_PATH,
HOME), so the machine's own audio setup is untouched. They fail while PortAudio initialises,
before any device is opened, so neither a sound card nor PulseAudio is needed.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from edge_agent.audio import portaudio_start, pyaudio_io
from edge_agent.audio.portaudio_start import (
    SYSTEM_ALSA_CONF,
    alsa_config_hint,
    native_summary,
    open_pyaudio,
)
from edge_agent.audio.pyaudio_io import find_device
from edge_agent.errors import AudioDeviceError
from edge_agent.machine import child_probe
from tests.cli import command
from tests.test_run_pulseaudio import write_scripted_config

REPO = Path(__file__).resolve().parent.parent
AUDIO_DEVICE_ERROR = 5  # AudioDeviceError.exit_code

GARBAGE = "this is { not an ALSA configuration @@@ ]]\n"


def _allow_core_dumps() -> None:
    """In the agent's process (inherited by its probe child): core dumps on, as far as the hard
    limit allows, so a probe that failed to turn them off would leave a core file behind."""
    _soft, hard = resource.getrlimit(resource.RLIMIT_CORE)
    resource.setrlimit(resource.RLIMIT_CORE, (hard, hard))


def _run(tmp_path: Path, **env_changes: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "EDGE_AGENT_CONFIG"}
    env["JACK_NO_START_SERVER"] = "1"
    # This checkout first, so `-m edge_agent` runs it and not an installed copy.
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    for key, value in env_changes.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    work = tmp_path / "cwd"  # where a core file would be written
    work.mkdir()
    return subprocess.run(
        command("run", "--duration", "1", config=write_scripted_config(tmp_path)),
        env=env, cwd=work, capture_output=True, text=True, timeout=120, check=False,
        preexec_fn=_allow_core_dumps)


def _one_alsa_error(done: subprocess.CompletedProcess[str]) -> str:
    report = f"exit {done.returncode}\nstdout: {done.stdout}\nstderr: {done.stderr}"
    assert done.returncode >= 0, f"killed by signal {-done.returncode}\n{report}"
    assert done.returncode == AUDIO_DEVICE_ERROR, report
    assert "Traceback" not in done.stderr, report
    # ALSA's own chatter is captured, not printed: stderr is our one line and nothing else.
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, report
    assert lines[0].startswith("edge-agent: error: "), report
    assert "ALSA" in lines[0], report
    return lines[0]


def test_garbage_alsa_config_is_one_clear_error(tmp_path: Path) -> None:
    broken = tmp_path / "alsa.conf"
    broken.write_text(GARBAGE, encoding="utf-8")
    line = _one_alsa_error(_run(tmp_path, ALSA_CONFIG_PATH=str(broken)))
    assert "failed to initialise" in line
    assert f"{broken} may be old or corrupted" in line  # ALSA's own words, naming the file
    assert f"ALSA_CONFIG_PATH is set to '{broken}'" in line  # and how to fix it


@pytest.mark.parametrize("kind", ["missing", "empty"])
def test_alsa_config_that_makes_portaudio_abort_is_one_clear_error(tmp_path: Path,
                                                                   kind: str) -> None:
    """PortAudio asserts (SIGABRT) on these in BuildDeviceList; the probe child takes the crash."""
    path = tmp_path / "alsa.conf"
    if kind == "missing":
        path = tmp_path / "nonexistent" / "alsa.conf"
    else:
        path.write_text("", encoding="utf-8")
    line = _one_alsa_error(_run(tmp_path, ALSA_CONFIG_PATH=str(path)))
    assert "crashed with SIGABRT (aborted)" in line
    assert f"ALSA_CONFIG_PATH is set to '{path}'" in line
    if kind == "missing":
        assert f"Cannot access file {path}" in line  # ALSA's message, no longer discarded
    assert not list((tmp_path / "cwd").iterdir())  # the probe's abort left no core file


@pytest.mark.skipif(not SYSTEM_ALSA_CONF.is_file(), reason=f"{SYSTEM_ALSA_CONF} is not installed")
def test_asoundrc_syntax_error_is_one_clear_error(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / ".asoundrc").write_text(GARBAGE, encoding="utf-8")
    line = _one_alsa_error(_run(tmp_path, HOME=str(home), ALSA_CONFIG_PATH=None,
                                XDG_CONFIG_HOME=None))
    assert f"{home / '.asoundrc'} may be old or corrupted" in line
    assert f"check {home / '.asoundrc'}" in line


# --- native_summary -------------------------------------------------------------------------

GARBAGE_STDERR = """\
ALSA lib conf.c:2007:(_snd_config_load_with_include) _toplevel_:1:11:Unexpected char
ALSA lib conf.c:4615:(snd_config_update_r) /x/alsa.conf may be old or corrupted: consider to remove or fix it
Expression 'alsa_snd_config_update()' failed in 'src/hostapi/alsa/pa_linux_alsa.c', line: 1354
Expression 'BuildDeviceList( alsaHostApi )' failed in 'src/hostapi/alsa/pa_linux_alsa.c', line: 767
"""


def test_summary_keeps_alsa_lines_over_portaudio_trace() -> None:
    assert native_summary(GARBAGE_STDERR) == (
        "ALSA lib conf.c:2007:(_snd_config_load_with_include) _toplevel_:1:11:Unexpected char | "
        "ALSA lib conf.c:4615:(snd_config_update_r) /x/alsa.conf may be old or corrupted: "
        "consider to remove or fix it")


def test_summary_keeps_a_repeated_line_once_and_the_assertion() -> None:
    missing = "ALSA lib conf.c:4555:(snd_config_update_r) Cannot access file /nope\n"
    text = missing * 7 + ("python3: src/hostapi/alsa/pa_linux_alsa.c:1454: BuildDeviceList: "
                          "Assertion `devIdx < numDeviceNames' failed.\n")
    summary = native_summary(text)
    assert summary.count("Cannot access file /nope") == 1
    assert summary.endswith("Assertion `devIdx < numDeviceNames' failed.")


def test_summary_drops_jack_noise_and_falls_back_to_other_lines() -> None:
    text = ("Cannot connect to server socket err = No such file or directory\n"
            "jack server is not running or cannot be started\n"
            "JackShmReadWritePtr::~JackShmReadWritePtr - Init not done for -1, skipping unlock\n"
            "\n"
            "Expression 'x' failed in 'pa.c', line: 1\n")
    assert native_summary(text) == "Expression 'x' failed in 'pa.c', line: 1"


def test_summary_keeps_the_last_lines_and_shortens_long_ones() -> None:
    text = "".join(f"ALSA lib n{i}\n" for i in range(10)) + "ALSA lib " + "x" * 1000 + "\n"
    parts = native_summary(text, lines=3).split(" | ")
    assert parts[:2] == ["ALSA lib n8", "ALSA lib n9"]
    assert parts[2].endswith("...") and len(parts[2]) < 300


def test_summary_of_nothing_is_empty() -> None:
    assert native_summary("") == ""
    assert native_summary("\n  \n") == ""


# --- alsa_config_hint -----------------------------------------------------------------------

def test_hint_names_alsa_config_path_when_set(tmp_path: Path) -> None:
    hint = alsa_config_hint({"ALSA_CONFIG_PATH": "/x/alsa.conf"}, tmp_path / "alsa.conf")
    assert "ALSA_CONFIG_PATH is set to '/x/alsa.conf'" in hint and "unset it" in hint


def test_hint_says_to_reinstall_a_missing_system_config(tmp_path: Path) -> None:
    hint = alsa_config_hint({"HOME": str(tmp_path)}, tmp_path / "missing.conf")
    assert f"{tmp_path / 'missing.conf'} is missing" in hint and "libasound2-data" in hint


def test_hint_points_at_the_users_asoundrc(tmp_path: Path) -> None:
    system = tmp_path / "alsa.conf"
    system.write_text("", encoding="utf-8")
    (tmp_path / ".asoundrc").write_text("", encoding="utf-8")
    hint = alsa_config_hint({"HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / "cfg")},
                            system)
    assert f"check {tmp_path / '.asoundrc'}" in hint
    (tmp_path / ".asoundrc").unlink()
    hint = alsa_config_hint({"HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / "cfg")},
                            system)
    assert "~/.asoundrc" in hint  # nothing of the user's: the generic list


# --- native stderr capture, the probe child, error mapping ------------------------------------

def test_native_stderr_is_captured_and_fd2_restored(capfd: pytest.CaptureFixture[str]) -> None:
    with portaudio_start.native_stderr() as native:
        os.write(2, b"ALSA lib probe noise\n")
    os.write(2, b"after\n")
    assert native.text == "ALSA lib probe noise\n"
    err = capfd.readouterr().err
    assert "probe noise" not in err and "after" in err


class _RecordingPopen(subprocess.Popen[bytes]):
    started: ClassVar[list[subprocess.Popen[bytes]]] = []

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _RecordingPopen.started.append(self)


@pytest.fixture
def probes(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[subprocess.Popen[bytes]]]:
    _RecordingPopen.started = []
    monkeypatch.setattr(child_probe.subprocess, "Popen", _RecordingPopen)
    yield _RecordingPopen.started


def test_probe_reports_a_crashing_child(monkeypatch: pytest.MonkeyPatch,
                                        probes: list[subprocess.Popen[bytes]]) -> None:
    monkeypatch.setattr(portaudio_start, "_PROBE",
                        "import os\nos.write(2, b'ALSA lib it broke\\n')\nos.abort()\n")
    monkeypatch.setenv("ALSA_CONFIG_PATH", "/x/alsa.conf")
    with pytest.raises(AudioDeviceError) as caught:
        portaudio_start._probe_portaudio()
    message = str(caught.value)
    assert "crashed with SIGABRT (aborted)" in message and "ALSA lib it broke" in message
    assert "ALSA_CONFIG_PATH is set to '/x/alsa.conf'" in message
    assert len(probes) == 1 and probes[0].returncode is not None  # reaped: no zombie


def test_probe_kills_and_reaps_a_hung_child(monkeypatch: pytest.MonkeyPatch,
                                            probes: list[subprocess.Popen[bytes]]) -> None:
    # The child stands in for an initialisation that never returns; it is killed at the timeout.
    monkeypatch.setattr(portaudio_start, "_PROBE", "import threading\nthreading.Event().wait()\n")
    with pytest.raises(AudioDeviceError, match="did not finish initialising ALSA within"):
        portaudio_start._probe_portaudio(timeout=0.5)
    assert len(probes) == 1 and probes[0].returncode is not None


def test_probe_leaves_a_clean_failure_to_the_in_process_start(
        monkeypatch: pytest.MonkeyPatch, probes: list[subprocess.Popen[bytes]]) -> None:
    monkeypatch.setattr(portaudio_start, "_PROBE", "raise SystemExit(1)\n")
    portaudio_start._probe_portaudio()  # no error: PyAudio() in-process reports it with its message
    assert probes[0].returncode == 1


def _fake_pyaudio(monkeypatch: pytest.MonkeyPatch, error: Exception) -> None:
    def failing() -> None:
        os.write(2, b"ALSA lib conf.c:1:(x) it is broken\n")
        raise error

    monkeypatch.setitem(sys.modules, "pyaudio", types.SimpleNamespace(PyAudio=failing))


@pytest.mark.parametrize("error", [OSError(-9999, "Unanticipated host error"),
                                   ValueError("bad")])
def test_initialisation_error_becomes_audio_device_error(
        monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str],
        error: Exception) -> None:
    _fake_pyaudio(monkeypatch, error)
    monkeypatch.delenv("ALSA_CONFIG_PATH", raising=False)
    with pytest.raises(AudioDeviceError) as caught:
        open_pyaudio(probe=False)
    message = str(caught.value)
    assert str(error) in message and "it is broken" in message and "Fix: " in message
    assert "it is broken" not in capfd.readouterr().err


class _BrokenPa:
    def get_device_count(self) -> int:
        raise OSError(-9999, "Unanticipated host error")


def test_enumeration_error_becomes_audio_device_error() -> None:
    with pytest.raises(AudioDeviceError, match="cannot list audio input devices"):
        find_device(_BrokenPa(), "", output=False)


class _RefusingPa:
    def open(self, **kwargs: Any) -> None:
        os.write(2, b"ALSA lib pcm.c:1:(open) Device or resource busy\n")
        raise OSError(-9985, "Device unavailable")


def test_stream_open_error_quotes_alsa(capfd: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(AudioDeviceError) as caught:
        pyaudio_io.open_stream(_RefusingPa(), 3, "output", output=True)
    message = str(caught.value)
    assert message.startswith("cannot open audio output device 3: [Errno -9985] Device unavailable")
    assert "Device or resource busy" in message and "audio.output_device" in message
    assert "busy" not in capfd.readouterr().err
