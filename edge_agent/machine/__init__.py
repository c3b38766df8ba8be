"""What this machine is, as `doctor` reports it and a benchmark records it: CPU model, memory,
operating system, load. One probe, read from /proc and /etc where Linux keeps them."""

from __future__ import annotations

import contextlib
import os
import platform
from pathlib import Path


def cpu_model() -> str:
    """x86 says "model name"; ARM boards (a Raspberry Pi) say "Model" or "Hardware"."""
    found: dict[str, str] = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            key, sep, value = line.partition(":")
            if sep and value.strip():
                found.setdefault(key.strip(), value.strip())
    return next((found[k] for k in ("model name", "Model", "Hardware", "cpu model") if k in found),
                platform.processor() or platform.machine() or "unknown CPU")


def load_average() -> list[float]:
    """The 1-, 5- and 15-minute load, rounded to hundredths."""
    return [round(x, 2) for x in os.getloadavg()]


def memory_bytes() -> tuple[int, int]:
    """(total, available) RAM in bytes, from /proc/meminfo; 0 for a figure it does not give
    (or when it cannot be read)."""
    info: dict[str, int] = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            key, _, value = line.partition(":")
            fields = value.split()
            if fields and fields[0].isdigit():
                info[key] = int(fields[0]) * 1024  # kB
    return info.get("MemTotal", 0), info.get("MemAvailable", 0)


def os_name() -> str:
    """The distribution's name ("Debian GNU/Linux 13 (trixie)"), else the system's."""
    with contextlib.suppress(OSError):
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                return line.partition("=")[2].strip().strip('"')
    return platform.system()


def memory_kb(pid: int) -> dict[str, int]:
    """Process `pid`'s resident memory in kB: VmRSS (now), VmHWM (its peak) and Pss (its share
    of pages it shares with others), from /proc (OSError when it has gone)."""
    values = {}
    for name in ("status", "smaps_rollup"):
        for line in Path(f"/proc/{pid}/{name}").read_text().splitlines():
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM", "Pss"):
                values[key] = int(rest.split()[0])
    return values
