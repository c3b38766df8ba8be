"""SystemdNotifier against a real datagram socket owned by the test (as systemd's would be), and
the watchdog pings of keep_alive: at their rate, and stopped by a blocked event loop."""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from edge_agent.service.notify import SystemdNotifier, keep_alive, supervised


@dataclass
class Listener:
    """A notify socket and a thread that timestamps every datagram as it arrives (the
    timestamps measure the sender's loop, not when the test got round to reading)."""

    sock: socket.socket
    address: str
    received: list[tuple[float, str]] = field(default_factory=list)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        def receive() -> None:
            while True:
                try:
                    data = self.sock.recv(4096)
                except OSError:
                    return  # closed by stop()
                if data == b"":
                    return
                self.received.append((time.monotonic(), data.decode()))

        self._thread = threading.Thread(target=receive, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        # An empty datagram ends the receiver (after everything sent before it); then the socket
        # closes. A second call does nothing.
        if self.sock.fileno() < 0:
            return
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as poke:
            poke.sendto(b"", self.sock.getsockname())
        if self._thread is not None:
            self._thread.join(timeout=10)
        self.sock.close()

    def messages(self) -> list[str]:
        return [message for _, message in self.received]

    def times(self, message: str) -> list[float]:
        return [at for at, text in self.received if text == message]


def _socket_dir(tmp_path: Path) -> Path:
    # sun_path holds 107 bytes: a deep pytest tmp_path may not fit, a short temp dir does.
    if len(str(tmp_path / "notify.sock")) < 100:
        return tmp_path
    return Path(tempfile.mkdtemp(prefix="sdn"))


@pytest.fixture
def listener(tmp_path: Path) -> Iterator[Listener]:
    path = _socket_dir(tmp_path) / "notify.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(path))
    found = Listener(sock, str(path))
    found.start()
    yield found
    found.stop()
    path.unlink(missing_ok=True)


@pytest.fixture
def abstract_listener() -> Iterator[Listener]:
    name = f"edge-agent-test-{os.getpid()}-{time.monotonic_ns()}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(b"\0" + name.encode())
    found = Listener(sock, "@" + name)
    found.start()
    yield found
    found.stop()


def _drained(listener: Listener, count: int) -> list[str]:
    """The messages once `count` have arrived: the receiver thread is woken by a last datagram
    sent after them (datagrams on one socket keep their order), not by waiting."""
    listener.stop()
    return listener.messages()[:count]


def test_ready_status_watchdog_stopping_reach_the_socket(listener: Listener) -> None:
    notifier = SystemdNotifier({"NOTIFY_SOCKET": listener.address})
    assert notifier.enabled
    notifier.ready()
    notifier.status("loading models")
    notifier.status("loading models")  # the same status again: not sent
    notifier.status("listening\nSTOPPING=1")  # one line: a newline could forge an assignment
    notifier.watchdog()
    notifier.stopping()
    notifier.close()
    assert _drained(listener, 5) == ["READY=1", "STATUS=loading models",
                                     "STATUS=listening STOPPING=1", "WATCHDOG=1", "STOPPING=1"]
    assert not notifier.failed


def test_abstract_socket_name(abstract_listener: Listener) -> None:
    notifier = SystemdNotifier({"NOTIFY_SOCKET": abstract_listener.address})
    notifier.ready()
    notifier.status("listening")
    assert _drained(abstract_listener, 2) == ["READY=1", "STATUS=listening"]


def test_without_notify_socket_nothing_happens() -> None:
    notifier = SystemdNotifier({})
    assert not notifier.enabled
    notifier.ready()
    notifier.status("listening")
    notifier.watchdog()
    notifier.stopping()
    assert not notifier.failed
    assert SystemdNotifier({"NOTIFY_SOCKET": "relative/path"}).enabled is False


def test_a_gone_socket_never_raises_and_is_logged_once(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    notifier = SystemdNotifier({"NOTIFY_SOCKET": str(tmp_path / "gone.sock")})
    with caplog.at_level(logging.WARNING, logger="edge_agent.service.notify"):
        for _ in range(3):
            notifier.ready()
            notifier.status("listening")
            notifier.watchdog()
    assert notifier.failed
    assert len([r for r in caplog.records if "cannot notify systemd" in r.getMessage()]) == 1


@pytest.mark.parametrize(("env", "expected"), [
    ({"WATCHDOG_USEC": "30000000"}, 15.0),
    ({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": str(os.getpid())}, 15.0),
    ({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": str(os.getpid() + 1)}, None),
    ({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "x"}, None),
    ({"WATCHDOG_USEC": "0"}, None),
    ({"WATCHDOG_USEC": "-5"}, None),
    ({"WATCHDOG_USEC": "soon"}, None),
    ({}, None),
])
def test_watchdog_interval_is_half_the_watchdog_time(env: dict[str, str],
                                                     expected: float | None) -> None:
    assert SystemdNotifier(env).watchdog_interval() == expected


INTERVAL = 0.05
"""keep_alive's period in the timing tests: short, so a window of many periods stays short."""


async def test_keep_alive_pings_at_its_rate(listener: Listener) -> None:
    notifier = SystemdNotifier({"NOTIFY_SOCKET": listener.address})
    window = 20 * INTERVAL
    task = asyncio.create_task(keep_alive(notifier, INTERVAL))
    await asyncio.sleep(window)  # the observation window itself, not a wait for a condition
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    listener.stop()
    pings = len(listener.times("WATCHDOG=1"))
    expected = window / INTERVAL + 1  # one at once, then one per period
    # Loose on purpose: a loaded CI machine stretches sleeps, never shortens them.
    assert expected * 0.25 <= pings <= expected * 1.5, pings


async def test_a_blocked_loop_stops_the_pings(listener: Listener) -> None:
    notifier = SystemdNotifier({"NOTIFY_SOCKET": listener.address})
    block = 12 * INTERVAL
    task = asyncio.create_task(keep_alive(notifier, INTERVAL))
    await asyncio.sleep(5 * INTERVAL)
    blocked_at = time.monotonic()
    time.sleep(block)  # the stuck loop this watchdog exists for
    unblocked_at = time.monotonic()
    await asyncio.sleep(5 * INTERVAL)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    listener.stop()
    pings = listener.times("WATCHDOG=1")
    before = [at for at in pings if at < blocked_at]
    after = [at for at in pings if at >= unblocked_at]
    assert before and after, pings
    gaps = [b - a for a, b in itertools.pairwise(pings)]
    # The longest silence spans the block: no ping could be sent while the loop was stuck.
    assert max(gaps) >= block * 0.9, gaps
    assert not [at for at in pings if blocked_at + block * 0.1 < at < unblocked_at]


async def test_supervised_pings_when_asked_and_says_stopping(listener: Listener) -> None:
    env = {"NOTIFY_SOCKET": listener.address, "WATCHDOG_USEC": str(int(INTERVAL * 2e6))}
    notifier = SystemdNotifier(env)
    async with supervised(notifier):
        notifier.ready()
        await asyncio.sleep(4 * INTERVAL)
    listener.stop()
    messages = listener.messages()
    assert "READY=1" in messages and messages[-1] == "STOPPING=1"
    assert messages.count("WATCHDOG=1") >= 2


async def test_supervised_without_watchdog_only_says_stopping(listener: Listener) -> None:
    notifier = SystemdNotifier({"NOTIFY_SOCKET": listener.address})
    async with supervised(notifier):
        pass
    listener.stop()
    assert listener.messages() == ["STOPPING=1"]
