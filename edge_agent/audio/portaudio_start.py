"""Starting PortAudio, and saying clearly why it failed.

Start-up failures. Every PyAudio/PortAudio call made while starting (PortAudio initialisation,
device enumeration, stream open) turns OSError/ValueError into `AudioDeviceError` (exit 5, one
line) that quotes what PortAudio/ALSA printed and says how to fix it. ALSA and JACK print to
fd 2 directly, and print harmless probe noise on every start, so fd 2 is redirected to a
temporary file around those calls (`_native_stderr`): the text is dropped on success and its
relevant last lines (`native_summary`) go into the error on failure.

A broken ALSA configuration does not always fail cleanly: with ALSA_CONFIG_PATH naming a
missing or empty file, PortAudio's ALSA host API hits `assert(devIdx < numDeviceNames)` in
BuildDeviceList and aborts the whole process (SIGABRT), and nothing in-process can report it (a
SIGABRT handler cannot run Python safely once the C library is aborting). So `open_pyaudio`
first initialises PortAudio once in a throwaway child (`sys.executable -c ...`,
`_probe_portaudio`): if that child dies by a signal (or hangs past PROBE_TIMEOUT and is killed),
the error is reported from here with the child's native stderr; otherwise this process
initialises PortAudio itself, which then cannot crash the same way (same environment, same
configuration). Measured on a 2-core x86 VM (no sound card; then with a PulseAudio server as
ALSA's default): `open_pyaudio` took 33-40 ms without the probe and 155-200 ms with it (median
of 6-8), i.e. the probe adds about 0.15 s, mostly the child interpreter starting and importing
pyaudio. That is paid once per `run`/benchmark, before models load (seconds), so the probe
always runs rather than behind a guess about when the configuration might be broken: checking
for the known trigger instead (a missing ALSA_CONFIG_PATH file) would miss the others found
while reproducing this (an empty file, a directory). The child's stderr goes to a file, not a
pipe, so a daemon it might spawn (PulseAudio autospawn) cannot hold the read end open; it is
always reaped (no zombie), and it turns core dumps off so the abort leaves no core file.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edge_agent.errors import AudioDeviceError
from edge_agent.machine.child_probe import python_child_env, read_tail, run_child, scratch_file

SYSTEM_ALSA_CONF = Path("/usr/share/alsa/alsa.conf")
PROBE_TIMEOUT = 30.0
"""Seconds the PortAudio probe child may take; it normally takes 0.2 s, so only a hang (an
unresponsive sound server behind an ALSA plugin) gets near this."""

_NATIVE_LINES = 4
_NATIVE_LINE_CHARS = 240
_NOISE = re.compile(
    r"jack server is not running|JackShmReadWritePtr|Cannot connect to server (socket|request)")
"""JACK's complaints when no JACK server runs: printed on every start, never the cause."""
_PROBE = (
    "from edge_agent.machine.child_probe import forbid_core_files\n"
    "forbid_core_files()\n"
    "from pyaudio import _portaudio as pa\n"
    "pa.initialize()\n"
    "pa.terminate()\n"
)
PYAUDIO_ERRORS = (OSError, ValueError)
"""What PyAudio raises for PortAudio errors (IOError is OSError) and for rejected parameters."""
_capture_lock = threading.RLock()
"""fd 2 is process-wide: two threads capturing at once would restore each other's fd."""


@dataclass
class _Captured:
    text: str = ""


@contextlib.contextmanager
def native_stderr() -> Iterator[_Captured]:
    """Send fd 2 (where ALSA, JACK and PortAudio print) to a temporary file for the duration;
    the text is in the yielded object once the block has exited."""
    captured = _Captured()
    with _capture_lock, scratch_file() as sink:
        sys.stderr.flush()
        saved = os.dup(2)
        try:
            os.dup2(sink.fileno(), 2)
            try:
                yield captured
            finally:
                sys.stderr.flush()
                os.dup2(saved, 2)
        finally:
            os.close(saved)
        captured.text = read_tail(sink)


def native_summary(text: str, lines: int = _NATIVE_LINES) -> str:
    """The lines of native stderr that explain a failure, joined into one line (" | ").

    ALSA's own lines ("ALSA lib ...") and a failed C assertion say what is wrong; PortAudio's
    "Expression '...' failed" lines only trace where it noticed, and JACK's lines are noise, so
    those are used only when nothing better was printed. Repeats (ALSA reports a missing file
    once per lookup) are kept once. The last `lines` lines are kept: the cause is printed last.
    """
    seen: set[str] = set()
    kept: list[str] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line in seen or _NOISE.search(line):
            continue
        seen.add(line)
        if len(line) > _NATIVE_LINE_CHARS:
            line = line[:_NATIVE_LINE_CHARS - 3] + "..."
        kept.append(line)
    preferred = [line for line in kept if line.startswith("ALSA lib") or "Assertion" in line]
    return " | ".join((preferred or kept)[-lines:])


def alsa_config_hint(env: Mapping[str, str], system_conf: Path = SYSTEM_ALSA_CONF) -> str:
    """How to fix a PortAudio start-up failure, which on Linux means ALSA's configuration."""
    configured = env.get("ALSA_CONFIG_PATH", "").strip()
    if configured:
        return (f"ALSA_CONFIG_PATH is set to {configured!r}, which replaces ALSA's own "
                f"configuration ({system_conf}): point it at a valid file or unset it")
    if not system_conf.is_file():
        return (f"{system_conf} is missing: reinstall ALSA's configuration files (Debian/Ubuntu: "
                "apt-get install --reinstall libasound2-data)")
    home = env.get("HOME", "")
    config_home = env.get("XDG_CONFIG_HOME", "") or (f"{home}/.config" if home else "")
    candidates = [f"{home}/.asoundrc" if home else "", f"{config_home}/alsa/asoundrc"
                  if config_home else "", "/etc/asound.conf"]
    present = [path for path in candidates if path and Path(path).is_file()]
    if present:
        return (f"check {' and '.join(present)} for errors (ALSA reads "
                f"{'them' if len(present) > 1 else 'it'} after {system_conf}; move "
                f"{'them' if len(present) > 1 else 'it'} aside to test)")
    return f"check ALSA's configuration ({system_conf}, ~/.asoundrc, /etc/asound.conf)"


def said(native: str) -> str:
    summary = native_summary(native).rstrip(".")  # the caller's sentence goes on after it
    return f"; ALSA/PortAudio said: {summary}" if summary else ""


def _probe_portaudio(timeout: float = PROBE_TIMEOUT) -> None:
    """Initialise PortAudio in a child first: a crash there is reported here (see the module
    docstring). Returns quietly when the child survived, whatever its exit status: a clean
    failure is reported by the initialisation in this process, with the same text."""
    if not sys.executable:
        return  # embedded interpreter: nothing to run the probe with
    try:
        outcome = run_child([sys.executable, "-c", _PROBE], timeout, env=python_child_env())
    except OSError:
        return  # cannot start a child: fall back to initialising in-process only
    if outcome.returncode is None:
        raise AudioDeviceError(
            f"cannot start audio: PortAudio did not finish initialising ALSA within "
            f"{timeout:.0f} s{said(outcome.native)}. A sound server behind ALSA (PulseAudio, "
            f"PipeWire, JACK) may be hung: restart it. Otherwise: {alsa_config_hint(os.environ)}")
    if outcome.crashed:
        raise AudioDeviceError(
            f"cannot start audio: PortAudio crashed with {outcome.signal} while "
            f"reading ALSA's configuration and listing audio devices{said(outcome.native)}. Fix: "
            f"{alsa_config_hint(os.environ)}")


def open_pyaudio(probe: bool = True) -> Any:
    """A `pyaudio.PyAudio` (PortAudio initialised), or AudioDeviceError saying why not.
    `probe`: initialise in a child process first (see the module docstring)."""
    try:
        import pyaudio
    except ImportError as exc:  # pyaudio itself, or libportaudio.so.2 it links against
        raise AudioDeviceError(
            f"cannot load PyAudio/PortAudio: {exc}. Install PortAudio (Debian/Ubuntu: apt-get "
            "install libportaudio2) and PyAudio (pip install pyaudio)") from None
    if probe:
        _probe_portaudio()
    failure: Exception | None = None
    with native_stderr() as native:
        try:
            return pyaudio.PyAudio()
        except PYAUDIO_ERRORS as exc:
            failure = exc
    raise AudioDeviceError(
        f"cannot start audio: PortAudio failed to initialise ALSA ({failure}){said(native.text)}"
        f". Fix: {alsa_config_hint(os.environ)}")
