"""Idempotent install steps: each is data (`describe()`, `is_done()`, `apply()`), so a dry run
prints the very list a real run applies, and a step already in place is reported and left alone.
Commands go through an injected `Runner` (tests record them)."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from edge_agent.errors import OutputError, ServiceError


@dataclass(frozen=True)
class CommandResult:
    returncode: int
    output: str


class Runner(Protocol):
    def __call__(self, argv: Sequence[str]) -> CommandResult: ...


def run_command(argv: Sequence[str]) -> CommandResult:
    """The real runner; a failing or missing command is a result, the step decides."""
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, check=False)
    except OSError as exc:
        return CommandResult(127, str(exc))
    return CommandResult(done.returncode, (done.stdout + done.stderr).strip())


class Step(Protocol):
    def describe(self) -> str: ...
    def is_done(self) -> bool: ...
    def apply(self) -> None: ...


def _may_chown() -> bool:
    # Only root can give files away; an unprivileged run (tests, an image built as a user)
    # leaves the owner alone rather than failing.
    return os.geteuid() == 0


@dataclass
class WriteFile:
    path: Path
    text: str
    mode: int
    keep_existing: bool = False
    """A file an administrator owns once written (the config): never overwritten."""
    detail: str = ""
    """What matters in it, for the dry run."""
    owner: Callable[[], tuple[int, int] | None] = lambda: (0, 0)
    """uid, gid, looked up when needed (an earlier step may create the group); None: unknown."""
    owner_name: str = "root"

    def describe(self) -> str:
        return (f"write {self.path} (mode {self.mode:04o}, {self.owner_name}"
                f"{'; ' * bool(self.detail)}{self.detail})")

    def kept(self) -> bool:
        """An existing file this step leaves as it is, whatever it holds."""
        return self.keep_existing and self.path.exists()

    def is_done(self) -> bool:
        if self.kept():
            return True
        try:
            info = self.path.stat()
            owner = self.owner()
            owned = not _may_chown() or (owner is not None and (info.st_uid, info.st_gid) == owner)
            return (self.path.read_text(encoding="utf-8") == self.text
                    and (info.st_mode & 0o7777) == self.mode and owned)
        except (OSError, UnicodeDecodeError):
            return False

    def apply(self) -> None:
        # Written next to the target and renamed over it: a unit is never seen half-written.
        temp = self.path.with_name(f".{self.path.name}.edge-agent-new")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, self.mode)
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                os.fchmod(out.fileno(), self.mode)
                if _may_chown():
                    os.fchown(out.fileno(), *(self.owner() or (0, 0)))
                out.write(self.text)
            os.replace(temp, self.path)
        except OSError as exc:
            temp.unlink(missing_ok=True)
            raise OutputError(self.path, exc) from None


@dataclass
class MakeDir:
    path: Path
    mode: int
    owner: Callable[[], tuple[int, int] | None] = lambda: (0, 0)
    """uid, gid, looked up when needed (an earlier step may create the user); None: unknown."""
    owner_name: str = "root"

    def describe(self) -> str:
        return f"mkdir {self.path} (mode {self.mode:04o}, owner {self.owner_name})"

    def is_done(self) -> bool:
        try:
            info = self.path.stat()
        except OSError:
            return False
        owner = self.owner()
        owned = not _may_chown() or (owner is not None and (info.st_uid, info.st_gid) == owner)
        return self.path.is_dir() and (info.st_mode & 0o7777) == self.mode and owned

    def apply(self) -> None:
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            os.chmod(self.path, self.mode)
            owner = self.owner()
            if _may_chown() and owner is not None:
                os.chown(self.path, *owner)
        except OSError as exc:
            raise OutputError(self.path, exc) from None


@dataclass
class Remove:
    path: Path
    tree: bool = False

    def describe(self) -> str:
        return f"remove {self.path}" + (" and everything in it" if self.tree else "")

    def is_done(self) -> bool:
        return not self.path.exists() and not self.path.is_symlink()

    def apply(self) -> None:
        try:
            if self.tree and self.path.is_dir() and not self.path.is_symlink():
                shutil.rmtree(self.path)
            else:
                self.path.unlink(missing_ok=True)
        except OSError as exc:
            raise OutputError(self.path, exc) from None


@dataclass
class Command:
    argv: list[str]
    runner: Runner
    done: Callable[[], bool] = lambda: False
    """Whether what the command would do is already so (queried, never changed)."""
    after: tuple[Step, ...] = ()
    """Needed only when one of these steps changed something (daemon-reload after the unit)."""
    target: Path | None = None
    """What a failure is reported against (else the command alone)."""

    def describe(self) -> str:
        return f"run {shlex.join(self.argv)}"

    def is_done(self) -> bool:
        return self.done()

    def apply(self) -> None:
        result = self.runner(self.argv)
        if result.returncode != 0:
            detail = result.output.splitlines()[-1].rstrip(".") if result.output else ""
            where = f"{self.target}: " if self.target is not None else ""
            raise ServiceError(f"{where}`{shlex.join(self.argv)}` failed (exit "
                               f"{result.returncode}){': ' + detail if detail else ''}")


@dataclass
class Plan:
    steps: list[Step]
    notes: list[str] = field(default_factory=list)


def run_plan(plan: Plan, dry_run: bool, say: Callable[[str], None]) -> int:
    """Apply (or, dry, only describe) each step in order; return how many changed something."""
    changed: list[Step] = []
    for step in plan.steps:
        if isinstance(step, Command) and step.after and not any(
                s in changed for s in step.after):
            say(f"  [ok]    {step.describe()}: not needed, nothing it depends on changed")
            continue
        if isinstance(step, WriteFile) and step.kept():
            say(f"  [kept]  {step.path}: exists, kept as it is (the shipped default is not "
                "written over it)")
            continue
        if step.is_done():
            say(f"  [ok]    {step.describe()}: already so")
            continue
        changed.append(step)
        if dry_run:
            say(f"  [would] {step.describe()}")
            continue
        step.apply()
        say(f"  [done]  {step.describe()}")
    for note in plan.notes:
        say(note)
    return len(changed)
