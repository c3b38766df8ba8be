"""The hash record of a fetched model (`<model dir>/.sha256`), written at fetch, checked at load.

A copy in the data dir shadows the one in a wheel, so a damaged copy (overwritten, truncated)
must be caught before an engine loads it: a Silero VAD fed noise hears nothing and says nothing.
Each line is `DIGEST SIZE MTIME_NS  RELATIVE` (older records: `DIGEST  RELATIVE`). At load a small
file is hashed (a same-size corruption is caught); a big one is compared by size and mtime and
hashed only when its mtime moved. Digests are cached per process, keyed by path, size and mtime.
"""

from __future__ import annotations

import hashlib
import stat
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from edge_agent.models.manifest_schema import HASHES_FILE

HASH_AT_LOAD_MAX = 64 << 20
"""Files up to this size are hashed at load; bigger ones are checked by size and mtime."""

_DIGESTS: dict[Path, tuple[int, int, str]] = {}
"""path -> (size, mtime_ns, sha256) of files hashed in this process."""


@dataclass(frozen=True)
class RecordLine:
    relative: str
    digest: str
    size: int | None = None
    """None in records written before sizes were recorded."""
    mtime_ns: int | None = None


@dataclass(frozen=True)
class Record:
    lines: tuple[RecordLine, ...]
    problems: tuple[str, ...]
    """Lines that cannot be read (a damaged record)."""

    def under(self, relative: str) -> tuple[RecordLine, ...]:
        """The lines for `relative` (a file) or for the files under it (a directory)."""
        prefix = PurePosixPath(relative).as_posix()
        return tuple(line for line in self.lines
                     if line.relative == prefix or line.relative.startswith(prefix + "/"))


def sha256_of(path: Path) -> str:
    """The file's sha256, computed once per process while its size and mtime stay the same."""
    info = path.stat()
    cached = _DIGESTS.get(path)
    if cached is not None and cached[:2] == (info.st_size, info.st_mtime_ns):
        return cached[2]
    digest = sha256_digest(path).hexdigest()
    _DIGESTS[path] = (info.st_size, info.st_mtime_ns, digest)
    return digest


def sha256_digest(path: Path) -> hashlib._Hash:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest


def read_record(model_dir: Path) -> Record | None:
    """The record of `model_dir`, or None when it has none."""
    path = model_dir / HASHES_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        return Record((), (f"cannot read the hash record {path}: {exc}",))
    lines: list[RecordLine] = []
    problems: list[str] = []
    for number, text_line in enumerate(text.splitlines(), 1):
        line = _parse(text_line)
        if line is None:
            problems.append(f"{path} line {number} is damaged")
        else:
            lines.append(line)
    return Record(tuple(lines), tuple(problems))


def _parse(text: str) -> RecordLine | None:
    head, separator, relative = text.partition("  ")
    fields = head.split(" ")
    relative_path = PurePosixPath(relative)
    if (not separator or not relative or relative_path.is_absolute()
            or ".." in relative_path.parts or len(fields[0]) != 64):
        return None
    if len(fields) == 1:
        return RecordLine(relative, fields[0])
    if len(fields) == 3 and fields[1].isdigit() and fields[2].isdigit():
        return RecordLine(relative, fields[0], int(fields[1]), int(fields[2]))
    return None


def check(model_dir: Path, lines: tuple[RecordLine, ...], thorough: bool) -> list[str]:
    """Problems of the files `lines` name; `thorough` hashes every file whatever its size."""
    return [problem for line in lines
            if (problem := _check_line(model_dir, line, thorough)) is not None]


def _check_line(model_dir: Path, line: RecordLine, thorough: bool) -> str | None:
    path = model_dir / line.relative
    try:
        info = path.stat()
    except OSError:
        return f"{line.relative}: missing"
    if not stat.S_ISREG(info.st_mode):
        return f"{line.relative}: not a file"
    if line.size is not None and info.st_size != line.size:
        return (f"{line.relative}: {info.st_size} bytes, the fetched file had {line.size} "
                "(truncated or replaced?)")
    moved = line.mtime_ns is not None and info.st_mtime_ns != line.mtime_ns
    if thorough or info.st_size <= HASH_AT_LOAD_MAX or moved:
        try:
            digest = sha256_of(path)
        except OSError as exc:
            return f"{line.relative}: cannot be read ({exc.strerror or exc})"
        if digest != line.digest:
            return f"{line.relative}: sha256 differs from the fetched file (corrupted?)"
    return None


def write_record(model_dir: Path) -> None:
    """Record every file of `model_dir` (not partial downloads); unchanged files keep their
    digest, so fetching a present model again does not hash gigabytes."""
    old = read_record(model_dir)
    known = {line.relative: line for line in old.lines} if old else {}
    lines = []
    for path in sorted(p for p in model_dir.rglob("*") if p.is_file()):
        relative = path.relative_to(model_dir).as_posix()
        if (relative == HASHES_FILE or path.suffix == ".part"
                or any(part.startswith(".extract-") for part in PurePosixPath(relative).parts)):
            continue
        info = path.stat()
        previous = known.get(relative)
        if previous is not None and (previous.size, previous.mtime_ns) == (info.st_size,
                                                                             info.st_mtime_ns):
            digest = previous.digest
        else:
            digest = sha256_of(path)
        lines.append(f"{digest} {info.st_size} {info.st_mtime_ns}  {relative}")
    (model_dir / HASHES_FILE).write_text("\n".join(lines) + "\n", encoding="utf-8")
