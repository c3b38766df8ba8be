"""Sockets systemd opened for the agent (socket activation, sd_listen_fds(3)), with no library.

The kiosk's screen is served on a socket that `edge-agent-screen.socket` listens on: systemd
creates it outside the service's sandbox and hands it over when the agent starts, so the agent
itself keeps no network at all (PrivateNetwork=yes, AF_UNIX only) and still serves the page.
The protocol: $LISTEN_PID is this process, $LISTEN_FDS counts the sockets from descriptor 3 on,
$LISTEN_FDNAMES names them (FileDescriptorName=), colon-separated. Outside systemd (a terminal,
the tests) nothing was handed over.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping

FIRST_FD = 3
"""sd_listen_fds(3)'s SD_LISTEN_FDS_START."""


def inherited_socket(name: str, environ: Mapping[str, str] | None = None) -> socket.socket | None:
    """The listening socket handed over under `name`, else None. A child this process starts
    inherits none of them (the descriptor is made non-inheritable)."""
    env = os.environ if environ is None else environ
    if env.get("LISTEN_PID", "") != str(os.getpid()):
        return None  # meant for another process (the variables were inherited)
    count = env.get("LISTEN_FDS", "")
    names = env.get("LISTEN_FDNAMES", "").split(":")
    if not count.isdigit():
        return None
    for index in range(min(int(count), len(names))):
        if names[index] == name:
            fd = FIRST_FD + index
            os.set_inheritable(fd, False)
            return socket.socket(fileno=fd)  # its family and type are read from the socket
    return None
