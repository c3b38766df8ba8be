"""The audio callback threads: asked for real-time scheduling, and the device's misses counted.

PortAudio calls the microphone's and the speaker's callbacks on threads of its own. At the
default priority, a machine whose every core is busy (a kiosk's browser at its worst: two
processes spinning beside the agent on a 2-core PC) keeps them waiting behind those processes,
and the device's buffers run over (the microphone's frames are lost) or under (the speaker plays
silence it was never given). So, on its first callback, each thread asks for Linux's real-time
class, `SCHED_FIFO` at `[audio] realtime_priority`: it then runs before every normal process
whenever it has work, which is copying one buffer per callback.

Who gets it:
- The kiosk's systemd unit sets `LimitRTPRIO=` (the most a process may ask for without
  privileges) to the default priority: the service user gets it.
- A desktop user gets it where PAM grants `rtprio` (on Debian and Ubuntu, members of the `audio`
  group when the jackd package's "realtime process priority" was enabled:
  /etc/security/limits.d/audio.conf; `ulimit -r` shows the limit); root always does.
- Otherwise the threads stay at normal priority, and the agent says why once. RealtimeKit (the
  D-Bus service PulseAudio and PipeWire ask) is not asked: that needs D-Bus bindings.
- A kernel built with real-time group scheduling (`CONFIG_RT_GROUP_SCHED`) refuses it inside a
  cgroup given no real-time budget; Debian's and Raspberry Pi OS's kernels are not.

The threads hold the interpreter's lock for the copying only; a callback that finds the lock
held (the loop running Python) still waits for it, at any priority.

The device's own misses are counted from PortAudio's status flags: an input overflow (captured
audio nobody read in time, lost) and an output underflow (the device played silence nobody
gave it). A reply whose next piece is synthesized late is not one: PortAudio was handed silence.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass

INPUT_OVERFLOW = 0x2
"""PortAudio's paInputOverflow status flag."""
OUTPUT_UNDERFLOW = 0x4
"""PortAudio's paOutputUnderflow status flag."""
PRIORITY_RANGE = (0, 99)
"""SCHED_FIFO's priorities on Linux (0: do not ask)."""


def request_fifo(priority: int) -> None:
    """The calling thread into SCHED_FIFO at `priority` (Linux: pid 0 is the calling thread);
    OSError if not permitted."""
    os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(priority))


@dataclass(frozen=True)
class AudioThreadsState:
    """How the audio threads have fared so far."""

    scheduling: str
    """"real-time (SCHED_FIFO 10)", "normal priority (...)" and why, or "" before any
    callback."""
    fix: str
    """How to get real-time scheduling, when it was refused ("" otherwise)."""
    input_overflows: int
    """Callbacks that reported captured audio lost (nobody read it in time)."""
    output_underflows: int
    """Callbacks that reported the device playing silence nobody gave it."""


class AudioThreads:
    """The callback threads of one PortAudio host's streams. `entered` is called first in every
    callback, on PortAudio's thread; `state` may be read from any thread."""

    def __init__(self, priority: int,
                 request: Callable[[int], None] = request_fifo) -> None:
        """`priority`: SCHED_FIFO's (1-99), 0 to leave the threads as they are. `request`:
        puts the calling thread into SCHED_FIFO (raises OSError when not permitted)."""
        self._priority = priority
        self._request = request
        self._asked: set[int] = set()
        self._scheduling = ""
        self._fix = ""
        self._overflows = 0
        self._underflows = 0

    def entered(self, status: int) -> None:
        """A callback began with PortAudio's `status` flags."""
        if status & INPUT_OVERFLOW:
            self._overflows += 1
        if status & OUTPUT_UNDERFLOW:
            self._underflows += 1
        thread = threading.get_native_id()
        if thread not in self._asked:  # once per thread (a reopened stream brings a new one)
            self._asked.add(thread)
            self._scheduling, self._fix = self._ask()

    def state(self) -> AudioThreadsState:
        return AudioThreadsState(self._scheduling, self._fix, self._overflows, self._underflows)

    def _ask(self) -> tuple[str, str]:
        if not self._priority:
            return "normal priority ([audio] realtime_priority = 0)", ""
        try:
            self._request(self._priority)
        except OSError as exc:
            return (f"normal priority (real-time priority {self._priority} was refused: "
                    f"{exc.strerror or exc})",
                    "allow it with the unit's LimitRTPRIO=, or a PAM rtprio limit for the user "
                    "(`ulimit -r` shows it); or set [audio] realtime_priority = 0")
        return f"real-time (SCHED_FIFO {self._priority})", ""
