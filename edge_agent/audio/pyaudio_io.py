"""PyAudio capture and playback on real devices (ALSA, PulseAudio, PipeWire).

Capture runs in callback mode and hands frames to the loop with `call_soon_threadsafe`.
Playback runs in blocking mode on its own thread that only writes what fits, so no PortAudio
call ever blocks; the played cursor is written − (write space at open − write space now),
which counts what reached the DAC and not what is still queued (see FIELD-NOTES).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Iterator
from typing import Any

from edge_agent.clock import Clock
from edge_agent.errors import AudioDeviceError

_PERIOD = 512


@contextlib.contextmanager
def _quiet_native_stderr() -> Iterator[None]:
    """ALSA and JACK print every failed device probe straight to fd 2 while PortAudio starts."""
    sys.stderr.flush()
    saved, devnull = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(devnull)
        os.close(saved)


def open_pyaudio() -> Any:
    import pyaudio

    with _quiet_native_stderr():
        return pyaudio.PyAudio()


def find_device(pa: Any, wanted: str, output: bool) -> int:
    """A device index from "" (default), an index, or part of a device name."""
    direction = "output" if output else "input"
    channels_key = "maxOutputChannels" if output else "maxInputChannels"
    devices = [pa.get_device_info_by_index(i) for i in range(pa.get_device_count())]
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
        except OSError:
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


class PyAudioMicrophone:
    sample_rate = 16000
    frame_samples = 512

    def __init__(self, pa: Any, device: int) -> None:
        self._pa = pa
        self._device = device

    async def frames(self) -> AsyncIterator[bytes]:
        import pyaudio

        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[bytes] = asyncio.Queue()

        def on_audio(data: bytes, frame_count: int, time_info: Any, status: int) -> tuple[None, int]:
            loop.call_soon_threadsafe(queue.put_nowait, data)
            return None, pyaudio.paContinue

        try:
            stream = self._pa.open(format=pyaudio.paInt16, channels=1, rate=self.sample_rate,
                                   input=True, input_device_index=self._device,
                                   frames_per_buffer=self.frame_samples, stream_callback=on_audio)
        except OSError as exc:
            raise AudioDeviceError(f"cannot open input device {self._device}: {exc}") from None
        try:
            while True:
                yield await queue.get()
        finally:
            with contextlib.suppress(OSError):
                stream.stop_stream()
            stream.close()


class PyAudioSpeaker:
    """Blocking-mode output owned by one writer thread; `interrupt` aborts with no tail."""

    def __init__(self, pa: Any, device: int, sample_rate: int, clock: Clock) -> None:
        import pyaudio

        self.sample_rate = sample_rate
        self._clock = clock
        self._lock = threading.Lock()
        try:
            self._stream = pa.open(format=pyaudio.paInt16, channels=1, rate=sample_rate,
                                   output=True, output_device_index=device,
                                   frames_per_buffer=_PERIOD)
        except OSError as exc:
            raise AudioDeviceError(f"cannot open output device {device}: {exc}") from None
        self._capacity: int = self._stream.get_write_available()
        self._queue: deque[bytes] = deque()
        self._written = 0  # frames handed to PortAudio since the (re)start
        self._base = 0  # device frames played before the last restart
        self._queued_frames = 0
        self._closed = False
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._pump, name="speaker", daemon=True)
        self._thread.start()

    def write(self, pcm: bytes) -> int:
        with self._lock:
            start = self._base + self._written + self._queued_frames
            self._queue.append(pcm)
            self._queued_frames += len(pcm) // 2
        self._wake.set()
        return start

    def played_frames(self) -> int:
        with self._lock:
            return self._base + self._played_locked()

    def _written_frames(self) -> int:
        with self._lock:
            return self._base + self._written + self._queued_frames

    def _device_queue(self) -> int:
        available: int = self._stream.get_write_available()
        return self._capacity - available

    async def wait_played(self, frame: int) -> None:
        while self.played_frames() < min(frame, self._written_frames()):
            await self._clock.sleep(0.005)

    def interrupt(self) -> int:
        with self._lock:
            played = self._played_locked()
            self._stream.stop_stream()  # blocking mode: stops with no tail
            self._queue.clear()
            self._queued_frames = 0
            self._base += played
            self._written = 0
            self._stream.start_stream()
            self._capacity = self._stream.get_write_available()
            return self._base

    def close(self) -> None:
        self._closed = True
        self._wake.set()
        self._thread.join(timeout=1)
        with self._lock, contextlib.suppress(OSError):
            self._stream.stop_stream()
            self._stream.close()

    def _played_locked(self) -> int:
        if not self._written:
            return 0
        queued_in_device = self._device_queue()
        return max(0, self._written - max(0, queued_in_device))

    def _pump(self) -> None:
        while not self._closed:
            wrote = False
            with self._lock:
                if self._queue:
                    room = self._stream.get_write_available()
                    if room >= _PERIOD // 2:
                        chunk = self._queue[0]
                        take = min(len(chunk) // 2, room)
                        self._stream.write(chunk[: take * 2], take,
                                           exception_on_underflow=False)
                        self._written += take
                        self._queued_frames -= take
                        if take * 2 >= len(chunk):
                            self._queue.popleft()
                        else:
                            self._queue[0] = chunk[take * 2 :]
                        wrote = True
            if not wrote:
                if not self._queue:
                    self._wake.wait(0.05)
                    self._wake.clear()
                else:
                    time.sleep(0.003)
