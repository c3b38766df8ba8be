"""Readiness, status and watchdog for systemd (`Type=notify`, `WatchdogSec=`), with no library.

systemd's protocol is one datagram per message on the AF_UNIX socket named by $NOTIFY_SOCKET
(a path, or "@name" for an abstract socket), each message `KEY=value` lines: READY=1 once the
agent can take a call, STATUS=... for `systemctl status`, WATCHDOG=1 as a sign of life,
STOPPING=1 on the way out. Outside systemd ($NOTIFY_SOCKET unset: a terminal, the tests, the
demo) every method does nothing.

The watchdog pings come from the event loop itself (`keep_alive`), never from a thread: the
loop is what must not stall (every decision of a call is taken on it), so a loop blocked for
longer than WatchdogSec stops the pings and systemd kills and restarts the agent. An engine
busy on its owner thread (a long model load, a slow reply) does not block the loop, so it never
passes for a hang. The ping period is half of WatchdogSec, as sd_watchdog_enabled(3) advises:
one late ping is not yet a timeout. systemd arms the watchdog at READY=1 (tried with systemd 252:
10 s before READY=1 under WatchdogSec=4 passed; a loop blocked 9 s after it was killed with
SIGABRT), so loading the models is bounded by TimeoutStartSec= alone.

Sending never raises into the agent: the socket can go away (a manager re-executing, a test
tearing it down) and a voice agent must not stop for want of a status line. The first failure
is logged once; later ones are dropped silently.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import AsyncIterator, Mapping

log = logging.getLogger(__name__)

NOTIFY_SOCKET = "NOTIFY_SOCKET"
WATCHDOG_USEC = "WATCHDOG_USEC"
WATCHDOG_PID = "WATCHDOG_PID"


class SystemdNotifier:
    """sd_notify(3) for one process. `env` is injected (os.environ by default) so that tests
    and other callers decide which socket it talks to."""

    def __init__(self, env: Mapping[str, str] | None = None, pid: int | None = None) -> None:
        env = os.environ if env is None else env
        self._address = _socket_address(env.get(NOTIFY_SOCKET, ""))
        self._watchdog_usec = env.get(WATCHDOG_USEC, "")
        self._watchdog_pid = env.get(WATCHDOG_PID, "")
        self._pid = os.getpid() if pid is None else pid
        self._socket: socket.socket | None = None
        self._last_status: str | None = None
        self.failed = False
        """True once a send failed (logged the first time only)."""

    @property
    def enabled(self) -> bool:
        """Whether a notify socket was given (the process runs under systemd's Type=notify)."""
        return self._address is not None

    def ready(self) -> None:
        """The agent listens: systemd ends `start` (and the watchdog starts counting)."""
        self._send("READY=1")

    def status(self, text: str) -> None:
        """What `systemctl status` shows. The same status twice in a row is sent once: the
        conversation's events repeat states (listening after every unit) far more often than
        they change them."""
        # A status is one line: a newline would start a new KEY= assignment in the datagram.
        line = " ".join(text.split())
        if line == self._last_status:
            return
        if self._send(f"STATUS={line}"):
            self._last_status = line

    def watchdog(self) -> None:
        """A sign of life; systemd kills the agent when none comes for WatchdogSec."""
        self._send("WATCHDOG=1")

    def stopping(self) -> None:
        """The agent is shutting down on purpose (no watchdog complaint while it closes)."""
        self._send("STOPPING=1")

    def watchdog_interval(self) -> float | None:
        """Seconds between pings (half of WatchdogSec), or None when no watchdog is asked for
        this process: $WATCHDOG_USEC unset, not a positive number, or $WATCHDOG_PID naming
        another process (a child inherited the variables)."""
        if self._watchdog_pid:
            try:
                if int(self._watchdog_pid) != self._pid:
                    return None
            except ValueError:
                return None
        try:
            usec = int(self._watchdog_usec)
        except ValueError:
            return None
        if usec <= 0:
            return None
        return usec / 2_000_000

    def close(self) -> None:
        if self._socket is not None:
            self._socket.close()
            self._socket = None

    def _send(self, message: str) -> bool:
        """Send one datagram; False (never an exception) when it could not be sent."""
        if self._address is None:
            return False
        try:
            if self._socket is None:
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                # A datagram socket never blocks for long, but a full receive queue on a wedged
                # manager must not stall the event loop that is sending the ping.
                sock.setblocking(False)
                self._socket = sock
            self._socket.sendto(message.encode("utf-8"), self._address)
        except OSError as exc:
            if not self.failed:
                self.failed = True
                log.warning("cannot notify systemd at %s: %s (further failures are not logged)",
                            self._address, exc)
            return False
        return True


def _socket_address(value: str) -> str | bytes | None:
    """$NOTIFY_SOCKET as an address for sendto: "@name" is the abstract socket "\\0name"
    (bytes, so that Python does not take it for a path); a relative path is not valid."""
    if value.startswith("@") and len(value) > 1:
        return b"\0" + value[1:].encode("utf-8")
    if value.startswith("/"):
        return value
    return None


async def keep_alive(notifier: SystemdNotifier, interval: float) -> None:
    """Ping the watchdog every `interval` seconds from the event loop, until cancelled.

    It runs as a task on the agent's own loop: if the loop stops running callbacks (a blocking
    call where none may be), the pings stop with it, which is what systemd should see."""
    notifier.watchdog()
    while True:
        await asyncio.sleep(interval)
        notifier.watchdog()


@contextlib.asynccontextmanager
async def supervised(notifier: SystemdNotifier) -> AsyncIterator[SystemdNotifier]:
    """Watchdog pings for the duration of the block (when systemd asked for them), STOPPING=1
    at its end. READY=1 is the caller's to send, when the agent can really take a call."""
    interval = notifier.watchdog_interval()
    task = asyncio.create_task(keep_alive(notifier, interval)) if interval else None
    try:
        yield notifier
    finally:
        notifier.stopping()
        if task is not None:
            task.cancel()
            # wait(), not `await task`: the ping task's CancelledError is its own, while a
            # cancellation of this task must still propagate.
            await asyncio.wait([task])
