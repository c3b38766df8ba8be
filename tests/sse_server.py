"""A scripted OpenAI-compatible chat server on 127.0.0.1, for the LAN model's tests without a
model: each request is answered by the next of `answers` (raw HTTP bytes, or a function of the
request body), and every request is kept (`requests`)."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

Answer = bytes | Callable[[socket.socket], None]
"""What the server sends back: the whole response, or a function given the connection."""


def sse(*chunks: dict[str, Any] | str, done: bool = True, finish: str | None = "stop") -> bytes:
    """A 200 event stream: each chunk as `data: {json}` (a str is sent as it is, e.g. a
    ": ping" comment), a last chunk with `finish` as its finish reason, then `[DONE]`."""
    events = [chunk if isinstance(chunk, str) else f"data: {json.dumps(chunk)}\n\n"
              for chunk in chunks]
    if finish is not None:
        events.append(f"data: {json.dumps(_choice({}, finish))}\n\n")
    if done:
        events.append("data: [DONE]\n\n")
    body = "".join(events).encode("utf-8")
    return (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
            + body)


def piece(text: str) -> dict[str, Any]:
    """A chunk holding `text` as the next piece of the reply."""
    return _choice({"content": text}, None)


def _choice(delta: dict[str, Any], finish: str | None) -> dict[str, Any]:
    return {"object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def http_error(status: int, reason: str, message: str) -> bytes:
    body = json.dumps({"error": {"message": message, "type": "invalid_request_error"}})
    return (f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n{body}").encode()


@dataclass
class ScriptedChatServer:
    """Listens on 127.0.0.1 (`port`); serve with `with` (stops and joins at the end)."""

    answers: Sequence[Answer]
    requests: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._socket = socket.create_server(("127.0.0.1", 0))
        self.port = self._socket.getsockname()[1]
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._stopped = threading.Event()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> ScriptedChatServer:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stopped.set()
        self._socket.close()
        self._thread.join(timeout=10)

    def _serve(self) -> None:
        for answer in self._answers():
            try:
                connection, _ = self._socket.accept()
            except OSError:  # closed: the test is over
                return
            with connection:
                self._read_request(connection)
                if callable(answer):
                    answer(connection)
                    continue
                with contextlib.suppress(OSError):  # the client hung up: its right
                    connection.sendall(answer)

    def _answers(self) -> Iterator[Answer]:
        yield from self.answers

    def _read_request(self, connection: socket.socket) -> None:
        data = b""
        while b"\r\n\r\n" not in data:
            data += connection.recv(65536)
        head, _, body = data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        headers = dict(line.split(": ", 1) for line in lines[1:] if ": " in line)
        length = int(headers.get("Content-Length", "0"))
        while len(body) < length:
            body += connection.recv(65536)
        self.headers.append(headers)
        self.requests.append({"path": lines[0].split(" ")[1], **json.loads(body or b"{}")})
