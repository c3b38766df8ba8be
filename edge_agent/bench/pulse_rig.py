"""A private PulseAudio server with virtual devices: real audio I/O for tests and benchmarks.

No sound card, D-Bus or systemd is needed: the server runs as the current user (root too) in
per-user mode with a generated script (`-n -F`), a private runtime dir and socket under a temp
dir, and is killed at the end. A null sink plays at real time (5 s took 5.02 s here) and its
monitor records exactly what was played.

Devices:
- `speaker`  null sink at 22.05 kHz mono, the default sink (the agent's output). `speaker.monitor` records
             exactly what was played (`record()`).
- `micsink`  null sink at 16 kHz mono; `mic` (a remap of `micsink.monitor`) is the default
             source, i.e. the virtual microphone. Feed it with `play(wav)` (`paplay -d micsink`):
             paced at real time, silence when idle.
- `drain`    throwaway null sink; a `module-loopback` (latency_msec=20) from each null sink's
             monitor into it keeps the sinks from idling (else the first PortAudio stream can
             stall 1–2 s).
- `usbmic`, `usbspeaker` (with `hotplug=True`) devices that tests unplug and plug back
             (`unplug`/`plug`), reached through the ALSA PCMs of the same names: see `_HOTPLUG`.
- an echo path (`echo_path(gain, latency_ms)`): a `module-loopback` from `speaker.monitor` into
             `micsink`, so the microphone hears the agent as a kiosk's does, late and quieter
             (a real clock path, with its jitter, not the simulator's room).
- `array`    (with `array_channels=N`) an N-channel 16 kHz source, the microphones of an array,
             fed by playing N-channel audio into `arraysink`; through the ALSA PCM `array`.
- `tap`      (with `tap=True`) a stereo 16 kHz null sink: the microphone's audio on the left,
             the speaker's on the right, through two identical loopbacks, so both sides of a
             conversation are recorded on one clock (`record_tap()`). Measured: a click reaching
             both channels by the same path lands on the same sample +-0.1 ms.

Clients reach it through the environment only (`PulseServer.env`), nothing under /etc is
written: PULSE_SERVER / PULSE_RUNTIME_PATH / PULSE_CLIENTCONFIG (autospawn off) for libpulse
tools, and ALSA_CONFIG_PATH -> a generated file that includes the system alsa.conf and then
makes ALSA's `default` PCM/CTL `type pulse`, so PyAudio (PortAudio over ALSA) opens the
server's default sink/source as its default devices.

    with pulse_server() as pulse:          # raises PulseUnavailable if it cannot start
        subprocess.run([...], env=pulse.env)
"""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import signal
import subprocess
import tempfile
import time
import wave
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from edge_agent.audio.device import MIC_RATE

SYSTEM_ALSA_CONF = Path("/usr/share/alsa/alsa.conf")
SPEAKER_RATE = 22050
"""The Piper medium voices' rate: the agent's audio reaches the sink unresampled, so the monitor
records it bit for bit."""

_SCRIPT = """\
load-module module-native-protocol-unix auth-anonymous=1 socket={socket}
load-module module-null-sink sink_name=speaker rate={speaker_rate} channels=1 format=s16le \
sink_properties=device.description=speaker
load-module module-null-sink sink_name=micsink rate={mic_rate} channels=1 format=s16le \
sink_properties=device.description=micsink
load-module module-remap-source master=micsink.monitor source_name=mic \
source_properties=device.description=mic
load-module module-null-sink sink_name=drain sink_properties=device.description=drain
load-module module-loopback source=speaker.monitor sink=drain latency_msec=20 \
source_dont_move=true sink_dont_move=true
load-module module-loopback source=micsink.monitor sink=drain latency_msec=20 \
source_dont_move=true sink_dont_move=true
set-default-sink speaker
set-default-source mic
"""

_TAP = """load-module module-null-sink sink_name=tap rate={mic_rate} channels=2 format=s16le \
channel_map=front-left,front-right sink_properties=device.description=tap
load-module module-loopback source=micsink.monitor sink=tap latency_msec=20 channels=1 \
channel_map=front-left source_dont_move=true sink_dont_move=true
load-module module-loopback source=speaker.monitor sink=tap latency_msec=20 channels=1 \
channel_map=front-right source_dont_move=true sink_dont_move=true
"""

_HOTPLUG = """load-module module-null-sink sink_name=usbspeaker rate={speaker_rate} channels=1 \
format=s16le sink_properties=device.description=usbspeaker
load-module module-remap-source master=micsink.monitor source_name=usbmic \
source_properties=device.description=usbmic
"""
"""Devices a test can pull out from under a client, like a USB headset. They are not the defaults
on purpose: PulseAudio moves every stream that follows the default device to the new default
when the default changes (`pa_core_update_default_source`), so unloading a default device is
never seen by its clients. A named device with `rescue-streams = no` (`_DAEMON_HOTPLUG`) is the
case where PulseAudio kills the client's stream instead, which is what a USB device with no
other device to fall back on looks like (measured: the PortAudio stream goes inactive)."""
_ALSA_HOTPLUG = """pcm.usbmic { type pulse device "usbmic" }
pcm.usbspeaker { type pulse device "usbspeaker" }
"""
_DAEMON_HOTPLUG = "rescue-streams = no\n"
_ARRAY = """load-module module-null-sink sink_name=arraysink rate={mic_rate} channels={channels} \
channel_map={channel_map} format=s16le sink_properties=device.description=arraysink
load-module module-remap-source master=arraysink.monitor source_name=array \
master_channel_map={channel_map} channel_map={channel_map} remix=no \
source_properties=device.description=array
"""
"""A microphone array (`array_channels`): `array`, a source of that many channels, fed by
playing into `arraysink`, reached through the ALSA PCM of the same name. Every channel keeps
its place: the maps are ALSA's own for that many channels (`ALSA_CHANNEL_MAPS`), the one the
ALSA plugin asks for, so PulseAudio remixes nothing (with another map, it mixes a 4-channel
stream's channels into each other)."""
ALSA_CHANNEL_MAPS = {
    2: "front-left,front-right",
    4: "front-left,front-right,rear-left,rear-right",
    6: "front-left,front-right,rear-left,rear-right,front-center,lfe",
    8: "front-left,front-right,rear-left,rear-right,front-center,lfe,side-left,side-right",
}
_ALSA_ARRAY = """pcm.array { type pulse device "array" }
"""


def paplay_command(wav: Path, device: str) -> list[str]:
    """The argv that plays `wav` into `device`. A file of several channels is played with
    ALSA's map for that many (`ALSA_CHANNEL_MAPS`), the one the rig's devices have, so each
    channel arrives where it was written."""
    with wave.open(str(wav)) as clip:
        channels = clip.getnchannels()
    mapped = ([f"--channel-map={ALSA_CHANNEL_MAPS[channels]}"]
              if channels > 1 and channels in ALSA_CHANNEL_MAPS else [])
    return ["paplay", "-d", device, *mapped, str(wav)]

_ALSA = """\
# Generated for tests: the system configuration, then ALSA "default" = the test PulseAudio.
<{system}>
pcm.!default {{
    type pulse
    hint.description "test PulseAudio"
}}
ctl.!default {{
    type pulse
}}
"""


class PulseUnavailable(RuntimeError):
    """PulseAudio (or its tools / ALSA plugin) is missing or the server would not start."""


@dataclass
class PulseServer:
    root: Path
    env: dict[str, str]
    pid: int | None = None
    prefix: str = ""
    """Put before each device name the methods take (the rig's names: "micsink", "speaker",
    "tap", ...): empty on the rig's own server, the bench's mark on a borrowed one
    (`borrowed_server`)."""
    _children: list[subprocess.Popen[bytes]] = field(default_factory=list)
    _launch: tuple[Path, dict[str, str], float] | None = None
    """(script, server environment, timeout) that `start` launched it with."""

    @property
    def log(self) -> str:
        path = self.root / "pulse.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def pactl(self, *args: str, timeout: float = 10) -> str:
        """pactl's output, in English whatever the user's locale (its listings are parsed)."""
        done = subprocess.run(["pactl", *args], env={**self.env, "LC_ALL": "C"},
                              capture_output=True, text=True, timeout=timeout, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"pactl {' '.join(args)} failed: {done.stderr.strip()}")
        return done.stdout

    def play(self, wav: Path, device: str = "micsink") -> subprocess.Popen[bytes]:
        """Start playing `wav` into `device` (default: the virtual microphone); returns the
        process (it exits when the clip has been played at real time)."""
        proc = subprocess.Popen(paplay_command(wav, self.prefix + device), env=self.env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self._children.append(proc)
        return proc

    def record(self, path: Path, source: str = "speaker.monitor", rate: int = 22050,
               channels: int = 1) -> subprocess.Popen[bytes]:
        """Start recording `source` as raw s16le into `path`; stop it with `stop(proc)` and
        read it with `read_raw(path)` (or use `recording()`)."""
        out = path.open("wb")
        try:
            return self._parec(out, source, rate, channels, latency_ms=20)
        finally:
            out.close()

    def record_pipe(self, source: str = "speaker.monitor", rate: int = 22050,
                    latency_ms: int = 10) -> subprocess.Popen[bytes]:
        """Start recording `source` (mono s16le) into a pipe, `proc.stdout`, in fragments of
        about `latency_ms`: a reader that notes when each read returns knows, within a
        fragment, when the samples were played. Stop it with `stop(proc)`."""
        return self._parec(subprocess.PIPE, source, rate, 1, latency_ms)

    def _parec(self, out: int | IO[bytes], source: str, rate: int, channels: int,
               latency_ms: int) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(
            ["parec", "-d", self.prefix + source, "--raw", "--format=s16le", f"--rate={rate}",
             f"--channels={channels}", f"--latency-msec={latency_ms}"],
            env=self.env, stdout=out, stderr=subprocess.PIPE)
        self._children.append(proc)
        return proc

    def record_tap(self, path: Path) -> subprocess.Popen[bytes]:
        """Record both sides (a server started with `tap=True`): stereo s16le at `MIC_RATE`,
        the microphone left, the speaker right."""
        return self.record(path, "tap.monitor", MIC_RATE, channels=2)

    @contextlib.contextmanager
    def recording(self, path: Path, source: str = "speaker.monitor",
                  rate: int = 22050) -> Iterator[Path]:
        proc = self.record(path, source, rate)
        try:
            yield path
        finally:
            stop(proc)

    def unplug(self, device: str) -> tuple[str, str]:
        """Unload the module that provides sink or source `device` (its streams are killed,
        with a `hotplug=True` server); returns (module name, arguments) for `plug`."""
        for kind in ("sinks", "sources"):
            for line in self.pactl("list", "short", kind).splitlines():
                cols = line.split("\t")
                if len(cols) > 2 and cols[1] == device:
                    owner = self._owner_module(kind, cols[0])
                    for module in self.pactl("list", "short", "modules").splitlines():
                        index, name, args = [*module.split("\t"), "", ""][:3]
                        if index == owner:
                            self.pactl("unload-module", index)
                            return name, args
        raise RuntimeError(f"no sink or source named {device!r}")

    def plug(self, module: tuple[str, str]) -> None:
        """Load a module that `unplug` returned: the device is back, under the same name."""
        name, args = module
        self.pactl("load-module", name, *args.split())

    def echo_path(self, gain: float, latency_ms: int = 40) -> str:
        """Let the microphone hear the speaker, as a kiosk's does: a loopback from the speaker's
        monitor into the microphone's sink, `latency_ms` late, at `gain` (linear amplitude).
        Returns the module's index (`pactl unload-module` takes the path away)."""
        module = self.pactl("load-module", "module-loopback",
                            f"source={self.prefix}speaker.monitor", f"sink={self.prefix}micsink",
                            f"latency_msec={latency_ms}").strip()
        for block in self.pactl("list", "sink-inputs").split("\n\n"):
            lines = [line.strip() for line in block.splitlines()]
            if lines and f"Owner Module: {module}" in lines:
                stream = lines[0].split("#", 1)[1]
                self.pactl("set-sink-input-volume", stream, f"{20 * math.log10(gain):.2f}dB")
                return module
        raise RuntimeError(f"the echo loopback (module {module}) has no sink input")

    def _owner_module(self, kind: str, index: str) -> str:
        key = "Sink #" if kind == "sinks" else "Source #"
        for block in self.pactl("list", kind).split("\n\n"):
            if block.lstrip().startswith(f"{key}{index}\n"):
                for line in block.splitlines():
                    if line.strip().startswith("Owner Module:"):
                        return line.split(":", 1)[1].strip()
        raise RuntimeError(f"cannot find the module that owns {kind} #{index}")

    def restart(self) -> None:
        """(Re)start the server from the script `start` wrote: the same socket, the same
        devices (those unplugged are back). Returns once it answers with its defaults set."""
        assert self._launch is not None, "only a server from `start` can be restarted"
        script, server_env, timeout = self._launch
        runtime = self.root / "runtime"
        cmd = ["pulseaudio", "-n", "-F", str(script), "--daemonize=yes", "--exit-idle-time=-1",
               "--disallow-exit", "--use-pid-file=yes", "--system=no", "--disable-shm=no",
               f"--log-target=file:{self.root / 'pulse.log'}", "--log-level=notice"]
        try:
            done = subprocess.run(cmd, env=server_env, capture_output=True, text=True,
                                  timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            raise PulseUnavailable(
                f"`{' '.join(cmd)}` did not return within {timeout:.0f} s") from None
        with contextlib.suppress(OSError, ValueError):
            self.pid = int((runtime / "pid").read_text().split()[0])
        if done.returncode != 0:
            self.close()
            raise PulseUnavailable(
                f"pulseaudio failed to start (exit {done.returncode}): "
                f"{(done.stderr or '').strip()[-800:]}\n{self.log[-1500:]}")
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            try:
                info = self.pactl("info", timeout=5)
                if "Default Source: mic" in info and "Default Sink: speaker" in info:
                    return
                last = info
            except (RuntimeError, subprocess.TimeoutExpired) as exc:
                last = str(exc)
            time.sleep(0.1)
        self.close()
        raise PulseUnavailable(f"PulseAudio started but is not usable: {last}\n{self.log[-1500:]}")

    def kill_server(self) -> None:
        """Kill the server at once (SIGKILL, as a crash): every client's stream dies."""
        if self.pid is not None:
            _signal_and_wait(self.pid, signal.SIGKILL)
            self.pid = None
            # Until init reaps it, the dead server still has a pid, and a new one would take
            # its pid file for a daemon already running.
            (self.root / "runtime" / "pid").unlink(missing_ok=True)

    def wait_for_stream(self, kind: str, device: str, timeout: float = 30,
                        exclude_apps: tuple[str, ...] = ("paplay", "parec")) -> bool:
        """Wait until a client stream is connected to `device`: kind "source-outputs" (someone
        records from source `device`) or "sink-inputs" (someone plays to sink `device`).
        Loopbacks and our own paplay/parec are ignored. False on timeout."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._has_stream(kind, device, exclude_apps):
                return True
            time.sleep(0.1)
        return False

    def _has_stream(self, kind: str, device: str, exclude_apps: tuple[str, ...]) -> bool:
        devices = "sources" if kind == "source-outputs" else "sinks"
        device = self.prefix + device
        index = None
        for line in self.pactl("list", "short", devices).splitlines():
            cols = line.split("\t")
            if len(cols) > 1 and cols[1] == device:
                index = cols[0]
        if index is None:
            return False
        # Long listing: blocks separated by blank lines with the device index and properties.
        for block in self.pactl("list", kind).split("\n\n"):
            key = "Source: " if kind == "source-outputs" else "Sink: "
            if f"{key}{index}\n" not in block + "\n":
                continue
            if "module-loopback" in block or 'media.name = "Loopback' in block:
                continue
            if any(f'application.process.binary = "{app}"' in block for app in exclude_apps):
                continue
            return True
        return False

    def close(self) -> None:
        for proc in self._children:
            stop(proc)
        self._children.clear()
        if self.pid is not None and not _signal_and_wait(self.pid, signal.SIGTERM):
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
        self.pid = None


def stop(proc: subprocess.Popen[bytes], timeout: float = 5) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if proc.stderr:
        proc.stderr.close()


def _signal_and_wait(pid: int, sig: signal.Signals, seconds: float = 5) -> bool:
    """Send `sig` to the server `pid` and wait up to `seconds` for it to be gone (polled: it is
    not our child, there is nothing to wait on). True once it is."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and alive(pid):
        time.sleep(0.05)
    return not alive(pid)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (daemonized, reparented to an init that has not reaped it yet) counts as gone.
    with contextlib.suppress(OSError):
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] != "Z"
    return True


def check_tools() -> None:
    missing = [t for t in ("pulseaudio", "pactl", "paplay", "parec") if not shutil.which(t)]
    if missing:
        raise PulseUnavailable(
            f"PulseAudio tools not found: {', '.join(missing)} "
            "(apt-get install pulseaudio pulseaudio-utils libasound2-plugins)")
    if not SYSTEM_ALSA_CONF.is_file():
        raise PulseUnavailable(f"{SYSTEM_ALSA_CONF} not found (alsa-lib configuration missing)")
    plugin_dirs = [Path(p) for p in ("/usr/lib/x86_64-linux-gnu/alsa-lib",
                                     "/usr/lib/aarch64-linux-gnu/alsa-lib", "/usr/lib/alsa-lib",
                                     "/usr/lib64/alsa-lib")]
    if not any((d / "libasound_module_pcm_pulse.so").exists() for d in plugin_dirs):
        raise PulseUnavailable("the ALSA pulse plugin (libasound_module_pcm_pulse.so) is missing "
                               "(apt-get install libasound2-plugins)")


def client_env(root: Path, base: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for clients of the server whose runtime dir is `root`/runtime."""
    env = dict(os.environ if base is None else base)
    runtime = root / "runtime"
    env.update({
        "PULSE_RUNTIME_PATH": str(runtime),
        "PULSE_STATE_PATH": str(root / "state"),
        "PULSE_SERVER": f"unix:{runtime / 'native'}",
        "PULSE_CLIENTCONFIG": str(root / "client.conf"),
        "PULSE_COOKIE": str(root / "cookie"),
        "ALSA_CONFIG_PATH": str(root / "asound.conf"),
        "JACK_NO_START_SERVER": "1",
    })
    env.pop("PULSE_SINK", None)
    env.pop("PULSE_SOURCE", None)
    return env


def start(root: Path, timeout: float = 20, speaker_rate: int = SPEAKER_RATE,
          tap: bool = False, hotplug: bool = False, array_channels: int = 0) -> PulseServer:
    """Start the server with its runtime under `root` (an existing, empty directory).
    `hotplug`: add the `usbmic`/`usbspeaker` devices that tests unplug (see `_HOTPLUG`);
    `array_channels`: add the `array` source of that many channels (see `_ARRAY`)."""
    check_tools()
    runtime = root / "runtime"
    for sub in (runtime, root / "state"):
        sub.mkdir(mode=0o700, parents=True, exist_ok=True)
    (root / "client.conf").write_text("autospawn = no\n")
    (root / "asound.conf").write_text(_ALSA.format(system=SYSTEM_ALSA_CONF)
                                      + (_ALSA_HOTPLUG if hotplug else "")
                                      + (_ALSA_ARRAY if array_channels else ""))
    script = root / "test.pa"
    script.write_text(_SCRIPT.format(socket=runtime / "native", mic_rate=MIC_RATE,
                                    speaker_rate=speaker_rate)
                      + (_TAP.format(mic_rate=MIC_RATE) if tap else "")
                      + (_HOTPLUG.format(speaker_rate=speaker_rate) if hotplug else "")
                      + (_ARRAY.format(mic_rate=MIC_RATE, channels=array_channels,
                                       channel_map=ALSA_CHANNEL_MAPS[array_channels])
                         if array_channels else ""))
    env = client_env(root)
    server = PulseServer(root=root, env=env)
    server_env = {**env, "XDG_CONFIG_HOME": str(root / "config")}  # nothing in ~/.config
    if hotplug:
        # The server reads PULSE_CONFIG, not $XDG_CONFIG_HOME/pulse/daemon.conf, as root.
        (root / "daemon.conf").write_text(_DAEMON_HOTPLUG)
        server_env["PULSE_CONFIG"] = str(root / "daemon.conf")
    server._launch = (script, server_env, timeout)
    server.restart()
    return server


@contextlib.contextmanager
def pulse_server(speaker_rate: int = SPEAKER_RATE, tap: bool = False,
                 hotplug: bool = False, array_channels: int = 0) -> Iterator[PulseServer]:
    """A running private PulseAudio server; killed (and its temp dir removed) on exit.
    Raises PulseUnavailable with the reason when it cannot be started."""
    # Short path: the unix socket path must fit in sockaddr_un (108 bytes).
    root = Path(tempfile.mkdtemp(prefix="ea-pulse-"))
    server = None
    try:
        server = start(root, speaker_rate=speaker_rate, tap=tap, hotplug=hotplug,
                       array_channels=array_channels)
        yield server
    finally:
        if server is not None:
            server.close()
        shutil.rmtree(root, ignore_errors=True)


@contextlib.contextmanager
def client_environment(env: dict[str, str]) -> Iterator[None]:
    """This process as a client of the server whose `env` it is: PortAudio reads ALSA's
    configuration from the environment when it initialises. Restored afterwards."""
    saved = dict(os.environ)
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def unreachable_env(root: Path, base: dict[str, str] | None = None) -> dict[str, str]:
    """Environment in which neither PulseAudio nor any ALSA card is reachable: PULSE_SERVER
    names a socket that does not exist (autospawn off) and ALSA's default stays the system
    one (on a machine with no card, nothing opens)."""
    runtime = root / "runtime"
    runtime.mkdir(mode=0o700, parents=True, exist_ok=True)
    (root / "client.conf").write_text("autospawn = no\n")
    env = dict(os.environ if base is None else base)
    env.update({
        "PULSE_RUNTIME_PATH": str(runtime),
        "PULSE_SERVER": f"unix:{runtime / 'no-such-socket'}",
        "PULSE_CLIENTCONFIG": str(root / "client.conf"),
        "JACK_NO_START_SERVER": "1",
    })
    env.pop("ALSA_CONFIG_PATH", None)
    return env
