"""Other programs on the kiosk: processes that keep cores busy beside the agent while a part
measures (`bench engines --busy N`, `bench latency --busy N`).

A kiosk is rarely alone on its CPU: a browser showing its screen, a log shipper, an update.
Each co-tenant here is a Python process spinning in a loop at normal priority, the worst such a
neighbour does to one core; `N` of them, one per core, is a machine whose every core someone
else also wants.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator

SPIN = "while True:\n    pass\n"


@contextlib.contextmanager
def busy_processes(count: int) -> Iterator[list[int]]:
    """`count` processes each keeping one core busy while inside; their pids. They are killed
    and reaped on the way out, whatever happened inside."""
    spinners: list[subprocess.Popen[bytes]] = []
    try:
        for _ in range(count):
            spinners.append(subprocess.Popen([sys.executable, "-c", SPIN],
                                             stdin=subprocess.DEVNULL,
                                             stdout=subprocess.DEVNULL,
                                             stderr=subprocess.DEVNULL))
        yield [spinner.pid for spinner in spinners]
    finally:
        for spinner in spinners:
            spinner.kill()
        for spinner in spinners:
            spinner.wait()
