"""`bench latency --sound-server default`: the call through the sound server the user has.

The private rig (`pulse_rig`) is a PulseAudio of the bench's own, built to measure: the speaker
sink runs at the voice's rate (22.05 kHz mono) and the microphone at 16 kHz mono, so nothing is
converted, and ALSA's default PCM is pointed at it by a generated configuration. A user's server
is not built like that: its devices run at its default sample spec (PulseAudio's daemon.conf:
44.1 kHz stereo; PipeWire: 48 kHz), each of the agent's streams is resampled and remixed, and
ALSA reaches it through the system's own configuration (`/etc/alsa/conf.d/99-pulse.conf`).

`borrowed_server` borrows that server, found as any of its clients finds it (PULSE_SERVER, else
the user's runtime socket): it adds the bench's virtual devices at the server's default sample
spec (the speaker, a microphone that the caller's lines are played into, the tap that records
both sides on one clock), points only the agent's streams at them (PULSE_SINK and PULSE_SOURCE,
read by libpulse and so by ALSA's pulse plugin: the user's default devices and every other
program's streams stay where they are) and unloads them at the end, whatever happened. Devices a
killed run left behind are unloaded by the next one (their names carry the run's process id).
(A server whose only device is its stand-in, module-always-sink's `auto_null`, drops it when
the bench's sink appears and takes the bench's devices as its defaults for the call: there was
no sound device to keep.)

`StreamWatch` reads, once a second while the call runs, what the server says of the agent's two
streams (its sample spec, the resampler, the audio buffered in the stream and in the device), in
either mode: where the rig and the user's server differ, these say why.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import statistics
import subprocess
import tempfile
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TypedDict

from edge_agent.audio.device import MIC_RATE
from edge_agent.bench import pulse_rig

SOUND_SERVERS = {"private": "a private PulseAudio server", "default": "your sound server"}
"""`bench latency --sound-server`, and how the bench names each: the bench's own PulseAudio
(`pulse_rig`, the default), or the server the user has, with the bench's devices added for the
call (`borrowed_server`)."""
MARK = "edge_agent_bench_"
"""Every device the bench adds to a borrowed server is named MARK + process id + "_" + the
rig's name for it ("speaker", "micsink", "mic", "tap")."""
_WATCH_EVERY_S = 1.0


class StreamFacts(TypedDict):
    """What the sound server says of one of the agent's streams, over the call."""

    device: str
    """The sink or source the stream is connected to."""
    sample_spec: str
    """The stream's own format, e.g. "s16le 1ch 22050Hz" (the device's may differ)."""
    device_sample_spec: str
    """The device's format: where it differs, the server converts every sample."""
    resample_method: str
    """The server's resampler for this stream ("" when it reports none)."""
    buffer_latency_ms: float
    """Audio held in the stream's buffer, median of the readings (PulseAudio's "Buffer
    Latency")."""
    device_latency_ms: float
    """Audio held by the device behind it, median of the readings ("Sink Latency" / "Source
    Latency")."""
    readings: int
    """How many times it was read."""


class ServerFacts(TypedDict):
    """The sound server a `bench latency` call went through."""

    mode: str
    """"private" (the bench's own PulseAudio, devices at the agent's rates) or "default" (the
    user's server, devices at its default sample spec)."""
    server: str
    """Its name and version, as `pactl info` gives them."""
    default_sample_spec: str
    """The format of the devices it makes by default."""
    speaker: StreamFacts | None
    """The agent's playback stream (None: never seen on the bench's speaker)."""
    microphone: StreamFacts | None
    """The agent's capture stream (None: never seen on the bench's microphone)."""


class NotReachedError(pulse_rig.PulseUnavailable):
    """The agent's streams did not reach the bench's devices on the borrowed server."""


@contextlib.contextmanager
def borrowed_server(environ: Mapping[str, str] | None = None
                    ) -> Iterator[pulse_rig.PulseServer]:
    """The user's running sound server (the one a client with `environ`, default this
    process's environment, reaches) with the bench's devices added (see the module docstring);
    they are unloaded when the block ends. Raises PulseUnavailable, saying why, when no server
    answers or a device cannot be added."""
    for tool in ("pactl", "paplay", "parec"):
        if shutil.which(tool) is None:
            raise pulse_rig.PulseUnavailable(
                f"{tool} not found: the bench talks to your sound server with PulseAudio's "
                "tools (apt-get install pulseaudio-utils; with PipeWire, pipewire-pulse serves "
                "them)")
    env = dict(os.environ if environ is None else environ)
    env.pop("PULSE_SINK", None)
    env.pop("PULSE_SOURCE", None)
    prefix = f"{MARK}{os.getpid()}_"
    root = Path(tempfile.mkdtemp(prefix="ea-borrowed-"))
    server = pulse_rig.PulseServer(root=root, env=env, prefix=prefix)
    loaded: list[str] = []
    try:
        try:
            server.pactl("info", timeout=5)
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            raise pulse_rig.PulseUnavailable(
                f"no sound server answers ({exc}); start your desktop's sound server (PulseAudio "
                "or PipeWire with pipewire-pulse), or measure on the bench's own server "
                "(--sound-server private)") from None
        _unload_left_behind(server)
        for module, *args in _devices(prefix):
            try:
                loaded.append(server.pactl("load-module", module, *args).strip())
            except RuntimeError as exc:
                raise pulse_rig.PulseUnavailable(
                    f"your sound server refused the bench's device ({exc})") from None
        server.env.update({"PULSE_SINK": prefix + "speaker", "PULSE_SOURCE": prefix + "mic"})
        yield server
    finally:
        server.close()
        for module in reversed(loaded):
            with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
                server.pactl("unload-module", module)
        shutil.rmtree(root, ignore_errors=True)


def _devices(prefix: str) -> list[list[str]]:
    """The modules that add the bench's devices, in load order. The speaker and the microphone
    take the server's default format (no rate or channels given), as a desktop's devices do;
    the tap is the instrument, the same as the rig's (`pulse_rig`: 16 kHz stereo, two identical
    loopbacks)."""
    def described(name: str) -> str:
        return f"device.description={prefix}{name}"

    loopback = ["latency_msec=20", "channels=1", "source_dont_move=true", "sink_dont_move=true"]
    return [
        ["module-null-sink", f"sink_name={prefix}speaker", f"sink_properties={described('speaker')}"],
        ["module-null-sink", f"sink_name={prefix}micsink", f"sink_properties={described('micsink')}"],
        ["module-remap-source", f"master={prefix}micsink.monitor", f"source_name={prefix}mic",
         f"source_properties={described('mic')}"],
        ["module-null-sink", f"sink_name={prefix}tap", f"rate={MIC_RATE}", "channels=2",
         "format=s16le", "channel_map=front-left,front-right",
         f"sink_properties={described('tap')}"],
        ["module-loopback", f"source={prefix}micsink.monitor", f"sink={prefix}tap",
         "channel_map=front-left", *loopback],
        ["module-loopback", f"source={prefix}speaker.monitor", f"sink={prefix}tap",
         "channel_map=front-right", *loopback],
    ]


def _unload_left_behind(server: pulse_rig.PulseServer) -> None:
    """Unload the devices of earlier bench runs whose process is gone (killed mid-call)."""
    pattern = re.compile(rf"{MARK}(\d+)_")
    for line in server.pactl("list", "short", "modules").splitlines():
        index, _, args = [*line.split("\t"), "", ""][:3]
        found = pattern.search(args)
        if found and not pulse_rig.alive(int(found.group(1))):
            with contextlib.suppress(RuntimeError):
                server.pactl("unload-module", index)


def server_name(server: pulse_rig.PulseServer) -> tuple[str, str]:
    """(name and version, default sample spec) from `pactl info`."""
    info = _fields(server.pactl("info"))
    return (f"{info.get('Server Name', '?')} {info.get('Server Version', '?')}",
            info.get("Default Sample Specification", "?"))


def _fields(block: str) -> dict[str, str]:
    """`Key: value` lines of a pactl block (top-level keys only)."""
    fields: dict[str, str] = {}
    for line in block.splitlines():
        key, sep, value = line.strip().partition(": ")
        if sep and key not in fields:
            fields[key] = value.strip()
    return fields


def _usec_ms(value: str) -> float | None:
    found = re.match(r"(\d+) usec", value)
    return int(found.group(1)) / 1000 if found else None


class StreamWatch:
    """Reads the agent's streams on `server` (the streams of process `pid`, default this one,
    on the bench's speaker and microphone) once a second on a thread of its own, from `start`
    to `stop`."""

    def __init__(self, server: pulse_rig.PulseServer, pid: int | None = None) -> None:
        self._server = server
        self._pid = str(os.getpid() if pid is None else pid)
        self._readings: dict[str, list[dict[str, str]]] = {"sink-inputs": [],
                                                           "source-outputs": []}
        self._devices: dict[str, dict[str, tuple[str, str]]] = {}  # "sinks": {index: (name, spec)}
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="stream-watch", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stopped.wait(_WATCH_EVERY_S):
            with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
                self._read()

    def _read(self) -> None:
        for kind, devices in (("sink-inputs", "sinks"), ("source-outputs", "sources")):
            for block in self._server.pactl("list", kind).split("\n\n"):
                if f'application.process.id = "{self._pid}"' in block:
                    self._readings[kind].append(_fields(block))
            if devices not in self._devices:
                self._devices[devices] = _device_specs(self._server.pactl("list", devices))

    def facts(self) -> tuple[StreamFacts | None, StreamFacts | None]:
        """(speaker, microphone): the agent's streams on the bench's devices, over the call."""
        return (self._stream("sink-inputs", "sinks", "Sink", self._server.prefix + "speaker"),
                self._stream("source-outputs", "sources", "Source",
                             self._server.prefix + "mic"))

    def _stream(self, kind: str, devices: str, key: str, device: str) -> StreamFacts | None:
        specs = self._devices.get(devices, {})
        readings = [r for r in self._readings[kind]
                    if specs.get(r.get(key, ""), ("", ""))[0] == device]
        if not readings:
            return None
        last = readings[-1]

        def median(field: str) -> float:
            values = [v for v in (_usec_ms(r.get(field, "")) for r in readings) if v is not None]
            return round(statistics.median(values), 1) if values else 0.0

        return StreamFacts(device=device, sample_spec=last.get("Sample Specification", ""),
                           device_sample_spec=specs[last[key]][1],
                           resample_method=last.get("Resample method", ""),
                           buffer_latency_ms=median("Buffer Latency"),
                           device_latency_ms=median(f"{key} Latency"),
                           readings=len(readings))


def _device_specs(listing: str) -> dict[str, tuple[str, str]]:
    """index -> (name, sample spec) of each sink or source in a `pactl list sinks|sources`."""
    specs: dict[str, tuple[str, str]] = {}
    for block in listing.split("\n\n"):
        head = block.strip().splitlines()[0] if block.strip() else ""
        found = re.match(r"(?:Sink|Source) #(\d+)", head)
        if found:
            fields = _fields(block)
            specs[found.group(1)] = (fields.get("Name", ""),
                                     fields.get("Sample Specification", ""))
    return specs


def check_reached(server: pulse_rig.PulseServer, timeout: float) -> None:
    """Wait until the agent's streams are on the bench's speaker and microphone; raise
    NotReachedError, saying what to do, if they never are (ALSA's default does not go through
    the PulseAudio plugin, so PULSE_SINK and PULSE_SOURCE were not read)."""
    for kind, device in (("sink-inputs", "speaker"), ("source-outputs", "mic")):
        if not server.wait_for_stream(kind, device, timeout):
            raise NotReachedError(
                f"the agent's {'playback' if kind == 'sink-inputs' else 'capture'} stream did "
                f"not reach the bench's {server.prefix + device} within {timeout:.0f} s: ALSA's "
                "default device here does not go through PulseAudio's ALSA plugin (aplay -L "
                "lists `default` as something else), so the bench cannot steer the agent's "
                "streams; make PulseAudio ALSA's default (the pulseaudio package's "
                "/etc/alsa/conf.d/99-pulse.conf, or pipewire-alsa's), or use --sound-server "
                "private")
