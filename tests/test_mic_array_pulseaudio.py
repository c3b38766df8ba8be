"""A microphone array on a real audio stack: a 4-channel source on a private PulseAudio
server, read through ALSA and PortAudio as the agent reads a USB or HAT array, each channel
where the board puts it, and the beamformer on the live stream hearing the front and not the
side; and the doctor recording every microphone and naming a dead one."""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Callable, Iterator
from typing import cast

import numpy as np
import pytest

from edge_agent.audio.array import MicArray, mic_array
from edge_agent.audio.beamformer import BeamformedMicrophone, Beamformer, design_filters
from edge_agent.audio.device import MIC_RATE
from edge_agent.audio.pcm import write_wav
from edge_agent.audio.portaudio_host import PortAudioHost
from edge_agent.audio.resilient import ResilientMicrophone
from edge_agent.bench import pulse_rig
from edge_agent.clock import MonotonicClock
from edge_agent.config import AudioConfig, Config
from edge_agent.doctor import checks as doctor_checks
from edge_agent.doctor.report import CheckRecord, Context, MachineRecord

pytestmark = [pytest.mark.audio, pytest.mark.realtime]

TONES_HZ = (300.0, 500.0, 800.0, 1300.0)


@pytest.fixture
def pulse() -> Iterator[pulse_rig.PulseServer]:
    try:
        with pulse_rig.pulse_server(array_channels=4) as server, \
                pulse_rig.client_environment(server.env):
            yield server
    except pulse_rig.PulseUnavailable as exc:
        pytest.skip(f"PulseAudio not available: {exc}")


def _hat() -> MicArray:
    array = mic_array("respeaker-4mic-hat", [], [], 0)
    assert array is not None
    return array


async def _until(condition: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    """Wait for `condition` (a generous bound: it fails only when something is wrong)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)


async def _listen_while_playing(pulse: pulse_rig.PulseServer, channels: np.ndarray,
                                steer: MicArray | None = None) -> np.ndarray:
    """Play `channels` (samples, 4) into the array and return what the agent's microphone
    delivered meanwhile: every channel, or (with `steer`) the beamformer's one."""
    from edge_agent.audio.portaudio_start import open_pyaudio

    clock = MonotonicClock()
    host = PortAudioHost(open_pyaudio(), clock)
    device = ResilientMicrophone(host, "array", clock, lambda *_: None, channels=4)
    mic = device if steer is None else BeamformedMicrophone(
        device, Beamformer(steer, design_filters(steer, MIC_RATE, 0.0, 0.0)))
    frames: list[bytes] = []

    async def collect() -> None:
        async for frame in mic.frames():
            frames.append(frame)

    listening = asyncio.create_task(collect())
    try:
        await _until(lambda: len(frames) > 10, "the first frames")
        wav = pulse.root / "array.wav"
        with contextlib.suppress(FileNotFoundError):
            wav.unlink()
        pcm = np.clip(np.round(channels), -32768, 32767).astype(np.int16).tobytes()
        write_wav(wav, pcm, MIC_RATE, channels=4)
        player = pulse.play(wav, "arraysink", pulse_rig.ALSA_CHANNEL_MAPS[4])
        await asyncio.to_thread(player.wait)
        heard = len(frames)
        await _until(lambda: len(frames) > heard + 10, "the frames after it")
    finally:
        listening.cancel()
        await asyncio.gather(listening, return_exceptions=True)
        host.terminate()
    samples = np.frombuffer(b"".join(frames), dtype=np.int16).astype(np.float64)
    return samples.reshape(-1, 4) if steer is None else samples


def _peak_hz(signal: np.ndarray) -> float:
    spectrum = np.abs(np.fft.rfft(signal * np.hanning(len(signal))))
    return float(np.fft.rfftfreq(len(signal), 1.0 / MIC_RATE)[int(np.argmax(spectrum))])


async def test_each_microphone_arrives_on_its_own_channel(
        pulse: pulse_rig.PulseServer) -> None:
    t = np.arange(round(1.5 * MIC_RATE)) / MIC_RATE
    played = np.stack([6000.0 * np.sin(2 * math.pi * f * t) for f in TONES_HZ], axis=1)
    heard = await _listen_while_playing(pulse, played)
    loud = np.flatnonzero(np.max(np.abs(heard), axis=1) > 3000)
    assert len(loud) > MIC_RATE  # the whole 1.5 s came through, all four channels together
    middle = heard[loud[0] + 2000:loud[-1] - 2000]
    assert [round(_peak_hz(middle[:, c])) for c in range(4)] == pytest.approx(TONES_HZ, abs=3)


async def test_the_live_beamformer_hears_the_front_and_cuts_the_side(
        pulse: pulse_rig.PulseServer) -> None:
    hat = _hat()
    rng = np.random.default_rng(11)
    # Speech-band noise (300-3400 Hz), 1.5 s, from in front and then from the side.
    noise = rng.standard_normal(round(1.5 * MIC_RATE))
    spectrum = np.fft.rfft(noise)
    frequencies = np.fft.rfftfreq(len(noise), 1.0 / MIC_RATE)
    spectrum[(frequencies < 300) | (frequencies > 3400)] = 0
    voice = np.fft.irfft(spectrum, len(noise))
    voice *= 4000.0 / np.std(voice)
    levels = []
    for azimuth in (0.0, 90.0):
        out = await _listen_while_playing(pulse, hat.plane_wave(voice, azimuth, 0.0, MIC_RATE),
                                          steer=hat)
        loud = np.flatnonzero(np.abs(out) > 1000)
        assert len(loud), f"nothing came out for a wave from {azimuth} degrees"
        levels.append(float(np.sqrt(np.mean(out[loud[0]:loud[0] + MIC_RATE] ** 2))))
    front, side = levels
    assert 20 * math.log10(front / 4000.0) == pytest.approx(0.0, abs=1.0)
    assert 20 * math.log10(side / front) < -6.0


def _doctor_input(config: Config) -> CheckRecord:
    records: list[CheckRecord] = []
    doctor_checks.audio(Context(config, True, cast(MachineRecord, {})), records.append)
    return next(r for r in records if r["name"] == "audio input")


@pytest.mark.parametrize("dead", [None, 2])
async def test_doctor_records_every_microphone_and_names_a_dead_one(
        pulse: pulse_rig.PulseServer, dead: int | None) -> None:
    t = np.arange(round(4.0 * MIC_RATE)) / MIC_RATE
    played = np.stack([3000.0 * np.sin(2 * math.pi * f * t) for f in TONES_HZ], axis=1)
    if dead is not None:
        played[:, dead] = 0.0
    wav = pulse.root / f"doctor-{dead}.wav"
    write_wav(wav, np.round(played).astype(np.int16).tobytes(), MIC_RATE, channels=4)
    player = pulse.play(wav, "arraysink", pulse_rig.ALSA_CHANNEL_MAPS[4])
    try:
        await asyncio.sleep(0.5)  # playing before the doctor's second of recording starts
        config = Config(audio=AudioConfig(input_device="array", array="respeaker-4mic-hat"))
        record = await asyncio.to_thread(_doctor_input, config)
    finally:
        player.kill()
        await asyncio.to_thread(player.wait)
    assert "array respeaker-4mic-hat, 4 microphones at" in record["detail"], record
    if dead is None:
        assert record["status"] == "ok", record
    else:
        assert record["status"] == "warn", record
        assert f"microphone {dead + 1} (input channel {dead})" in record["detail"], record
        assert "mic_channels" in record["fix"]
