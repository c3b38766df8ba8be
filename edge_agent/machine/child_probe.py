"""Native code tried first in a throwaway child process, so that a crash there is a report here.

A native library that dies by a signal (llama.cpp built for instructions this CPU does not run:
SIGILL; a PortAudio assertion: SIGABRT) takes the whole Python process with it, and nothing
in-process can report it. Running the risky step once in a child turns that death into an exit
status this process reads and explains. The child's output goes to temporary files, never to
pipes, so nothing it leaves behind (a daemon it spawned) can hold a pipe open, and it is always
reaped: killed when it runs past its time or when the parent is interrupted.
"""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

NATIVE_TAIL = 64 * 1024
"""Bytes of a child's stderr kept: the failure is at the end, noise before it."""

_MEANINGS = {
    signal.SIGILL: "illegal instruction",
    signal.SIGSEGV: "segmentation fault",
    signal.SIGBUS: "bus error",
    signal.SIGABRT: "aborted",
    signal.SIGFPE: "arithmetic fault",
    signal.SIGKILL: "killed: out of memory, or by another process",
}

def forbid_core_files() -> None:
    """What a probe child does first: the crash it exists to catch must not leave a core file.
    Where setrlimit is not allowed (the service unit's SystemCallFilter= denies @resources) the
    child goes on: the core then goes wherever the system sends them."""
    with contextlib.suppress(OSError, ValueError):
        resource.setrlimit(resource.RLIMIT_CORE, (0, resource.getrlimit(resource.RLIMIT_CORE)[1]))


@dataclass(frozen=True)
class ChildOutcome:
    returncode: int | None
    """The child's exit status; negative: the signal that killed it; None: it ran past its time
    (and was killed)."""
    stdout: str
    native: str
    """The end of what it printed on stderr (native libraries print their last words there)."""

    @property
    def crashed(self) -> bool:
        return self.returncode is not None and self.returncode < 0

    @property
    def signal(self) -> str:
        """`SIGILL (illegal instruction)`; "" when it did not die by a signal."""
        return signal_name(-self.returncode) if self.crashed and self.returncode else ""


def signal_name(number: int) -> str:
    try:
        known = signal.Signals(number)
    except ValueError:
        return f"signal {number}"
    meaning = _MEANINGS.get(known)
    return f"{known.name} ({meaning})" if meaning else known.name


def python_child_env() -> dict[str, str]:
    """The environment for a `sys.executable` child that imports this very edge_agent,
    wherever it was imported from (a checkout too)."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])  # the directory edge_agent/ is in
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    return env


def scratch_file() -> IO[bytes]:
    """A temporary file for a child's output; /dev/null when no temp dir is writable (the
    output is then lost, the child still runs)."""
    try:
        return tempfile.TemporaryFile()
    except OSError:
        return open(os.devnull, "w+b")


def read_tail(sink: IO[bytes], limit: int = NATIVE_TAIL) -> str:
    with contextlib.suppress(OSError):
        size = sink.seek(0, os.SEEK_END)
        sink.seek(max(0, size - limit))
        return sink.read().decode("utf-8", errors="replace")
    return ""


def run_child(argv: Sequence[str], timeout_s: float, stdin: bytes = b"",
              env: Mapping[str, str] | None = None) -> ChildOutcome:
    """Run `argv` to its end (or `timeout_s`); OSError when it cannot be started."""
    with scratch_file() as out, scratch_file() as err:
        try:
            completed = subprocess.run(list(argv), input=stdin, stdout=out, stderr=err,
                                       timeout=timeout_s, env=None if env is None else dict(env),
                                       check=False)
            returncode: int | None = completed.returncode
        except subprocess.TimeoutExpired:  # subprocess.run killed and reaped it
            returncode = None
        return ChildOutcome(returncode, read_tail(out, 1 << 20), read_tail(err))
