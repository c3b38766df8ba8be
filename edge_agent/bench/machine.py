"""The machine a benchmark ran on and the models it used, for the results and the table."""

from __future__ import annotations

import contextlib
import os
import platform
import socket
from datetime import datetime
from pathlib import Path

from edge_agent import __version__
from edge_agent.bench.document import MachineInfo, ModelInfo
from edge_agent.config import Config
from edge_agent.engines.cpu_share import usable_cores
from edge_agent.errors import EdgeAgentError
from edge_agent.models.catalog import load_catalog


def machine_info(started: datetime) -> MachineInfo:
    """This machine, as the run found it at `started` (load_after is filled at the end)."""
    load = load_average()
    return {"hostname": socket.gethostname(), "cpu_model": cpu_model(),
            "cpu_cores": usable_cores(), "ram_total_mb": _ram_total_mb(),
            "os": _os_name(), "kernel": platform.release(), "arch": platform.machine(),
            "python": platform.python_version(), "edge_agent": __version__,
            "date": started.isoformat(timespec="seconds"), "load_before": load,
            "load_after": load}


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def cpu_model() -> str:
    """x86 says "model name"; ARM boards (a Raspberry Pi) say "Model" or "Hardware"."""
    found: dict[str, str] = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            key, sep, value = line.partition(":")
            if sep and value.strip():
                found.setdefault(key.strip(), value.strip())
    return next((found[k] for k in ("model name", "Model", "Hardware", "cpu model") if k in found),
                platform.processor() or platform.machine() or "unknown CPU")


def _ram_total_mb() -> int:
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) // 1024
    return 0


def _os_name() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                return line.partition("=")[2].strip().strip('"')
    return platform.system()


_ENGINES = {"vad": "silero", "tts": "piper", "llm": "llama.cpp", "turn": "smart-turn"}


def models_used(config: Config) -> list[ModelInfo]:
    """Every model the config uses, resolved (a missing one says why)."""
    catalog = load_catalog(config.models_dir)
    models: list[ModelInfo] = []
    for use in config.models_in_use(with_llm=True):
        try:
            path, problem = str(catalog.resolve(use.reference, use.kind, use.key,
                                                config.source)), ""
        except EdgeAgentError as exc:
            path, problem = "", str(exc)
        engine = config.stt_engine if use.kind == "stt" else _ENGINES[use.kind]
        models.append({"kind": use.kind, "engine": engine, "name": use.reference, "path": path,
                       "problem": problem})
    if config.llm.engine != "llama":
        models.append({"kind": "llm", "engine": "scripted", "name": config.llm.script,
                       "path": config.llm.script, "problem": ""})
    return models
