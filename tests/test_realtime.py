"""The sound device's callback threads ask for real-time scheduling (where the system grants it,
and say why not where it does not), the device's misses are counted, and the live run reports
both in its event log."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from edge_agent.app.audio_health import report_audio_health
from edge_agent.audio.realtime import INPUT_OVERFLOW, OUTPUT_UNDERFLOW, AudioThreads
from edge_agent.bench.latency_figures import audio_health
from edge_agent.clock import VirtualClock
from edge_agent.config import Config
from edge_agent.console import label
from edge_agent.events import AudioHealth, EventLog, LoggedEvent

REPO = Path(__file__).resolve().parents[1]


def _on_threads(threads: AudioThreads, statuses: list[list[int]]) -> None:
    """Each list of statuses, as the callbacks of one thread of its own."""
    def callbacks(run: list[int]) -> None:
        for status in run:
            threads.entered(status)

    for run in statuses:
        worker = threading.Thread(target=callbacks, args=(run,))
        worker.start()
        worker.join()


def test_each_thread_asks_once_and_the_misses_are_counted() -> None:
    asked: list[tuple[int, int]] = []
    threads = AudioThreads(10, request=lambda p: asked.append((threading.get_native_id(), p)))
    assert threads.state().scheduling == ""  # no callback yet
    _on_threads(threads, [[0, INPUT_OVERFLOW, 0], [OUTPUT_UNDERFLOW, OUTPUT_UNDERFLOW, 0x10]])
    assert [priority for _, priority in asked] == [10, 10]  # once per thread, not per callback
    state = threads.state()
    assert state.scheduling == "real-time (SCHED_FIFO 10)"
    assert (state.input_overflows, state.output_underflows) == (1, 2)


def test_refused_the_threads_stay_as_they_are_and_it_says_how_to_allow_it() -> None:
    def refuse(priority: int) -> None:
        raise PermissionError(1, "Operation not permitted")

    threads = AudioThreads(10, request=refuse)
    _on_threads(threads, [[0]])
    state = threads.state()
    assert state.scheduling == ("normal priority (real-time priority 10 was refused: "
                                "Operation not permitted)")
    assert "LimitRTPRIO=" in state.fix and "realtime_priority = 0" in state.fix


def test_priority_zero_asks_nothing() -> None:
    threads = AudioThreads(0, request=lambda p: pytest.fail("asked for real-time"))
    _on_threads(threads, [[0]])
    assert threads.state().scheduling == "normal priority ([audio] realtime_priority = 0)"


CHILD = """
import os, sys, threading
from edge_agent.audio.realtime import AudioThreads
if sys.argv[1] == "nobody":
    os.setgid(65534)
    os.setuid(65534)  # no CAP_SYS_NICE, and RLIMIT_RTPRIO as it was (0 unless granted)
threads = AudioThreads(10)
seen = []
worker = threading.Thread(target=lambda: (threads.entered(0),
                                          seen.append(os.sched_getscheduler(0))))
worker.start()
worker.join()
print(threads.state().scheduling)
print("FIFO" if seen == [os.SCHED_FIFO] else "OTHER", os.sched_getscheduler(0) == os.SCHED_OTHER)
"""


@pytest.mark.parametrize("who", ["root", "nobody"])
def test_the_callback_thread_runs_real_time_where_the_system_grants_it(who: str) -> None:
    # In a real process: root (CAP_SYS_NICE) gets SCHED_FIFO on the callback thread and on
    # nothing else; a user with no RLIMIT_RTPRIO is refused, and told how to allow it. (The
    # unit's LimitRTPRIO= path needs CAP_SYS_RESOURCE to set up here, which this machine's
    # root lacks: the kernel grants SCHED_FIFO up to that limit, see sched_setscheduler(2).)
    import resource

    if os.getuid() != 0:
        pytest.skip("switching to another user needs root (CI runs as root)")
    if who == "nobody" and resource.getrlimit(resource.RLIMIT_RTPRIO)[0] >= 10:
        pytest.skip("RLIMIT_RTPRIO here grants 10 to anyone")
    child = subprocess.run([sys.executable, "-c", CHILD, who], capture_output=True, text=True,
                           timeout=60, cwd=REPO, check=False)
    assert child.returncode == 0, child.stderr
    scheduling, result = child.stdout.splitlines()
    if who == "root":
        assert scheduling == "real-time (SCHED_FIFO 10)"
        assert result == "FIFO True"  # the audio thread only
    else:
        assert scheduling.startswith("normal priority (real-time priority 10 was refused")
        assert result == "OTHER True"


def test_the_kiosk_unit_allows_the_configured_priority_and_its_system_call() -> None:
    unit = (REPO / "systemd" / "edge-agent.service").read_text(encoding="utf-8")
    limit = re.search(r"^LimitRTPRIO=(\d+)$", unit, re.MULTILINE)
    assert limit and int(limit.group(1)) == Config().audio.realtime_priority
    assert not re.search(r"^RestrictRealtime=yes", unit, re.MULTILINE)
    filters = re.findall(r"^SystemCallFilter=(.*)$", unit, re.MULTILINE)
    # Taken out with @resources, given back after it (systemd applies them in order).
    assert filters.index("sched_setscheduler") > filters.index("~@privileged @resources")


async def test_the_run_reports_once_known_and_again_only_when_a_count_grows() -> None:
    clock = VirtualClock()
    log = EventLog(clock)
    seen: list[LoggedEvent] = []
    log.listen(seen.append)
    threads = AudioThreads(10, request=lambda p: None)
    losses = [0]
    reporting = asyncio.create_task(report_audio_health(threads, lambda: losses[0], log))
    await clock.advance(3.0)
    assert not seen  # no callback yet: nothing known
    threads.entered(0)
    await clock.advance(3.0)
    threads.entered(OUTPUT_UNDERFLOW)
    await clock.advance(1.0)
    losses[0] = 1
    await clock.advance(3.0)
    threads.entered(INPUT_OVERFLOW)  # just before the run ends: said as it stops
    reporting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await reporting
    reported = [e.event for e in seen]
    assert reported == [AudioHealth("real-time (SCHED_FIFO 10)", 0, 0, 0),
                        AudioHealth("real-time (SCHED_FIFO 10)", 0, 1, 0),
                        AudioHealth("real-time (SCHED_FIFO 10)", 0, 1, 1),
                        AudioHealth("real-time (SCHED_FIFO 10)", 1, 1, 1)]
    line = label(reported[-1])
    assert line is not None and "1 speaker underrun(s), 1 device loss(es)" in line.text
    # bench latency's figures read the last one.
    assert audio_health(seen) == {"scheduling": "real-time (SCHED_FIFO 10)",
                                  "input_overflows": 1, "output_underflows": 1,
                                  "device_losses": 1}
    assert audio_health([])["scheduling"] == ""
