"""PyAudio capture and playback on real devices (ALSA, PulseAudio, PipeWire).

Capture runs in callback mode and hands frames to the loop with `call_soon_threadsafe`.
Playback runs in callback mode, always (silence when idle): the played cursor comes from
`output_buffer_dac_time` and the stream clock, so it counts what reached the DAC and not what
is still queued; measured against the recorded output (`bench heard`, tests).

Start-up failures are diagnosed in `edge_agent.audio.portaudio_start`. Both stream kinds stamp
each callback with the clock, so a device that went away can be told (`lost_reason`): measured
on PulseAudio 16 through ALSA's pulse plugin, a stream whose device is removed (or whose server
dies) goes inactive at once with no error status, and the callbacks simply stop; the stream
clock (`get_time`) keeps running, so the speaker's cursor must not be read from it afterwards
(`confirmed_played`). Recovery is `edge_agent.audio.resilient`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from edge_agent.audio.device import MIC_FRAME, MIC_RATE, OUTPUT_PERIOD
from edge_agent.audio.portaudio_start import (
    PYAUDIO_ERRORS,
    alsa_config_hint,
    native_stderr,
    said,
)
from edge_agent.audio.realtime import AudioThreads
from edge_agent.audio.recent import RecentAudio
from edge_agent.clock import Clock, MonotonicClock
from edge_agent.errors import AudioDeviceError

_PAST_RUNS = 32
"""Runs kept after they played out, so `played_when` can tell when a recent frame played (the
echo canceller asks for the frames played since the microphone's last frame: a few runs)."""
CAPTURE_PERIOD = 128
"""Microphone samples PortAudio delivers per callback; `Capture` assembles them into frames.
A frame of 512 is complete the moment its last sample is, not a buffer later: measured on
PulseAudio through ALSA's pulse plugin, a click heard by the microphone and answered at once
on the speaker (512-frame output periods) reached the speaker 87-90 ms later with 512-sample
capture periods (max 114-124 ms), 74 ms with 128 (max 85-96 ms). No capture overrun in any
run, also with three Python threads contending for the GIL and a busy process. The output
keeps 512-frame periods: with 256 the same round trip took 51 ms, but under that contention
the speaker underran 274 times in 20 s (8 times with 512)."""

def find_device(pa: Any, wanted: str, output: bool) -> int:
    """A device index from "" (default), an index, or part of a device name."""
    direction = "output" if output else "input"
    channels_key = "maxOutputChannels" if output else "maxInputChannels"
    try:
        devices = [pa.get_device_info_by_index(i) for i in range(pa.get_device_count())]
    except PYAUDIO_ERRORS as exc:
        raise AudioDeviceError(
            f"cannot list audio {direction} devices: {exc}. Fix: "
            f"{alsa_config_hint(os.environ)}") from None
    usable = [d for d in devices if int(d[channels_key]) > 0]
    if not usable:
        raise AudioDeviceError(
            f"no audio {direction} device found. Connect a sound card (or start PulseAudio/"
            f"PipeWire), check `arecord -l`/`aplay -l`, or name a device in "
            f"audio.{direction}_device"
        )
    if not wanted:
        try:
            info = pa.get_default_output_device_info() if output else pa.get_default_input_device_info()
        except PYAUDIO_ERRORS:  # no default device: the first usable one will do
            info = usable[0]
        return int(info["index"])
    if wanted.isdigit():
        index = int(wanted)
        if any(int(d["index"]) == index for d in usable):
            return index
    else:
        for device in usable:
            if wanted.lower() in str(device["name"]).lower():
                return int(device["index"])
    names = "; ".join(f"{d['index']}: {d['name']}" for d in usable)
    raise AudioDeviceError(
        f"audio.{direction}_device = {wanted!r} matches no {direction} device (have: {names})"
    )


def _stalled(now: float, opened_at: float, last: float | None, stall: float, grace: float,
             what: str) -> str | None:
    """Why a stream whose last callback was at `last` counts as stalled, or None. For `grace`
    seconds after opening, `grace` is the limit instead of `stall`: a fresh PulseAudio stream
    delivers its first input frame only after 1.9-2.0 s, and an output stream asks for one
    priming buffer and then nothing for 1.7-1.8 s (measured on an idle sink)."""
    limit = grace if now - opened_at < grace else stall
    since = now - (opened_at if last is None else last)
    return f"{what} for {since:.1f} s" if since > limit else None


def open_stream(pa: Any, device: int, direction: str, **kwargs: Any) -> Any:
    """`pa.open`, with what ALSA prints kept for the error instead of reaching the terminal."""
    failure: Exception | None = None
    with native_stderr() as native:
        try:
            return pa.open(**kwargs)
        except PYAUDIO_ERRORS as exc:
            failure = exc
    raise AudioDeviceError(
        f"cannot open audio {direction} device {device}: {failure}{said(native.text)}. Check "
        f"that no other program holds it, or name another device in audio.{direction}_device")


class Capture:
    """One open input stream: each frame of `frame_samples` goes to `deliver` (called on
    PortAudio's thread), assembled from periods of `CAPTURE_PERIOD`; each period stamps
    `last_frame` with the clock, so a stream that stopped can be told from a quiet room (a
    silent microphone still delivers frames)."""

    def __init__(self, pa: Any, device: int, sample_rate: int, frame_samples: int,
                 deliver: Callable[[bytes], object], clock: Clock, channels: int = 1,
                 threads: AudioThreads | None = None) -> None:
        """`channels`: a microphone array's; each frame holds every channel, interleaved.
        `threads`: told of every callback (its thread's priority, the device's overflows)."""
        import pyaudio

        self.device = device
        self.opened_at = clock.now()
        self.last_frame: float | None = None
        frame_bytes = 2 * frame_samples * channels
        if channels > 1:
            offers = int(pa.get_device_info_by_index(device)["maxInputChannels"])
            if offers < channels:
                raise AudioDeviceError(
                    f"input device {device} has {offers} channel(s); the microphone array needs "
                    f"{channels} ([audio] input_channels, array): name the array's device in "
                    "audio.input_device (`arecord -l` lists them)")
        pending = bytearray()

        def on_audio(data: bytes, frame_count: int, time_info: Any, status: int) -> tuple[None, int]:
            if threads is not None:
                threads.entered(status)
            self.last_frame = clock.now()
            pending.extend(data)
            while len(pending) >= frame_bytes:
                deliver(bytes(pending[:frame_bytes]))
                del pending[:frame_bytes]
            return None, pyaudio.paContinue

        period = min(CAPTURE_PERIOD, frame_samples)
        self._stream = open_stream(pa, device, "input", format=pyaudio.paInt16,
                                    channels=channels, rate=sample_rate, input=True,
                                    input_device_index=device,
                                    frames_per_buffer=period, stream_callback=on_audio)

    def lost_reason(self, now: float, stall: float, grace: float) -> str | None:
        """Why this stream is gone, or None while it delivers (see `_stalled`)."""
        try:
            active = self._stream.is_active()
        except OSError as exc:
            return f"the input stream failed ({exc})"
        if not active:
            return "the input stream stopped (PortAudio reports it inactive)"
        return _stalled(now, self.opened_at, self.last_frame, stall, grace, "no audio came")

    def stop(self) -> None:
        """Stop the callbacks. This joins PortAudio's callback thread, which can block for
        good once the sound server is gone (see `PortAudioHost.discard`)."""
        with contextlib.suppress(OSError):
            self._stream.stop_stream()

    def close(self) -> None:
        self.stop()
        with contextlib.suppress(OSError):
            self._stream.close()


class PyAudioMicrophone:
    sample_rate = MIC_RATE
    frame_samples = MIC_FRAME

    def __init__(self, pa: Any, device: int) -> None:
        self._pa = pa
        self._device = device

    async def frames(self) -> AsyncIterator[bytes]:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[bytes] = asyncio.Queue()
        capture = Capture(self._pa, self._device, self.sample_rate, self.frame_samples,
                          lambda data: loop.call_soon_threadsafe(queue.put_nowait, data),
                          MonotonicClock())
        try:
            while True:
                yield await queue.get()
        finally:
            capture.close()


class PyAudioSpeaker:
    """Callback-mode output that always runs (silence when idle), with a DAC-time cursor.

    Each callback notes how many device frames were handed out before it and when the first
    frame of its buffer reaches the DAC (`output_buffer_dac_time`); the device position at any
    later moment follows from the stream clock. Written audio occupies known runs of device
    frames, so that position maps to audio frames played (underrun silence is not a frame).
    `interrupt` aborts the stream (no tail) and restarts it empty.
    """

    def __init__(self, pa: Any, device: int, sample_rate: int, clock: Clock,
                 threads: AudioThreads | None = None, period: int = OUTPUT_PERIOD) -> None:
        """`period`: frames handed to the device per callback (see `OUTPUT_PERIOD`)."""
        import pyaudio

        self.sample_rate = sample_rate
        self._clock = clock
        self._threads = threads
        self._lock = threading.Lock()
        self._queue: deque[bytes] = deque()
        self._queued = 0  # audio frames written, not yet handed to PortAudio
        self._audio_out = 0  # audio frames handed to PortAudio (or played, after a restart)
        self._device_out = 0  # device frames handed out since the last (re)start, incl. silence
        self._runs: deque[_Run] = deque()  # audio runs handed out since the last (re)start
        self._past_runs: deque[_Run] = deque(maxlen=_PAST_RUNS)  # played out, for played_when
        self._restart_audio = 0  # audio frames played when the stream last (re)started
        self._anchor: tuple[int, float] | None = None  # (device frames before, DAC time)
        self._paused = False
        self._recent = RecentAudio(sample_rate)
        self._continue = pyaudio.paContinue
        self.opened_at = clock.now()
        self._last_callback: float | None = None  # clock time of the last callback
        self._confirmed = 0  # audio frames played when PortAudio last called back
        self._stream = open_stream(pa, device, "output", format=pyaudio.paInt16, channels=1,
                                    rate=sample_rate, output=True, output_device_index=device,
                                    frames_per_buffer=period, stream_callback=self._fill)

    def write(self, pcm: bytes) -> int:
        with self._lock:
            start = self._audio_out + self._queued
            self._queue.append(pcm)
            self._queued += len(pcm) // 2
            self._recent.add(start, pcm)
        return start

    def played_frames(self) -> int:
        with self._lock:
            return self._played_locked()

    async def wait_played(self, frame: int) -> None:
        while True:
            with self._lock:
                played = self._played_locked()
                target = min(frame, self._audio_out + self._queued)
            if played >= target:
                return
            await self._clock.sleep(0.005)

    def pause(self) -> None:
        """Hand out silence from the next callback on; what PortAudio already holds (a buffer
        or two) still plays and is counted."""
        with self._lock:
            self._paused = True

    def resume(self) -> None:
        with self._lock:
            self._paused = False

    def interrupt(self) -> int:
        import pyaudio

        with self._lock:
            self._queue.clear()  # from here on the callback hands out silence only
            self._queued = 0
            self._paused = False
        # Abort outside the lock: it waits for a running callback, which takes the lock.
        # Abort, not stop: stop lets 11-16 ms more play in callback mode (measured).
        try:
            pyaudio._portaudio.abort_stream(self._stream._stream)
        except OSError:  # a host error on abort: stopping still ends playback (with a tail)
            with contextlib.suppress(OSError):
                self._stream.stop_stream()
        self._stream._is_running = False
        with self._lock:
            # Read after the abort: what played while it took effect was heard too.
            played = self._played_locked()
            self._audio_out = self._restart_audio = played
            self._confirmed = min(self._confirmed, played)
            self._recent.drop_from(played)
            self._device_out = 0
            self._runs.clear()
            self._past_runs.clear()
            self._anchor = None
            # A restarted stream is a fresh one to PulseAudio: after one priming buffer it may
            # ask for nothing for 1-2 s (measured), which is no loss (`lost_reason`'s grace).
            self.opened_at = self._clock.now()
            self._last_callback = None
        try:
            self._stream.start_stream()
        except OSError as exc:
            raise AudioDeviceError(f"the output device did not restart after playback was "
                                   f"interrupted: {exc}") from None
        return played

    def played_audio(self, start: int, end: int) -> bytes:
        with self._lock:
            return self._recent.get(start, end)

    def played_when(self, frame: int) -> tuple[int, float] | None:
        """The run of back-to-back audio that holds `frame` (since the stream's last start)
        and the clock time its first frame reached the DAC, by the latest callback's DAC
        time."""
        with self._lock:
            if self._anchor is None:
                return None
            handed_before, dac_time = self._anchor
            run = next((r for r in reversed((*self._past_runs, *self._runs))
                        if r.audio_start <= frame < r.audio_start + r.frames), None)
            if run is None:
                return None
            began = dac_time + (run.device_start - handed_before) / self.sample_rate
            return run.audio_start, self._clock.now() - (self._stream.get_time() - began)

    def stop(self) -> None:
        """Stop the callbacks (see `Capture.stop`)."""
        with contextlib.suppress(OSError):
            self._stream.stop_stream()

    def close(self) -> None:
        self.stop()
        with contextlib.suppress(OSError):
            self._stream.close()

    def next_frame(self) -> int:
        """The frame the next `write` will start at."""
        with self._lock:
            return self._audio_out + self._queued

    def confirmed_played(self) -> int:
        """Audio frames that had reached the DAC when PortAudio last called back: the most that
        can be claimed once the device is gone (the stream clock runs on without it)."""
        with self._lock:
            return self._confirmed

    def active(self) -> bool:
        """PortAudio still runs the stream (it stops it at once when the device goes)."""
        try:
            return bool(self._stream.is_active())
        except OSError:
            return False

    def callback_age(self, now: float) -> float | None:
        """Seconds since PortAudio last asked for audio; None before its first call."""
        last = self._last_callback
        return None if last is None else now - last

    def quiet(self) -> bool:
        """Nothing queued and everything handed out played: closing now cuts nothing."""
        with self._lock:
            return self._queued == 0 and self._played_locked() >= self._audio_out

    def pending(self) -> tuple[bool, bool]:
        """(audio written and not played yet, paused)."""
        with self._lock:
            return self._queued > 0 or self._played_locked() < self._audio_out, self._paused

    def lost_reason(self, now: float, stall: float, grace: float) -> str | None:
        """Why the output is gone, or None while PortAudio keeps asking for audio (it always
        does: silence is handed out when idle)."""
        try:
            active = self._stream.is_active()
        except OSError as exc:
            return f"the output stream failed ({exc})"
        if not active:
            return "the output stream stopped (PortAudio reports it inactive)"
        return _stalled(now, self.opened_at, self._last_callback, stall, grace,
                        "PortAudio asked for no audio")

    def _played_locked(self, at: float | None = None) -> int:
        """Audio frames played at stream time `at` (default: now)."""
        if self._anchor is None or not self._runs:
            return self._restart_audio
        handed_before, dac_time = self._anchor
        when = self._stream.get_time() if at is None else at
        position = handed_before + (when - dac_time) * self.sample_rate
        while len(self._runs) > 1 and self._runs[1].device_start <= position:
            self._past_runs.append(self._runs.popleft())
        run = self._runs[0]
        inside = min(run.frames, max(0, int(position) - run.device_start))
        return run.audio_start + inside

    def _fill(self, in_data: None, frame_count: int, time_info: dict[str, float],
              status: int) -> tuple[bytes, int]:
        if self._threads is not None:
            self._threads.entered(status)
        with self._lock:
            dac_time = time_info.get("output_buffer_dac_time") or self._dac_fallback(time_info)
            self._anchor = (self._device_out, dac_time)
            self._last_callback = self._clock.now()
            if time_info.get("current_time"):
                # Never less than already confirmed: a restart resets the runs, not the count.
                self._confirmed = max(self._confirmed, min(
                    self._played_locked(time_info["current_time"]), self._audio_out))
            out = bytearray()
            while self._queue and not self._paused and len(out) < frame_count * 2:
                chunk = self._queue[0]
                take = min(len(chunk), frame_count * 2 - len(out))
                out += chunk[:take]
                if take == len(chunk):
                    self._queue.popleft()
                else:
                    self._queue[0] = chunk[take:]
            audio = len(out) // 2
            if audio:
                self._add_run(audio)
            self._queued -= audio
            self._audio_out += audio
            self._device_out += frame_count
            out += bytes(frame_count * 2 - len(out))
        return bytes(out), self._continue

    def _dac_fallback(self, time_info: dict[str, float]) -> float:
        """A host API that reports no DAC time: assume the stream's nominal output latency."""
        stream = getattr(self, "_stream", None)
        latency = stream.get_output_latency() if stream is not None else 0.0
        return time_info["current_time"] + float(latency)

    def _add_run(self, frames: int) -> None:
        last = self._runs[-1] if self._runs else None
        if last is not None and last.device_start + last.frames == self._device_out:
            last.frames += frames
        else:
            self._runs.append(_Run(self._device_out, self._audio_out, frames))


@dataclass
class _Run:
    """Audio frames handed to the device back to back."""

    device_start: int
    """Device frame (since the stream's last start) of the run's first audio frame."""
    audio_start: int
    """Audio frame number of that frame."""
    frames: int
