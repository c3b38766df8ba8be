"""A microphone array on a real audio stack: a 4-channel source on a private PulseAudio
server, read through ALSA and PortAudio as the agent reads a USB or HAT array, each channel
where the board puts it, and the beamformer on the live stream hearing the front and not the
side; and `edge-agent doctor` recording every microphone and naming a dead one.

The audio runs in child processes (`tests.array_listener_child`, the doctor command): PortAudio
reads ALSA's configuration from the environment once per process, so in a test process that
had already opened audio elsewhere the array's device is not there ("no audio input device
found", as these tests failed when they ran in-process after other audio tests)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from edge_agent.audio.array import mic_array
from edge_agent.audio.device import MIC_RATE
from edge_agent.bench import pulse_rig
from tests.array_listener_child import write_channels
from tests.cli import REPO, edge_agent, environment, write_config

pytestmark = [pytest.mark.audio, pytest.mark.realtime]

TONES_HZ = (300.0, 500.0, 800.0, 1300.0)


@pytest.fixture
def pulse() -> Iterator[pulse_rig.PulseServer]:
    try:
        with pulse_rig.pulse_server(array_channels=4) as server:
            yield server
    except pulse_rig.PulseUnavailable as exc:
        pytest.skip(f"PulseAudio not available: {exc}")


def _client_env(pulse: pulse_rig.PulseServer) -> dict[str, str]:
    """A child's environment on this server (its variables are a copy of this process's: a
    developer's $EDGE_AGENT_CONFIG is left out again), able to import `tests`."""
    return {**{k: v for k, v in pulse.env.items() if k != "EDGE_AGENT_CONFIG"},
            "PYTHONPATH": str(REPO)}


def _listen_while_playing(pulse: pulse_rig.PulseServer, tmp_path: Path, channels: np.ndarray,
                          steer: bool = False) -> np.ndarray:
    """Play `channels` (samples, 4) into the array and return what the agent's microphone
    delivered meanwhile: every channel, or (with `steer`) the beamformer's one toward the
    front."""
    played, heard = tmp_path / "played.npy", tmp_path / "heard.npy"
    np.save(played, channels)
    done = subprocess.run(
        [sys.executable, "-m", "tests.array_listener_child", str(played), str(heard),
         *(["steer"] if steer else [])],
        env=environment(_client_env(pulse)), capture_output=True,
        text=True, timeout=120, check=False, cwd=REPO)
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stderr[-3000:]}"
    return np.load(heard).astype(np.float64)


def _peak_hz(signal: np.ndarray) -> float:
    spectrum = np.abs(np.fft.rfft(signal * np.hanning(len(signal))))
    return float(np.fft.rfftfreq(len(signal), 1.0 / MIC_RATE)[int(np.argmax(spectrum))])


def test_each_microphone_arrives_on_its_own_channel(pulse: pulse_rig.PulseServer,
                                                    tmp_path: Path) -> None:
    t = np.arange(round(1.5 * MIC_RATE)) / MIC_RATE
    played = np.stack([6000.0 * np.sin(2 * math.pi * f * t) for f in TONES_HZ], axis=1)
    heard = _listen_while_playing(pulse, tmp_path, played)
    loud = np.flatnonzero(np.max(np.abs(heard), axis=1) > 3000)
    assert len(loud) > MIC_RATE  # the whole 1.5 s came through, all four channels together
    middle = heard[loud[0] + 2000:loud[-1] - 2000]
    assert [round(_peak_hz(middle[:, c])) for c in range(4)] == pytest.approx(TONES_HZ, abs=3)


def test_the_live_beamformer_hears_the_front_and_cuts_the_side(
        pulse: pulse_rig.PulseServer, tmp_path: Path) -> None:
    hat = mic_array("respeaker-4mic-hat", [], [], 0)
    assert hat is not None
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
        out = _listen_while_playing(pulse, tmp_path, hat.plane_wave(voice, azimuth, 0.0, MIC_RATE),
                                    steer=True)
        loud = np.flatnonzero(np.abs(out) > 1000)
        assert len(loud), f"nothing came out for a wave from {azimuth} degrees"
        levels.append(float(np.sqrt(np.mean(out[loud[0]:loud[0] + MIC_RATE] ** 2))))
    front, side = levels
    assert 20 * math.log10(front / 4000.0) == pytest.approx(0.0, abs=1.0)
    assert 20 * math.log10(side / front) < -6.0


@pytest.mark.parametrize("dead", [None, 2])
def test_doctor_records_every_microphone_and_names_a_dead_one(
        pulse: pulse_rig.PulseServer, tmp_path: Path, dead: int | None) -> None:
    t = np.arange(round(30.0 * MIC_RATE)) / MIC_RATE
    played = np.stack([3000.0 * np.sin(2 * math.pi * f * t) for f in TONES_HZ], axis=1)
    if dead is not None:
        played[:, dead] = 0.0
    wav = tmp_path / "array.wav"
    write_channels(wav, played)
    # No models: their checks fail at once (exit 1), the audio checks are what is looked at.
    gone = tmp_path / "no-such-model"
    config = write_config(tmp_path, '[audio]\ninput_device = "array"\n'
                          'array = "respeaker-4mic-hat"\n'
                          f"[vad]\nmodel = {json.dumps(str(gone / 'vad.onnx'))}\n"
                          f"[llm]\nmodel = {json.dumps(str(gone / 'llm.gguf'))}\n")
    player = pulse.play(wav, "arraysink")
    try:
        assert pulse.wait_for_stream("sink-inputs", "arraysink", exclude_apps=()), \
            "paplay never connected to arraysink"
        done = edge_agent("doctor", "--quick", "--json", tmp_path / "doctor.json",
                          config=config, env=_client_env(pulse), cwd=tmp_path)
    finally:
        pulse_rig.stop(player)
    report = f"exit {done.returncode}\n{done.stdout}\n{done.stderr[-3000:]}"
    assert "Traceback" not in done.stderr, report
    checks = json.loads((tmp_path / "doctor.json").read_text(encoding="utf-8"))["checks"]
    record = next(c for c in checks if c["name"] == "audio input")
    assert "array respeaker-4mic-hat, 4 microphones at" in record["detail"], record
    if dead is None:
        assert record["status"] == "ok", record
    else:
        assert record["status"] == "warn", record
        assert f"microphone {dead + 1} (input channel {dead})" in record["detail"], record
        assert "mic_channels" in record["fix"]

