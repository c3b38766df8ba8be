"""`edge-agent bench`'s document against the JSON Schema shipped in the package, and the suite's
handling of parts that cannot run or fail (fake parts: no models, no sound server)."""

from __future__ import annotations

import copy
import dataclasses
import io
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from edge_agent.bench import parts as bench_parts
from edge_agent.bench.document import FORMAT, schema
from edge_agent.bench.heard import CutTrial, report
from edge_agent.bench.needs import SoundServerUnavailable
from edge_agent.bench.suite import PARTS, Part, run_suite
from edge_agent.bench.summary import heard_rows, table
from edge_agent.bench.workbench import Plan, Workbench
from edge_agent.cli import main
from edge_agent.config import Config
from edge_agent.errors import EngineError
from edge_agent.heard.truncation import HeardPolicy
from tests.cli import write_config

MACHINE = {"hostname": "kiosk", "cpu_model": "ARM Cortex-A76", "cpu_cores": 4,
           "ram_total_mb": 8000, "os": "Debian GNU/Linux 12 (bookworm)", "kernel": "6.6.51",
           "arch": "aarch64", "python": "3.11.2", "edge_agent": "0.1.0",
           "date": "2026-12-01T10:00:00+01:00", "load_before": [0.1, 0.2, 0.3],
           "load_after": [0.5, 0.3, 0.3]}
MODEL = {"kind": "tts", "engine": "piper", "name": "joe-medium", "path": "/m/joe.onnx",
         "problem": ""}


def _heard_result() -> dict[str, Any]:
    trial = CutTrial(text="We open at nine.", cut_after_ms=812.0, sample_rate=22050,
                     unit_samples=30000, estimated_samples=17900, recorded_samples=17950,
                     interrupt_ms=3.1, heard="We open", heard_by_recording="We open",
                     boundary_words=0)
    return report([trial], seed=1, policy=HeardPolicy.COMPLETED)


def _document() -> dict[str, Any]:
    result = _heard_result()
    return {"format": FORMAT, "quick": True, "seed": 1, "ok": True, "seconds": 95.2,
            "machine": dict(MACHINE), "models": [dict(MODEL)],
            "parts": [
                {"name": "heard", "title": "heard position", "status": "ok", "reason": "",
                 "seconds": 12.0, "settings": {"runs": 1}, "result": result,
                 "rows": heard_rows(result)},
                {"name": "service", "title": "the service", "status": "skipped",
                 "reason": "no PulseAudio", "seconds": 0.0, "settings": {}, "result": None,
                 "rows": []}]}


def _errors(document: dict[str, Any]) -> list[str]:
    validator = jsonschema.Draft202012Validator(schema())
    return [error.message for error in validator.iter_errors(document)]


def test_the_shipped_schema_is_a_valid_schema() -> None:
    jsonschema.Draft202012Validator.check_schema(schema())


def test_a_minimal_document_is_valid() -> None:
    assert _errors(_document()) == []


@pytest.mark.parametrize("breakage", ["no machine", "seconds as text", "cores as text",
                                      "no trials", "ok without a result",
                                      "skipped without a reason", "unknown status"])
def test_a_broken_document_is_refused(breakage: str) -> None:
    document = copy.deepcopy(_document())
    heard, service = document["parts"]
    if breakage == "no machine":
        del document["machine"]
    elif breakage == "seconds as text":
        document["seconds"] = "95 s"
    elif breakage == "cores as text":
        document["machine"]["cpu_cores"] = "2"
    elif breakage == "no trials":  # the raw samples are what the schema is for
        heard["result"]["trials"] = []
    elif breakage == "ok without a result":
        heard["result"] = None
    elif breakage == "skipped without a reason":
        service["reason"] = ""
    else:
        service["status"] = "maybe"
    assert _errors(document), breakage


def _part(name: str, run: Any, needs: tuple[Any, ...] = ()) -> Part:
    heard = next(p for p in PARTS if p.name == "heard")
    return dataclasses.replace(heard, name=name, needs=needs, run=run)


def _missing_pulse(config: Config) -> None:
    raise SoundServerUnavailable("service", "pulseaudio is not installed")


def _broken(bench: Workbench, plan: Plan) -> dict[str, Any]:
    raise EngineError("the voice crashed")


def _bug(bench: Workbench, plan: Plan) -> dict[str, Any]:
    return {}["missing"]  # type: ignore[no-any-return]


def test_skipped_and_failed_parts_are_recorded_and_the_others_still_run() -> None:
    selection = [_part("service", _heard_run, needs=(_missing_pulse,)),
                 _part("latency", _broken), _part("memory", _bug), _part("heard", _heard_run)]
    out = io.StringIO()
    document = run_suite(Config(), quick=True, seed=1, out=out, selection=selection)
    status = {p["name"]: (p["status"], p["reason"]) for p in document["parts"]}
    assert status["service"] == ("skipped", "the service benchmark needs a private PulseAudio "
                                            "server: pulseaudio is not installed")
    assert status["latency"] == ("failed", "the voice crashed")
    assert status["memory"] == ("failed", "KeyError: 'missing'")
    assert status["heard"] == ("ok", "")
    assert document["ok"] is False
    assert _errors(json.loads(json.dumps(document))) == []
    printed = table(document)
    assert "service     SKIPPED: the service benchmark needs" in printed
    assert "latency     FAILED: the voice crashed" in printed
    assert "heard position error" in printed
    progress = out.getvalue().splitlines()
    assert any("4/4 heard: ok in" in line for line in progress), progress


def _heard_run(bench: Workbench, plan: Plan) -> dict[str, Any]:
    return _heard_result()


def test_the_subcommand_and_the_suite_write_the_same_part_json(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[int, int]] = []

    def measured(bench: Workbench, runs: int, seed: int) -> dict[str, Any]:
        calls.append((runs, seed))
        return _heard_result()

    monkeypatch.setattr(bench_parts, "heard_part", measured)
    config = write_config(tmp_path)
    written = tmp_path / "heard.json"
    assert main(["-c", str(config), "bench", "heard", "--runs", "2", "--seed", "7",
                 "--json", str(written)]) == 0
    heard = next(p for p in PARTS if p.name == "heard")
    document = run_suite(Config(), quick=True, seed=7, out=io.StringIO(),
                         selection=[dataclasses.replace(heard, needs=())])
    assert calls == [(2, 7), (3, 7)]  # the subcommand's sizes, then --quick's
    [record] = document["parts"]
    assert record["result"] == json.loads(written.read_text(encoding="utf-8"))
