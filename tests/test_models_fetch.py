"""`edge-agent models fetch|verify|list` against a local HTTP server (no network, no real models;
tests/model_server.py), which can cut a transfer short or ignore Range on purpose.

The CLI runs as a subprocess (`python -m edge_agent`), so what is tested is the real entry point:
exit codes, stdout and stderr.
"""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import pytest

from tests.model_server import (
    FETCH_ERROR,
    PAYLOAD_SIZE,
    Server,
    archive_model,
    assert_clean_error,
    fetch,
    models_cli,
    part_files,
    random_bytes,
    sha,
    single_file_model,
    write_setup,
)

CUT_AT = 100_000


def _zip(members: dict[str, bytes], directories: tuple[str, ...] = ()) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as zipped:
        for directory in directories:
            zipped.writestr(zipfile.ZipInfo(directory), b"")
        for name, data in members.items():
            zipped.writestr(name, data)
    return buffer.getvalue()


# --------------------------------------------------------------------------- (a) good hash


def test_fetch_installs_verifies_lists_and_detects_corruption(server: Server, tmp_path: Path) -> None:
    data = random_bytes(PAYLOAD_SIZE)
    url = server.serve("/files/weights.bin", data)
    setup = write_setup(tmp_path, {"tiny": single_file_model(url, data)})

    result = fetch(setup, "tiny")
    assert result.returncode == 0, result.stderr
    final = setup.models_dir / "tiny" / "weights.bin"
    assert "verified and installed" in result.stdout
    assert str(final) in result.stdout
    assert final.read_bytes() == data
    assert part_files(setup.models_dir) == []
    assert "Traceback" not in result.stderr

    verified = models_cli(setup, "verify", "tiny", "--manifest", str(setup.manifest))
    assert verified.returncode == 0, (verified.stdout, verified.stderr)
    assert "tiny: ok" in verified.stdout

    listed = models_cli(setup, "list", "--manifest", str(setup.manifest))
    assert listed.returncode == 0, listed.stderr
    row = next(line for line in listed.stdout.splitlines() if "tiny" in line)
    assert "fetched" in row.split()
    assert str(final) in row

    # Fetching again is a no-op: the file is there, nothing is downloaded.
    before = len(server.served.requests)
    again = fetch(setup, "tiny")
    assert again.returncode == 0, again.stderr
    assert len(server.served.requests) == before

    # Corrupt one byte: verify fails, names the file, exits nonzero.
    corrupted = bytearray(data)
    corrupted[PAYLOAD_SIZE // 2] ^= 0xFF
    final.write_bytes(bytes(corrupted))
    broken = models_cli(setup, "verify", "tiny", "--manifest", str(setup.manifest))
    assert_clean_error(broken, FETCH_ERROR)
    assert "tiny: FAILED" in broken.stdout
    assert "weights.bin" in broken.stdout
    assert "sha256" in broken.stdout
    assert "failed verification" in broken.stderr

    # A deleted file is reported as missing (and the model is then missing altogether).
    final.unlink()
    gone = models_cli(setup, "verify", "tiny", "--manifest", str(setup.manifest))
    assert gone.returncode == FETCH_ERROR
    assert "missing" in gone.stdout


def test_verify_without_name_checks_every_present_model(server: Server, tmp_path: Path) -> None:
    data = random_bytes(50_000, seed=7)
    url = server.serve("/w.bin", data)
    setup = write_setup(tmp_path, {
        "present": single_file_model(url, data),
        "absent": single_file_model(f"{server.base_url}/nothing.bin", b"x" * 10, "n.bin"),
    })
    assert fetch(setup, "present").returncode == 0
    result = models_cli(setup, "verify", "--manifest", str(setup.manifest))
    assert result.returncode == 0, (result.stdout, result.stderr)
    assert "present: ok" in result.stdout
    assert "absent" not in result.stdout


# --------------------------------------------------------------------------- (b) bad hash


def test_bad_sha256_installs_nothing(server: Server, tmp_path: Path) -> None:
    data = random_bytes(PAYLOAD_SIZE)
    url = server.serve("/files/weights.bin", data)
    wrong = sha(b"something else")
    setup = write_setup(tmp_path, {"tiny": single_file_model(url, data, sha256=wrong)})

    result = fetch(setup, "tiny")
    assert_clean_error(result, FETCH_ERROR)
    assert "sha256" in result.stderr
    assert wrong in result.stderr
    assert sha(data) in result.stderr
    assert not (setup.models_dir / "tiny" / "weights.bin").exists()
    assert part_files(setup.models_dir) == []
    assert not (setup.models_dir / "tiny" / ".sha256").exists()

    listed = models_cli(setup, "list", "--manifest", str(setup.manifest))
    row = next(line for line in listed.stdout.splitlines() if "tiny" in line)
    assert "missing" in row.split()


def test_size_mismatch_installs_nothing(server: Server, tmp_path: Path) -> None:
    data = random_bytes(PAYLOAD_SIZE)
    url = server.serve("/files/weights.bin", data)
    model = single_file_model(url, data)
    model["files"][0]["size"] = PAYLOAD_SIZE - 10  # type: ignore[index]
    setup = write_setup(tmp_path, {"tiny": model})

    result = fetch(setup, "tiny")
    assert_clean_error(result, FETCH_ERROR)
    assert str(PAYLOAD_SIZE) in result.stderr
    assert not (setup.models_dir / "tiny" / "weights.bin").exists()
    assert part_files(setup.models_dir) == []


def test_unknown_model_name_is_a_config_error(tmp_path: Path) -> None:
    setup = write_setup(tmp_path, {"tiny": single_file_model("http://127.0.0.1:9/x.bin", b"x")})
    result = fetch(setup, "nope")
    assert_clean_error(result, 2)
    assert "nope" in result.stderr
    assert "tiny" in result.stderr  # lists the known names


def test_unreachable_server_is_a_clean_fetch_error(tmp_path: Path) -> None:
    # Port 9 (discard) on localhost: connection refused.
    setup = write_setup(tmp_path, {"tiny": single_file_model("http://127.0.0.1:9/x.bin", b"x" * 10)})
    result = fetch(setup, "tiny")
    assert_clean_error(result, FETCH_ERROR)
    assert "download failed" in result.stderr
    assert not (setup.models_dir / "tiny" / "x.bin").exists()


# --------------------------------------------------------------------------- (c) interrupted


def test_interrupted_transfer_keeps_part_and_resumes_with_range(server: Server,
                                                                tmp_path: Path) -> None:
    data = random_bytes(PAYLOAD_SIZE)
    url = server.serve("/files/weights.bin", data)
    setup = write_setup(tmp_path, {"tiny": single_file_model(url, data)})
    final = setup.models_dir / "tiny" / "weights.bin"

    server.served.mode, server.served.cut_at = "cut", CUT_AT
    cut = fetch(setup, "tiny")
    assert_clean_error(cut, FETCH_ERROR)
    assert f"{CUT_AT} of {PAYLOAD_SIZE} bytes kept" in cut.stderr
    assert "run the same command to resume" in cut.stderr
    assert not final.exists()
    parts = part_files(setup.models_dir)
    assert len(parts) == 1, parts
    assert parts[0].stat().st_size == CUT_AT
    assert parts[0].read_bytes() == data[:CUT_AT]
    assert str(parts[0]) in cut.stderr

    server.served.mode = "normal"
    resumed = fetch(setup, "tiny")
    assert resumed.returncode == 0, resumed.stderr
    assert server.served.requests[-1] == ("/files/weights.bin", f"bytes={CUT_AT}-", 206)
    assert server.served.ranges("/files/weights.bin") == [None, f"bytes={CUT_AT}-"]
    assert final.read_bytes() == data
    assert sha(final.read_bytes()) == sha(data)
    assert part_files(setup.models_dir) == []
    verified = models_cli(setup, "verify", "tiny", "--manifest", str(setup.manifest))
    assert verified.returncode == 0, verified.stdout


def test_interrupted_twice_then_resumes(server: Server, tmp_path: Path) -> None:
    """A resume that is itself cut keeps the bytes of both tries."""
    data = random_bytes(PAYLOAD_SIZE)
    url = server.serve("/w.bin", data)
    setup = write_setup(tmp_path, {"tiny": single_file_model(url, data)})

    server.served.mode, server.served.cut_at = "cut", CUT_AT
    assert fetch(setup, "tiny").returncode == FETCH_ERROR
    # The second try gets 200 (the cutting server ignores Range) and is cut at the same place:
    # the part file restarts from 0 and again holds CUT_AT good bytes.
    assert fetch(setup, "tiny").returncode == FETCH_ERROR
    parts = part_files(setup.models_dir)
    assert [p.stat().st_size for p in parts] == [CUT_AT]
    assert parts[0].read_bytes() == data[:CUT_AT]

    server.served.mode = "normal"
    assert fetch(setup, "tiny").returncode == 0
    assert (setup.models_dir / "tiny" / "weights.bin").read_bytes() == data


def test_corrupt_part_file_is_discarded_after_resume(server: Server, tmp_path: Path) -> None:
    """Resumed bytes that do not hash right are thrown away; the next fetch starts over."""
    data = random_bytes(PAYLOAD_SIZE)
    url = server.serve("/w.bin", data)
    setup = write_setup(tmp_path, {"tiny": single_file_model(url, data)})
    model_dir = setup.models_dir / "tiny"
    model_dir.mkdir(parents=True)
    (model_dir / "weights.bin.part").write_bytes(b"\0" * CUT_AT)  # wrong bytes at the front

    bad = fetch(setup, "tiny")
    assert_clean_error(bad, FETCH_ERROR)
    assert "sha256" in bad.stderr
    assert server.served.ranges("/w.bin") == [f"bytes={CUT_AT}-"]
    assert part_files(setup.models_dir) == []
    assert not (model_dir / "weights.bin").exists()

    good = fetch(setup, "tiny")
    assert good.returncode == 0, good.stderr
    assert server.served.ranges("/w.bin")[-1] is None
    assert (model_dir / "weights.bin").read_bytes() == data


def test_chunked_transfer_cut_short_is_a_clean_error(server: Server, tmp_path: Path) -> None:
    data = random_bytes(PAYLOAD_SIZE)
    url = server.serve("/w.bin", data)
    setup = write_setup(tmp_path, {"tiny": single_file_model(url, data)})

    server.served.mode, server.served.cut_at = "cut_chunked", CUT_AT
    cut = fetch(setup, "tiny")
    assert_clean_error(cut, FETCH_ERROR)
    assert "run the same command to resume" in cut.stderr
    assert not (setup.models_dir / "tiny" / "weights.bin").exists()


# --------------------------------------------------------------------------- (d) Range ignored


def test_resume_when_server_ignores_range_starts_over(server: Server, tmp_path: Path) -> None:
    data = random_bytes(PAYLOAD_SIZE)
    url = server.serve("/files/weights.bin", data)
    setup = write_setup(tmp_path, {"tiny": single_file_model(url, data)})

    server.served.mode, server.served.cut_at = "cut", CUT_AT
    assert fetch(setup, "tiny").returncode == FETCH_ERROR
    assert [p.stat().st_size for p in part_files(setup.models_dir)] == [CUT_AT]

    server.served.mode = "ignore_range"
    result = fetch(setup, "tiny")
    assert result.returncode == 0, result.stderr
    # It asked to resume, got the whole body with 200, and did not append it to the old part.
    assert server.served.requests[-1] == ("/files/weights.bin", f"bytes={CUT_AT}-", 200)
    final = setup.models_dir / "tiny" / "weights.bin"
    assert final.stat().st_size == PAYLOAD_SIZE
    assert final.read_bytes() == data
    assert part_files(setup.models_dir) == []
    assert models_cli(setup, "verify", "tiny", "--manifest", str(setup.manifest)).returncode == 0


# --------------------------------------------------------------------------- (e) zip extraction


def test_zip_directory_extraction(server: Server, tmp_path: Path) -> None:
    members = {
        "model-dir/conf.txt": b"sample-rate 16000\n",
        "model-dir/am/final.bin": random_bytes(40_000, seed=2),
        "model-dir/graph/words.txt": b"hello 1\nworld 2\n",
        "README.txt": b"not part of the model",
        "other-dir/skip.bin": b"skip me",
    }
    archive = _zip(members, directories=("model-dir/", "model-dir/am/"))
    url = server.serve("/pkg/model.zip", archive)
    setup = write_setup(tmp_path, {"dirmodel": archive_model(url, archive, "model-dir/", "model")})

    result = fetch(setup, "dirmodel")
    assert result.returncode == 0, result.stderr
    model_dir = setup.models_dir / "dirmodel"
    installed = model_dir / "model"
    assert installed.is_dir()
    files = {p.relative_to(installed).as_posix(): p.read_bytes()
             for p in installed.rglob("*") if p.is_file()}
    assert files == {name.removeprefix("model-dir/"): data
                     for name, data in members.items() if name.startswith("model-dir/")}
    # Neither the archive, its part file, nor the scratch directory is left behind.
    assert sorted(p.name for p in model_dir.iterdir()) == [".sha256", "model"]

    assert models_cli(setup, "verify", "dirmodel", "--manifest", str(setup.manifest)).returncode == 0
    listed = models_cli(setup, "list", "--manifest", str(setup.manifest))
    row = next(line for line in listed.stdout.splitlines() if "dirmodel" in line)
    assert "fetched" in row.split()

    (installed / "graph" / "words.txt").write_bytes(b"tampered\n")
    broken = models_cli(setup, "verify", "dirmodel", "--manifest", str(setup.manifest))
    assert broken.returncode == FETCH_ERROR
    assert "model/graph/words.txt" in broken.stdout


def test_zip_single_member_extraction(server: Server, tmp_path: Path) -> None:
    payload = random_bytes(60_000, seed=3)
    archive = _zip({"a/b.bin": payload, "a/c.bin": b"other", "top.txt": b"top"})
    url = server.serve("/pkg/wheel.whl", archive)
    setup = write_setup(tmp_path, {"member": archive_model(url, archive, "a/b.bin", "b.bin",
                                                           kind="vad")})

    result = fetch(setup, "member")
    assert result.returncode == 0, result.stderr
    model_dir = setup.models_dir / "member"
    assert (model_dir / "b.bin").read_bytes() == payload
    assert sorted(p.name for p in model_dir.iterdir()) == [".sha256", "b.bin"]
    assert models_cli(setup, "verify", "member", "--manifest", str(setup.manifest)).returncode == 0


@pytest.mark.parametrize(
    ("archive", "extract", "message"),
    [
        pytest.param(_zip({"a/b.bin": b"payload"}), "a/missing.bin", "a/missing.bin",
                     id="member-missing"),
        pytest.param(random_bytes(1000), "a/b.bin", "not a valid zip", id="not-a-zip"),
    ],
)
def test_bad_archive_is_a_clean_error(server: Server, tmp_path: Path, archive: bytes,
                                      extract: str, message: str) -> None:
    url = server.serve("/pkg/x.zip", archive)
    setup = write_setup(tmp_path, {"member": archive_model(url, archive, extract, "b.bin",
                                                           kind="vad")})

    result = fetch(setup, "member")
    assert_clean_error(result, FETCH_ERROR)
    assert message in result.stderr
    assert not (setup.models_dir / "member" / "b.bin").exists()


def test_zip_slip_member_is_refused(server: Server, tmp_path: Path) -> None:
    """A member under the extracted directory whose name climbs out of it is refused at
    extraction (an `extract` naming "../" is refused earlier, when the manifest is read)."""
    archive = _zip({"evil/../../outside/x.bin": b"evil", "evil/x.bin": b"fine"})
    url = server.serve("/pkg/evil.zip", archive)
    setup = write_setup(tmp_path, {"evil": archive_model(url, archive, "evil/", "x", kind="vad")})

    result = fetch(setup, "evil")
    assert_clean_error(result, FETCH_ERROR)
    assert "unsafe member path" in result.stderr
    assert not (setup.models_dir / "evil" / "x").exists()
    assert not (setup.models_dir / "evil" / "outside").exists()  # where the member would land
    assert not list(tmp_path.rglob("outside"))
