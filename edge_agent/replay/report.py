"""A replay's result for people (one line per decision, recorded and replayed side by side)
and for programs (`--json`: `ReplayJson`); and the command that runs it.

Marks: `=` the same decision, `!` the same kind of decision turned out otherwise (the second
line is the replay's), `-` only the recording has it, `+` only the replay has it.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import TypedDict

from edge_agent.config import Config
from edge_agent.errors import ConfigError
from edge_agent.events import CallerSpoke, PlaybackStarted, UserSpeechStarted
from edge_agent.files.jsonfile import write_json
from edge_agent.memory.kept_audio import kept_audio
from edge_agent.memory.record import record_events, session_record
from edge_agent.memory.record_check import DATABASE_HINT, checked, checked_clips
from edge_agent.memory.store import MemoryStore
from edge_agent.printable import escape_controls
from edge_agent.replay import EXIT_DIFFERS
from edge_agent.replay.decisions import Decision, Row, differences
from edge_agent.replay.placement import LineRecord, ReplayLine, line_record
from edge_agent.replay.run import Printer, ReplayResult, replay_session

MARKS = {"same": "=", "changed": "!", "recorded only": "-", "replay only": "+"}
_SPEECH = (UserSpeechStarted, CallerSpoke, PlaybackStarted)
"""A record with none of these has nothing a replay could say or decide again."""


class ReplayJson(TypedDict):
    """`sessions replay --json`: what was replayed and how each decision compares."""

    session_id: str
    caller_audio: str
    """Where the caller's audio came from: "kept clips", "call lines" or "transcripts"."""
    lines: list[LineRecord]
    """The caller's lines as replayed, with their cues."""
    model_replies: int
    """Model requests answered with what the recorded model generated."""
    compared: int
    """Rows of the comparison (decisions of either side, paired where they match)."""
    differences: int
    """Rows that are not "same"; 0: the replay decided everything as the recording did."""
    rows: list[Row]
    notes: list[str]
    """What the replay could not reproduce, or how it got the caller's audio."""
    call_seconds: float
    """Virtual seconds replayed."""
    wall_seconds: float
    """Real seconds the replay took, models loaded included."""
    load_seconds: float
    """Of which loading the models."""


def run_replay(config: Config, store: MemoryStore, session_id: str, json_out: Path | None,
               echo_gain: float, printer: Printer = print) -> int:
    """`edge-agent sessions replay`: 0 when every decision is the same, `EXIT_DIFFERS` when
    some differ."""
    where = f"{store.path}: session {session_id}"
    record = checked(session_record(store, [session_id]), where, DATABASE_HINT)
    if not any(isinstance(entry.event, _SPEECH) for entry in record_events(record)):
        raise ConfigError(f"session {session_id}", "events",
                          "nothing to replay: no speech was recorded in it, or its event log was "
                          "deleted ([memory] retention_days deletes the event logs of old "
                          "sessions; their turns stay)")
    clips = checked_clips(kept_audio(store, [session_id]), where)
    result = asyncio.run(replay_session(config, record, clips, printer, echo_gain))
    for line in report_lines(result):
        printer(escape_controls(line))
    if json_out is not None:
        write_json(dict(report_json(result)), json_out)
        printer(f"replay written to {json_out}")
    return EXIT_DIFFERS if differences(result.rows) else 0


def report_json(result: ReplayResult) -> ReplayJson:
    return {"session_id": result.session_id, "caller_audio": result.caller_audio,
            "lines": [line_record(line) for line in result.lines],
            "model_replies": len(result.script.replies), "compared": len(result.rows),
            "differences": differences(result.rows), "rows": list(result.rows),
            "notes": list(result.notes), "call_seconds": round(result.call_seconds, 3),
            "wall_seconds": round(result.wall_seconds, 3),
            "load_seconds": round(result.load_seconds, 3)}


def report_lines(result: ReplayResult) -> list[str]:
    lines = ["caller lines (as replayed):"]
    lines.extend(f"  {i:>2}  {_cue(line):34} {line.segment.text!r}  ({line.segment.source})"
                 for i, line in enumerate(result.lines, 1))
    lines.append(f"    {'recorded':>8} {'replay':>8}  decision (seconds on each side's clock)")
    for row in result.rows:
        lines.extend(_row(row))
    lines.extend(f"note: {note}" for note in result.notes)
    count = len(result.rows)
    differing = differences(result.rows)
    kinds = _kinds(result.recorded)
    timing = (f"{result.call_seconds:.1f} s of call replayed in "
              f"{result.wall_seconds - result.load_seconds:.1f} s (+ {result.load_seconds:.1f} s "
              "loading models)")
    if differing:
        lines.append(f"{differing} of {count} decisions differ from the recording "
                     f"(recorded: {kinds}); {timing}")
    else:
        lines.append(f"no differences: {count} decisions compared ({kinds}); {timing}")
    return lines


def _cue(line: ReplayLine) -> str:
    cue = line.cue
    if cue is None:
        return f"at {line.segment.start:.3f} s"
    which = "" if cue.count <= 1 else f" (#{cue.count})"
    if cue.event is PlaybackStarted:
        return f"{cue.after:.3f} s after {cue.unit} started{which}"
    return f"{cue.after:.3f} s after {cue.unit} finished{which}"


def _row(row: Row) -> list[str]:
    mark = MARKS[row["status"]]
    old, new = row["recorded"], row["replay"]
    if old is not None and new is not None and row["status"] == "same":
        return [f"  {mark} {_at(old):>8} {_at(new):>8}  {_describe(old)}"]
    lines = []
    if old is not None:
        lines.append(f"  {mark} {_at(old):>8} {'':>8}  {_describe(old)}")
    if new is not None:
        lead = mark if old is None else " "
        lines.append(f"  {lead} {'':>8} {_at(new):>8}  {_describe(new)}")
    return lines


def _at(decision: Decision) -> str:
    return f"{decision['at']:.2f}"


def _describe(decision: Decision) -> str:
    kind, text, unit = decision["kind"], decision["text"], decision["unit"]
    if kind == "paused":
        return f"paused       unit {unit}"
    if kind == "barge-in":
        return f"barge-in     unit {unit}, on {text!r}"
    if kind == "dropped":
        return "dropped      (nothing recognized)"
    if kind == "heard":
        cut = " (cut)" if decision["interrupted"] else ""
        return f"heard        unit {unit}{cut}: {text!r}"
    return f"{kind:12} {text!r}"


def _kinds(decisions: Sequence[Decision]) -> str:
    counts = Counter(d["kind"] for d in decisions)
    return ", ".join(f"{n} {kind}" for kind, n in sorted(counts.items())) or "none"
