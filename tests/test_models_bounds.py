"""`models fetch` reads and writes bounded amounts whatever the server or the archive does: the
manifest's size is a hard cap on the download, the unpacked bytes of an archive are capped
(the manifest's `unpacked_size`, else a multiple of the download), the progress output stays a
few lines, and a manifest is read capped like every file a user hands us.

Through the real entry point (`python -m edge_agent`) against the local HTTP server of
tests/model_server.py; the progress bar's throttling is also checked in-process with a fake clock.
"""

from __future__ import annotations

import io
import struct
import zipfile
from pathlib import Path

from edge_agent.files import TEXT_FILE_LIMIT
from edge_agent.models.fetch import PROGRESS_STEPS, UNPACK_RATIO, progress_bar
from tests.model_server import (
    FETCH_ERROR,
    PAYLOAD_SIZE,
    Server,
    Setup,
    archive_model,
    assert_clean_error,
    fetch,
    random_bytes,
    single_file_model,
    write_setup,
)

CONFIG_ERROR = 2
STDERR_BOUND = 4096
"""More than any error plus a few lines of progress per file."""


def _bytes_under(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.rglob("*") if p.is_file())


def _leftovers(setup: Setup, name: str) -> list[str]:
    """What a refused fetch left in the model's directory (a scratch dir, a part, a file)."""
    model_dir = setup.models_dir / name
    return sorted(p.name for p in model_dir.iterdir()) if model_dir.exists() else []


# --------------------------------------------------------------------------- the download


def test_a_server_that_keeps_sending_is_stopped_one_byte_past_the_size(
        server: Server, tmp_path: Path) -> None:
    data = random_bytes(PAYLOAD_SIZE)
    url = server.serve("/w.bin", data)
    server.served.mode = "endless"  # the right bytes, then zeros for as long as anyone reads
    url = url
    setup = write_setup(tmp_path, {"tiny": single_file_model(url, data)})

    result = fetch(setup, "tiny")  # before the cap: read until the 600 s deadline

    assert_clean_error(result, FETCH_ERROR)
    assert url in result.stderr
    assert f"expected {PAYLOAD_SIZE} bytes, received {PAYLOAD_SIZE + 1}" in result.stderr
    assert _leftovers(setup, "tiny") == []  # no final file, no part to resume from
    assert len(result.stderr) < STDERR_BOUND, len(result.stderr)
    progress = [line for line in result.stderr.splitlines() if "MB/s" in line]
    assert 1 <= len(progress) <= PROGRESS_STEPS + 1, progress


def test_a_length_announced_past_the_size_is_refused_before_reading(
        server: Server, tmp_path: Path) -> None:
    data = random_bytes(PAYLOAD_SIZE)
    url = server.serve("/w.bin", data)
    model = single_file_model(url, data[:1000])
    setup = write_setup(tmp_path, {"tiny": model})

    result = fetch(setup, "tiny")

    assert_clean_error(result, FETCH_ERROR)
    assert f"expected 1000 bytes, it announced {PAYLOAD_SIZE}" in result.stderr
    assert _leftovers(setup, "tiny") == []
    assert "MB/s" not in result.stderr  # nothing was read


# --------------------------------------------------------------------------- progress output


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_on_a_terminal_is_redrawn_a_few_times_a_second() -> None:
    now = [0.0]
    out = _Terminal()
    show = progress_bar(out, clock=lambda: now[0])
    total = 10_000_000
    for received in range(1, 20_001):  # 20 000 blocks within one instant: one redraw
        show("w.bin", received, total, 1.0)
    assert out.getvalue().count("\r") == 1
    for step in range(100):  # 10 s, a block every 0.1 s: at most 4 redraws a second
        now[0] += 0.1
        show("w.bin", 100_000 * step, total, now[0])
    assert out.getvalue().count("\r") <= 1 + 10 * 4
    for _ in range(10_000):  # the server goes on at the end: the last line is written once
        show("w.bin", total, total, now[0])
    assert out.getvalue().count("\n") == 1
    assert len(out.getvalue()) < 100 * 45


def test_progress_in_a_log_is_one_line_per_tenth_of_a_file() -> None:
    out = io.StringIO()
    show = progress_bar(out, clock=lambda: 0.0)
    total = 1_000_000
    for received in range(0, total + 1, 100):
        show("a.bin", received, total, 2.0)
    for _ in range(1000):
        show("a.bin", total, total, 2.0)
    lines = out.getvalue().splitlines()
    assert len(lines) == PROGRESS_STEPS + 1, lines
    assert "100.0%" in lines[-1] and "\r" not in out.getvalue()


# --------------------------------------------------------------------------- unpacking


def _zip_of(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as zipped:
        for name, data in members.items():
            zipped.writestr(name, data)
    return buffer.getvalue()


def _zip_model(served: Server, archive: bytes, extract: str, save_as: str,
               **extra: int) -> dict[str, object]:
    return archive_model(served.serve("/m.zip", archive), archive, extract, save_as, **extra)


def test_a_zip_bomb_is_refused_before_anything_is_unpacked(
        server: Server, tmp_path: Path) -> None:
    bomb = 32 << 20  # 32 MiB of zeros deflate to ~32 KB
    archive = _zip_of({"model/conf.txt": b"ok\n", "model/weights.bin": bytes(bomb)})
    assert len(archive) * UNPACK_RATIO < bomb
    setup = write_setup(tmp_path, {"bomb": _zip_model(server, archive, "model/", "model")})

    result = fetch(setup, "bomb")

    assert_clean_error(result, FETCH_ERROR)
    assert f"unpacks to {bomb + 3} bytes, more than the {len(archive) * UNPACK_RATIO}" \
        in result.stderr
    assert "give unpacked_size in the manifest" in result.stderr
    assert _leftovers(setup, "bomb") == []  # no archive, no scratch directory, no model
    assert _bytes_under(tmp_path / "data") == 0


def test_unpacked_size_in_the_manifest_is_the_cap(server: Server, tmp_path: Path) -> None:
    text = b"hello 1\nworld 2\n" * 200_000  # 3.2 MB of words that deflate ~200 times
    archive = _zip_of({"graph/words.txt": text, "graph/conf.txt": b"x\n"})
    unpacked = len(text) + 2
    assert len(archive) * UNPACK_RATIO < unpacked  # too much without unpacked_size

    (tmp_path / "tight").mkdir()
    (tmp_path / "exact").mkdir()
    tight = write_setup(tmp_path / "tight", {"m": _zip_model(server, archive, "graph/", "graph",
                                                         unpacked_size=unpacked - 1)})
    refused = fetch(tight, "m")
    assert_clean_error(refused, FETCH_ERROR)
    assert f"unpacks to {unpacked} bytes, more than the {unpacked - 1} allowed (the " \
        "manifest's unpacked_size)" in refused.stderr
    assert _leftovers(tight, "m") == []

    exact = write_setup(tmp_path / "exact", {"m": _zip_model(server, archive, "graph/", "graph",
                                                         unpacked_size=unpacked)})
    installed = fetch(exact, "m")
    assert installed.returncode == 0, installed.stderr
    assert (exact.models_dir / "m" / "graph" / "words.txt").read_bytes() == text


def _lie_about_size(archive: bytes, size: int) -> bytes:
    """The zip with its one member's uncompressed size (local header and central directory)
    set to `size`: the deflated data still inflates to the real size."""
    patched = bytearray(archive)
    local = patched.index(b"PK\x03\x04")
    struct.pack_into("<I", patched, local + 22, size)
    central = patched.index(b"PK\x01\x02")
    struct.pack_into("<I", patched, central + 24, size)
    return bytes(patched)


def test_a_member_that_inflates_past_its_declared_size_is_cut_there(
        server: Server, tmp_path: Path) -> None:
    archive = _lie_about_size(_zip_of({"w.bin": bytes(16 << 20)}), 1000)
    setup = write_setup(tmp_path, {"liar": _zip_model(server, archive, "w.bin", "w.bin")})

    result = fetch(setup, "liar")

    assert_clean_error(result, FETCH_ERROR)
    assert "not a valid zip archive" in result.stderr and "CRC" in result.stderr
    assert _leftovers(setup, "liar") == []


# --------------------------------------------------------------------------- the manifest


def test_a_huge_manifest_is_refused_unread(tmp_path: Path) -> None:
    setup = write_setup(tmp_path, {})
    with setup.manifest.open("w", encoding="utf-8") as out:
        line = "# " + "x" * 1000 + "\n"
        for _ in range(TEXT_FILE_LIMIT // len(line) + 2):
            out.write(line)
    for manifest in (setup.manifest, Path("/dev/zero")):
        result = fetch(Setup(setup.tmp, setup.config, manifest, setup.models_dir), "m")
        assert_clean_error(result, CONFIG_ERROR)
        assert f"{manifest}: cannot read manifest: larger than 1 MiB" in result.stderr
