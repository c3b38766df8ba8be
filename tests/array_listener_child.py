"""Run as `python -m tests.array_listener_child PLAYED.npy HEARD.npy [steer]` in the private
PulseAudio server's environment: the agent's array microphone (`ResilientMicrophone` with 4
channels on the ALSA PCM `array`) listens while PLAYED (samples x 4, int16) is played into the
array's sink with each channel in its place; what it delivered meanwhile is saved to HEARD:
every channel (samples x 4), or with `steer` the beamformer's one channel toward the front of a
ReSpeaker 4-mic HAT.

A process of its own: PortAudio reads ALSA's configuration (where the PCM `array` is) from the
environment once per process, so a test process that has opened audio elsewhere would not find
the array's device."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import tempfile
import time
import wave
from collections.abc import Callable
from pathlib import Path

import numpy as np

from edge_agent.audio.array import mic_array
from edge_agent.audio.beamformer import BeamformedMicrophone, Beamformer, design_filters
from edge_agent.audio.device import MIC_RATE, Microphone
from edge_agent.audio.portaudio_host import PortAudioHost
from edge_agent.audio.portaudio_start import open_pyaudio
from edge_agent.audio.resilient import ResilientMicrophone
from edge_agent.bench.pulse_rig import ALSA_CHANNEL_MAPS
from edge_agent.clock import MonotonicClock

CHANNELS = 4
WAIT_S = 30.0
"""A generous bound on each wait: it fails only when something is wrong."""


def write_channels(path: Path, channels: np.ndarray) -> None:
    """`channels` (samples x N) as an N-channel 16 kHz WAV file (int16, rounded)."""
    with wave.open(str(path), "wb") as out:
        out.setnchannels(channels.shape[1])
        out.setsampwidth(2)
        out.setframerate(MIC_RATE)
        out.writeframes(np.round(channels).astype(np.int16).tobytes())


async def _until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


async def listen(played: np.ndarray, steer: bool) -> np.ndarray:
    clock = MonotonicClock()
    host = PortAudioHost(open_pyaudio(), clock)
    device = ResilientMicrophone(host, "array", clock, lambda *_: None, channels=CHANNELS)
    mic: Microphone = device
    if steer:
        hat = mic_array("respeaker-4mic-hat", [], [], 0)
        assert hat is not None
        mic = BeamformedMicrophone(device, Beamformer(hat, design_filters(hat, MIC_RATE, 0.0, 0.0)))
    frames: list[bytes] = []

    async def collect() -> None:
        async for frame in mic.frames():
            frames.append(frame)

    listening = asyncio.create_task(collect())
    try:
        await _until(lambda: len(frames) > 10, "the first frames")
        with tempfile.TemporaryDirectory() as scratch:
            wav = Path(scratch) / "played.wav"
            write_channels(wav, played)
            # Off the loop: the microphone's frames keep being taken meanwhile.
            await asyncio.to_thread(
                subprocess.run, ["paplay", "-d", "arraysink",
                                 f"--channel-map={ALSA_CHANNEL_MAPS[CHANNELS]}", str(wav)],
                check=True, timeout=WAIT_S)
        heard = len(frames)
        await _until(lambda: len(frames) > heard + 10, "the frames after it")
    finally:
        listening.cancel()
        await asyncio.gather(listening, return_exceptions=True)
        host.terminate()
    samples = np.frombuffer(b"".join(frames), dtype=np.int16)
    return samples if steer else samples.reshape(-1, CHANNELS)


def main(played_path: str, heard_path: str, *steer: str) -> None:
    played = np.load(played_path)
    np.save(heard_path, asyncio.run(listen(played, steer == ("steer",))))


if __name__ == "__main__":
    main(*sys.argv[1:])
