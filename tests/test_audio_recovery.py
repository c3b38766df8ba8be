"""The microphone and speaker outlive their device (edge_agent/audio/resilient.py).

Unit tests drive a fake PyAudio on the virtual clock: the backoff schedule, each state said
once, the speaker's heard-truth bookkeeping across a loss, and the shared PortAudio's
re-initialisation. The `audio` tests pull devices out from under real PortAudio streams on the
private PulseAudio server (`pulse_rig`, `hotplug=True`) and kill and restart that server."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from edge_agent.audio.device import MIC_RATE
from edge_agent.audio.pacing import PACED_FRAMES
from edge_agent.audio.portaudio_host import PortAudioHost
from edge_agent.audio.pyaudio_io import CAPTURE_PERIOD
from edge_agent.audio.realtime import INPUT_OVERFLOW, OUTPUT_UNDERFLOW, AudioThreads
from edge_agent.audio.resilient import (
    Backoff,
    ResilientMicrophone,
    StateSayer,
)
from edge_agent.audio.resilient_speaker import ResilientSpeaker
from edge_agent.bench import pulse_rig
from edge_agent.clock import MonotonicClock, VirtualClock
from tests.live_audio import around_playing, until

SPEAKER_RATE = 22050
LATENCY = 0.05
"""The fake output's DAC latency: audio handed out at t reaches the DAC at t + LATENCY."""
TONE = (np.full(512, 1000, dtype=np.int16)).tobytes()


def _tone(seconds: float, rate: int = SPEAKER_RATE, seed: int = 0) -> bytes:
    """Loud noise with no zero sample: found bit for bit in a recording, and where it ends."""
    rng = np.random.default_rng(seed)
    count = int(seconds * rate)
    samples = rng.integers(2000, 12000, count) * rng.choice([-1, 1], count)
    return samples.astype(np.int16).tobytes()


# -- a fake PyAudio on the virtual clock ------------------------------------------------------

class FakeStream:
    def __init__(self, pa: FakePyAudio, name: str, kwargs: dict[str, Any]) -> None:
        self.pa, self.name = pa, name
        self.callback = kwargs["stream_callback"]
        self.output = bool(kwargs.get("output"))
        self.period = kwargs["frames_per_buffer"] / kwargs["rate"]
        self.frames = kwargs["frames_per_buffer"]
        self.running, self.closed, self.frozen = True, False, False
        self._stream = self  # what PyAudio's Stream hands `_portaudio.abort_stream`
        self._is_running = True
        self.handed: list[tuple[float, bytes]] = []  # (DAC time, audio) of each output buffer
        self.status = 0  # PortAudio's status flags for the next callback

    def is_active(self) -> bool:
        return self.running and not self.closed

    def stop_stream(self) -> None:
        self.running = False

    def start_stream(self) -> None:
        self.running = True

    def close(self) -> None:
        self.closed, self.running = True, False

    def get_time(self) -> float:
        return self.pa.clock.now()

    def get_output_latency(self) -> float:
        return LATENCY

    def tick(self) -> None:
        now = self.pa.clock.now()
        if self.output:
            data, _ = self.callback(None, self.frames, {"current_time": now,
                                                        "output_buffer_dac_time": now + LATENCY},
                                    self.status)
            self.handed.append((now + LATENCY, data))
        else:
            self.callback(TONE[:2 * self.frames], self.frames, {}, self.status)
        self.status = 0

    def played_by(self, when: float, rate: int = SPEAKER_RATE) -> int:
        """Audio (nonzero) samples that reached the fake DAC by `when`."""
        samples = np.concatenate([np.frombuffer(data, dtype=np.int16)[
            :max(0, min(len(data) // 2, round((when - dac) * rate)))]
            for dac, data in self.handed]) if self.handed else np.zeros(0, np.int16)
        return int(np.count_nonzero(samples))


class FakePyAudio:
    """Devices by name; `unplug` stops their streams (as PortAudio does) and fails opening.
    With `scan_on_init`, the device list is a snapshot taken at (re)initialisation, like ALSA
    hardware."""

    def __init__(self, clock: VirtualClock, names: tuple[str, ...] = ("usbmic", "usbspeaker"),
                 scan_on_init: bool = False) -> None:
        self.clock = clock
        self.plugged = set(names)
        self.listed = list(names)
        self.scan_on_init = scan_on_init
        self.opens: list[tuple[float, str]] = []
        self.streams: list[FakeStream] = []
        self.inits = 1

    def get_device_count(self) -> int:
        return len(self.listed)

    def get_device_info_by_index(self, index: int) -> dict[str, Any]:
        name = self.listed[index]
        mic = "mic" in name
        return {"index": index, "name": name, "maxInputChannels": int(mic),
                "maxOutputChannels": int(not mic)}

    def open(self, **kwargs: Any) -> FakeStream:
        index = kwargs.get("input_device_index", kwargs.get("output_device_index"))
        name = self.listed[index]
        self.opens.append((self.clock.now(), name))
        if name not in self.plugged:
            raise OSError(-9999, "Unanticipated host error")
        stream = FakeStream(self, name, kwargs)
        self.streams.append(stream)
        asyncio.get_running_loop().create_task(self._pump(stream))
        return stream

    async def _pump(self, stream: FakeStream) -> None:
        while not stream.closed:
            await self.clock.sleep(stream.period)
            if stream.is_active() and not stream.frozen:
                stream.tick()

    def unplug(self, name: str) -> None:
        self.plugged.discard(name)
        for stream in self.streams:
            if stream.name == name:
                stream.running = False

    def plug(self, name: str) -> None:
        self.plugged.add(name)

    def live(self, name: str) -> FakeStream:
        return next(s for s in reversed(self.streams) if s.name == name and not s.closed)

    def terminate(self) -> None:
        for stream in self.streams:
            stream.close()

    def reinit(self) -> FakePyAudio:
        self.inits += 1
        if self.scan_on_init:
            self.listed = sorted(self.plugged)
        return self


def _fake_host(pa: FakePyAudio, clock: VirtualClock,
               threads: AudioThreads | None = None) -> PortAudioHost:
    return PortAudioHost(pa, clock, reopen=pa.reinit, offload=False, threads=threads)


class Said:
    def __init__(self, clock: VirtualClock | MonotonicClock) -> None:
        self.clock = clock
        self.calls: list[tuple[float, str, str, str]] = []

    def __call__(self, device: str, state: str, detail: str) -> None:
        self.calls.append((self.clock.now(), device, state, detail))

    def states(self, device: str) -> list[str]:
        return [state for _, d, state, _ in self.calls if d == device]

    def when(self, device: str, state: str) -> float:
        return next(t for t, d, s, _ in reversed(self.calls) if d == device and s == state)


async def _collect(mic: ResilientMicrophone, into: list[tuple[float, bytes]],
                   clock: VirtualClock | MonotonicClock) -> None:
    async for frame in mic.frames():
        into.append((clock.now(), frame))


# -- unit tests -------------------------------------------------------------------------------

def test_backoff_doubles_from_half_a_second_to_ten() -> None:
    backoff = Backoff()
    assert [backoff.next() for _ in range(7)] == [0.5, 1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
    backoff.reset()
    assert backoff.next() == 0.5


def test_each_state_is_said_once_per_change() -> None:
    said: list[tuple[str, str, str]] = []
    sayer = StateSayer("microphone", lambda *args: said.append(args))
    for state in ("lost", "lost", "waiting", "waiting", "waiting", "back", "back", "lost"):
        sayer.say(state, "why")
    assert [s for _, s, _ in said] == ["lost", "waiting", "back", "lost"]


async def test_microphone_retries_with_backoff_yields_silence_and_comes_back() -> None:
    clock = VirtualClock()
    pa = FakePyAudio(clock)
    said = Said(clock)
    mic = ResilientMicrophone(_fake_host(pa, clock), "usbmic", clock, said, refresh_after=99)
    frames: list[tuple[float, bytes]] = []
    listening = asyncio.create_task(_collect(mic, frames, clock))
    await clock.advance(1.0)
    # Whole frames, assembled from PortAudio's short periods.
    assert pa.streams[0].frames == CAPTURE_PERIOD < len(TONE) // 2
    assert frames and all(f == TONE for _, f in frames)

    unplugged = clock.now()
    pa.unplug("usbmic")
    await clock.advance(40.0)
    assert said.states("microphone") == ["lost", "waiting"]  # once each, however many tries
    lost = said.when("microphone", "lost")
    assert lost - unplugged <= 0.25 + 1e-9  # an inactive stream is seen at the next check
    tries = [t - lost for t, name in pa.opens[1:]]
    assert tries == pytest.approx([0.5, 1.5, 3.5, 7.5, 15.5, 25.5, 35.5])
    # Silence at the frame rate meanwhile: the loop's VAD and audio clock keep moving.
    during = [f for t, f in frames if lost < t <= unplugged + 40.0]
    assert all(f == bytes(1024) for f in during)
    assert abs(len(during) - (unplugged + 40.0 - lost) / 0.032) <= 3

    pa.plug("usbmic")
    before = len(frames)
    await clock.advance(11.0)
    assert said.states("microphone") == ["lost", "waiting", "back"]
    assert said.when("microphone", "back") - lost == pytest.approx(45.5 + 0.032, abs=0.01)
    assert frames[-1][1] == TONE and sum(f == TONE for _, f in frames[before:]) > 100
    listening.cancel()


async def test_an_idle_loop_gets_the_microphone_in_batches_and_a_busy_one_frame_by_frame(
        ) -> None:
    clock = VirtualClock()
    pa = FakePyAudio(clock)
    mic = ResilientMicrophone(_fake_host(pa, clock), "usbmic", clock, Said(clock))
    urgent = False
    frames: list[float] = []

    async def collect() -> None:
        async for _ in mic.paced_frames(lambda: urgent):
            frames.append(clock.now())

    listening = asyncio.create_task(collect())
    await clock.advance(4.0)
    idle = list(frames)
    urgent = True
    switched = clock.now()
    await clock.advance(1.0)
    busy = frames[len(idle):]
    period = 512 / 16000
    # Nothing lost while idle: every frame captured so far came (the rest within a batch).
    captured = round(4.0 / period)
    assert captured - PACED_FRAMES <= len(idle) <= captured
    wakes = sorted(set(idle))
    assert len(wakes) <= len(idle) / 4  # handed over several at a time...
    held = PACED_FRAMES * period + 1e-9
    assert all(b - a <= held for a, b in itertools.pairwise(wakes))  # ...never held long
    # Busy: each frame as it is captured (the batch waiting at the switch comes with the first).
    after = [t for t in busy if t > switched + period]
    assert len(set(after)) == len(after) and len(after) >= round(1.0 / period) - 3
    listening.cancel()


async def test_a_microphone_that_stops_delivering_is_lost_and_reopened() -> None:
    clock = VirtualClock()
    pa = FakePyAudio(clock)
    said = Said(clock)
    mic = ResilientMicrophone(_fake_host(pa, clock), "usbmic", clock, said, stall_s=1.0,
                              start_grace_s=2.0)
    frames: list[tuple[float, bytes]] = []
    listening = asyncio.create_task(_collect(mic, frames, clock))
    await clock.advance(3.0)
    last_frame = frames[-1][0]
    pa.live("usbmic").frozen = True  # active, but the callback never comes again
    await clock.advance(3.0)
    assert said.states("microphone") == ["lost", "back"]
    # Found at the first check (every 0.25 s) more than stall_s after the last frame.
    assert 1.0 < said.when("microphone", "lost") - last_frame <= 1.0 + 0.25 + 1e-9
    assert frames[-1][1] == TONE  # the reopened stream delivers
    listening.cancel()


async def test_the_speaker_keeps_the_configured_output_period_across_a_reopen() -> None:
    """`[audio] output_period` reaches the device, also when the speaker opens it again after
    a loss, and audio plays out whole at that period."""
    clock = VirtualClock()
    pa = FakePyAudio(clock)
    speaker = ResilientSpeaker(_fake_host(pa, clock), "usbspeaker", SPEAKER_RATE, clock,
                               Said(clock), period=256)
    assert pa.live("usbspeaker").frames == 256
    pa.unplug("usbspeaker")
    await clock.advance(0.5)
    pa.plug("usbspeaker")
    await clock.advance(3.0)
    assert len([s for s in pa.streams if s.name == "usbspeaker"]) == 2
    assert pa.live("usbspeaker").frames == 256
    tone = _tone(0.5)
    start = speaker.write(tone)
    await clock.advance(1.0)
    assert speaker.played_frames() == start + len(tone) // 2
    speaker.close()


async def test_speaker_loss_claims_only_what_reached_the_dac_and_drops_until_interrupt() -> None:
    clock = VirtualClock()
    pa = FakePyAudio(clock)
    said = Said(clock)
    speaker = ResilientSpeaker(_fake_host(pa, clock), "usbspeaker", SPEAKER_RATE, clock, said)
    await clock.advance(0.2)
    first = _tone(1.0)
    start = speaker.write(first)
    end = start + len(first) // 2
    await clock.advance(0.4)
    before = speaker.played_frames()
    assert start < before < end
    stream = pa.live("usbspeaker")

    pulled = clock.now()
    pa.unplug("usbspeaker")
    waiting = asyncio.create_task(speaker.wait_played(end))
    await clock.advance(0.3)
    assert waiting.done()  # resolved by the loss, not left hanging
    assert said.states("speaker") == ["lost"]
    frozen = speaker.played_frames()
    assert before <= frozen <= stream.played_by(pulled)  # monotonic, and never unplayed audio

    # Written while lost: numbered after everything written, never played, not waited for.
    dropped = speaker.write(_tone(0.5, seed=1))
    assert dropped == end
    await asyncio.wait_for(speaker.wait_played(dropped + 100), 1)
    assert speaker.played_frames() == frozen

    await clock.advance(1.0)  # the first retry fails
    pa.plug("usbspeaker")
    await clock.advance(2.0)
    assert said.states("speaker") == ["lost", "waiting", "back"]
    # Back, but the reply that was cut stays cut until the conversation's next stop.
    speaker.write(_tone(0.5, seed=2))
    await clock.advance(1.0)
    assert speaker.played_frames() == frozen
    assert pa.live("usbspeaker").played_by(clock.now()) == 0

    assert speaker.interrupt() == frozen
    fresh = _tone(0.5, seed=3)
    assert speaker.write(fresh) == frozen  # numbering goes on from what was played
    await clock.advance(1.0)
    assert speaker.played_frames() == frozen + len(fresh) // 2
    assert pa.live("usbspeaker").played_by(clock.now()) == len(fresh) // 2
    speaker.close()


async def test_speaker_loss_while_idle_needs_no_interrupt() -> None:
    clock = VirtualClock()
    pa = FakePyAudio(clock)
    said = Said(clock)
    speaker = ResilientSpeaker(_fake_host(pa, clock), "usbspeaker", SPEAKER_RATE, clock, said)
    await clock.advance(0.2)
    pa.unplug("usbspeaker")
    await clock.advance(0.3)
    pa.plug("usbspeaker")
    await clock.advance(1.0)
    assert said.states("speaker") == ["lost", "back"]
    pcm = _tone(0.2)
    start = speaker.write(pcm)
    await asyncio.wait_for(_advancing(clock, speaker.wait_played(start + len(pcm) // 2)), 1)
    assert speaker.played_frames() == start + len(pcm) // 2
    speaker.close()


async def test_every_callback_tells_the_hosts_threads_and_the_devices_misses_count() -> None:
    clock = VirtualClock()
    pa = FakePyAudio(clock)
    asked: list[int] = []
    threads = AudioThreads(10, request=asked.append)
    host = _fake_host(pa, clock, threads)
    said = Said(clock)
    mic = ResilientMicrophone(host, "usbmic", clock, said)
    frames: list[tuple[float, bytes]] = []
    listening = asyncio.create_task(_collect(mic, frames, clock))
    speaker = ResilientSpeaker(host, "usbspeaker", SPEAKER_RATE, clock, said)
    await clock.advance(0.2)
    assert asked == [10] and threads.state().scheduling == "real-time (SCHED_FIFO 10)"
    pa.live("usbmic").status = INPUT_OVERFLOW
    pa.live("usbspeaker").status = OUTPUT_UNDERFLOW
    await clock.advance(0.2)
    pa.live("usbspeaker").status = OUTPUT_UNDERFLOW
    await clock.advance(0.2)
    state = threads.state()
    assert (state.input_overflows, state.output_underflows) == (1, 2)
    listening.cancel()
    speaker.close()


async def test_the_speaker_says_when_each_stretch_of_playback_reached_the_dac(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import pyaudio

    monkeypatch.setattr(pyaudio._portaudio, "abort_stream", FakeStream.stop_stream)
    # The echo canceller's reference places each stretch of a reply at the time it played: a
    # piece written after the speaker ran dry begins a stretch of its own, at its own time.
    clock = VirtualClock()
    pa = FakePyAudio(clock)
    speaker = ResilientSpeaker(_fake_host(pa, clock), "usbspeaker", SPEAKER_RATE, clock,
                               Said(clock))
    await clock.advance(0.2)
    stream = pa.live("usbspeaker")
    pieces = [_tone(0.3, seed=1), _tone(0.2, seed=2)]
    starts = []
    for piece in pieces:
        starts.append(speaker.write(piece))
        await clock.advance(0.5)  # plays out and runs dry
    assert speaker.played_frames() == starts[1] + len(pieces[1]) // 2
    dac_times = [next(dac for dac, data in stream.handed if data[:64] == piece[:64])
                 for piece in pieces]
    for start, piece, dac in zip(starts, pieces, dac_times, strict=True):
        for frame in (start, start + len(piece) // 4, start + len(piece) // 2 - 1):
            when = speaker.played_when(frame)
            assert when is not None and when[0] == start
            assert when[1] == pytest.approx(dac, abs=1e-9)
    assert speaker.played_when(starts[1] + len(pieces[1]) // 2) is None  # never written
    speaker.interrupt()  # a restarted stream: what played before it is no longer placed
    assert speaker.played_when(starts[1]) is None
    speaker.close()


async def test_a_restart_after_a_barge_in_may_stall_without_being_a_loss(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """PulseAudio treats the stream restarted by `interrupt` as a fresh one: it may ask for
    nothing for 1-2 s. That must not be taken for a lost device (it would cut the next reply)."""
    import pyaudio

    monkeypatch.setattr(pyaudio._portaudio, "abort_stream", FakeStream.stop_stream)
    clock = VirtualClock()
    pa = FakePyAudio(clock)
    said = Said(clock)
    speaker = ResilientSpeaker(_fake_host(pa, clock), "usbspeaker", SPEAKER_RATE, clock, said,
                               stall_s=1.0)
    await clock.advance(6.0)  # past the start-up grace
    speaker.write(_tone(1.0))
    await clock.advance(0.3)
    played = speaker.interrupt()
    stream = pa.live("usbspeaker")
    stream.frozen = True  # the restarted stream is silent for a while
    await clock.advance(1.8)
    stream.frozen = False
    pcm = _tone(0.3, seed=6)
    assert speaker.write(pcm) == played
    await clock.advance(1.0)
    assert said.states("speaker") == []
    assert speaker.played_frames() == played + len(pcm) // 2
    speaker.close()


async def _advancing(clock: VirtualClock, awaitable: Awaitable[None]) -> None:
    task = asyncio.ensure_future(awaitable)
    while not task.done():
        await clock.advance(0.05)
    await task


async def test_portaudio_restarts_for_a_rescan_only_when_the_other_device_is_quiet() -> None:
    clock = VirtualClock()
    pa = FakePyAudio(clock, scan_on_init=True)  # hardware: listed only as of the last scan
    said = Said(clock)
    host = _fake_host(pa, clock)
    speaker = ResilientSpeaker(host, "usbspeaker", SPEAKER_RATE, clock, said)
    mic = ResilientMicrophone(host, "usbmic", clock, said, refresh_after=2)
    frames: list[tuple[float, bytes]] = []
    listening = asyncio.create_task(_collect(mic, frames, clock))
    await clock.advance(0.5)
    pa.unplug("usbmic")
    pa.listed.remove("usbmic")  # gone from the kernel's card list too
    long = _tone(5.0)
    speaker.write(long)  # the speaker is busy: no restart may cut it
    await clock.advance(4.0)
    assert pa.inits == 1
    pa.plug("usbmic")  # back, but PortAudio will only see it after a rescan
    await clock.advance(4.0)  # the reply has played out: quiet
    assert pa.inits == 2 and said.states("microphone") == ["lost", "waiting", "back"]
    assert said.states("speaker") == []  # released and reopened around the restart: no loss
    pcm = _tone(0.3, seed=4)
    start = speaker.write(pcm)
    await clock.advance(1.0)
    assert speaker.played_frames() == start + len(pcm) // 2
    assert pa.live("usbspeaker").played_by(clock.now()) == len(pcm) // 2
    assert frames[-1][1] == TONE
    listening.cancel()
    speaker.close()


# -- on the private PulseAudio server ---------------------------------------------------------

@pytest.fixture
def pulse() -> Iterator[pulse_rig.PulseServer]:
    try:
        with pulse_rig.pulse_server(hotplug=True) as server, \
                pulse_rig.client_environment(server.env):
            yield server
    except pulse_rig.PulseUnavailable as exc:
        pytest.skip(f"PulseAudio not available: {exc}")


def _live_host() -> PortAudioHost:
    from edge_agent.audio.portaudio_start import open_pyaudio

    return PortAudioHost(open_pyaudio(), MonotonicClock())


@pytest.mark.audio
@pytest.mark.realtime
@pytest.mark.parametrize("fault", ["unplug", "server restart"])
async def test_microphone_comes_back_after_its_device_does(pulse: pulse_rig.PulseServer,
                                                           fault: str) -> None:
    clock = MonotonicClock()
    host = _live_host()
    said = Said(clock)
    mic = ResilientMicrophone(host, "usbmic", clock, said)
    frames: list[tuple[float, bytes]] = []
    listening = asyncio.create_task(_collect(mic, frames, clock))
    try:
        await until(lambda: len(frames) > 10, "the first frames")
        if fault == "unplug":
            module = await asyncio.to_thread(pulse.unplug, "usbmic")
        else:
            await asyncio.to_thread(pulse.kill_server)
        await until(lambda: said.states("microphone") == ["lost", "waiting"], "the loss")
        silent = len(frames)
        await until(lambda: len(frames) > silent + 10, "silence frames while lost")
        assert not any(any(f) for _, f in frames[silent:])

        if fault == "unplug":
            await asyncio.to_thread(pulse.plug, module)
        else:
            await asyncio.to_thread(pulse.restart)
        returned = clock.now()
        await until(lambda: said.states("microphone")[-1:] == ["back"], "the return")
        player = pulse.play(_wav(pulse.root / "tone.wav"), "micsink")
        await until(lambda: any(any(f) for t, f in frames if t > returned), "audio after return")
        assert said.states("microphone") == ["lost", "waiting", "back"]
        print(f"\nmicrophone, {fault}: back {said.when('microphone', 'back') - returned:.3f} s "
              "after the device returned")
        pulse_rig.stop(player)
    finally:
        listening.cancel()
        await asyncio.gather(listening, return_exceptions=True)
        host.terminate()


@pytest.mark.audio
@pytest.mark.realtime
async def test_the_microphone_hands_over_whole_frames_of_every_sample_played(
        pulse: pulse_rig.PulseServer) -> None:
    """Frames are assembled from PortAudio's short capture periods: 512 samples each, in order,
    nothing dropped or doubled (the played noise is found bit for bit)."""
    from edge_agent.audio.pcm import write_wav

    clock = MonotonicClock()
    host = _live_host()
    mic = ResilientMicrophone(host, "usbmic", clock, Said(clock))
    frames: list[tuple[float, bytes]] = []
    listening = asyncio.create_task(_collect(mic, frames, clock))
    noise = _tone(1.5, MIC_RATE, seed=3)
    write_wav(pulse.root / "noise.wav", noise, MIC_RATE)
    try:
        await around_playing(frames, lambda: asyncio.to_thread(
            pulse.play(pulse.root / "noise.wav", "micsink").wait))
    finally:
        listening.cancel()
        await asyncio.gather(listening, return_exceptions=True)
        host.terminate()
    assert {len(frame) for _, frame in frames} == {2 * mic.frame_samples}
    assert noise in b"".join(frame for _, frame in frames)


def _wav(path: Path) -> Path:
    from edge_agent.audio.pcm import write_wav

    write_wav(path, _tone(3.0, MIC_RATE), MIC_RATE)
    return path


MAX_OVER_MS = 25.0
"""How far the played count may run past the monitor recording: the cursor's measured accuracy
in normal playback (tests/test_heard_pulseaudio.py); the recording itself loses its last
block when its source goes away with the sink."""


@pytest.mark.audio
@pytest.mark.realtime
@pytest.mark.parametrize("fault", ["unplug", "server restart"])
async def test_speaker_loss_is_honest_and_playback_resumes(pulse: pulse_rig.PulseServer,
                                                           tmp_path: Path, fault: str) -> None:
    from edge_agent.bench.heard import recorded_length

    clock = MonotonicClock()
    host = _live_host()
    said = Said(clock)
    speaker = ResilientSpeaker(host, "usbspeaker", SPEAKER_RATE, clock, said)
    seen: list[int] = []

    async def watch() -> None:
        while True:
            seen.append(speaker.played_frames())
            await asyncio.sleep(0.002)

    watching = asyncio.create_task(watch())
    try:
        recording = tmp_path / "before.raw"
        recorder = pulse.record(recording, "usbspeaker.monitor", SPEAKER_RATE)
        assert await asyncio.to_thread(pulse.wait_for_stream, "source-outputs",
                                       "usbspeaker.monitor", 30, ())
        pcm = _tone(4.0)
        start = speaker.write(pcm)
        end = start + len(pcm) // 2
        await until(lambda: speaker.played_frames() > start + SPEAKER_RATE, "a second played")
        if fault == "unplug":
            module = await asyncio.to_thread(pulse.unplug, "usbspeaker")
        else:
            await asyncio.to_thread(pulse.kill_server)
        await asyncio.wait_for(speaker.wait_played(end), 10)  # resolves: does not hang
        assert said.states("speaker") == ["lost"]
        played = speaker.played_frames() - start
        pulse_rig.stop(recorder)
        recorded = recorded_length(recording.read_bytes(), pcm)
        over_ms = (played - recorded) * 1000 / SPEAKER_RATE
        print(f"\nspeaker, {fault}: claimed {played} of {recorded} recorded ({over_ms:+.1f} ms)")
        assert over_ms <= MAX_OVER_MS
        assert played < len(pcm) // 2
        assert all(a <= b for a, b in itertools.pairwise(seen))

        if fault == "unplug":
            await asyncio.to_thread(pulse.plug, module)
        else:
            await asyncio.to_thread(pulse.restart)
        await until(lambda: said.states("speaker")[-1:] == ["back"], "the return", 60)
        frozen = speaker.interrupt()  # the conversation's next stop: the cut unit ends here
        assert frozen == start + played
        recording = tmp_path / "after.raw"
        recorder = pulse.record(recording, "usbspeaker.monitor", SPEAKER_RATE)
        assert await asyncio.to_thread(pulse.wait_for_stream, "source-outputs",
                                       "usbspeaker.monitor", 30, ())
        again = _tone(1.0, seed=5)
        assert speaker.write(again) == frozen
        await asyncio.wait_for(speaker.wait_played(frozen + len(again) // 2), 30)
        assert speaker.played_frames() == frozen + len(again) // 2
        await until(lambda: _holds(recording, again, recorded_length), "the new audio recorded")
        pulse_rig.stop(recorder)
        assert all(a <= b for a, b in itertools.pairwise(seen))
    finally:
        watching.cancel()
        speaker.close()
        host.terminate()


def _holds(recording: Path, pcm: bytes, recorded_length: Callable[[bytes, bytes], int]) -> bool:
    try:
        return recorded_length(recording.read_bytes(), pcm) == len(pcm) // 2
    except ValueError:
        return False
