"""Microphone and speaker that survive their device going away (USB unplugged, sound server
restarted): the loop keeps running, the device is reopened with backoff, and each change of
state is said once through `on_state(device, state, detail)`, always on the event loop's thread:

- "lost"    the stream died (PortAudio reports it inactive, it raised, or no callback came
            for `stall_s`); said when it is noticed.
- "waiting" the first reopening failed: the device is really gone; retries continue with
            backoff (`Backoff`: 0.5 s doubling to 10 s, again from 0.5 s after a return).
- "back"    a reopened stream delivers again (the microphone's first frame, the speaker's first
            callback), not merely opened.

Measured on PulseAudio 16 through ALSA's pulse plugin (tests/test_audio_recovery.py): removing
a device that a stream is on, or killing the server, leaves the PortAudio stream inactive at
once with no error status; reopening by name works on the same PortAudio instance once the
device is back (the pulse PCMs come from ALSA's configuration, not from a device scan). A stream
on PulseAudio's *default* device is never lost this way: PulseAudio moves it to the new default
itself. Raw ALSA hardware (hw:N) is only scanned when PortAudio initialises, so a card that
returns under another number needs a re-initialisation: `PortAudioHost.refresh`, the only place
that does it, after `refresh_after` failed reopenings.

While the microphone is lost it yields silence at the frame rate (`silence_while_lost`): the
loop's VAD, endpointing and audio clock keep moving (a turn in progress ends as a turn instead
of waiting for frames that never come, a reply's failure still surfaces, an idle session can
still end). Nothing is invented: silence is what a dead microphone hears.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import TypeVar

from edge_agent.audio.device import MIC_FRAME, MIC_RATE
from edge_agent.audio.pacing import PACED_FRAMES
from edge_agent.audio.portaudio_host import PortAudioHost
from edge_agent.audio.pyaudio_io import Capture, find_device
from edge_agent.clock import Clock
from edge_agent.errors import AudioDeviceError

__all__ = ["Backoff", "OnState", "RecoveringDevice", "ResilientMicrophone", "StateSayer"]

T = TypeVar("T")
OnState = Callable[[str, str, str], None]
"""on_state(device, state, detail): device is "microphone" or "speaker"."""

CHECK_S = 0.25
"""How often a waiting microphone, and an idle speaker, look at their streams (a dead stream is
noticed this fast)."""
WATCH_S = 0.1
"""How often the speaker looks at its stream while audio waits to be played."""


class Backoff:
    """Retry delays: `first`, doubling, at most `cap` (0.5, 1, 2, 4, 8, 10, 10, ...)."""

    def __init__(self, first: float = 0.5, cap: float = 10.0, factor: float = 2.0) -> None:
        self._first, self._cap, self._factor = first, cap, factor
        self._next = first

    def next(self) -> float:
        delay, self._next = self._next, min(self._cap, self._next * self._factor)
        return delay

    def reset(self) -> None:
        self._next = self._first


class StateSayer:
    """Calls `on_state` once per change of state (repeats of the same state are dropped)."""

    def __init__(self, device: str, on_state: OnState) -> None:
        self.device = device
        self.state = "up"
        self._on_state = on_state

    def say(self, state: str, detail: str) -> None:
        if state != self.state:
            self.state = state
            self._on_state(self.device, state, detail)

    @property
    def down(self) -> bool:
        return self.state in ("lost", "waiting")


class RecoveringDevice:
    """What both devices share: the state said, the retry schedule, the failures counted."""

    def __init__(self, host: PortAudioHost, wanted: str, clock: Clock, states: StateSayer,
                 backoff: Backoff | None, refresh_after: int) -> None:
        self._host = host
        self._wanted = wanted
        self._clock = clock
        self._states = states
        self._backoff = backoff or Backoff()
        self._refresh_after = refresh_after
        self._failures = 0
        self._retry_at = 0.0
        self._released = False

    def _down(self, state: str, detail: str) -> None:
        """Lost, or a reopening failed: say so (once) and schedule the next try."""
        self._failures += 1 if state == "waiting" else 0
        self._states.say(state, detail)
        self._retry_at = self._clock.now() + self._backoff.next()

    def _up(self, detail: str) -> None:
        self._failures = 0
        self._backoff.reset()
        if self._states.down:  # the first start is not a return
            self._states.say("back", detail)

    async def _rescan(self) -> None:
        """After `refresh_after` failed reopenings, have PortAudio scan the devices again
        before each further try: raw ALSA hardware that came back under another card number
        is only found that way (the host refuses when it would cut the other device)."""
        if self._failures >= self._refresh_after:
            await self._host.refresh(self)

    # Member of the PortAudioHost: the subclasses hold the stream.
    def holds_stream(self) -> bool:
        raise NotImplementedError

    def quiet(self) -> bool:
        raise NotImplementedError

    def release(self) -> None:
        raise NotImplementedError

    async def reacquire(self) -> None:
        raise NotImplementedError


class ResilientMicrophone(RecoveringDevice):
    """A Microphone on PyAudio that outlives its device (see the module docstring).

    `wanted`: audio.input_device as configured ("" default, an index, or part of a name), found
    again at every retry. `require_at_start`: raise AudioDeviceError at once if it cannot be
    found now (a misconfiguration says so at start-up); else start out waiting for it."""

    sample_rate = MIC_RATE
    frame_samples = MIC_FRAME

    def __init__(self, host: PortAudioHost, wanted: str, clock: Clock, on_state: OnState, *,
                 stall_s: float = 1.0, start_grace_s: float = 5.0,
                 backoff: Backoff | None = None, refresh_after: int = 3,
                 silence_while_lost: bool = True, require_at_start: bool = True,
                 channels: int = 1) -> None:
        """`channels`: opened with that many (a microphone array), frames interleaved."""
        self.channels = channels
        super().__init__(host, wanted, clock, StateSayer("microphone", on_state), backoff,
                         refresh_after)
        self._stall, self._grace = stall_s, start_grace_s
        self._silence = silence_while_lost
        self._capture: Capture | None = None
        self._generation = 0
        self._arrived: collections.deque[tuple[int, bytes]] = collections.deque()
        self._urgent: Callable[[], bool] = lambda: True
        self._arrival: asyncio.Event | None = None
        self._awaiting_first = False
        if require_at_start:
            find_device(host.pa, wanted, output=False)

    def frames(self) -> AsyncIterator[bytes]:
        return self.paced_frames(lambda: True)

    async def paced_frames(self, urgent: Callable[[], bool]) -> AsyncIterator[bytes]:
        """Frames as they arrive, paced by `urgent` (see `edge_agent.audio.pacing`)."""
        period = self.frame_samples / self.sample_rate
        silence = bytes(2 * self.frame_samples * self.channels)
        self._urgent = urgent
        self._arrival = asyncio.Event()
        self._host.join(self)
        checker = asyncio.get_running_loop().create_task(self._wake_to_check(),
                                                         name="microphone-check")
        try:
            try:
                await self._open()
            except AudioDeviceError as exc:
                self._down("waiting", f"cannot open it: {exc}; retrying")
            next_silence = self._clock.now()
            while True:
                if self._capture is not None:
                    frame = await self._next_frame()
                    if frame is not None:
                        yield frame
                    next_silence = self._clock.now()
                    continue
                now = self._clock.now()
                if not self._released and now >= self._retry_at:
                    await self._attempt()
                elif self._silence and now >= next_silence:
                    yield silence
                    # On time, but never a burst after a slow reopening.
                    next_silence = max(next_silence + period, now - 2 * period)
                else:
                    wake = next_silence if self._silence else now + period
                    await self._clock.sleep_until(
                        wake if self._released else min(wake, self._retry_at))
        finally:
            checker.cancel()
            self._host.leave(self)
            capture, self._capture = self._capture, None
            if capture is not None:
                self._host.discard(capture)

    async def _next_frame(self) -> bytes | None:
        """The current stream's next frame; None once it is found lost (or was released)."""
        assert self._arrival is not None
        while (capture := self._capture) is not None:
            while self._arrived:
                generation, data = self._arrived.popleft()
                if generation == self._generation:  # not a late frame of a closed stream
                    if self._awaiting_first:
                        self._awaiting_first = False
                        self._up(f"frames flow again from device {capture.device}")
                    return data
            reason = capture.lost_reason(self._clock.now(), self._stall, self._grace)
            if reason is not None:
                self._capture = None
                self._host.discard(capture)
                # A stream that never delivered was a failed reopening, not a new loss.
                self._down("waiting" if self._awaiting_first else "lost", reason)
                return None
            self._arrival.clear()
            await self._arrival.wait()  # a frame, or `_wake_to_check`
        return None

    async def _wake_to_check(self) -> None:
        """Wake `_next_frame` every CHECK_S, so that a stream that stopped delivering is found
        lost: one timer for the microphone's life, not a timer and a task per frame (those cost
        more CPU than the voice activity detector on an idle kiosk)."""
        while True:
            await self._clock.sleep(CHECK_S)  # also hands over frames held back while idle
            if self._arrival is not None:
                self._arrival.set()

    async def _open(self) -> None:
        loop = asyncio.get_running_loop()
        generation = self._generation + 1

        def wake() -> None:
            if self._arrival is not None:
                self._arrival.set()

        def arrive(data: bytes) -> None:  # on PortAudio's thread
            self._arrived.append((generation, data))  # a deque: safe across threads
            if self._urgent() or len(self._arrived) >= PACED_FRAMES:
                # A discarded stream calls back until its stop returns, maybe after the loop.
                with contextlib.suppress(RuntimeError):
                    loop.call_soon_threadsafe(wake)

        def open_capture() -> Capture:
            device = find_device(self._host.pa, self._wanted, output=False)
            return Capture(self._host.pa, device, self.sample_rate, self.frame_samples, arrive,
                           self._clock, self.channels, self._host.threads)

        capture = await self._host.call(open_capture, abandoned=self._host.discard)
        self._generation = generation
        self._capture = capture
        self._awaiting_first = True

    async def _attempt(self) -> None:
        await self._rescan()
        try:
            await self._open()
        except AudioDeviceError as exc:
            self._down("waiting", f"cannot open it: {exc}; retrying")

    def holds_stream(self) -> bool:
        return self._capture is not None

    def quiet(self) -> bool:
        return True  # a gap of a few frames; the host's `refresh_every` bounds how often

    def release(self) -> None:
        self._released = True
        capture, self._capture = self._capture, None
        if capture is not None:
            capture.close()

    async def reacquire(self) -> None:
        self._released = False
        awaiting = self._awaiting_first
        try:
            await self._open()
        except AudioDeviceError as exc:
            self._down("lost", f"not reopened after PortAudio restarted: {exc}")
        else:
            self._awaiting_first = awaiting  # not a return from a loss: nothing to say
