"""The speaker side of device recovery (`edge_agent.audio.resilient` has the rest): a played
position that never claims what did not play, and writes dropped while the device is gone."""

from __future__ import annotations

import asyncio
import contextlib

from edge_agent.audio.device import OUTPUT_PERIOD
from edge_agent.audio.portaudio_host import PortAudioHost
from edge_agent.audio.pyaudio_io import PyAudioSpeaker, find_device
from edge_agent.audio.recent import RecentAudio
from edge_agent.audio.resilient import (
    CHECK_S,
    WATCH_S,
    Backoff,
    OnState,
    RecoveringDevice,
    StateSayer,
)
from edge_agent.clock import Clock
from edge_agent.errors import AudioDeviceError


class ResilientSpeaker(RecoveringDevice):
    """A Speaker on PyAudio (a `PyAudioSpeaker` inside) that outlives its device.

    Frames keep one numbering across reopenings (`_base` maps the current stream's onto it).
    What the listener could not hear is never claimed (the heard-truth contract):

    - on loss, `played_frames` stops at what had reached the DAC when PortAudio last called back
      (`confirmed_played`; never below a count already reported: it stays monotonic); the queue
      is dropped and `wait_played` returns at once: the Speaker's "queue dropped" case.
    - writes while lost are dropped, yet numbered after everything written (so no unit's range
      overlaps another's) and never counted played. The Responder then sees what a barge-in
      shows it: `_finish` finds `played_frames() < end` and leaves the unit open, and the next
      `stop()` (the next user turn, a barge-in, the session's end) calls `interrupt()`, which
      returns the frozen count, and finalizes the unit with exactly the words that played.
    - once cut by a loss, writes stay dropped until that `interrupt()`, even after the device
      is back: the rest of a reply never resumes mid-sentence after a gap, and a later unit
      playing out cannot make the ledger close the cut unit as played in full.
    """

    def __init__(self, host: PortAudioHost, wanted: str, sample_rate: int, clock: Clock,
                 on_state: OnState, *, stall_s: float = 2.0, start_grace_s: float = 5.0,
                 suspect_s: float = 0.1, backoff: Backoff | None = None,
                 refresh_after: int = 3, require_at_start: bool = True,
                 period: int = OUTPUT_PERIOD) -> None:
        super().__init__(host, wanted, clock, StateSayer("speaker", on_state), backoff,
                         refresh_after)
        self.sample_rate = sample_rate
        self._period = period
        self._stall, self._grace, self._suspect = stall_s, start_grace_s, suspect_s
        self._inner: PyAudioSpeaker | None = None
        self._candidate: PyAudioSpeaker | None = None  # reopened, no callback seen yet
        self._base = 0  # outer frame = _base + the inner speaker's frame
        self._reported = 0  # the highest played count returned (and the frozen one, when lost)
        self._written_end = 0  # the frame after everything written
        self._cut = False  # a loss dropped written audio: drop writes until `interrupt`
        self._held: list[bytes] = []  # written while released for a PortAudio restart
        self._recent = RecentAudio(sample_rate)
        self._moved = (0, clock.now())  # (played, when): the stuck-cursor check
        self._watch: asyncio.Task[None] | None = None
        try:
            self._inner = self._open()
        except AudioDeviceError as exc:
            if require_at_start:
                raise
            self._down("waiting", f"cannot open it: {exc}; retrying")
        host.join(self)
        self._ensure_watch()

    def write(self, pcm: bytes) -> int:
        self._ensure_watch()
        inner = self._inner
        if self._released and not self._cut:  # PortAudio restarting: played once reopened
            start = self._written_end
            self._held.append(pcm)
            self._recent.add(start, pcm)
        elif inner is None or self._cut:
            start = self._written_end  # dropped: numbered, never played
            self._cut = True
        else:
            start = self._base + inner.write(pcm)
            self._recent.add(start, pcm)
        self._written_end = start + len(pcm) // 2
        return start

    def played_frames(self) -> int:
        inner = self._inner
        if inner is None or self._cut:
            return self._reported
        age = inner.callback_age(self._clock.now())
        # PortAudio went quiet or stopped the stream: its clock runs on without a device, so
        # only what its last callback confirmed counts until it calls again.
        fresh = age is not None and age <= self._suspect and inner.active()
        played = inner.played_frames() if fresh else inner.confirmed_played()
        self._reported = max(self._reported, self._base + played)
        return self._reported

    async def wait_played(self, frame: int) -> None:
        self._ensure_watch()
        while True:
            if (self._inner is None and not self._released) or self._cut:
                return  # lost: what was queued was dropped
            if self.played_frames() >= min(frame, self._written_end):
                return
            await self._clock.sleep(0.005)

    def pause(self) -> None:
        if self._inner is not None and not self._cut:
            self._inner.pause()

    def resume(self) -> None:
        if self._inner is not None and not self._cut:
            self._inner.resume()

    def interrupt(self) -> int:
        self._held.clear()
        inner = self._inner
        if inner is not None and not self._cut:
            try:
                inner_played = inner.interrupt()
            except AudioDeviceError as exc:
                self._lose(f"it did not restart after an interrupt: {exc}")
            else:
                played = max(self._reported, self._base + inner_played)
                self._base = played - inner_played
                return self._settle(played)
        played = self._reported
        self._cut = False
        if self._inner is not None:  # back since the cut: its stream holds nothing
            self._inner.resume()
            self._base = played - self._inner.next_frame()
        return self._settle(played)

    def played_audio(self, start: int, end: int) -> bytes:
        return self._recent.get(start, end)

    def played_when(self, frame: int) -> tuple[int, float] | None:
        inner = self._inner
        if inner is None or self._cut or frame < self._base:
            return None
        when = inner.played_when(frame - self._base)
        return None if when is None else (self._base + when[0], when[1])

    def close(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
        self._host.leave(self)
        for speaker in (self._inner, self._candidate):
            if speaker is not None:
                self._host.discard(speaker)
        self._inner = self._candidate = None

    def _settle(self, played: int) -> int:
        self._reported = self._written_end = played
        self._recent.drop_from(played)
        return played

    def _ensure_watch(self) -> None:
        if self._watch is None:
            with contextlib.suppress(RuntimeError):  # no running loop (yet): next call
                self._watch = asyncio.get_running_loop().create_task(self._watch_loop(),
                                                                     name="speaker-watch")

    def _open(self) -> PyAudioSpeaker:
        device = find_device(self._host.pa, self._wanted, output=True)
        return PyAudioSpeaker(self._host.pa, device, self.sample_rate, self._clock,
                              self._host.threads, self._period)

    async def _watch_loop(self) -> None:
        while True:
            # While nothing waits to be played, a loss may be noticed a little later (the stall
            # limits are seconds anyway) and the idle kiosk's loop wakes less.
            playing = self._inner is not None and self._inner.pending()[0]
            await self._clock.sleep(WATCH_S if playing else CHECK_S)
            try:
                await self._watch_once(self._clock.now())
            except (OSError, ValueError) as exc:  # PyAudio's errors: the stream is unusable
                if self._inner is not None:
                    self._lose(f"the output stream failed ({exc})")

    async def _watch_once(self, now: float) -> None:
        if self._inner is not None:
            reason = self._inner.lost_reason(now, self._stall, self._grace) or self._stuck(now)
            if reason is not None:
                self._lose(reason)
        elif (candidate := self._candidate) is not None:
            if candidate.callback_age(now) is not None:
                self._candidate, self._inner = None, candidate
                if not self._cut:
                    self._base = self._reported - candidate.next_frame()
                self._moved = (self._reported, now)
                self._up("PortAudio asks for audio again")
            elif (reason := candidate.lost_reason(now, self._stall, self._grace)) is not None:
                self._candidate = None
                self._host.discard(candidate)
                self._down("waiting", f"reopened, but {reason}")
        elif not self._released and now >= self._retry_at:
            await self._rescan()
            try:
                self._candidate = await self._host.call(self._open, abandoned=self._host.discard)
            except AudioDeviceError as exc:
                self._down("waiting", f"cannot open it: {exc}; retrying")

    def _stuck(self, now: float) -> str | None:
        """Audio waits, not paused, PortAudio still calls back, yet the cursor stands still."""
        assert self._inner is not None
        pending, paused = self._inner.pending()
        played = self.played_frames()
        if not pending or paused or played != self._moved[0]:
            self._moved = (played, now)
            return None
        limit = self._grace if now - self._inner.opened_at < self._grace else self._stall
        if now - self._moved[1] > limit:
            return f"the played position has not moved for {now - self._moved[1]:.1f} s"
        return None

    def _lose(self, reason: str) -> None:
        inner, self._inner = self._inner, None
        if inner is not None:
            self._reported = max(self._reported, self._base + inner.confirmed_played())
            self._host.discard(inner)
        if self._written_end > self._reported:
            self._cut = True  # what was queued is gone unheard
        self._recent.drop_from(self._reported)
        self._down("lost", reason)

    def holds_stream(self) -> bool:
        return self._inner is not None or self._candidate is not None

    def quiet(self) -> bool:
        return self._inner is None or self._cut or self._inner.quiet()

    def release(self) -> None:
        if self._inner is not None and not self._cut:
            self._reported = max(self._reported, self._written_end)  # quiet: all of it played
        for speaker in (self._inner, self._candidate):
            if speaker is not None:
                speaker.close()
        self._inner = self._candidate = None
        self._released = True

    async def reacquire(self) -> None:
        try:
            inner = await self._host.call(self._open, abandoned=self._host.discard)
        except AudioDeviceError as exc:
            self._released = False
            self._held.clear()
            self._lose(f"not reopened after PortAudio restarted: {exc}")
            return
        self._released = False
        self._inner = inner
        if not self._cut:
            self._base = self._reported - inner.next_frame()
            for pcm in self._held:  # numbered from `_reported` on when written: still true
                inner.write(pcm)
        self._held.clear()
