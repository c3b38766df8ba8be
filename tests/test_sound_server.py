"""`bench latency --sound-server default`: the bench borrows the user's sound server. Here that
server is a PulseAudio started as a desktop starts it (the system's default.pa and daemon.conf:
devices at 44.1 kHz stereo), reached through the system's own ALSA configuration, as a user's
programs reach theirs. For want of a sound card it gets a stand-in for one (`desk`, a null sink,
with the user's choice of it as the default), as a desktop has its speakers."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from edge_agent.bench import pulse_rig
from edge_agent.bench.latency_figures import table
from edge_agent.bench.sound_server import (
    MARK,
    NotReachedError,
    StreamWatch,
    borrowed_server,
    check_reached,
    server_name,
)

pytestmark = [pytest.mark.audio]

SYSTEM_SCRIPT = Path("/etc/pulse/default.pa")


@pytest.fixture(scope="module")
def desktop() -> Iterator[pulse_rig.PulseServer]:
    """A PulseAudio server from the system's own configuration, in a runtime dir of its own."""
    try:
        pulse_rig.check_tools()
    except pulse_rig.PulseUnavailable as exc:
        pytest.skip(f"PulseAudio not available: {exc}")
    if not SYSTEM_SCRIPT.is_file():
        pytest.skip(f"{SYSTEM_SCRIPT} not found (the pulseaudio package installs it)")
    root = Path(tempfile.mkdtemp(prefix="ea-desktop-"))
    env = pulse_rig.client_env(root)
    env.pop("ALSA_CONFIG_PATH")  # the system's ALSA configuration, as a user has it
    (root / "client.conf").write_text("autospawn = no\n")
    (root / "runtime").mkdir(mode=0o700)
    started = subprocess.run(
        ["pulseaudio", "--daemonize=yes", "--exit-idle-time=-1", "--system=no",
         "--use-pid-file=yes", f"--log-target=file:{root / 'pulse.log'}"],
        env={**env, "XDG_CONFIG_HOME": str(root / "config")}, capture_output=True, text=True,
        timeout=30, check=False)
    server = pulse_rig.PulseServer(root=root, env=env)
    try:
        assert started.returncode == 0, started.stderr
        server.pid = int((root / "runtime" / "pid").read_text().split()[0])
        deadline = time.monotonic() + 20
        while "Default Sink: auto_null" not in _info(server):
            assert time.monotonic() < deadline, _info(server) + server.log[-2000:]
            time.sleep(0.1)
        server.pactl("load-module", "module-null-sink", "sink_name=desk")
        server.pactl("set-default-sink", "desk")
        server.pactl("set-default-source", "desk.monitor")
        yield server
    finally:
        server.close()


def _info(server: pulse_rig.PulseServer) -> str:
    try:
        return server.pactl("info", timeout=5)
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        return str(exc)


def _modules(server: pulse_rig.PulseServer) -> list[str]:
    return server.pactl("list", "short", "modules").splitlines()


def _sink_spec(server: pulse_rig.PulseServer, name: str) -> str:
    for line in server.pactl("list", "short", "sinks").splitlines():
        cols = line.split("\t")
        if cols[1] == name:
            return cols[3]
    raise AssertionError(f"no sink {name}")


def test_the_bench_adds_its_devices_at_the_servers_format_and_takes_them_away(
        desktop: pulse_rig.PulseServer) -> None:
    before = _modules(desktop)
    with borrowed_server(desktop.env) as server:
        prefix = f"{MARK}{os.getpid()}_"
        assert server.prefix == prefix
        # The agent's devices take the server's default format, as a desktop's devices do;
        # the tap (the instrument) is the rig's own.
        assert _sink_spec(desktop, prefix + "speaker") == "s16le 2ch 44100Hz"
        assert _sink_spec(desktop, prefix + "micsink") == "s16le 2ch 44100Hz"
        assert _sink_spec(desktop, prefix + "tap") == "s16le 2ch 16000Hz"
        assert server.env["PULSE_SINK"] == prefix + "speaker"
        assert server.env["PULSE_SOURCE"] == prefix + "mic"
        assert server.env["PULSE_SERVER"] == desktop.env["PULSE_SERVER"]
        # Only the agent is pointed at them: the user's defaults stay.
        info = _info(desktop)
        assert "Default Sink: desk\n" in info and "Default Source: desk.monitor\n" in info
        assert server_name(server) == ("pulseaudio " + info.split("Server Version: ")[1]
                                       .splitlines()[0], "s16le 2ch 44100Hz")
    assert _modules(desktop) == before


def test_devices_a_killed_run_left_behind_are_taken_away(desktop: pulse_rig.PulseServer
                                                        ) -> None:
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    dead = int(gone.stdout)
    left = desktop.pactl("load-module", "module-null-sink",
                         f"sink_name={MARK}{dead}_speaker").strip()
    with borrowed_server(desktop.env):
        assert not any(line.split("\t")[0] == left for line in _modules(desktop))


def test_the_agents_streams_are_steered_to_the_bench_and_read(desktop: pulse_rig.PulseServer
                                                             ) -> None:
    """A program that opens ALSA's default devices, as the agent does (PortAudio), lands on the
    bench's speaker and microphone; the watch reads what the server says of its streams."""
    child = (
        "import sys, pyaudio\n"
        "pa = pyaudio.PyAudio()\n"
        "out = pa.open(format=pyaudio.paInt16, channels=1, rate=22050, output=True,\n"
        "              frames_per_buffer=512,\n"
        "              stream_callback=lambda d, n, t, s: (bytes(2 * n), pyaudio.paContinue))\n"
        "mic = pa.open(format=pyaudio.paInt16, channels=1, rate=16000, input=True,\n"
        "              frames_per_buffer=128,\n"
        "              stream_callback=lambda d, n, t, s: (None, pyaudio.paContinue))\n"
        "print('open', flush=True)\n"
        "sys.stdin.read()\n")
    with borrowed_server(desktop.env) as server:
        program = subprocess.Popen([sys.executable, "-c", child], env=server.env,
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   stderr=subprocess.DEVNULL, text=True)
        try:
            assert program.stdout is not None and program.stdout.readline() == "open\n"
            check_reached(server, timeout=10)
            watch = StreamWatch(server, pid=program.pid)
            watch.start()
            time.sleep(2.5)
            watch.stop()
        finally:
            program.communicate(input="", timeout=10)
    speaker, microphone = watch.facts()
    assert speaker is not None and microphone is not None
    assert speaker["device"] == server.prefix + "speaker"
    assert speaker["sample_spec"] == "s16le 1ch 22050Hz"
    assert speaker["device_sample_spec"] == "s16le 2ch 44100Hz"
    assert speaker["resample_method"] not in ("", "n/a")
    assert speaker["readings"] >= 2 and speaker["buffer_latency_ms"] > 0
    assert microphone["device"] == server.prefix + "mic"
    assert microphone["sample_spec"] == "s16le 1ch 16000Hz"
    assert microphone["device_sample_spec"] == "s16le 2ch 44100Hz"


def test_streams_that_never_reach_the_bench_are_named(desktop: pulse_rig.PulseServer) -> None:
    with borrowed_server(desktop.env) as server, pytest.raises(NotReachedError) as raised:
        check_reached(server, timeout=0.5)
    message = str(raised.value)
    assert f"{server.prefix}speaker" in message and "ALSA's default" in message
    assert "--sound-server private" in message


def test_no_server_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(pulse_rig.PulseUnavailable) as raised, \
            borrowed_server(pulse_rig.unreachable_env(tmp_path)):
        pass
    assert "no sound server answers" in str(raised.value)
    assert "--sound-server private" in str(raised.value)


def test_the_table_says_where_the_call_went_and_the_sound_paths_share() -> None:
    stream = {"device": "edge_agent_bench_1_speaker", "sample_spec": "s16le 1ch 22050Hz",
              "device_sample_spec": "s16le 2ch 44100Hz", "resample_method": "speex-float-1",
              "buffer_latency_ms": 57.5, "device_latency_ms": 4.1, "readings": 30}
    stats = {"n": 6, "p50": 560.0, "p95": 700.0, "max": 720.0}
    result = {
        "exchanges": 6, "engines": {"llm": "scripted", "stt": "moonshine"}, "caller_voice": "x",
        "answer_gap_ms": stats, "stop_ms": {"n": 0}, "barge_in_confirmed_ms": {"n": 0},
        "stages_ms": {"first_audio": {**stats, "p50": 450.0}}, "user_turns_wer_percent": 0.0,
        "user_turns": [], "questions_unanswered": 0, "questions_cut_off": 0, "peak_rss_mb": 1,
        "interruptions": {"count": 0, "missed": 0, "said_in_silence": 0,
                          "said_as_it_ended": 0},
        "backchannels": {"count": 0, "false_interruptions": 0}, "lines_unsaid": 0,
        "unmatched_caller_events": [],
        "sound_server": {"mode": "default", "server": "pulseaudio 16.1",
                         "default_sample_spec": "s16le 2ch 44100Hz", "speaker": stream,
                         "microphone": None}}
    text = table(result)
    assert "sound server: pulseaudio 16.1 (default; its devices by default s16le 2ch 44100Hz)" \
        in text
    assert ("the agent's speaker stream: s16le 1ch 22050Hz on a s16le 2ch 44100Hz device, "
            "converted by speex-float-1; buffered 58 ms in the stream, 4 ms in the device") in text
    assert "the agent's microphone stream: not seen" in text
    assert "share of the answer gap (p50 as recorded - p50 as timed inside): 110 ms" in text
