"""`edge-agent bench [--quick]`: every part on this machine, one after the other, sharing the
loaded engines; one document (`document.BenchDocument`) and one table (`summary.table`).

A part whose need is missing here (no PulseAudio, no espeak-ng, a model not fetched) is
skipped with the reason; a part that fails is recorded as failed with its error and the next
one runs. Progress lines go to `out` as they come: `[elapsed] i/n part: what it is doing`.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TextIO

from edge_agent.bench import needs, parts, summary
from edge_agent.bench.document import (
    FORMAT,
    BenchDocument,
    PartRecord,
    PartStatus,
    SummaryRow,
)
from edge_agent.bench.machine import machine_info, models_used
from edge_agent.bench.workbench import Plan, Workbench, plan_for
from edge_agent.config import Config
from edge_agent.errors import EdgeAgentError, ModelFileError
from edge_agent.machine import load_average


@dataclass(frozen=True)
class Part:
    """One part of the run."""

    name: str
    title: str
    needs: tuple[needs.Need, ...]
    """Checked before it runs: one that raises skips the part with its message."""
    run: Callable[[Workbench, Plan], dict[str, Any]]
    settings: Callable[[Plan], dict[str, Any]]
    """The sizes it runs with, for the record."""
    rows: Callable[[dict[str, Any]], list[SummaryRow]]


PARTS = (
    Part("engines", "each engine alone: load time, real-time factors, LLM tokens/s",
         (needs.models(with_llm=True),),
         lambda bench, plan: parts.engines_part(bench, plan.engine_sentences, plan.llm_prompts),
         lambda plan: {"sentences": plan.engine_sentences, "prompts": plan.llm_prompts},
         summary.engines_rows),
    Part("latency", "the live agent on the real audio path: answer gap by stage, barge-in",
         (needs.pulseaudio, needs.models(with_llm=False)),
         lambda bench, plan: parts.latency_part(
             bench, plan.latency_exchanges, plan.seed, reply=plan.latency_reply,
             interrupt_every=plan.latency_interrupt_every),
         lambda plan: {"exchanges": plan.latency_exchanges, "llm": "scripted",
                       "interrupt_every": plan.latency_interrupt_every},
         summary.latency_rows),
    Part("heard", "heard position against the recorded output, at random barge-ins",
         (needs.pulseaudio, needs.models(with_llm=False)),
         lambda bench, plan: parts.heard_part(bench, plan.heard_runs, plan.seed),
         lambda plan: {"runs": plan.heard_runs}, summary.heard_rows),
    Part("stt", "recognizer WER and speed on the clip set (accents, noise, a room)",
         (needs.espeak_ng, needs.models(with_llm=False)),
         lambda bench, plan: parts.stt_part(bench, plan.stt_engines, plan.stt_every),
         lambda plan: {"engines": list(plan.stt_engines), "clip_every": plan.stt_every},
         summary.stt_rows),
    Part("backchannel", "backchannel classifier on spoken clips through the recognizer",
         (needs.espeak_ng, needs.models(with_llm=False)),
         lambda bench, plan: parts.backchannel_part(bench, None, plan.backchannel_every),
         lambda plan: {"clip_every": plan.backchannel_every}, summary.backchannel_rows),
    Part("memory", "prompt assembly and first token as a session grows, restarts, kills",
         (needs.models(with_llm=True),),
         lambda bench, plan: parts.memory_part(bench, plan.memory),
         lambda plan: {"turns": plan.memory.turns, "kills": plan.memory.kills,
                       "repeats": plan.memory.repeats, "restarts": plan.memory.restarts,
                       "preemptions": plan.memory.preemptions},
         summary.memory_rows),
    Part("rooms", "echo canceller, interruptions and microphone arrays in simulated rooms "
         "(virtual audio)", (needs.models(with_llm=False), needs.room_acoustics),
         lambda bench, plan: parts.rooms_part(bench, plan.rooms),
         lambda plan: {"interruptions": plan.rooms.interruptions,
                       "replies": plan.rooms.replies,
                       "listening_lines": plan.rooms.listening_lines,
                       "far_end_texts": plan.rooms.far_end_texts,
                       "array_lines": plan.rooms.array_lines,
                       "array_interruptions": plan.rooms.array_interruptions},
         summary.rooms_rows),
    Part("service", "the agent as a service: READY, idle CPU and memory, an answer",
         (needs.pulseaudio, needs.models(with_llm=True)),
         lambda bench, plan: parts.service_part(bench, plan.service_idle_s,
                                                plan.service_devices),
         lambda plan: {"idle_s": plan.service_idle_s, "devices": plan.service_devices},
         summary.service_rows),
)


class Progress:
    """Progress lines, flushed as they come: `[m:ss] i/n part: line`."""

    def __init__(self, out: TextIO) -> None:
        self._out = out
        self._started = time.monotonic()
        self.prefix = ""

    def say(self, line: str) -> None:
        elapsed = int(time.monotonic() - self._started)
        print(f"[{elapsed // 60}:{elapsed % 60:02d}] {self.prefix}{line}", file=self._out,
              flush=True)


def run_suite(config: Config, quick: bool, seed: int, out: TextIO,
              selection: Sequence[Part] = PARTS) -> BenchDocument:
    """Every part of `selection` (all of `PARTS`) on this machine, in order; the document
    (`ok` false when a part failed)."""
    started_at = datetime.now().astimezone()
    started = time.monotonic()
    plan = plan_for(quick, seed, config)
    progress = Progress(out)
    bench = Workbench(config, progress.say)
    machine = machine_info(started_at)
    models = models_used(config)
    progress.say(f"edge-agent bench{' --quick' if quick else ''}: {len(selection)} parts on "
                 f"{machine['cpu_model']} ({machine['cpu_cores']} cores)")
    records = []
    for number, part in enumerate(selection, start=1):
        progress.prefix = f"{number}/{len(selection)} {part.name}: "
        records.append(run_part(part, bench, plan, progress))
        progress.prefix = ""
    machine["load_after"] = load_average()
    document: BenchDocument = {
        "format": FORMAT, "quick": quick, "seed": seed,
        "ok": all(r["status"] != "failed" for r in records),
        "seconds": round(time.monotonic() - started, 1), "machine": machine,
        "models": models, "parts": records}
    return document


def run_part(part: Part, bench: Workbench, plan: Plan, progress: Progress) -> PartRecord:
    """Run one part: ok with its result and rows, skipped (a need missing) or failed."""
    record: PartRecord = {"name": part.name, "title": part.title, "status": "ok", "reason": "",
                          "seconds": 0.0, "settings": part.settings(plan), "result": None,
                          "rows": []}
    started = time.monotonic()
    progress.say(part.title)
    try:
        for need in part.needs:
            need(bench.config)
    except ModelFileError as exc:  # a damaged model is a failure to fix, not a machine's lack
        return _ended(record, "failed", str(exc), started, progress)
    except EdgeAgentError as exc:
        return _ended(record, "skipped", str(exc), started, progress)
    try:
        result = part.run(bench, plan)
        record["rows"] = part.rows(result)
    except needs.SoundServerUnavailable as exc:
        return _ended(record, "skipped", str(exc), started, progress)
    except EdgeAgentError as exc:
        return _ended(record, "failed", str(exc), started, progress)
    except Exception as exc:  # one part's bug must not lose the others' figures
        for line in traceback.format_exc().rstrip().splitlines():
            progress.say(line)
        return _ended(record, "failed", f"{type(exc).__name__}: {exc}", started, progress)
    record["result"] = result
    return _ended(record, "ok", "", started, progress)


def _ended(record: PartRecord, status: PartStatus, reason: str, started: float,
           progress: Progress) -> PartRecord:
    record["status"] = status
    record["reason"] = reason
    record["seconds"] = round(time.monotonic() - started, 1)
    if status != "ok":
        record["rows"] = []
    progress.say(f"{status} in {record['seconds']:.1f} s{f': {reason}' if reason else ''}")
    return record
