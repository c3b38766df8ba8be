"""The `edge-agent` command as the tests run it, and the config files they give it: one runner,
one config writer.

A test that checks what a user meets (messages, exit codes, what a killed process leaves)
runs the real command in a child process, never the CLI function in-process; its environment
never carries the developer's $EDGE_AGENT_CONFIG, so only the config the test names is read.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Collection, Mapping
from pathlib import Path

COMMAND = (sys.executable, "-m", "edge_agent")
"""`edge-agent`, from this checkout's package."""


def command(*args: str | Path, config: Path | None = None) -> list[str]:
    """The argv of `edge-agent [-c CONFIG] ARGS` (for a child a test drives itself)."""
    return [*COMMAND, *(["-c", str(config)] if config is not None else []), *map(str, args)]


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
