"""llama-cpp-python's own OpenAI-compatible server (`python -m llama_cpp.server`, the pip extra
`llama-cpp-python[server]`) started on 127.0.0.1 for a test: a real LAN LLM server in a
process of its own, which a test can kill and start again on the same port."""

from __future__ import annotations

import http.client
import socket
import subprocess
import sys
import time
from pathlib import Path

READY_S = 120.0
"""Longest wait for the server to load its model and answer."""


def free_port() -> int:
    """A port nothing listens on now (bound, then released)."""
    with socket.create_server(("127.0.0.1", 0)) as probe:
        return int(probe.getsockname()[1])


class LlamaServer:
    """The server on `model` at `url`; `start()` and `stop()` it (a kill, as a crash or a
    pulled cable looks to the kiosk). Its output goes to `log` (never an undrained pipe)."""

    def __init__(self, model: Path, log: Path, port: int | None = None,
                 chat_format: str = "") -> None:
        self.model = model
        self.log = log
        self.port = port or free_port()
        self.chat_format = chat_format
        """llama-cpp-python's chat format ("chatml-function-calling": tool calls the chat API's
        way); "" for the model's own template."""
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> LlamaServer:
        # One request at a time, queued: a second request must not cut the first one's stream
        # short (--interrupt_requests false), as on a venue's server shared by kiosks.
        with self.log.open("ab") as out:
            self._process = subprocess.Popen(
                [sys.executable, "-m", "llama_cpp.server", "--model", str(self.model),
                 "--host", "127.0.0.1", "--port", str(self.port), "--n_ctx", "2048",
                 "--n_threads", "1", "--interrupt_requests", "false", "--verbose", "false",
                 *(["--chat_format", self.chat_format] if self.chat_format else [])],
                stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + READY_S
        while not self._answers():
            if self._process.poll() is not None:
                raise RuntimeError(f"llama_cpp.server exited {self._process.returncode}: "
                                   f"{self.log.read_text(errors='replace')[-3000:]}")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"llama_cpp.server did not answer in {READY_S:.0f} s")
            time.sleep(0.2)  # polled: it binds its port only once the model is loaded
        return self

    def _answers(self) -> bool:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
        try:
            connection.request("GET", "/v1/models")
            return connection.getresponse().status == 200
        except OSError:
            return False
        finally:
            connection.close()

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
            self._process.wait(30)
        self._process = None
