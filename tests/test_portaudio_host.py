"""A stream whose stop never returns does not take the agent with it (PortAudioHost.discard).

libpulse, under ALSA's pulse plugin, sometimes deadlocks tearing down its connection to a
sound server that was killed: PortAudio's stop then waits forever for the stream's callback
thread. Seen in this suite (the microphone test that kills the PulseAudio server): the loop
called the stop itself and froze. Here a scripted stream blocks its stop until told to return,
and the host runs on its real PortAudio thread."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

from edge_agent.audio.portaudio_host import PortAudioHost
from edge_agent.clock import MonotonicClock


class StuckStream:
    """`stop` blocks until `unstick` (as PortAudio's join of a deadlocked callback thread)."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.stopping = threading.Event()
        self.events: list[str] = []

    def stop(self) -> None:
        self.stopping.set()
        self.release.wait(30)
        self.events.append("stopped")

    def close(self) -> None:
        self.events.append("closed")


class CountingPyAudio:
    def __init__(self) -> None:
        self.terminated = 0

    def terminate(self) -> None:
        self.terminated += 1


class Requester:
    def holds_stream(self) -> bool:
        return False

    def quiet(self) -> bool:
        return True

    def release(self) -> None:
        raise AssertionError("a requester is never asked to release")

    async def reacquire(self) -> None:
        raise AssertionError("a requester is never asked to reacquire")


def _host(pa: CountingPyAudio, reopened: list[Any], stop_wait: float = 0.2) -> PortAudioHost:
    def reopen() -> CountingPyAudio:
        reopened.append(True)
        return CountingPyAudio()

    return PortAudioHost(pa, MonotonicClock(), reopen=reopen, stop_wait=stop_wait)


async def test_a_stuck_stop_blocks_neither_the_loop_nor_opening_and_prevents_any_terminate() -> None:
    pa, reopened = CountingPyAudio(), []
    host = _host(pa, reopened)
    stream = StuckStream()
    started = time.monotonic()
    host.discard(stream)
    assert time.monotonic() - started < 0.5  # the loop went on at once
    assert await asyncio.to_thread(stream.stopping.wait, 10)

    assert await host.call(lambda: "opened") == "opened"  # the PortAudio thread is free
    assert host.stuck()
    assert not await host.refresh(Requester())  # a rescan would terminate: refused
    assert reopened == []

    host.terminate()  # waits `stop_wait`, then leaves PortAudio as it is
    assert pa.terminated == 0
    stream.release.set()
    assert await asyncio.to_thread(host.wait_stopped, 10)
    assert stream.events == ["stopped", "closed"]  # closed only once stopped


async def test_stops_that_return_are_waited_for_at_exit_and_portaudio_is_terminated() -> None:
    pa, reopened = CountingPyAudio(), []
    host = _host(pa, reopened, stop_wait=30)
    stream = StuckStream()
    host.discard(stream)
    assert await asyncio.to_thread(stream.stopping.wait, 10)
    assert host.stuck()
    threading.Timer(0.2, stream.release.set).start()
    host.terminate()  # returns once the stop and close are done
    assert stream.events == ["stopped", "closed"]
    assert pa.terminated == 1
    assert not host.stuck()


async def test_a_refresh_after_the_stop_returned_reinitialises() -> None:
    pa, reopened = CountingPyAudio(), []
    host = _host(pa, reopened)
    stream = StuckStream()
    stream.release.set()
    host.discard(stream)
    assert await asyncio.to_thread(host.wait_stopped, 10)
    assert not host.stuck()
    assert await host.refresh(Requester())
    assert (pa.terminated, reopened) == (1, [True])
    host.terminate()
