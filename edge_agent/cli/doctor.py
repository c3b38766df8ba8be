"""`edge-agent doctor [--json FILE|-] [--quick]`: can this machine run the agent?

Part of the command line. One line per check on stdout:

    ok    audio output   "speaker" (index 3, the default), 22050 Hz: played a 0.3 s 440 Hz tone
    FAIL  audio input    no input device found. Fix: connect a microphone or start ...

then a count. The checks (`edge_agent.doctor`): config and data dir; cpu, ram, disk; the memory
database (read-only); PortAudio, the audio devices, a tone on the output and 1 s from the
input; every model the config uses (present, sha256-verified, loaded and run once in a child
process, so that a native crash is a FAIL line). `--quick` checks
model files by size instead of hashing them and runs SQLite's quick_check instead of its
integrity_check. `--json FILE` also writes the results (`DoctorRecord`: checks, ok, machine)
for fleet tooling; `--json -` prints them on stdout, the lines then going to stderr.

Exit status: 0 when no check failed (warnings do not fail); 1 (EdgeAgentError) when any check
failed, with one error line naming the failed checks. One status for every failure, whatever
the check: a machine has several problems at once and the JSON record says which; a bad
--json path is 7 (OutputError) before any check runs. Without a config already loaded
(`run(None, args)`), a config that cannot be loaded is the config check's FAIL line and the
other checks run on the built-in defaults.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from edge_agent.config import Config
from edge_agent.doctor.report import CheckRecord, DoctorRecord
from edge_agent.doctor.run import run_doctor
from edge_agent.errors import EdgeAgentError
from edge_agent.files.jsonfile import check_writable, json_text, write_json


def add_parser(commands: Any) -> None:
    doctor = commands.add_parser(
        "doctor", help="check that this machine can run the agent: config, data dir, machine, "
                       "memory database, audio devices (plays a short tone, records 1 s), "
                       "models (verified and loaded); exit 1 if any check fails")
    # A str, not a Path: "-" means stdout, and `cli` checks a Path-typed --json as a file.
    doctor.add_argument("--json", metavar="FILE",
                        help="also write the results as JSON to FILE (\"-\": stdout, the lines "
                             "then go to stderr)")
    doctor.add_argument("--quick", action="store_true",
                        help="check model files by size instead of hashing them, and the memory "
                             "database with quick_check instead of integrity_check")
    doctor.set_defaults(handler=run)  # given no config: loading it is one of its checks


def run(config: Config | None, args: argparse.Namespace) -> int:
    target: str | None = args.json
    if target and target != "-":
        check_writable(Path(target))  # before the checks: they take seconds, then it is lost
    lines = sys.stderr if target == "-" else sys.stdout

    def show(record: CheckRecord) -> None:
        print(format_line(record), file=lines, flush=True)

    record = run_doctor(config, getattr(args, "config", None), args.quick, show)
    print(_summary(record), file=lines, flush=True)
    if target == "-":
        sys.stdout.write(json_text(dict(record)))
        sys.stdout.flush()
    elif target:
        write_json(dict(record), Path(target))
    failed = [c["name"] for c in record["checks"] if c["status"] == "FAIL"]
    if failed:
        raise EdgeAgentError(f"doctor: {len(failed)} check(s) failed ({', '.join(failed)}); "
                             "each FAIL line says how to fix it")
    return 0


def format_line(record: CheckRecord) -> str:
    """`ok    audio output   "speaker" (index 3): played a 0.3 s tone` (+ ". Fix: ...")."""
    line = f"{record['status']:<6}{record['name']:<15}{record['detail']}"
    if record["fix"]:
        line += f". Fix: {record['fix']}"
    return line


def _summary(record: DoctorRecord) -> str:
    counts = {status: sum(c["status"] == status for c in record["checks"])
              for status in ("ok", "warn", "FAIL")}
    return (f"{len(record['checks'])} checks: {counts['ok']} ok, {counts['warn']} warning(s), "
            f"{counts['FAIL']} failed")
