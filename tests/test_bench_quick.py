"""`edge-agent bench --quick` as a user runs it: every part on this machine (real models, a
private PulseAudio server), one table, and a results file that validates against the schema
shipped in the package. Its figures are benchmarks, not asserted against thresholds; what is
asserted is that every part ran and kept its raw samples."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest

from edge_agent.bench.document import schema
from tests.cli import BenchRun

pytestmark = [pytest.mark.audio, pytest.mark.models, pytest.mark.realtime]

PARTS = ("engines", "latency", "heard", "stt", "backchannel", "memory", "rooms", "service")


def _raw_samples(name: str, result: dict[str, Any]) -> dict[str, list[Any]]:
    """The lists of raw measurements each part must keep, by what they are."""
    if name == "engines":
        return {**{kind: result[kind]["samples"] for kind in ("tts", "stt", "llm")},
                **{f"LLM beside the {' and the '.join(together['beside'])}":
                   together["tokens_per_s"].get("values", []) for together in result["together"]}}
    if name == "latency":
        return {"answer gap": result["answer_gap_ms"].get("values", []),
                "stop": result["stop_ms"].get("values", []),
                "first audio stage": result["stages_ms"]["first_audio"].get("values", []),
                "events": result["events"]}
    if name == "heard":
        return {"trials": result["trials"]}
    if name == "stt":
        return {"rows": result["rows"]}
    if name == "backchannel":
        return {"clips": result["clips"]}
    if name == "memory":
        return {"assembly": [v for s in result["assembly_ms"].values() for v in s["values"]],
                "first token": [v for values in result["first_token_samples_ms"]["stepped"]
                                .values() for v in values]}
    if name == "rooms":
        return {"ERLE per second": [v for e in result["canceller"]["erle"]
                                    for v in e["per_second_db"]],
                "caller lines": [line for call in result["interruptions"]
                                 for line in call["lines"]],
                "replies' events": result["self_interruptions"]["events"]}
    return {"idle CPU": result["figures"]["idle_cpu_samples"],
            "idle RSS": result["figures"]["idle_rss_samples_mb"]}


def test_bench_quick_runs_every_part_and_writes_a_valid_document(bench_quick: BenchRun) -> None:
    done, document = bench_quick.done, bench_quick.document
    print(f"bench --quick: {bench_quick.wall_s:.0f} s\n{done.stdout}")  # with -s: the figures
    jsonschema.Draft202012Validator(schema()).validate(document)
    assert document["quick"] is True and document["ok"] is True
    machine = document["machine"]
    assert machine["cpu_model"] and machine["cpu_cores"] >= 1 and machine["ram_total_mb"] > 0
    assert machine["os"] and machine["kernel"] and machine["python"] and machine["edge_agent"]
    kinds = {m["kind"] for m in document["models"]}
    assert kinds == {"vad", "stt", "tts", "llm", "turn"}, document["models"]
    assert all(m["path"] and not m["problem"] for m in document["models"]), document["models"]
    records = {p["name"]: p for p in document["parts"]}
    assert tuple(records) == PARTS
    for name, record in records.items():
        assert record["status"] == "ok", (name, record["reason"])
        assert record["rows"], name
        for what, values in _raw_samples(name, record["result"]).items():
            assert values, f"{name}: no raw samples of {what}"
    # One table with the machine on stdout; progress (part, i/n, elapsed) on stderr.
    assert done.stdout.startswith("edge-agent ") and "machine: " in done.stdout
    for name in PARTS:
        assert f"\n{name:12}" in done.stdout, name
        assert f"/{len(PARTS)} {name}: ok in " in done.stderr, name
