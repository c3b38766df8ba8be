"""The `edge-agent` command as the tests run it, and the config files they give it: one runner,
one config writer.

A test that checks what a user meets (messages, exit codes, what a killed process leaves)
runs the real command in a child process, never the CLI function in-process; its environment
never carries the developer's $EDGE_AGENT_CONFIG, so only the config the test names is read.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
"""This checkout: the directory a child process needs on its path to import `tests`."""
COMMAND = (sys.executable, "-m", "edge_agent")
"""`edge-agent`, from this checkout's package."""


def command(*args: str | Path, config: Path | None = None) -> list[str]:
    """The argv of `edge-agent [-c CONFIG] ARGS` (for a child a test drives itself)."""
    return [*COMMAND, *(["-c", str(config)] if config is not None else []), *map(str, args)]


def socket_activator(*listen: str, names: str, env: Mapping[str, str]) -> list[str]:
    """The argv prefix that runs a command as systemd's socket activation would: listening at
    each `listen` address, the sockets handed over named `names` ("a:b"), the command's
    environment `env` (the activator passes on nothing else). Skips where Debian's
    systemd-socket-activate (package systemd) is missing; .ci/run installs it."""
    import pytest

    found = shutil.which("systemd-socket-activate")
    if found is None:
        assert not os.environ.get("CI"), ".ci/run must apt-get install systemd"
        pytest.skip("no systemd-socket-activate (Debian package systemd)")
    return [found, *(f"--listen={address}" for address in listen), f"--fdname={names}",
            *(f"--setenv={name}={value}" for name, value in env.items())]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_listening(port: int, process: subprocess.Popen[Any], seconds: float = 120) -> bool:
    """Until something accepts connections on 127.0.0.1:`port` (True), `process` ends or
    `seconds` pass (False). The probe's own connection is closed at once."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and process.poll() is None:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return True
        time.sleep(0.05)
    return False


def environment(extra: Mapping[str, str] | None = None, drop: Collection[str] = ()
                ) -> dict[str, str]:
    """This process's environment without $EDGE_AGENT_CONFIG and the variables named in `drop`
    (in any case: "http_proxy" drops HTTP_PROXY too), plus `extra`."""
    dropped = {name.lower() for name in (*drop, "EDGE_AGENT_CONFIG")}
    env = {k: v for k, v in os.environ.items() if k.lower() not in dropped}
    return {**env, **(extra or {})}


def edge_agent(*args: str | Path, config: Path | None = None, timeout: float = 120,
               env: Mapping[str, str] | None = None, drop: Collection[str] = (),
               cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run `edge-agent [-c CONFIG] ARGS` to its end: its exit status and its output as text
    (stdin empty; the environment is `environment(env, drop)`)."""
    return subprocess.run(command(*args, config=config), capture_output=True, text=True,
                          env=environment(env, drop), cwd=cwd, timeout=timeout, check=False,
                          stdin=subprocess.DEVNULL)


def write_config(directory: Path, text: str = "", *, name: str = "edge-agent.toml",
                 data_dir: Path | None = None) -> Path:
    """A config file `directory/name` that keeps its data in `data_dir` (default
    `directory/data`, so nothing touches the user's), followed by `text` (more TOML)."""
    path = directory / name
    data = data_dir if data_dir is not None else directory / "data"
    path.write_text(f"data_dir = {json.dumps(str(data))}\n{text}", encoding="utf-8")
    return path


@dataclass(frozen=True)
class Demo:
    """An `edge-agent demo` that ended well: its record, its console, its database."""

    record: dict[str, Any]
    stdout: str
    database: Path


def run_demo(directory: Path, call: str, config: str, timeout: float = 240) -> Demo:
    """`edge-agent demo` of the call file `call` (TOML text) under a config of `config` (more
    TOML), recorded in `directory/memory.db`; fails the test unless it exits 0."""
    settings = write_config(directory, config)
    call_file, out = directory / "call.toml", directory / "session.json"
    call_file.write_text(call, encoding="utf-8")
    database = directory / "memory.db"
    done = edge_agent("demo", "--call", call_file, "--json", out, "--db", database,
                      config=settings, timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    return Demo(json.loads(out.read_text(encoding="utf-8")), done.stdout, database)


@dataclass(frozen=True)
class BenchRun:
    """One `edge-agent bench --quick --json` run to its end: its exit, output, results, wall."""

    done: subprocess.CompletedProcess[str]
    document: dict[str, Any]
    wall_s: float
