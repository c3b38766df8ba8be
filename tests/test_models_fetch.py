"""`edge-agent models fetch|verify|list` against a local HTTP server (no network, no real models).

The server runs in a thread on 127.0.0.1 and implements Range itself (206 + Content-Range), and
can misbehave on purpose: cut a transfer short after N bytes while promising the full
Content-Length, or ignore Range and send the whole body with 200.

The CLI runs as a subprocess (`python -m edge_agent`), so what is tested is the real entry point:
exit codes, stdout and stderr.
"""

from __future__ import annotations

import hashlib
import io
import os
import random
import re
import subprocess
import sys
import threading
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

FETCH_ERROR = 4  # ModelFetchError.exit_code
PAYLOAD_SIZE = 300_000
CUT_AT = 100_000


# --------------------------------------------------------------------------- the server


@dataclass
class Served:
    """What the server holds, how it behaves, and what it saw."""

    files: dict[str, bytes] = field(default_factory=dict)
    mode: str = "normal"
    """"normal" (honours Range), "cut" (full Content-Length, then closes after `cut_at` bytes),
    "ignore_range" (always 200 with the whole body), "cut_chunked" (chunked encoding, cut inside
    a chunk after `cut_at` bytes), "stall" (full Content-Length, `cut_at` bytes, then nothing
    until `release`), "silent" (no response at all until `release`), "trickle" (one byte every
    `trickle_s` until done or `release`), "endless" (no Content-Length: the body, then more
    bytes for as long as the client reads)."""
    cut_at: int = 0
    trickle_s: float = 0.02
    release: threading.Event = field(default_factory=threading.Event)
    """Set when the test ends: a stalling handler returns."""
    requests: list[tuple[str, str | None, int]] = field(default_factory=list)
    """(path, Range header or None, status sent) for each GET."""
    lock: threading.Lock = field(default_factory=threading.Lock)

    def ranges(self, path: str) -> list[str | None]:
        return [r for p, r, _ in self.requests if p == path]


def _handler(served: Served) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"  # one request per connection; closing ends the body

        def log_message(self, format: str, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            body = served.files.get(self.path)
            range_header = self.headers.get("Range")
            if body is None:
                self._record(range_header, 404)
                self.send_error(404)
                return
            total = len(body)
            if served.mode in ("stall", "silent", "trickle", "endless"):
                self._misbehave(body, range_header)
                return
            if served.mode == "cut_chunked":
                self._record(range_header, 200)
                self.send_response(200)
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                self.wfile.write(b"%x\r\n" % total + body[:served.cut_at])
                self.wfile.flush()
                self.close_connection = True
                return
            if served.mode == "cut":
                self._record(range_header, 200)
                self.send_response(200)
                self.send_header("Content-Type", "application/octet-stream")
                self.send_header("Content-Length", str(total))
                self.end_headers()
                self.wfile.write(body[:served.cut_at])
                self.wfile.flush()
                self.close_connection = True
                return
            start, end = 0, total - 1
            status = 200
            if range_header and served.mode == "normal":
                match = re.fullmatch(r"bytes=(\d+)-(\d*)", range_header.strip())
                if not match or int(match.group(1)) >= total:
                    self._record(range_header, 416)
                    self.send_response(416)
                    self.send_header("Content-Range", f"bytes */{total}")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                start = int(match.group(1))
                if match.group(2):
                    end = min(int(match.group(2)), total - 1)
                status = 206
            self._record(range_header, status)
            self.send_response(status)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Accept-Ranges", "bytes")
            self.send_header("Content-Length", str(end - start + 1))
            if status == 206:
                self.send_header("Content-Range", f"bytes {start}-{end}/{total}")
            self.end_headers()
            self.wfile.write(body[start:end + 1])

        def _misbehave(self, body: bytes, range_header: str | None) -> None:
            """A server that goes quiet (a dead link, an overloaded mirror) or trickles."""
            if served.mode == "silent":
                self._record(range_header, 0)
                served.release.wait()
                return
            self._record(range_header, 200)
            self.send_response(200)
            if served.mode == "endless":
                self.end_headers()  # no length: the body ends when the connection closes
                self._send_forever(body)
                return
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if served.mode == "stall":
                self.wfile.write(body[:served.cut_at])
                self.wfile.flush()
                served.release.wait()
                return
            for index in range(len(body)):  # trickle: paced by the server, not by the test
                try:
                    self.wfile.write(body[index:index + 1])
                    self.wfile.flush()
                except OSError:
                    return  # the client gave up
                if served.release.wait(served.trickle_s):
                    return

        def _send_forever(self, body: bytes) -> None:
            """The body, then zeros until the client hangs up (or the test ends)."""
            more = bytes(1 << 16)
            try:
                self.wfile.write(body)
                while not served.release.is_set():
                    self.wfile.write(more)
            except OSError:
                return  # the client stopped reading

        def _record(self, range_header: str | None, status: int) -> None:
            with served.lock:
                served.requests.append((self.path, range_header, status))

    return Handler


@dataclass
class Server:
    served: Served
    base_url: str


@pytest.fixture
def server() -> Iterator[Server]:
    served = Served()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(served))
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    try:
        yield Server(served, f"http://127.0.0.1:{httpd.server_address[1]}")
    finally:
        served.release.set()
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)


# --------------------------------------------------------------------------- fixtures and helpers


def _random_bytes(size: int, seed: int = 1234) -> bytes:
    return random.Random(seed).randbytes(size)


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _zip(members: dict[str, bytes], directories: tuple[str, ...] = ()) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as zipped:
        for directory in directories:
            zipped.writestr(zipfile.ZipInfo(directory), b"")
        for name, data in members.items():
            zipped.writestr(name, data)
    return buffer.getvalue()


@dataclass
class Setup:
    tmp: Path
    config: Path
    manifest: Path
    models_dir: Path


def _setup(tmp_path: Path, models: dict[str, dict[str, object]]) -> Setup:
    """Write a config (data_dir in tmp_path) and a manifest with `models`.

    Each model: {"kind", "entry", "files": [{"url", "size", "sha256", "save_as", "extract"?}]}.
    """
    data_dir = tmp_path / "data"
    config = tmp_path / "edge-agent.toml"
    config.write_text(f'data_dir = "{data_dir.as_posix()}"\n', encoding="utf-8")
    lines = []
    for name, model in models.items():
        lines += [f'[models."{name}"]', f'kind = "{model["kind"]}"',
                  f'description = "test model {name}"', f'entry = "{model["entry"]}"', ""]
        for download in model["files"]:  # type: ignore[attr-defined]
            lines.append(f'[[models."{name}".files]]')
            for key, value in download.items():
                lines.append(f"{key} = {value}" if isinstance(value, int) else f'{key} = "{value}"')
            lines.append("")
    manifest = tmp_path / "manifest.toml"
    manifest.write_text("\n".join(lines), encoding="utf-8")
    return Setup(tmp_path, config, manifest, data_dir / "models")


def _single_file_model(url: str, data: bytes, save_as: str = "weights.bin",
                       sha256: str | None = None) -> dict[str, object]:
    return {"kind": "llm", "entry": save_as, "files": [
        {"url": url, "size": len(data), "sha256": sha256 or _sha(data), "save_as": save_as}]}


def _cli(setup: Setup, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items()
           if k.lower() not in ("http_proxy", "https_proxy", "all_proxy", "edge_agent_config")}
    env["no_proxy"] = env["NO_PROXY"] = "*"
    return subprocess.run(
        [sys.executable, "-m", "edge_agent", "-c", str(setup.config), "models", *args],
        capture_output=True, text=True, env=env, timeout=60, check=False,
    )


def _fetch(setup: Setup, name: str) -> subprocess.CompletedProcess[str]:
    return _cli(setup, "fetch", name, "--manifest", str(setup.manifest))


def _parts(directory: Path) -> list[Path]:
    return sorted(directory.rglob("*.part")) if directory.exists() else []


def _assert_clean_error(result: subprocess.CompletedProcess[str], code: int) -> None:
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    assert "edge-agent: error:" in result.stderr, result.stderr


# --------------------------------------------------------------------------- (a) good hash


def test_fetch_installs_verifies_lists_and_detects_corruption(server: Server, tmp_path: Path) -> None:
    data = _random_bytes(PAYLOAD_SIZE)
    server.served.files["/files/weights.bin"] = data
    setup = _setup(tmp_path, {"tiny": _single_file_model(f"{server.base_url}/files/weights.bin",
                                                         data)})

    result = _fetch(setup, "tiny")
    assert result.returncode == 0, result.stderr
    final = setup.models_dir / "tiny" / "weights.bin"
    assert "verified and installed" in result.stdout
    assert str(final) in result.stdout
    assert final.read_bytes() == data
    assert _parts(setup.models_dir) == []
    assert "Traceback" not in result.stderr

    verified = _cli(setup, "verify", "tiny", "--manifest", str(setup.manifest))
    assert verified.returncode == 0, (verified.stdout, verified.stderr)
    assert "tiny: ok" in verified.stdout

    listed = _cli(setup, "list", "--manifest", str(setup.manifest))
    assert listed.returncode == 0, listed.stderr
    row = next(line for line in listed.stdout.splitlines() if "tiny" in line)
    assert "fetched" in row.split()
    assert str(final) in row

    # Fetching again is a no-op: the file is there, nothing is downloaded.
    before = len(server.served.requests)
    again = _fetch(setup, "tiny")
    assert again.returncode == 0, again.stderr
    assert len(server.served.requests) == before

    # Corrupt one byte: verify fails, names the file, exits nonzero.
    corrupted = bytearray(data)
    corrupted[PAYLOAD_SIZE // 2] ^= 0xFF
    final.write_bytes(bytes(corrupted))
    broken = _cli(setup, "verify", "tiny", "--manifest", str(setup.manifest))
    _assert_clean_error(broken, FETCH_ERROR)
    assert "tiny: FAILED" in broken.stdout
    assert "weights.bin" in broken.stdout
    assert "sha256" in broken.stdout
    assert "failed verification" in broken.stderr

    # A deleted file is reported as missing (and the model is then missing altogether).
    final.unlink()
    gone = _cli(setup, "verify", "tiny", "--manifest", str(setup.manifest))
    assert gone.returncode == FETCH_ERROR
    assert "missing" in gone.stdout


def test_verify_without_name_checks_every_present_model(server: Server, tmp_path: Path) -> None:
    data = _random_bytes(50_000, seed=7)
    server.served.files["/w.bin"] = data
    setup = _setup(tmp_path, {
        "present": _single_file_model(f"{server.base_url}/w.bin", data),
        "absent": _single_file_model(f"{server.base_url}/nothing.bin", b"x" * 10, "n.bin"),
    })
    assert _fetch(setup, "present").returncode == 0
    result = _cli(setup, "verify", "--manifest", str(setup.manifest))
    assert result.returncode == 0, (result.stdout, result.stderr)
    assert "present: ok" in result.stdout
    assert "absent" not in result.stdout


# --------------------------------------------------------------------------- (b) bad hash


def test_bad_sha256_installs_nothing(server: Server, tmp_path: Path) -> None:
    data = _random_bytes(PAYLOAD_SIZE)
    server.served.files["/files/weights.bin"] = data
    wrong = _sha(b"something else")
    setup = _setup(tmp_path, {"tiny": _single_file_model(f"{server.base_url}/files/weights.bin",
                                                         data, sha256=wrong)})

    result = _fetch(setup, "tiny")
    _assert_clean_error(result, FETCH_ERROR)
    assert "sha256" in result.stderr
    assert wrong in result.stderr
    assert _sha(data) in result.stderr
    assert not (setup.models_dir / "tiny" / "weights.bin").exists()
    assert _parts(setup.models_dir) == []
    assert not (setup.models_dir / "tiny" / ".sha256").exists()

    listed = _cli(setup, "list", "--manifest", str(setup.manifest))
    row = next(line for line in listed.stdout.splitlines() if "tiny" in line)
    assert "missing" in row.split()


def test_size_mismatch_installs_nothing(server: Server, tmp_path: Path) -> None:
    data = _random_bytes(PAYLOAD_SIZE)
    server.served.files["/files/weights.bin"] = data
    model = _single_file_model(f"{server.base_url}/files/weights.bin", data)
    model["files"][0]["size"] = PAYLOAD_SIZE - 10  # type: ignore[index]
    setup = _setup(tmp_path, {"tiny": model})

    result = _fetch(setup, "tiny")
    _assert_clean_error(result, FETCH_ERROR)
    assert str(PAYLOAD_SIZE) in result.stderr
    assert not (setup.models_dir / "tiny" / "weights.bin").exists()
    assert _parts(setup.models_dir) == []


def test_unknown_model_name_is_a_config_error(tmp_path: Path) -> None:
    setup = _setup(tmp_path, {"tiny": _single_file_model("http://127.0.0.1:9/x.bin", b"x")})
    result = _fetch(setup, "nope")
    _assert_clean_error(result, 2)
    assert "nope" in result.stderr
    assert "tiny" in result.stderr  # lists the known names


def test_unreachable_server_is_a_clean_fetch_error(tmp_path: Path) -> None:
    # Port 9 (discard) on localhost: connection refused.
    setup = _setup(tmp_path, {"tiny": _single_file_model("http://127.0.0.1:9/x.bin", b"x" * 10)})
    result = _fetch(setup, "tiny")
    _assert_clean_error(result, FETCH_ERROR)
    assert "download failed" in result.stderr
    assert not (setup.models_dir / "tiny" / "x.bin").exists()


# --------------------------------------------------------------------------- (c) interrupted


def test_interrupted_transfer_keeps_part_and_resumes_with_range(server: Server,
                                                                tmp_path: Path) -> None:
    data = _random_bytes(PAYLOAD_SIZE)
    server.served.files["/files/weights.bin"] = data
    setup = _setup(tmp_path, {"tiny": _single_file_model(f"{server.base_url}/files/weights.bin",
                                                         data)})
    final = setup.models_dir / "tiny" / "weights.bin"

    server.served.mode, server.served.cut_at = "cut", CUT_AT
    cut = _fetch(setup, "tiny")
    _assert_clean_error(cut, FETCH_ERROR)
    assert f"{CUT_AT} of {PAYLOAD_SIZE} bytes kept" in cut.stderr
    assert "run the same command to resume" in cut.stderr
    assert not final.exists()
    parts = _parts(setup.models_dir)
    assert len(parts) == 1, parts
    assert parts[0].stat().st_size == CUT_AT
    assert parts[0].read_bytes() == data[:CUT_AT]
    assert str(parts[0]) in cut.stderr

    server.served.mode = "normal"
    resumed = _fetch(setup, "tiny")
    assert resumed.returncode == 0, resumed.stderr
    assert server.served.requests[-1] == ("/files/weights.bin", f"bytes={CUT_AT}-", 206)
    assert server.served.ranges("/files/weights.bin") == [None, f"bytes={CUT_AT}-"]
    assert final.read_bytes() == data
    assert _sha(final.read_bytes()) == _sha(data)
    assert _parts(setup.models_dir) == []
    verified = _cli(setup, "verify", "tiny", "--manifest", str(setup.manifest))
    assert verified.returncode == 0, verified.stdout


def test_interrupted_twice_then_resumes(server: Server, tmp_path: Path) -> None:
    """A resume that is itself cut keeps the bytes of both tries."""
    data = _random_bytes(PAYLOAD_SIZE)
    server.served.files["/w.bin"] = data
    setup = _setup(tmp_path, {"tiny": _single_file_model(f"{server.base_url}/w.bin", data)})

    server.served.mode, server.served.cut_at = "cut", CUT_AT
    assert _fetch(setup, "tiny").returncode == FETCH_ERROR
    # The second try gets 200 (the cutting server ignores Range) and is cut at the same place:
    # the part file restarts from 0 and again holds CUT_AT good bytes.
    assert _fetch(setup, "tiny").returncode == FETCH_ERROR
    parts = _parts(setup.models_dir)
    assert [p.stat().st_size for p in parts] == [CUT_AT]
    assert parts[0].read_bytes() == data[:CUT_AT]

    server.served.mode = "normal"
    assert _fetch(setup, "tiny").returncode == 0
    assert (setup.models_dir / "tiny" / "weights.bin").read_bytes() == data


def test_corrupt_part_file_is_discarded_after_resume(server: Server, tmp_path: Path) -> None:
    """Resumed bytes that do not hash right are thrown away; the next fetch starts over."""
    data = _random_bytes(PAYLOAD_SIZE)
    server.served.files["/w.bin"] = data
    setup = _setup(tmp_path, {"tiny": _single_file_model(f"{server.base_url}/w.bin", data)})
    model_dir = setup.models_dir / "tiny"
    model_dir.mkdir(parents=True)
    (model_dir / "weights.bin.part").write_bytes(b"\0" * CUT_AT)  # wrong bytes at the front

    bad = _fetch(setup, "tiny")
    _assert_clean_error(bad, FETCH_ERROR)
    assert "sha256" in bad.stderr
    assert server.served.ranges("/w.bin") == [f"bytes={CUT_AT}-"]
    assert _parts(setup.models_dir) == []
    assert not (model_dir / "weights.bin").exists()

    good = _fetch(setup, "tiny")
    assert good.returncode == 0, good.stderr
    assert server.served.ranges("/w.bin")[-1] is None
    assert (model_dir / "weights.bin").read_bytes() == data


def test_chunked_transfer_cut_short_is_a_clean_error(server: Server, tmp_path: Path) -> None:
    data = _random_bytes(PAYLOAD_SIZE)
    server.served.files["/w.bin"] = data
    setup = _setup(tmp_path, {"tiny": _single_file_model(f"{server.base_url}/w.bin", data)})

    server.served.mode, server.served.cut_at = "cut_chunked", CUT_AT
    cut = _fetch(setup, "tiny")
    _assert_clean_error(cut, FETCH_ERROR)
    assert "run the same command to resume" in cut.stderr
    assert not (setup.models_dir / "tiny" / "weights.bin").exists()


# --------------------------------------------------------------------------- (d) Range ignored


def test_resume_when_server_ignores_range_starts_over(server: Server, tmp_path: Path) -> None:
    data = _random_bytes(PAYLOAD_SIZE)
    server.served.files["/files/weights.bin"] = data
    setup = _setup(tmp_path, {"tiny": _single_file_model(f"{server.base_url}/files/weights.bin",
                                                         data)})

    server.served.mode, server.served.cut_at = "cut", CUT_AT
    assert _fetch(setup, "tiny").returncode == FETCH_ERROR
    assert [p.stat().st_size for p in _parts(setup.models_dir)] == [CUT_AT]

    server.served.mode = "ignore_range"
    result = _fetch(setup, "tiny")
    assert result.returncode == 0, result.stderr
    # It asked to resume, got the whole body with 200, and did not append it to the old part.
    assert server.served.requests[-1] == ("/files/weights.bin", f"bytes={CUT_AT}-", 200)
    final = setup.models_dir / "tiny" / "weights.bin"
    assert final.stat().st_size == PAYLOAD_SIZE
    assert final.read_bytes() == data
    assert _parts(setup.models_dir) == []
    assert _cli(setup, "verify", "tiny", "--manifest", str(setup.manifest)).returncode == 0


# --------------------------------------------------------------------------- (e) zip extraction


def test_zip_directory_extraction(server: Server, tmp_path: Path) -> None:
    members = {
        "model-dir/conf.txt": b"sample-rate 16000\n",
        "model-dir/am/final.bin": _random_bytes(40_000, seed=2),
        "model-dir/graph/words.txt": b"hello 1\nworld 2\n",
        "README.txt": b"not part of the model",
        "other-dir/skip.bin": b"skip me",
    }
    archive = _zip(members, directories=("model-dir/", "model-dir/am/"))
    server.served.files["/pkg/model.zip"] = archive
    setup = _setup(tmp_path, {"dirmodel": {"kind": "stt", "entry": "model", "files": [{
        "url": f"{server.base_url}/pkg/model.zip", "size": len(archive),
        "sha256": _sha(archive), "extract": "model-dir/", "save_as": "model"}]}})

    result = _fetch(setup, "dirmodel")
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

    assert _cli(setup, "verify", "dirmodel", "--manifest", str(setup.manifest)).returncode == 0
    listed = _cli(setup, "list", "--manifest", str(setup.manifest))
    row = next(line for line in listed.stdout.splitlines() if "dirmodel" in line)
    assert "fetched" in row.split()

    (installed / "graph" / "words.txt").write_bytes(b"tampered\n")
    broken = _cli(setup, "verify", "dirmodel", "--manifest", str(setup.manifest))
    assert broken.returncode == FETCH_ERROR
    assert "model/graph/words.txt" in broken.stdout


def test_zip_single_member_extraction(server: Server, tmp_path: Path) -> None:
    payload = _random_bytes(60_000, seed=3)
    archive = _zip({"a/b.bin": payload, "a/c.bin": b"other", "top.txt": b"top"})
    server.served.files["/pkg/wheel.whl"] = archive
    setup = _setup(tmp_path, {"member": {"kind": "vad", "entry": "b.bin", "files": [{
        "url": f"{server.base_url}/pkg/wheel.whl", "size": len(archive),
        "sha256": _sha(archive), "extract": "a/b.bin", "save_as": "b.bin"}]}})

    result = _fetch(setup, "member")
    assert result.returncode == 0, result.stderr
    model_dir = setup.models_dir / "member"
    assert (model_dir / "b.bin").read_bytes() == payload
    assert sorted(p.name for p in model_dir.iterdir()) == [".sha256", "b.bin"]
    assert _cli(setup, "verify", "member", "--manifest", str(setup.manifest)).returncode == 0


@pytest.mark.parametrize(
    ("archive", "extract", "message"),
    [
        pytest.param(_zip({"a/b.bin": b"payload"}), "a/missing.bin", "a/missing.bin",
                     id="member-missing"),
        pytest.param(_random_bytes(1000), "a/b.bin", "not a valid zip", id="not-a-zip"),
    ],
)
def test_bad_archive_is_a_clean_error(server: Server, tmp_path: Path, archive: bytes,
                                      extract: str, message: str) -> None:
    server.served.files["/pkg/x.zip"] = archive
    setup = _setup(tmp_path, {"member": {"kind": "vad", "entry": "b.bin", "files": [{
        "url": f"{server.base_url}/pkg/x.zip", "size": len(archive),
        "sha256": _sha(archive), "extract": extract, "save_as": "b.bin"}]}})

    result = _fetch(setup, "member")
    _assert_clean_error(result, FETCH_ERROR)
    assert message in result.stderr
    assert not (setup.models_dir / "member" / "b.bin").exists()


def test_zip_slip_member_is_refused(server: Server, tmp_path: Path) -> None:
    """A member under the extracted directory whose name climbs out of it is refused at
    extraction (an `extract` naming "../" is refused earlier, when the manifest is read)."""
    archive = _zip({"evil/../../outside/x.bin": b"evil", "evil/x.bin": b"fine"})
    server.served.files["/pkg/evil.zip"] = archive
    setup = _setup(tmp_path, {"evil": {"kind": "vad", "entry": "x", "files": [{
        "url": f"{server.base_url}/pkg/evil.zip", "size": len(archive),
        "sha256": _sha(archive), "extract": "evil/", "save_as": "x"}]}})

    result = _fetch(setup, "evil")
    _assert_clean_error(result, FETCH_ERROR)
    assert "unsafe member path" in result.stderr
    assert not (setup.models_dir / "evil" / "x").exists()
    assert not (setup.models_dir / "evil" / "outside").exists()  # where the member would land
    assert not list(tmp_path.rglob("outside"))
