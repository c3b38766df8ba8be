"""`edge-agent doctor`: on the private PulseAudio server's virtual devices (every audio line ok,
the tone reaches the speaker, the microphone's level is measured), with no sound server and with
a broken ALSA configuration (FAIL lines with a fix, exit 1), on the real models, on damaged and
healthy memory databases, and its isolation (a check that raises or hangs is a FAIL line; the
others still run).

Audio runs in a subprocess: PortAudio reads ALSA's configuration from the environment once per
process, so each environment gets its own. The doctor subcommand is built there the way `cli`
builds it (`add_parser`, then `run`, an EdgeAgentError becoming the exit status). In-process
tests replace the audio and model groups with stubs to stay fast and off the sound system.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import pytest

from edge_agent.audio.device import MIC_RATE
from edge_agent.audio.pcm import write_wav
from edge_agent.bench import pulse_rig as pulse
from edge_agent.bench.postgres_rig import PASSWORD, LocalPostgres
from edge_agent.cli import doctor as cli_doctor
from edge_agent.config import Config, ModelUse
from edge_agent.doctor import checks as doctor_checks
from edge_agent.doctor import report
from edge_agent.doctor import run as doctor
from edge_agent.doctor.report import CheckRecord, Context, Emit, Group, check
from edge_agent.errors import EdgeAgentError
from edge_agent.memory.schema import SCHEMA_VERSION
from edge_agent.memory.store import MemoryStore
from edge_agent.models.catalog import load_catalog
from tests.cli import write_config
from tests.llama_server import free_port
from tests.sse_server import ScriptedChatServer, http_error, piece, sse
from tests.test_knowledge_lookup import _venue as _knowledge_venue

REPO = Path(__file__).resolve().parent.parent
AUDIO_LINES = ("portaudio", "audio devices", "audio output", "audio input", "audio threads")
GARBAGE_ALSA = "this is { not an ALSA configuration @@@ ]]\n"

_DOCTOR = """\
import argparse, sys
from pathlib import Path
from edge_agent.cli import doctor as cli_doctor
from edge_agent.config.file import load_config
from edge_agent.errors import EdgeAgentError
parser = argparse.ArgumentParser(prog="edge-agent")
parser.add_argument("-c", "--config", type=Path)
cli_doctor.add_parser(parser.add_subparsers(dest="command", required=True))
args = parser.parse_args()
try:
    sys.exit(cli_doctor.run(load_config(args.config), args))
except EdgeAgentError as exc:
    print(f"edge-agent: error: {exc}", file=sys.stderr)
    sys.exit(exc.exit_code)
"""
"""`edge-agent doctor` as cli.py runs it, until cli.py names the subcommand."""


def _doctor(config: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in env.items() if k != "EDGE_AGENT_CONFIG"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    env["JACK_NO_START_SERVER"] = "1"
    return subprocess.run([sys.executable, "-c", _DOCTOR, "-c", str(config), "doctor", *args],
                          env=env, capture_output=True, text=True, timeout=120, check=False,
                          cwd=config.parent)


def _lines(stdout: str) -> dict[str, str]:
    """Check name -> its whole line."""
    names = [*AUDIO_LINES, "config", "data dir", "cpu", "ram", "disk", "memory db",
             "echo cancel", "llm server", "venue store", "knowledge", "model vad", "model stt",
             "model tts",
             "model llm", "model turn"]
    found = {}
    for line in stdout.splitlines():
        for name in names:
            if line[6:6 + 15].rstrip() == name:
                found[name] = line
    return found


def _write_config(tmp_path: Path, models: bool = True) -> Path:
    """A config on a private data dir. models=False: every model is a missing path, so the
    model checks fail at once (the audio tests need no model loaded)."""
    text = ""
    if not models:
        gone = tmp_path / "no-such-model"
        text = (f"[vad]\nmodel = {json.dumps(str(gone / 'vad.onnx'))}\n"
                f"end_model = {json.dumps(str(gone / 'turn.onnx'))}\n"
                f"[stt]\nengine = \"moonshine\"\nmoonshine_model = {json.dumps(str(gone / 'stt'))}\n"
                f"[tts]\nvoice = {json.dumps(str(gone / 'voice.onnx'))}\n"
                f"[llm]\nmodel = {json.dumps(str(gone / 'llm.gguf'))}\n")
    return write_config(tmp_path, text)


def _report(stdout: str, stderr: str, code: int, server: pulse.PulseServer | None = None) -> str:
    """What the doctor said, and the sound server's own log where it ran on one (a server
    that dropped the doctor's connection says why there)."""
    said = f"exit {code}\nstdout:\n{stdout}\nstderr:\n{stderr[-3000:]}"
    return said + (f"\nPulseAudio's log:\n{server.log[-3000:]}" if server is not None else "")


# -- audio, end to end -----------------------------------------------------------------------



def _dominant_hz(pcm: bytes, rate: int) -> float:
    samples = np.frombuffer(pcm, dtype=np.int16).astype(np.float64)
    spectrum = np.abs(np.fft.rfft(samples))
    return float(np.argmax(spectrum[1:]) + 1) * rate / len(samples)


@pytest.mark.audio
@pytest.mark.models
def test_doctor_passes_on_the_virtual_devices(pulse_audio: pulse.PulseServer,
                                              tmp_path: Path) -> None:
    config = _write_config(tmp_path)
    # The virtual microphone hears a 1 kHz tone at about -33 dBFS RMS for as long as the doctor
    # runs (a silent one is digital silence: a warning, tested below).
    rate = MIC_RATE
    t = np.arange(20 * rate) / rate
    feed = np.round(np.sin(2 * np.pi * 1000 * t) * 0.03 * 32767).astype(np.int16).tobytes()
    write_wav(tmp_path / "feed.wav", feed, rate)
    player = pulse_audio.play(tmp_path / "feed.wav", "micsink")
    try:
        assert pulse_audio.wait_for_stream("sink-inputs", "micsink", exclude_apps=()), \
            "paplay never connected to micsink"
        with pulse_audio.recording(tmp_path / "speaker.raw", rate=pulse.SPEAKER_RATE) as raw:
            done = _doctor(config, pulse_audio.env, "--quick", "--json",
                           str(tmp_path / "doctor.json"))
    finally:
        pulse.stop(player)
    report = _report(done.stdout, done.stderr, done.returncode, pulse_audio)
    assert done.returncode == 0, report
    assert "Traceback" not in done.stderr, report
    lines = _lines(done.stdout)
    for name in AUDIO_LINES[:-1]:
        assert lines[name].startswith("ok    "), report
    # The input's callback thread asked for real-time scheduling as the agent's do: root
    # (CAP_SYS_NICE) gets it; a user without an rtprio limit is told how to allow it.
    if os.getuid() == 0:
        assert lines["audio threads"].startswith(
            "ok    audio threads  callback threads at real-time (SCHED_FIFO 10)"), report
    else:
        assert lines["audio threads"].startswith("warn  "), report
        assert "Fix: allow it with the unit's LimitRTPRIO=" in lines["audio threads"], report
    assert "played a 0.3 s 440 Hz tone" in lines["audio output"], report
    level = float(lines["audio input"].split("level ")[1].split(" dBFS")[0])
    assert -40 < level < -27, report  # the feed's -33 dBFS, through the virtual devices

    # The tone reached the speaker: the monitor recorded a 440 Hz burst.
    recorded = raw.read_bytes()
    loud = np.flatnonzero(np.abs(np.frombuffer(recorded, dtype=np.int16)) > 1000)
    assert len(loud), "nothing was played on the speaker"
    burst = recorded[2 * loud[0]:2 * loud[-1]]
    assert abs(_dominant_hz(burst, pulse.SPEAKER_RATE) - 440) < 10

    record = json.loads((tmp_path / "doctor.json").read_text(encoding="utf-8"))
    assert set(record) == {"checks", "ok", "machine"} and record["ok"] is True
    assert all(set(c) == {"name", "status", "detail", "fix"} for c in record["checks"])
    assert all(c["status"] in ("ok", "warn") for c in record["checks"])
    assert [c["name"] for c in record["checks"]][-5:] == [
        "model vad", "model stt", "model tts", "model llm", "model turn"]
    machine = record["machine"]
    assert machine["cpu_cores"] >= 1 and machine["mem_available_bytes"] > 0
    assert machine["disk_free_bytes"] > 0 and len(machine["load_average"]) == 3


@pytest.mark.audio
def test_a_silent_microphone_is_a_warning_not_a_failure(pulse_audio: pulse.PulseServer,
                                                        tmp_path: Path) -> None:
    """Nothing feeds the virtual microphone: every sample is 0, as from a muted mic."""
    done = _doctor(_write_config(tmp_path, models=False), pulse_audio.env)
    report = _report(done.stdout, done.stderr, done.returncode, pulse_audio)
    lines = _lines(done.stdout)
    assert lines["audio input"].startswith("warn  "), report
    assert "digital silence" in lines["audio input"] and "Fix: unmute it" in lines["audio input"]
    assert lines["audio output"].startswith("ok    "), report
    assert done.returncode == 1, report  # the missing models fail; the silent mic does not
    # Each model's line is about its own file (the end-of-turn check once failed on the VAD's
    # and offered to reinstall the end-of-turn model's wheel).
    assert "turn.onnx' is missing" in lines["model turn"] and "vad" not in lines["model turn"]
    assert "audio input" not in done.stderr, report


def _has_sound_card() -> bool:
    cards = Path("/proc/asound/cards")
    return cards.exists() and "no soundcards" not in cards.read_text()


@pytest.mark.skipif(_has_sound_card(), reason="this machine has an ALSA sound card")
def test_without_a_sound_server_the_audio_checks_fail_with_a_fix(tmp_path: Path) -> None:
    env = pulse.unreachable_env(tmp_path / "nopulse")
    done = _doctor(_write_config(tmp_path, models=False), env)
    report = _report(done.stdout, done.stderr, done.returncode)
    assert done.returncode == 1, report
    assert "Traceback" not in done.stderr, report
    lines = _lines(done.stdout)
    assert lines["portaudio"].startswith("ok    "), report  # PortAudio starts; nothing is there
    assert lines["audio input"] == (
        "FAIL  audio input    no input device found. Fix: connect a microphone or start "
        "PulseAudio/PipeWire; check arecord -l"), report
    assert lines["audio output"].startswith("FAIL  audio output   no output device found. "
                                            "Fix: "), report
    assert lines["config"].startswith("ok    ") and lines["memory db"].startswith("ok    "), report
    error = done.stderr.strip().splitlines()[-1]
    assert error.startswith("edge-agent: error: doctor: ") and "audio input" in error, report


def test_a_broken_alsa_configuration_fails_portaudio_with_alsas_words(tmp_path: Path) -> None:
    broken = tmp_path / "alsa.conf"
    broken.write_text(GARBAGE_ALSA, encoding="utf-8")
    env = {**os.environ, "ALSA_CONFIG_PATH": str(broken)}
    done = _doctor(_write_config(tmp_path, models=False), env)
    report = _report(done.stdout, done.stderr, done.returncode)
    assert done.returncode == 1, report
    assert "Traceback" not in done.stderr, report
    lines = _lines(done.stdout)
    assert lines["portaudio"].startswith("FAIL  portaudio      cannot start audio"), report
    assert f"{broken} may be old or corrupted" in lines["portaudio"], report  # ALSA's words
    assert f"Fix: ALSA_CONFIG_PATH is set to '{broken}'" in lines["portaudio"], report
    for name in AUDIO_LINES[1:]:
        assert "not tested: PortAudio did not start" in lines[name], report
    assert lines["memory db"].startswith("ok    "), report  # the other checks still ran


# -- in process, with the audio and model groups stubbed --------------------------------------

def _stub(monkeypatch: pytest.MonkeyPatch, group: str, names: str) -> None:
    """Replace a group of `doctor_checks` with one ok line named `group`."""
    monkeypatch.setattr(doctor_checks, names, lambda _context: (group,))
    monkeypatch.setattr(doctor_checks, group,
                        lambda _context, emit: emit(check(group, "ok", "stubbed")))


@pytest.fixture
def no_audio_or_models(monkeypatch: pytest.MonkeyPatch) -> None:
    _stub(monkeypatch, "audio", "audio_names")
    _stub(monkeypatch, "models", "model_names")


def _args(**given: Any) -> argparse.Namespace:
    return argparse.Namespace(**{"json": None, "quick": True, "config": None, **given})


def _run(config: Config | None, args: argparse.Namespace) -> int:
    try:
        return cli_doctor.run(config, args)
    except EdgeAgentError as exc:
        assert exc.exit_code == 1
        return exc.exit_code


def test_a_damaged_database_fails_its_check_with_a_fix_and_is_left_alone(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], no_audio_or_models: None) -> None:
    data = tmp_path / "data"
    data.mkdir()
    garbage = b"this is not a database\n" * 100
    (data / "edge-agent.db").write_bytes(garbage)
    config = Config(data_dir=str(data))
    assert _run(config, _args(json=str(tmp_path / "out.json"))) == 1
    line = _lines(capsys.readouterr().out)["memory db"]
    assert line.startswith(f"FAIL  memory db      {data / 'edge-agent.db'}: it is not a "
                           "SQLite database or it is damaged (file is not a database). Fix: it "
                           "was left untouched: move it away")
    assert (data / "edge-agent.db").read_bytes() == garbage
    assert sorted(p.name for p in data.iterdir()) == ["edge-agent.db"]
    record = json.loads((tmp_path / "out.json").read_text(encoding="utf-8"))
    [db] = [c for c in record["checks"] if c["name"] == "memory db"]
    assert db["status"] == "FAIL" and "move it away" in db["fix"] and record["ok"] is False


def test_a_healthy_database_is_read_without_writing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], no_audio_or_models: None) -> None:
    data = tmp_path / "data"
    MemoryStore.open(data / "edge-agent.db").close()
    before = {p.name: p.stat().st_mtime_ns for p in data.iterdir()}
    assert _run(Config(data_dir=str(data)), _args(json="-", quick=False)) == 0
    out = capsys.readouterr()
    record = json.loads(out.out)  # --json -: stdout is the record alone, the lines on stderr
    assert record["ok"] is True
    line = _lines(out.err)["memory db"]
    assert f"integrity_check ok, schema {SCHEMA_VERSION}" in line and "0 sessions" in line
    assert {p.name: p.stat().st_mtime_ns for p in data.iterdir()} == before


def test_a_newer_database_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                no_audio_or_models: None) -> None:
    data = tmp_path / "data"
    data.mkdir()
    with sqlite3.connect(data / "edge-agent.db") as connection:
        connection.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    connection.close()
    assert _run(Config(data_dir=str(data)), _args()) == 1
    line = _lines(capsys.readouterr().out)["memory db"]
    assert "written by a newer edge-agent" in line and "Fix: upgrade edge-agent" in line


def _symlinked_database(data: Path) -> None:
    target = data.parent / "elsewhere.db"
    MemoryStore.open(target).close()
    (data / "edge-agent.db").symlink_to(target)


def _dropped_table(data: Path) -> None:
    MemoryStore.open(data / "edge-agent.db").close()
    with sqlite3.connect(data / "edge-agent.db") as connection:
        connection.execute("DROP TABLE turns")
    connection.close()


@pytest.mark.parametrize(("make", "failing", "said"), [
    (_symlinked_database, "data dir", "edge-agent.db is a symbolic link, where edge-agent keeps"),
    (_symlinked_database, "memory db", "it is a symbolic link, not a database file"),
    (lambda data: (data / "edge-agent.lock").mkdir(), "data dir", "edge-agent.lock is a directory"),
    (lambda data: (data / "edge-agent.db.writer").symlink_to("/etc/hostname"), "data dir",
     "edge-agent.db.writer is a symbolic link"),
    (_dropped_table, "memory db", "its table(s) turns are missing"),
])
def test_the_doctor_fails_what_run_refuses(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], no_audio_or_models: None,
        make: Any, failing: str, said: str) -> None:
    """`doctor --quick` asks the same functions `run` asks (`check_data_dir`, the database
    checks of `memory.database_file`): it says "ok" only for what `run` accepts."""
    from edge_agent.datadir import data_dir_lock

    data = tmp_path / "data"
    data.mkdir()
    make(data)
    config = Config(data_dir=str(data))
    assert _run(config, _args()) == 1
    line = _lines(capsys.readouterr().out)[failing]
    assert line.startswith(f"FAIL  {failing:15}") and said in line, line
    with pytest.raises((EdgeAgentError, OSError)) as refused, data_dir_lock(config):
        MemoryStore.open(config.db_path).close()  # what `run` does first
    assert isinstance(refused.value, EdgeAgentError), refused.value


def test_a_bad_config_is_a_fail_line_and_the_rest_still_runs(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], no_audio_or_models: None) -> None:
    bad = tmp_path / "edge-agent.toml"
    bad.write_text("[vad]\nthreshold = 7\n", encoding="utf-8")
    assert _run(None, _args(config=bad)) == 1
    lines = _lines(capsys.readouterr().out)
    assert lines["config"].startswith(f"FAIL  config         {bad}: vad.threshold")
    assert "the other checks use the built-in defaults" in lines["config"]
    assert lines["cpu"] and lines["memory db"].startswith("ok    ")  # (cpu: ok, or busy: warn)


@pytest.mark.parametrize(("setting", "expected"), [
    ("auto", "ok    echo cancel    webrtc-aec3 (livekit "), ("off", "ok    echo cancel    off: ")])
def test_the_echo_canceller_is_built_and_run_once(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], no_audio_or_models: None,
        setting: str, expected: str) -> None:
    config = write_config(tmp_path, f'[audio]\necho_cancel = "{setting}"\n',
                          data_dir=tmp_path)
    _run(None, _args(config=config))
    assert _lines(capsys.readouterr().out)["echo cancel"].startswith(expected)


def test_the_lan_server_is_asked_for_a_word_and_timed(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], no_audio_or_models: None) -> None:
    def slow(connection: socket.socket) -> None:
        time.sleep(0.4)
        connection.sendall(sse(piece("OK")))

    with ScriptedChatServer([sse(piece("OK")), slow]) as server:
        config = write_config(tmp_path, f'[llm]\nserver = "{server.url}"\n'
                              "server_timeout_ms = 200\n", data_dir=tmp_path)
        _run(None, _args(config=config))
        first = _lines(capsys.readouterr().out)["llm server"]
        _run(None, _args(config=config))
        second = _lines(capsys.readouterr().out)["llm server"]
    assert first.startswith(f"ok    llm server     http://127.0.0.1:{server.port}/v1")
    assert "first word in" in first and "(llm.server_timeout_ms 200)" in first
    assert second.startswith("warn  llm server") and "more than llm.server_timeout_ms" in second
    assert server.requests[0]["max_tokens"] == 4
    config = write_config(tmp_path, f'[llm]\nserver = "http://127.0.0.1:{free_port()}/v1"\n',
                          data_dir=tmp_path)
    _run(None, _args(config=config))
    down = _lines(capsys.readouterr().out)["llm server"]
    assert down.startswith("warn  llm server") and "connection refused" in down
    assert "replies come from the on-device model" in down
    write_config(tmp_path, data_dir=tmp_path)
    _run(None, _args(config=tmp_path / "edge-agent.toml"))
    assert "llm server" not in _lines(capsys.readouterr().out)  # none configured: no line


@pytest.mark.postgres
def test_the_venue_store_is_reached_without_changing_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], no_audio_or_models: None,
        venue: LocalPostgres, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EDGE_AGENT_SYNC_PASSWORD", PASSWORD)
    config = write_config(tmp_path, f'[sync]\nurl = "{venue.url}"\nkiosk_id = "k9"\n',
                          data_dir=tmp_path)
    _run(None, _args(config=config))
    line = _lines(capsys.readouterr().out)["venue store"]
    assert line.startswith(f"ok    venue store    {venue.url} as kiosk k9: answered in"), line
    assert "no edge-agent tables yet" in line
    monkeypatch.setenv("EDGE_AGENT_SYNC_PASSWORD", "wrong-password-42")
    _run(None, _args(config=config))
    wrong = _lines(capsys.readouterr().out)["venue store"]
    assert wrong.startswith("warn  venue store") and "password authentication failed" in wrong
    assert "wrong-password-42" not in wrong
    with psycopg.connect(venue.admin_url) as admin:  # the doctor made nothing there
        assert admin.execute("SELECT to_regnamespace('edge_agent')").fetchone() == (None,)


def test_a_scripted_llm_needs_its_replies_file(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _stub(monkeypatch, "audio", "audio_names")
    replies = tmp_path / "replies.toml"
    # The other models are paths that are not there: nothing slow loads.
    config = _write_config(tmp_path, models=False)
    with config.open("a", encoding="utf-8") as more:
        more.write(f"engine = \"scripted\"\nscript = {json.dumps(str(replies))}\n")  # [llm]
    assert _run(None, _args(config=config)) == 1
    lines = _lines(capsys.readouterr().out)
    assert lines["config"] == (f"FAIL  config         {replies}: script file not found. Fix: "
                               f"make {replies} a readable TOML file, or name another")
    assert lines["model llm"].startswith("FAIL  model llm      "), lines
    vad = tmp_path / "no-such-model" / "vad.onnx"
    assert lines["model vad"] == (f"FAIL  model vad      model '{vad}' is missing (looked at "
                                  f"{vad}). Fix: fix the path in the config, or use a name "
                                  "from `edge-agent models list`.")
    replies.write_text('replies = ["Hello."]\n', encoding="utf-8")
    assert _run(None, _args(config=config)) == 1  # the other models are still missing
    lines = _lines(capsys.readouterr().out)
    assert lines["config"] == f"ok    config         {config}: loaded, valid"
    assert lines["model llm"] == (f"ok    model llm      scripted replies from {replies} "
                                  '(llm.engine = "scripted"): no model to load')


def test_a_data_dir_that_is_a_file_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                         no_audio_or_models: None) -> None:
    (tmp_path / "data").write_text("", encoding="utf-8")
    assert _run(Config(data_dir=str(tmp_path / "data")), _args()) == 1
    line = _lines(capsys.readouterr().out)["data dir"]
    assert line == (f"FAIL  data dir       {tmp_path / 'data'} is a file, not a directory. "
                    "Fix: point data_dir at a directory (it is created if missing)")


def test_a_data_dir_nobody_can_create_fails_as_run_refuses_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], no_audio_or_models: None) -> None:
    """/proc allows root everything by its mode, yet nothing can be made in it: the doctor
    tries, as the agent would, instead of reading permissions."""
    from edge_agent.datadir import ensure_data_dir

    config = Config(data_dir="/proc/edge-agent-data")
    assert _run(config, _args()) == 1
    line = _lines(capsys.readouterr().out)["data dir"]
    assert line.startswith("FAIL  data dir       /proc/edge-agent-data does not exist and cannot "
                           "be created in /proc"), line
    with pytest.raises(EdgeAgentError, match="cannot create /proc/edge-agent-data"):
        ensure_data_dir(config)
    fresh = Config(data_dir=str(tmp_path / "new" / "data"))
    assert _run(fresh, _args()) in (0, 1)
    assert _lines(capsys.readouterr().out)["data dir"].startswith("ok    data dir")
    assert list(tmp_path.iterdir()) == []  # the probe left nothing behind


def test_a_nearly_full_disk_fails_and_a_low_one_warns(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    real = os.statvfs(tmp_path)

    def statvfs_with(free: int) -> Any:
        fields = list(real)
        fields[4] = free // real.f_frsize  # f_bavail
        return os.statvfs_result(fields)

    for free, status in ((100 << 20, "FAIL"), (500 << 20, "warn"), (5 << 30, "ok")):
        monkeypatch.setattr(os, "statvfs", lambda _p, free=free: statvfs_with(free))
        machine: report.MachineRecord = {}
        record = doctor._disk(tmp_path / "not-yet", machine)
        assert record["status"] == status, record
        assert machine["disk_path"] == str(tmp_path)  # the nearest existing directory


# -- models ----------------------------------------------------------------------------------

@pytest.mark.models
def test_the_configured_models_are_present_verified_and_load(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _stub(monkeypatch, "audio", "audio_names")
    assert _run(Config(data_dir=str(tmp_path / "data")), _args(quick=True)) == 0
    lines = _lines(capsys.readouterr().out)
    for kind in ("vad", "stt", "tts", "llm", "turn"):
        line = lines[f"model {kind}"]
        assert line.startswith("ok    ") and "sizes ok (not hashed: --quick)" in line, line
        assert "; loaded in " in line and "; ran once in " in line, line  # in a child
    assert "judged a second of silence (finished: " in lines["model turn"], lines["model turn"]
    # ok, not warn: the llama.cpp under test is the portable build README installs.
    assert "(portable build (" in lines["model llm"], lines["model llm"]


def test_a_missing_model_or_one_of_the_wrong_kind_fails_with_a_fix(tmp_path: Path) -> None:
    config = Config(data_dir=str(tmp_path / "data"))  # nothing fetched here
    catalog = load_catalog(config.models_dir)
    record = doctor_checks._model(config, catalog, ModelUse("llm", "qwen2.5-0.5b-instruct",
                                                            "llm.model"), quick=True)
    assert record["status"] == "FAIL", record
    assert "qwen2.5-0.5b-instruct is missing" in record["detail"]
    assert record["fix"].startswith("get it with: edge-agent models fetch qwen2.5-0.5b-instruct")
    wrong = doctor_checks._model(config, catalog, ModelUse("vad", "joe-medium", "vad.model"),
                                 quick=True)
    assert wrong["status"] == "FAIL" and "is a tts model, not a vad model" in wrong["detail"]


# -- isolation -------------------------------------------------------------------------------

def _collect() -> tuple[list[CheckRecord], Emit]:
    seen: list[CheckRecord] = []
    return seen, seen.append


def test_a_check_that_raises_is_its_fail_line_and_the_rest_is_named() -> None:
    def run(_context: Context, emit: Emit) -> None:
        emit(check("first", "ok", "fine"))
        raise RuntimeError("boom\x1b[2J")

    seen, emit = _collect()
    group = Group(lambda _c: ("first", "second", "third"), run, 30)
    doctor._run_group(group, Context(Config(), True, {}), emit)
    assert [(c["name"], c["status"]) for c in seen] == [
        ("first", "ok"), ("second", "FAIL"), ("third", "FAIL")]
    assert seen[1]["detail"] == "RuntimeError: boom\\x1b[2J"  # escaped, never a traceback
    assert seen[1]["fix"] == report.UNEXPECTED_FIX
    assert seen[2]["detail"] == "not checked: an earlier step of this check failed"


def test_a_check_that_hangs_fails_when_its_time_is_up_and_late_lines_are_dropped() -> None:
    release = threading.Event()
    after = threading.Event()

    def run(_context: Context, emit: Emit) -> None:
        release.wait()
        emit(check("stuck", "ok", "too late"))
        after.set()

    seen, emit = _collect()
    group = Group(lambda _c: ("stuck",), run, 0.2)
    doctor._run_group(group, Context(Config(), True, {}), emit)
    assert [(c["name"], c["status"]) for c in seen] == [("stuck", "FAIL")]
    assert seen[0]["detail"] == "did not finish within 0.2 s"
    release.set()
    assert after.wait(10)
    assert len(seen) == 1


def test_lines_escape_control_characters() -> None:
    line = cli_doctor.format_line(check("audio output", "FAIL", "\"evil\x1b]0;x\x07\" (index 3)",
                                    "rename it"))
    assert line == ("FAIL  audio output   \"evil\\x1b]0;x\\x07\" (index 3). Fix: rename it")


def test_the_knowledge_files_are_read_without_touching_the_database(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], no_audio_or_models: None) -> None:
    files = _knowledge_venue(tmp_path)
    config = write_config(tmp_path, f"[knowledge]\nfiles = {json.dumps([str(f) for f in files])}\n",
                          data_dir=tmp_path / "data")
    _run(None, _args(config=config))
    line = _lines(capsys.readouterr().out)["knowledge"]
    assert line.startswith("ok    knowledge      3 file(s), 10 entries, opening hours"), line
    assert not (tmp_path / "data").exists()  # nothing made: not the data dir, not a database
    files[2].write_text("question,answer\nWhere?,Here.\nWhy?,Because,extra\n", encoding="utf-8")
    _run(None, _args(config=config))
    broken = _lines(capsys.readouterr().out)["knowledge"]
    assert broken.startswith(f"FAIL  knowledge      {files[2]}: line 3: 3 cells"), broken


def test_the_lan_server_is_asked_how_it_takes_tools(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], no_audio_or_models: None) -> None:
    ping = {"choices": [{"index": 0, "finish_reason": None, "delta": {"tool_calls": [
        {"index": 0, "id": "p1", "type": "function",
         "function": {"name": "ping", "arguments": "{}"}}]}}]}
    refused = http_error(500, "Internal Server Error", "tools param requires --jinja flag")
    json_call = sse(piece('{"tool": "ping", "arguments": {}}'))
    lines = []
    for answers in ([sse(piece("OK")), sse(ping)], [sse(piece("OK")), refused, json_call],
                    [sse(piece("OK")), sse(piece("Pong."))]):
        with ScriptedChatServer(answers) as server:
            config = write_config(tmp_path, f'[llm]\nserver = "{server.url}"\n'
                                  '[tools]\nenabled = ["book_table"]\n', data_dir=tmp_path)
            _run(None, _args(config=config))
            lines.append(_lines(capsys.readouterr().out)["llm server"])
    native, json_form, words = lines
    assert native.startswith("ok ") and "tools: native (it called the test tool)" in native
    assert json_form.startswith("ok ") and "tools: json (it called the test tool)" in json_form
    assert words.startswith("warn ") and "answered in words" in words
    assert 'server_tools = "json"' in words
