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
import wave
from pathlib import Path

import numpy as np

from edge_agent.audio.array import mic_array
from edge_agent.audio.beamformer import BeamformedMicrophone, Beamformer, design_filters
from edge_agent.audio.device import MIC_RATE, Microphone
from edge_agent.audio.pcm import to_pcm
from edge_agent.audio.portaudio_host import PortAudioHost
from edge_agent.audio.portaudio_start import open_pyaudio
from edge_agent.audio.resilient import ResilientMicrophone
from edge_agent.bench.pulse_rig import paplay_command
from edge_agent.clock import MonotonicClock
from tests.live_audio import WAIT_S, around_playing

CHANNELS = 4


def write_channels(path: Path, channels: np.ndarray) -> None:
    """`channels` (samples x N, int16 scale) as an N-channel 16 kHz WAV file."""
    with wave.open(str(path), "wb") as out:
        out.setnchannels(channels.shape[1])
        out.setsampwidth(2)
        out.setframerate(MIC_RATE)
        out.writeframes(to_pcm(channels))


async def listen(played: np.ndarray, wav: Path, steer: bool) -> np.ndarray:
    """What the microphone delivered around `played`, written to `wav` and played from there."""
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
    write_channels(wav, played)
    try:
        # paplay off the loop: the microphone's frames keep being taken meanwhile.
        await around_playing(frames, lambda: asyncio.to_thread(
            subprocess.run, paplay_command(wav, "arraysink"), check=True, timeout=WAIT_S))
    finally:
        listening.cancel()
        await asyncio.gather(listening, return_exceptions=True)
        host.terminate()
    samples = np.frombuffer(b"".join(frames), dtype=np.int16)
    return samples if steer else samples.reshape(-1, CHANNELS)


def main(played_path: str, heard_path: str, *steer: str) -> None:
    played = np.load(played_path)
    wav = Path(heard_path).with_suffix(".wav")  # beside HEARD, in the test's directory
    np.save(heard_path, asyncio.run(listen(played, wav, steer == ("steer",))))


if __name__ == "__main__":
    main(*sys.argv[1:])
