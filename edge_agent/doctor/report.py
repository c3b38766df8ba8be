"""What a doctor check reports (one line: ok / warn / FAIL, what was found, the fix) and how a
group of checks is run: the pieces every check module shares."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, TypedDict

from edge_agent.config import Config
from edge_agent.errors import ConfigError, EdgeAgentError, ModelMissingError
from edge_agent.printable import escape_controls

Status = Literal["ok", "warn", "FAIL"]


class CheckRecord(TypedDict):
    name: str
    status: Status
    detail: str
    """What was found (control characters escaped: device names and paths come from outside)."""
    fix: str
    """What to do about a warning or failure; "" for ok."""


class MachineRecord(TypedDict, total=False):
    """What fleet tooling needs to tell machines apart; filled as far as the checks got."""

    hostname: str
    system: str
    python: str
    edge_agent: str
    config: str
    data_dir: str
    cpu_model: str
    cpu_cores: int
    load_average: list[float]
    mem_total_bytes: int
    mem_available_bytes: int
    disk_path: str
    disk_free_bytes: int


class DoctorRecord(TypedDict):
    checks: list[CheckRecord]
    ok: bool
    """No check failed (warnings allowed)."""
    machine: MachineRecord


Emit = Callable[[CheckRecord], None]

GB = 1 << 30
MB = 1 << 20
LOW_RAM = LOW_DISK = 1 * GB
FULL_DISK = 200 * MB
UNEXPECTED_FIX = "an unexpected error in this check: report it with this line"


def check(name: str, status: Status, detail: str, fix: str = "") -> CheckRecord:
    return {"name": name, "status": status, "detail": escape_controls(detail),
            "fix": escape_controls(fix)}


def failure(name: str, exc: BaseException, fix: str = "") -> CheckRecord:
    """An exception as a FAIL line (our errors often carry their fix, after "Fix: ")."""
    text = str(exc) if isinstance(exc, EdgeAgentError) else f"{type(exc).__name__}: {exc}"
    detail, _, said_fix = text.partition("Fix: ")
    if isinstance(exc, ModelMissingError):
        detail, said_fix = text.partition(". ")[0], lower_first(exc.fetch_hint)
    elif isinstance(exc, ConfigError):
        said_fix = (f"correct {exc.key} in {exc.path} (config/edge-agent.toml documents every "
                    "key)" if exc.key else f"make {exc.path} a readable TOML file, or name "
                    "another")
    elif isinstance(exc, EdgeAgentError):
        said_fix = said_fix or "act on the message; run the doctor again"
    return check(name, "FAIL", detail.strip().rstrip("."), fix or said_fix.strip()
                 or UNEXPECTED_FIX)


def lower_first(text: str) -> str:  # "Fix: get it with: ...", not "Fix: Get it with: ..."
    return text[:1].lower() + text[1:]


def guarded(emit: Emit, name: str, body: Callable[[], CheckRecord]) -> CheckRecord:
    """Run one check; an exception becomes its FAIL line."""
    try:
        record = body()
    except Exception as exc:  # isolation: whatever one check raises, the others still run
        record = failure(name, exc)
    emit(record)
    return record


@dataclass
class Context:
    config: Config
    quick: bool
    machine: MachineRecord


@dataclass(frozen=True)
class Group:
    names: Callable[[Context], Sequence[str]]
    """The lines the group reports, in order (known up front, so a hang can name them); never
    raises."""
    run: Callable[[Context, Emit], None]
    timeout_s: float
