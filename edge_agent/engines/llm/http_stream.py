"""HTTP to a server on the venue's LAN, with deadlines and bounds on everything it sends.

A kiosk talks to machines it does not control, and what they send is input like any other. A
socket timeout bounds one read, not a reply: a server that drips one byte a second, drips its
status line, or sends nothing but ": ping" keep-alive comments never trips it, and holds the turn
as long as it likes. Here every read and write on the connection must end by one absolute
deadline (`TimedSocket.deadline`, on the injected clock's time), which the caller moves per
phase: connect, TLS, the request, the status line, the headers and the first piece of the reply
all within the first word's time; each later piece within its own.

Every line is read with a bound (`MAX_LINE_BYTES`: a 400 MB `data:` line is refused after
64 kB, never read whole); anything the parser chokes on (deeply nested JSON, a chunk size of
2^64, bytes that are not UTF-8) is an unusable answer like any other (`Unusable`), never an
exception of another kind.
"""

from __future__ import annotations

import http.client
import io
import json
import socket
from collections.abc import Callable, Iterator
from typing import Any

from edge_agent.printable import shown

Now = Callable[[], float]

MAX_LINE_BYTES = 64 * 1024
"""One line of an event stream, at most (a piece of a reply is a few bytes; a chunk that holds
a whole tool call, a few kB)."""


class Unusable(http.client.HTTPException):
    """The server answered, but not with something usable (the reason says what)."""


class TimedSocket:
    """A connected socket whose every read and write must end by `deadline` (seconds on
    `now`'s clock; TimeoutError after it), however the bytes trickle in."""

    def __init__(self, sock: socket.socket, now: Now, deadline: float) -> None:
        self._sock = sock
        self._now = now
        self.deadline = deadline
        self._readers = 0
        self._closed = False

    def _arm(self) -> None:
        remaining = self.deadline - self._now()
        if remaining <= 0:
            raise TimeoutError("no reply within the time allowed")
        self._sock.settimeout(remaining)

    def sendall(self, data: bytes) -> None:
        view = memoryview(data)
        for start in range(0, len(view), 65536):
            self._arm()
            self._sock.sendall(view[start:start + 65536])

    def recv_into(self, buffer: Any) -> int:
        self._arm()
        return self._sock.recv_into(buffer)

    def makefile(self, mode: str = "rb") -> io.BufferedReader:
        """What `http.client` reads the response from: every read under the deadline."""
        self._readers += 1
        return io.BufferedReader(_TimedReader(self))

    def setsockopt(self, *args: Any) -> None:
        self._sock.setsockopt(*args)

    def close(self) -> None:
        """Closed once no response reads from it any more (as a socket's own makefile keeps
        it: `http.client` closes the connection of a "Connection: close" response while the
        response is still to be read)."""
        self._closed = True
        if self._readers == 0:
            self._sock.close()

    def reader_closed(self) -> None:
        self._readers -= 1
        if self._closed and self._readers == 0:
            self._sock.close()


class _TimedReader(io.RawIOBase):
    def __init__(self, timed: TimedSocket) -> None:
        self._timed = timed

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        return self._timed.recv_into(buffer)

    def close(self) -> None:
        if not self.closed:
            self._timed.reader_closed()
        super().close()


class TimedConnection(http.client.HTTPConnection):
    """An HTTP connection whose socket is a `TimedSocket` from the moment it connects (the
    connect itself within the first deadline)."""

    def __init__(self, host: str, port: int, now: Now, deadline: float, **options: Any) -> None:
        super().__init__(host, port, timeout=max(0.001, deadline - now()), **options)
        self.timed: TimedSocket | None = None
        self.response: http.client.HTTPResponse | None = None
        self._now = now
        self._deadline = deadline

    def connect(self) -> None:
        super().connect()
        self.sock = self.timed = TimedSocket(self.sock, self._now, self._deadline)

    def until(self, deadline: float) -> None:
        """From now on, reads and writes must end by `deadline`."""
        self._deadline = deadline
        if self.timed is not None:
            self.timed.deadline = deadline

    def getresponse(self) -> http.client.HTTPResponse:
        self.response = super().getresponse()
        return self.response

    def close(self) -> None:
        """Closed with its response, now: `http.client` leaves the response of a
        "Connection: close" reply open (its socket with it) until it is collected, and a
        reply given up on must stop the server's work at once."""
        response, self.response = self.response, None
        super().close()
        if response is not None:
            response.close()


class TimedTlsConnection(TimedConnection, http.client.HTTPSConnection):
    """`TimedConnection` over TLS (`context=` given; the handshake within the first deadline)."""


def event_chunks(response: http.client.HTTPResponse) -> Iterator[dict[str, Any] | None]:
    """Each `data:` chunk of a server-sent event stream, parsed (a chunk that is not an object
    is `{}`); None once `[DONE]` ends a finished reply. Unusable for a line over
    `MAX_LINE_BYTES`, a chunk that is not JSON or holds an error, an end without `[DONE]`, or
    `[DONE]` before any chunk said the reply was finished (llama-cpp-python's server ends an
    interrupted reply that way)."""
    finished = False
    while True:
        raw = response.readline(MAX_LINE_BYTES + 1)
        if not raw:
            raise Unusable("the stream ended without [DONE]")
        if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
            raise Unusable(f"a line of more than {MAX_LINE_BYTES // 1024} kB")
        line = raw.decode("utf-8", "replace").strip()
        if not line.startswith("data:"):
            continue  # blank lines between events, ":" keep-alive comments, event names
        data = line[len("data:"):].strip()
        if data == "[DONE]":
            if not finished:
                raise Unusable("the server stopped the reply before it was finished (another "
                               "request interrupted it?)")
            yield None
            return
        chunk = parsed(data)
        if isinstance(chunk, dict) and "error" in chunk:
            raise Unusable(f"error: {shown(json.dumps(chunk['error'], default=str), 200)}")
        choices = chunk.get("choices") if isinstance(chunk, dict) else None
        if isinstance(choices, list) and choices and isinstance(choices[0], dict):
            finished = finished or bool(choices[0].get("finish_reason"))
        yield chunk if isinstance(chunk, dict) else {}


def parsed(data: str | bytes) -> Any:
    """JSON from the server; Unusable for anything Python's parser refuses or chokes on."""
    try:
        return json.loads(data)
    except (ValueError, RecursionError):
        raise Unusable(f"not JSON: {shown(_text(data), 60)!r}") from None


def _text(data: str | bytes) -> str:
    return data if isinstance(data, str) else data[:200].decode("utf-8", "replace")
