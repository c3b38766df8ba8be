"""A TCP proxy on 127.0.0.1 in front of a real server, for network faults: it can cut every
connection now, or cut a connection once the client has sent a given number of bytes through
it (a network dropped in the middle of a batch), and refuse new ones while "down"."""

from __future__ import annotations

import contextlib
import select
import socket
import threading

_RESET = (1).to_bytes(4, "little") + (0).to_bytes(4, "little")
"""SO_LINGER on, 0 s: close sends a reset, as a dropped network's next packet would get."""


class TcpProxy:
    def __init__(self, upstream_port: int) -> None:
        self._upstream = ("127.0.0.1", upstream_port)
        self._listener = socket.socket()
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self.port = int(self._listener.getsockname()[1])
        self._lock = threading.Lock()
        self._open: list[socket.socket] = []
        self._closing = threading.Event()
        self.down = False
        """While True, a new connection is closed at once."""
        self._client_bytes = 0
        self._cut_at: int | None = None
        self.cuts = 0
        """Connections cut by `cut_after`."""
        threading.Thread(target=self._accept, daemon=True).start()

    def url(self, url: str, server_port: int) -> str:
        """`url` of the server, through this proxy."""
        return url.replace(f":{server_port}/", f":{self.port}/")

    @property
    def client_bytes(self) -> int:
        """Bytes the clients sent through so far."""
        return self._client_bytes

    def cut_after(self, count: int) -> None:
        """Cut the connection through which the clients' next `count` bytes pass, at that
        byte (once)."""
        with self._lock:
            self._cut_at = self._client_bytes + count

    def drop_all(self) -> None:
        """Cut every open connection (both ends see a reset)."""
        with self._lock:
            sockets, self._open = self._open, []
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RESET)
                sock.close()

    def close(self) -> None:
        self._closing.set()
        self.drop_all()
        self._listener.close()

    def _accept(self) -> None:
        while not self._closing.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if self.down:
                client.close()
                continue
            try:
                upstream = socket.create_connection(self._upstream, timeout=5)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._open += [client, upstream]
            threading.Thread(target=self._pump, args=(client, upstream), daemon=True).start()

    def _pump(self, client: socket.socket, upstream: socket.socket) -> None:
        try:
            while True:
                ready, _, _ = select.select([client, upstream], [], [], 1.0)
                for sock in ready:
                    data = sock.recv(65536)
                    if not data:
                        return
                    if sock is client:
                        with self._lock:
                            before = self._client_bytes
                            self._client_bytes += len(data)
                            cut_at = self._cut_at
                            if cut_at is not None and self._client_bytes >= cut_at:
                                self._cut_at = None
                                self.cuts += 1
                        if cut_at is not None and before + len(data) >= cut_at:
                            upstream.sendall(data[: max(0, cut_at - before)])
                            return
                        upstream.sendall(data)
                    else:
                        client.sendall(data)
        except (OSError, ValueError):
            return
        finally:
            for sock in (client, upstream):
                with contextlib.suppress(OSError):
                    sock.close()
