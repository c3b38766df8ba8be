"""The agent under test as a child process, watched as systemd watches a service: a notify
socket, a journald-like stderr stream, CPU time and memory from /proc, and a config file of
its own (`bench service`)."""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import threading
import time
from pathlib import Path
from typing import Any

from edge_agent.config import Config
from edge_agent.models.catalog import load_catalog


class JournalStream:
    """A pipe the agent gets as its stderr, announced as systemd announces a journald stream
    ($JOURNAL_STREAM, its device and inode), read line by line as the agent writes."""

    def __init__(self) -> None:
        self._read, self.write_fd = os.pipe()
        status = os.fstat(self.write_fd)
        self.variable = f"{status.st_dev}:{status.st_ino}"
        self.lines: list[str] = []
        self._thread = threading.Thread(target=self._drain, daemon=True)
        self._thread.start()

    def _drain(self) -> None:
        with open(self._read, encoding="utf-8", errors="replace") as stream:
            for line in stream:
                self.lines.append(line.rstrip("\n"))

    def started(self) -> None:
        """The agent holds the write end now: close ours, so the end of its output is seen."""
        os.close(self.write_fd)

    def finish(self, timeout: float = 30.0) -> list[str]:
        """Every line, once the agent has exited (its end of the pipe closed)."""
        self._thread.join(timeout)
        return list(self.lines)


class NotifyListener:
    """A datagram socket that receives what the agent tells systemd, with arrival times."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / "notify.sock"
        self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._socket.bind(str(self.path))
        self.messages: list[tuple[float, str]] = []
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._receive, daemon=True)
        self._thread.start()

    def _receive(self) -> None:
        while True:
            try:
                data = self._socket.recv(4096)
            except OSError:
                return
            with self._changed:
                for line in data.decode("utf-8", "replace").splitlines():
                    self.messages.append((time.monotonic(), line))
                self._changed.notify_all()

    def wait_for(self, message: str, after: float, timeout: float) -> float:
        """When `message` arrived after `after` (monotonic); RuntimeError after `timeout`."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                for at, line in self.messages:
                    if at >= after and line == message:
                        return at
                left = deadline - time.monotonic()
                if left <= 0:
                    raise RuntimeError(f"the agent did not send {message!r} within {timeout:.0f} s"
                                       f" (got: {[m for _, m in self.messages][-8:]})")
                self._changed.wait(left)

    def count(self, message: str, start: float, end: float) -> int:
        with self._changed:
            return sum(1 for at, line in self.messages if line == message and start <= at <= end)

    def close(self) -> None:
        self._socket.close()


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])  # utime + stime, all threads
    return ticks / os.sysconf("SC_CLK_TCK")


def with_model_paths(config: Config) -> Config:
    """`config` with each model it names resolved to its path: the child runs on a data dir of
    its own, where a model fetched into the user's data dir would not be found by name."""
    catalog = load_catalog(config.models_dir)
    for use in config.models_in_use():
        section, _, key = use.key.partition(".")
        if section == "stt" and key == "engine":
            continue  # PocketSphinx: its model comes with its wheel, not from a key
        path = catalog.resolve(use.reference, use.kind, use.key, config.source)
        config = dataclasses.replace(config, **{section: dataclasses.replace(
            getattr(config, section), **{key: str(path)})})
    return config


def to_toml(config: Config) -> str:
    """`config` as a TOML file that loads back to the same values (a child's config)."""
    lines = [f"data_dir = {json.dumps(config.data_dir)}"]
    for section in dataclasses.fields(config):
        value = getattr(config, section.name)
        if not dataclasses.is_dataclass(value):
            continue
        lines.append(f"[{section.name}]")
        for item in dataclasses.fields(value):
            lines.append(f"{item.name} = {_toml_value(getattr(value, item.name))}")
    return "\n".join(lines) + "\n"


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    return json.dumps(value, ensure_ascii=False)
