"""A local HTTP server for the `edge-agent models` tests (no network, no real models), and the
config, manifest and CLI runs those tests share.

The server runs in a thread on 127.0.0.1 and implements Range itself (206 + Content-Range), and
can misbehave on purpose: cut a transfer short after N bytes while promising the full
Content-Length, ignore Range, stall, trickle, or never end (`Served.mode`). The `server` fixture
(conftest) holds one for a test.
"""

from __future__ import annotations

import hashlib
import random
import re
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from tests.cli import edge_agent, write_config

FETCH_ERROR = 4  # ModelFetchError.exit_code
PAYLOAD_SIZE = 300_000


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

    def serve(self, path: str, body: bytes) -> str:
        """Serve `body` at `path` ("/w.bin"); its URL."""
        self.served.files[path] = body
        return f"{self.base_url}{path}"


@contextmanager
def running_server() -> Iterator[Server]:
    """A server on 127.0.0.1 in a thread, for the length of the `with`; stalling handlers are
    released at its end."""
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


# --------------------------------------------------------------------------- the models a test fetches


def random_bytes(size: int, seed: int = 1234) -> bytes:
    return random.Random(seed).randbytes(size)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass
class Setup:
    tmp: Path
    config: Path
    manifest: Path
    models_dir: Path


def write_setup(tmp_path: Path, models: dict[str, dict[str, object]]) -> Setup:
    """Write a config (data_dir in tmp_path) and a manifest with `models`.

    Each model: {"kind", "entry", "files": [{"url", "size", "sha256", "save_as", "extract"?}]}.
    """
    data_dir = tmp_path / "data"
    config = write_config(tmp_path, data_dir=data_dir)
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


def single_file_model(url: str, data: bytes, save_as: str = "weights.bin",
                       sha256: str | None = None) -> dict[str, object]:
    return {"kind": "llm", "entry": save_as, "files": [
        {"url": url, "size": len(data), "sha256": sha256 or sha(data), "save_as": save_as}]}


def archive_model(url: str, archive: bytes, extract: str, save_as: str, *, kind: str = "stt",
                  entry: str = "", **extra: int) -> dict[str, object]:
    """A model whose one download is the zip `archive` at `url`, its `extract` member or folder
    saved as `save_as` (also the entry unless `entry` says otherwise)."""
    return {"kind": kind, "entry": entry or save_as, "files": [{
        "url": url, "size": len(archive), "sha256": sha(archive), "extract": extract,
        "save_as": save_as, **extra}]}


def models_cli(setup: Setup, *args: str) -> subprocess.CompletedProcess[str]:
    return edge_agent("models", *args, config=setup.config, timeout=60,
                      drop=("http_proxy", "https_proxy", "all_proxy"),
                      env={"no_proxy": "*", "NO_PROXY": "*"})


def fetch(setup: Setup, name: str) -> subprocess.CompletedProcess[str]:
    return models_cli(setup, "fetch", name, "--manifest", str(setup.manifest))


def part_files(directory: Path) -> list[Path]:
    return sorted(directory.rglob("*.part")) if directory.exists() else []


def assert_clean_error(result: subprocess.CompletedProcess[str], code: int) -> None:
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    assert "edge-agent: error:" in result.stderr, result.stderr
