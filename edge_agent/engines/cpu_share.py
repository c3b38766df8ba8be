"""How many cores the LLM may use right now: never more than nobody else needs.

llama.cpp's worker threads wait for each other at every step of a token by spinning. When one
of them has no core (another program is busy, or the agent's own voice is synthesizing), every
token waits for it to be scheduled again. Measured on a 2-core PC with SmolLM2-135M (48 tokens,
temperature 0):

| beside it | 2 threads | 1 thread |
|---|---|---|
| nothing | 56-65 tokens/s | 39-48 tokens/s |
| one busy process | 16-20 tokens/s | 45-48 tokens/s |
| two busy processes | 15-16 tokens/s | 27-28 tokens/s |

So the LLM's thread count is chosen while it runs, not once from the core count: before a
request and between its tokens, `CpuShare.llm_threads` gives the cores of the machine less

- the cores other programs used over the last fraction of a second (measured: the machine's
  busy time from /proc/stat less this process's own CPU time), a core as soon as they use
  half of one, and
- the threads of the agent's own engines at work right now (the voice synthesizing, the
  recognizer transcribing: they mark themselves with `CpuShare.working`),

at least 1 and at most `[llm] threads` (0: every core this process may use, `usable_cores`).
The other engines run onnxruntime on one thread each by default, which does not spin: they are
not the ones that collapse.

The rule for a machine of N cores with nothing else on it: the LLM on N threads while it writes
alone, N - 1 while the voice synthesizes a clause (or the recognizer transcribes), fewer when
another program keeps cores busy. On 2 cores that is 2, 1 and 1.

One wait is not shared at all: while the voice synthesizes the first piece of a reply, the
listener hears nothing until it is done, and the rest of the reply is not needed before that
piece has played (a second or more). So the LLM stops between tokens while a listener waits
(`CpuShare.listener_waiting`, `CpuShare.hold_while_listener_waits`). Measured on a 2-core PC,
Piper synthesizing "I'm not a parking service," while SmolLM2-135M writes a long reply
(median of 8; alone: 135-145 ms):

| beside them | model held | model writing on 1 thread |
|---|---|---|
| nothing | 140 ms | 146 ms |
| one busy process | 157 ms | 218 ms |

llama.cpp's second worker keeps spinning when the model is told to use one thread, and on a
machine where another program takes a core, that is the core the voice needed.
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Protocol

SAMPLE_EVERY_S = 0.2
"""The load of other programs is re-measured at most this often (reading /proc/stat costs
~20 µs; per token it would be noise, not news)."""
HOLD_AT_MOST_S = 2.0
"""The LLM waits at most this long per token for a listener (a guard: the longest first piece
Piper synthesizes on a Raspberry Pi takes well under it)."""
CORE_TAKEN_AT = 0.5
"""Share of a core other programs must use for the LLM to leave that core to them. Measured
on a 2-core PC, SmolLM2-135M beside one process busy a share of every 10 ms (of every 100 ms):
at 15 % 2 threads 54 (51) tokens/s, 1 thread 40 (41); at 30 % 55 (51) and 42 (40); at 50 %
38 (49) and 41 (42); at 70 % 34 and 44. Half a core is where one thread starts to win."""


class LoadMeter(Protocol):
    """What other programs on the machine do with the CPU."""

    def others_cores(self) -> float:
        """Cores' worth of CPU time other processes used lately (0.0 .. the core count)."""
        ...


def usable_cores(cgroup_root: Path = Path("/sys/fs/cgroup"),
                 own_cgroup: Path = Path("/proc/self/cgroup")) -> int:
    """The cores this process may run on: its affinity mask (`taskset`, systemd's
    `CPUAffinity=`), fewer under a CPU quota (cgroup v2 `cpu.max`: a container started with
    `--cpus=2` on a 64-core host, systemd's `CPUQuota=`), at least 1."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    quota = _cpu_quota(cgroup_root, own_cgroup)
    if quota is not None:
        cores = min(cores, math.ceil(quota))
    return max(1, cores)


def _cpu_quota(cgroup_root: Path, own_cgroup: Path) -> float | None:
    """The smallest CPU quota (in cores) on the way from this process's cgroup up to the root,
    or None: no quota, or no cgroup v2 to read it from."""
    try:
        lines = own_cgroup.read_text(encoding="ascii").splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    unified = [line[3:] for line in lines if line.startswith("0::")]
    if not unified:
        return None
    parts = [part for part in unified[0].split("/") if part not in ("", ".", "..")]
    quotas: list[float] = []
    for depth in range(len(parts), -1, -1):
        try:
            fields = cgroup_root.joinpath(*parts[:depth], "cpu.max").read_text(
                encoding="ascii").split()
            if len(fields) == 2 and fields[0] != "max":
                quotas.append(int(fields[0]) / int(fields[1]))
        except (OSError, ValueError, UnicodeDecodeError, ZeroDivisionError):
            continue  # the root has no cpu.max; an unreadable one limits nothing we know of
    return min(quotas) if quotas else None


class CpuShare:
    """The cores free for the LLM now: see the module's docstring. Safe to call from any
    thread (engines mark themselves from their owner threads)."""

    def __init__(self, cores: int, meter: LoadMeter) -> None:
        self._cores = cores
        self._meter = meter
        self._lock = threading.Lock()
        self._engine_threads = 0
        """Threads of the agent's other engines working right now."""
        self._listeners_waiting = 0
        self._nobody_waits = threading.Condition(self._lock)

    @property
    def cores(self) -> int:
        return self._cores

    @contextlib.contextmanager
    def working(self, threads: int) -> Iterator[None]:
        """Mark an engine running on `threads` threads while inside."""
        with self._lock:
            self._engine_threads += threads
        try:
            yield
        finally:
            with self._lock:
                self._engine_threads -= threads

    @contextlib.contextmanager
    def listener_waiting(self) -> Iterator[None]:
        """While inside, the listener waits for what is being done (the first piece of a
        reply): the LLM holds between its tokens (`hold_while_listener_waits`)."""
        with self._lock:
            self._listeners_waiting += 1
        try:
            yield
        finally:
            with self._lock:
                self._listeners_waiting -= 1
                self._nobody_waits.notify_all()

    def hold_while_listener_waits(self, at_most_s: float = HOLD_AT_MOST_S) -> bool:
        """Block (the LLM's thread, between tokens) while a listener waits, at most
        `at_most_s`; True when it waited."""
        with self._lock:
            if self._listeners_waiting == 0:
                return False
            self._nobody_waits.wait_for(lambda: self._listeners_waiting == 0, at_most_s)
            return True

    def llm_threads(self, ceiling: int) -> int:
        """Threads for the LLM's next step: the cores nobody else needs, 1 .. `ceiling`
        (0: the core count)."""
        ceiling = self._cores if ceiling <= 0 else ceiling
        taken_by_others = math.floor(self._meter.others_cores() + 1 - CORE_TAKEN_AT)
        free = self._cores - taken_by_others - self._engine_threads
        return max(1, min(ceiling, free))


def at_work(share: CpuShare | None, threads: int) -> contextlib.AbstractContextManager[None]:
    """`share.working(threads)`, or nothing to mark without a share."""
    return contextlib.nullcontext() if share is None else share.working(threads)


def listener_waits(share: CpuShare | None) -> contextlib.AbstractContextManager[None]:
    """`share.listener_waiting()`, or nothing to mark without a share."""
    return contextlib.nullcontext() if share is None else share.listener_waiting()


class ProcLoadMeter:
    """Other programs' CPU use on Linux: the machine's busy time (/proc/stat) less this
    process's own (all its threads), over the time since the previous reading (at least
    `SAMPLE_EVERY_S`; a reading after a long idle covers that whole stretch)."""

    def __init__(self, now: Callable[[], float] = time.monotonic,
                 stat_path: str = "/proc/stat") -> None:
        self._now = now
        self._stat_path = stat_path
        self._ticks = os.sysconf("SC_CLK_TCK")
        self._lock = threading.Lock()
        self._last = self._reading()
        self._others = 0.0

    def others_cores(self) -> float:
        with self._lock:
            if self._last is not None and self._now() - self._last[0] < SAMPLE_EVERY_S:
                return self._others
            reading = self._reading()
            if reading is None or self._last is None:
                self._last = reading
                return self._others
            elapsed = reading[0] - self._last[0]
            machine = reading[1] - self._last[1]
            own = reading[2] - self._last[2]
            self._others = min(float(os.cpu_count() or 1), max(0.0, (machine - own) / elapsed))
            self._last = reading
            return self._others

    def _reading(self) -> tuple[float, float, float] | None:
        """(now, the machine's busy CPU seconds, this process's CPU seconds); None where
        /proc/stat cannot be read (not Linux): then nobody else counts."""
        try:
            with open(self._stat_path, encoding="ascii") as stat:
                fields = stat.readline().split()
        except OSError:
            return None
        if len(fields) < 6 or fields[0] != "cpu":
            return None
        ticks = [int(field) for field in fields[1:]]
        idle = ticks[3] + ticks[4]  # idle + iowait
        # guest and guest_nice (fields 9, 10) are already counted in user and nice.
        busy = sum(ticks[:8]) - idle
        times = os.times()
        return self._now(), busy / self._ticks, times.user + times.system
