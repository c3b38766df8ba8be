"""The results file of `edge-agent bench` (`--json OUT`): its typed shape, and the JSON Schema
shipped with the package that it validates against (`bench.schema.json`).

One document per run: the machine it ran on, the models used, and one record per part, in the
order they ran. A part's `result` is exactly what `edge-agent bench <part> --json FILE` writes,
every raw sample included (not only percentiles); its `rows` are the figures of the summary
table. A part that could not run on this machine is "skipped" with the reason, one that failed
"failed" with its error; both have no result.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any, Literal, TypedDict

FORMAT = "edge-agent-bench/1"
"""The document's `format`: changes when a field changes meaning or goes away."""

PartStatus = Literal["ok", "skipped", "failed"]


class MachineInfo(TypedDict):
    """The machine a run measured."""

    hostname: str
    cpu_model: str
    """As /proc/cpuinfo names it ("model name" on x86, "Model" on a Raspberry Pi)."""
    cpu_cores: int
    """Cores this process may run on."""
    ram_total_mb: int
    os: str
    """The distribution (/etc/os-release PRETTY_NAME), else the system's name."""
    kernel: str
    arch: str
    python: str
    edge_agent: str
    """The edge-agent version that ran."""
    date: str
    """When the run started, ISO 8601 with its UTC offset."""
    load_before: list[float]
    """1, 5 and 15-minute load averages when the run started (a busy machine measures slow)."""
    load_after: list[float]
    """The same when it ended."""


class ModelInfo(TypedDict):
    """A model the configuration uses."""

    kind: str
    """"vad", "stt", "tts", "llm", "turn" (the end-of-turn model) or "wake"."""
    engine: str
    """What runs it: silero, moonshine, pocketsphinx, vosk, piper, llama.cpp, scripted or
    smart-turn."""
    name: str
    """The config's reference: a catalog name or a path."""
    path: str
    """Where it resolved; "" when it is missing (its error is in `problem`)."""
    problem: str
    """Why it could not be resolved; "" when it was."""


class SummaryRow(TypedDict):
    """One line of the summary table."""

    figure: str
    """What was measured."""
    unit: str
    """ms, s, %, MB, x real time, tokens/s, or "" for a count."""
    n: int
    """How many samples the figure comes from."""
    p50: float | None
    """Median of the samples (None for a single figure)."""
    p95: float | None
    """95th percentile of the samples (None for a single figure)."""
    value: float | None
    """A single figure (a rate, a count, a total); None when p50/p95 are given."""
    note: str
    """What the value is out of, or a target to read it against."""


class PartRecord(TypedDict):
    """One part of the run."""

    name: str
    """engines, latency, heard, stt, backchannel, memory, rooms or service."""
    title: str
    """What the part measures, in a few words."""
    status: PartStatus
    reason: str
    """Why it was skipped, or the error it failed with; "" when ok."""
    seconds: float
    """Wall time the part took, shared engines loaded in an earlier part excepted."""
    settings: dict[str, Any]
    """How much it measured (runs, clips, turns, ...): the quick or the full sizes."""
    result: dict[str, Any] | None
    """The part's JSON (what `edge-agent bench <part> --json` writes); None unless ok."""
    rows: list[SummaryRow]
    """Its figures in the summary table; empty unless ok."""


class BenchDocument(TypedDict):
    """What `edge-agent bench --json OUT` writes."""

    format: str
    """`FORMAT`."""
    quick: bool
    """The quick run (`--quick`): fewer runs, clips and turns; nothing killed or unplugged."""
    seed: int
    ok: bool
    """No part failed (skipped parts do not count)."""
    seconds: float
    """Wall time of the whole run."""
    machine: MachineInfo
    models: list[ModelInfo]
    parts: list[PartRecord]


def schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of `BenchDocument`, as shipped in the package."""
    text = resources.files("edge_agent.bench").joinpath("bench.schema.json").read_text("utf-8")
    loaded: dict[str, Any] = json.loads(text)
    return loaded
