"""The machine a benchmark ran on and the models it used, for the results and the table."""

from __future__ import annotations

import platform
import socket
from datetime import datetime

from edge_agent import __version__
from edge_agent.bench.document import MachineInfo, ModelInfo
from edge_agent.config import Config
from edge_agent.engines.cpu_share import usable_cores
from edge_agent.errors import EdgeAgentError
from edge_agent.machine import cpu_model, load_average, memory_bytes, os_name
from edge_agent.models.catalog import load_catalog


def machine_info(started: datetime) -> MachineInfo:
    """This machine, as the run found it at `started` (load_after is filled at the end)."""
    load = load_average()
    return {"hostname": socket.gethostname(), "cpu_model": cpu_model(),
            "cpu_cores": usable_cores(), "ram_total_mb": memory_bytes()[0] >> 20,
            "os": os_name(), "kernel": platform.release(), "arch": platform.machine(),
            "python": platform.python_version(), "edge_agent": __version__,
            "date": started.isoformat(timespec="seconds"), "load_before": load,
            "load_after": load}


_ENGINES = {"vad": "silero", "tts": "piper", "llm": "llama.cpp", "turn": "smart-turn",
            "wake": "microwakeword"}


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
