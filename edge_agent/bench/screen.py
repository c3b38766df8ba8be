"""`edge-agent bench screen`: the kiosk's captions against the audio, and what the screen's
server costs the agent's loop.

The real `ScreenServer` runs in an asyncio loop beside the real `Playback` on the agent's own
PyAudio speaker, on a private PulseAudio server whose speaker sink runs at the voice's rate;
Piper units (real TTS) play one after another as a reply's would. Pages are WebSocket clients
speaking the page's protocol, in a process of their own as a browser is
(`bench.screen_pages`). Three phases, with 0, 1 and 4 pages open; each is an idle stretch,
every unit, then every unit again with the lag probe running.

- Caption skew (the 1-page phase): a word is marked played when the page receives the first
  snapshot whose heard part covers it; it left the speaker when the heard-truth policy's
  instant of it (`completed`: its last sample; `started`: its first) left the sink, read off
  the sink's monitor, recorded in 10 ms fragments by a thread that notes when each arrives.
  The recording's clock is the line under those arrivals (a chunk can arrive late, never
  early: `caption_timing.fit_sample_clock`), and each unit is found in it bit for bit. Skew =
  marked - left, positive when the page is late: a perfect screen reads 0. PulseAudio's null
  sink renders up to a block ahead of its nominal time (about 10 ms with this recorder), so
  the skew errs by at most that much toward "late". A browser adds at most one frame to paint
  the mark (about 17 ms at 60 Hz), not counted here.
- CPU: of the thread that runs the loop (`time.thread_time`: the server and the playback it
  reads; not PortAudio's callback thread, the recorder or the pages), as % of one core, minus
  the same stretch of the phase with no page open (the server then only folds the few events
  of each unit): idle with 1 page (nothing plays, so the server waits for events), and the
  units' first pass with 1 and with 4 pages. Objects older than the run are frozen out of
  the garbage collector, whose full passes over them would land in one phase or another.
- Loop lag, in the units' second pass: a task sleeps 5 ms again and again; how much longer
  than 5 ms each sleep took, its 99th percentile, with 0 and with 4 pages open. (The probe
  costs the loop about 2 % of a core itself, hence a pass of its own.)
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence

from edge_agent.audio.device import Speaker
from edge_agent.bench import pulse_rig
from edge_agent.bench.caption_timing import Marks
from edge_agent.bench.heard import REPLIES, speaker_on_private_pulse
from edge_agent.bench.screen_figures import (
    RECORDER_MS,
    Phase,
    Played,
    ScreenBenchError,
    ScreenResult,
    Window,
    report,
)
from edge_agent.clock import MonotonicClock
from edge_agent.config.lan import ListenAddress
from edge_agent.conversation.playback import Playback
from edge_agent.engines.base import SpeechAudio, TextToSpeech
from edge_agent.errors import AudioDeviceError
from edge_agent.events import EventLog
from edge_agent.heard.truncation import HeardPolicy
from edge_agent.memory.conversation_memory import ConversationMemory, MemorySettings
from edge_agent.screen.captions import Captions
from edge_agent.screen.server import ScreenServer

PAGES = (0, 1, 4)
"""Pages open in each phase, in order; the first is the baseline of the others' CPU."""
IDLE_S = 4.0
"""The idle stretch before each phase's units."""
GAP_S = 0.3
"""Silence between two units."""
PROBE_S = 0.005
"""The lag probe's sleep."""


class LagProbe:
    """Sleeps `PROBE_S` over and over on the loop; notes (when, how late it woke)."""

    def __init__(self) -> None:
        self.lags: list[tuple[float, float]] = []

    async def run(self) -> None:
        while True:
            asked = time.monotonic()
            await asyncio.sleep(PROBE_S)
            self.lags.append((asked, (time.monotonic() - asked - PROBE_S) * 1000))

    def within(self, window: Window) -> list[float]:
        return [lag for at, lag in self.lags if window.start <= at < window.end]


class MonitorRecorder:
    """The speaker's monitor through `parec` into a pipe, read by a thread of its own that
    notes when each read returned: (samples so far, arrival) per chunk."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self._proc = proc
        self._chunks: list[bytes] = []
        self._bytes = 0
        self.arrivals: list[tuple[int, float]] = []
        self._first = threading.Event()
        self._thread = threading.Thread(target=self._read, name="monitor-recorder", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self._proc.stdout is not None
        fd = self._proc.stdout.fileno()
        while data := os.read(fd, 1 << 16):
            arrived = time.monotonic()
            self._chunks.append(data)
            self._bytes += len(data)
            self.arrivals.append((self._bytes // 2, arrived))
            self._first.set()

    def wait_running(self, timeout: float = 5.0) -> None:
        """Until the first chunk came: playing before would miss the start."""
        if not self._first.wait(timeout):
            raise AudioDeviceError(f"parec recorded nothing of the speaker's monitor within "
                                   f"{timeout:.0f} s")

    def stop(self) -> bytes:
        """Stop recording; everything recorded."""
        pulse_rig.stop(self._proc)
        self._thread.join(5)
        if self._proc.stdout is not None:
            self._proc.stdout.close()
        return b"".join(self._chunks)


def run_screen(tts: TextToSpeech, memory: MemorySettings, units: int, policy: HeardPolicy,
               say: Callable[[str], None], period: int) -> ScreenResult:
    """Start a private PulseAudio server and measure `units` Piper units in each phase
    (`memory`: the settings of the conversation memory the playback finalizes units into;
    `period`: the speaker's frames per callback, `[audio] output_period`)."""
    texts = [REPLIES[i % len(REPLIES)] for i in range(units)]
    audios = [(text, tts.synthesize(text)) for text in texts]
    with speaker_on_private_pulse("screen", tts.sample_rate, period) as (pulse, speaker):
        recorder = MonitorRecorder(pulse.record_pipe(rate=tts.sample_rate,
                                                     latency_ms=RECORDER_MS))
        try:
            recorder.wait_running()
            # A full collection walks every object the models and imports left: one landing
            # inside a phase would be charged to it. The phases' own garbage is still collected.
            gc.collect()
            gc.freeze()
            began = time.monotonic()
            phases = asyncio.run(_phases(speaker, memory, policy, audios, say))
        finally:
            recording = recorder.stop()
    return report(phases, recording, recorder.arrivals, policy, began)


async def _phases(speaker: Speaker, memory: MemorySettings, policy: HeardPolicy,
                  audios: Sequence[tuple[str, SpeechAudio]],
                  say: Callable[[str], None]) -> list[Phase]:
    clock = MonotonicClock()
    log = EventLog(clock)
    playback = Playback(speaker, ConversationMemory(memory, log), log, None, policy)
    screen = ScreenServer(ListenAddress("127.0.0.1", 0), "",
                          Captions(clock, clear_after=24 * 3600.0), playback.now_playing,
                          _no_stop)
    screen.follow(log)
    await screen.start()
    try:
        phases = []
        for pages in PAGES:
            say(f"{pages} page{'' if pages == 1 else 's'} open: idle {IDLE_S:.0f} s, then "
                f"{len(audios)} units twice (the second time with the lag probe)")
            phases.append(await _phase(pages, screen.port, playback, audios))
        return phases
    finally:
        await screen.close()


async def _no_stop() -> bool:
    return False  # nobody touches Stop in this benchmark


async def _phase(pages: int, port: int, playback: Playback,
                 audios: Sequence[tuple[str, SpeechAudio]]) -> Phase:
    child = await _open_pages(port, pages) if pages else None
    try:
        idle = await _idle(IDLE_S)
        talking, played = await _talk(playback, audios)
        # The probe wakes the loop 200 times a second, which costs about as much CPU as the
        # server itself, and varies more: it runs only in a pass of its own.
        probe = LagProbe()
        probing = asyncio.create_task(probe.run())
        try:
            probed, _ = await _talk(playback, audios)
        finally:
            probing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await probing
    finally:
        arrivals = await _close_pages(child) if child is not None else []
    return Phase(pages, idle, talking, played, arrivals, probed, probe.within(probed))


async def _idle(seconds: float) -> Window:
    start, cpu = time.monotonic(), time.thread_time()
    await asyncio.sleep(seconds)
    return Window(start, time.monotonic(), time.thread_time() - cpu)


async def _talk(playback: Playback, audios: Sequence[tuple[str, SpeechAudio]]
                ) -> tuple[Window, list[Played]]:
    """Every unit, one after another, as a reply's units play (opened, queued, announced when
    its first sample plays, finalized when it played out)."""
    played = []
    start, cpu = time.monotonic(), time.thread_time()
    for number, (text, audio) in enumerate(audios):
        if number:
            await asyncio.sleep(GAP_S)
        unit = playback.open(audio.sample_rate)
        unit.add_text(text)
        written = time.monotonic()
        playback.queue(unit, audio, 0, len(text))
        announced = asyncio.create_task(playback.started(unit))
        await playback.finish(unit)
        await announced
        played.append(Played(unit, audio, written))
    return Window(start, time.monotonic(), time.thread_time() - cpu), played


async def _open_pages(port: int, count: int) -> asyncio.subprocess.Process:
    """`count` pages in a process of their own, each with its first snapshot."""
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "edge_agent.bench.screen_pages", str(port), str(count),
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE)
    assert child.stdout is not None
    ready = await child.stdout.readline()
    if ready.strip() != b"ready":
        await _close_pages(child)  # raises with the pages' error
        raise ScreenBenchError("the benchmark's pages ended before the screen reached them")
    return child


async def _close_pages(child: asyncio.subprocess.Process) -> list[list[Marks]]:
    """Each page's snapshots, as (arrival, {unit id: heard length})."""
    out, err = await child.communicate(b"")  # stdin closed: the pages stop
    if child.returncode != 0:
        raise ScreenBenchError(f"the benchmark's pages failed (exit {child.returncode}): "
                               f"{err.decode(errors='replace').strip()[-800:]}")
    return [[(arrival, heard) for arrival, heard in page] for page in json.loads(out)]
