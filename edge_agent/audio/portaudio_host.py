"""The one PortAudio instance the microphone and speaker share (see `PortAudioHost`)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from edge_agent.audio.realtime import AudioThreads
from edge_agent.clock import Clock
from edge_agent.errors import AudioDeviceError

T = TypeVar("T")

STOP_WAIT_S = 2.0
"""At exit, how long `terminate` waits for streams still stopping (`discard`) before it leaves
PortAudio as it is."""


class Member(Protocol):
    """A device using the host's PortAudio: what a re-initialisation must ask of it."""

    def holds_stream(self) -> bool: ...

    def quiet(self) -> bool:
        """Its stream can be closed and reopened now without cutting what it plays."""
        ...

    def release(self) -> None:
        """Close its stream for a re-initialisation (not a loss: nothing is said)."""
        ...

    async def reacquire(self) -> None:
        """Reopen after the re-initialisation (a failure is a loss, said as one)."""
        ...


class Stream(Protocol):
    """A stream the host discards: stopped first (which may never return), then closed."""

    def stop(self) -> None: ...

    def close(self) -> None: ...


def _fresh_pyaudio() -> Any:
    from edge_agent.audio.portaudio_start import open_pyaudio

    return open_pyaudio(probe=False)  # the configuration already survived the start-up probe


class PortAudioHost:
    """The one PortAudio instance the microphone and speaker share, and the one owner of its
    re-initialisation: `Pa_Terminate` closes every stream, so `refresh` first has each other
    member release its stream (only when quiet) and reopen it after. Opening and closing run on
    one worker thread (`offload`), serialized: PortAudio's device scan is not thread-safe, and a
    sound server that hangs must not freeze the loop. `refresh_every`: the least time between
    two re-initialisations that interrupt a working device. `stop_wait`: how long `terminate`
    waits for streams still stopping. `threads`: what every stream's callback thread asks for
    and reports (`edge_agent.audio.realtime`; default: nothing asked)."""

    def __init__(self, pa: Any, clock: Clock, *, reopen: Callable[[], Any] = _fresh_pyaudio,
                 offload: bool = True, refresh_every: float = 30.0,
                 stop_wait: float = STOP_WAIT_S, threads: AudioThreads | None = None) -> None:
        self._pa: Any = pa
        self.threads = threads if threads is not None else AudioThreads(0)
        """The streams' callback threads: their priority, the device's overflows."""
        self._clock = clock
        self._reopen = reopen
        self._executor = (concurrent.futures.ThreadPoolExecutor(1, "portaudio")
                          if offload else None)
        self._refresh_every = refresh_every
        self._stop_wait = stop_wait
        self._last_refresh: float | None = None
        self._members: list[Member] = []
        self._busy = 0  # calls running on the PortAudio thread
        self._portaudio = threading.Lock()  # PortAudio's own calls, one at a time
        self._stopping = 0  # streams `discard` is stopping
        self._stopping_lock = threading.Condition()
        self.refreshes = 0

    @property
    def pa(self) -> Any:
        if self._pa is None:
            raise AudioDeviceError("PortAudio is not initialised (its last restart failed)")
        return self._pa

    def join(self, member: Member) -> None:
        if member not in self._members:
            self._members.append(member)

    def leave(self, member: Member) -> None:
        with contextlib.suppress(ValueError):
            self._members.remove(member)

    async def call(self, fn: Callable[[], T], abandoned: Callable[[T], None] | None = None) -> T:
        """`fn()` on the PortAudio thread. If the caller is cancelled meanwhile, `abandoned`
        gets the result (a stream opened for nobody is closed, not leaked)."""
        if self._executor is None:
            return fn()

        def run() -> T:
            self._busy += 1
            try:
                with self._portaudio:
                    return fn()
            finally:
                self._busy -= 1

        future = asyncio.get_running_loop().run_in_executor(self._executor, run)
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            if abandoned is not None:
                future.add_done_callback(
                    lambda done: None if done.cancelled() or done.exception() is not None
                    else abandoned(done.result()))
            raise

    def discard(self, stream: Stream) -> None:
        """Stop and close a stream that was lost or is no longer wanted, without waiting.

        Stopping joins PortAudio's callback thread, and the sound library can leave that
        thread blocked for good: libpulse (under ALSA's pulse plugin) deadlocks now and then
        tearing down its connection to a sound server that was killed, the callback thread
        waiting on a lock the connection's own thread holds while that thread waits for the
        callback thread. The stop therefore runs on a thread of its own: neither the loop nor
        the PortAudio thread, which opens the replacement, waits on it. The close edits
        PortAudio's list of open streams, so it runs after the stop under the lock every
        PortAudio call takes. While a stop is stuck, PortAudio is never terminated (that would
        close the stuck stream again and hang): no rescan, and none at exit."""
        if self._executor is None:
            stream.close()
            return

        def stop_then_close() -> None:
            try:
                stream.stop()
                with self._portaudio:
                    stream.close()
            finally:
                with self._stopping_lock:
                    self._stopping -= 1
                    self._stopping_lock.notify_all()

        with self._stopping_lock:
            self._stopping += 1
        threading.Thread(target=stop_then_close, name="portaudio-stop", daemon=True).start()

    def wait_stopped(self, timeout: float) -> bool:
        """Block (a thread, never the loop) until no discarded stream is stopping, at most
        `timeout` seconds; False if one still is."""
        with self._stopping_lock:
            return self._stopping_lock.wait_for(lambda: self._stopping == 0, timeout)

    def stuck(self) -> bool:
        """A call on the PortAudio thread or a discarded stream's stop has not returned."""
        with self._stopping_lock:
            return self._busy > 0 or self._stopping > 0

    async def refresh(self, requester: Member) -> bool:
        """Re-initialise PortAudio so that it scans the devices again. False when it would cut
        another member's audio, interrupt a working member again too soon, or hang on a
        stream still stopping (`discard`)."""
        with self._stopping_lock:
            if self._stopping:
                return False
        others = [m for m in self._members if m is not requester and m.holds_stream()]
        now = self._clock.now()
        if others and (not all(m.quiet() for m in others) or (
                self._last_refresh is not None and now - self._last_refresh < self._refresh_every)):
            return False
        for member in others:
            member.release()
        try:
            await self.call(self._reinitialise)
        finally:
            self._last_refresh = now
            for member in others:
                await member.reacquire()
        return self._pa is not None

    def _reinitialise(self) -> None:
        old, self._pa = self._pa, None
        if old is not None:
            with contextlib.suppress(OSError, ValueError):
                old.terminate()
        self.refreshes += 1
        try:
            self._pa = self._reopen()
        except AudioDeviceError:
            self._pa = None  # `pa` says so; the next refresh tries again

    def terminate(self) -> None:
        """End PortAudio (after the devices closed). A call still stuck on the PortAudio
        thread (a hung sound server), or a stream still stopping (`discard`), is not waited
        for, and PortAudio is then left as it is: terminating it under them could hang or
        crash the exiting process."""
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self.wait_stopped(self._stop_wait)  # the devices' last stops: milliseconds
            if self.stuck():
                return
        if self._pa is not None:
            self._pa.terminate()
            self._pa = None
