"""`bench rooms`' microphone arrays: the caller heard with one microphone and with 2-, 4- and
6-microphone arrays in a café where everyone has a place (`CAFE`: an 8 x 6 x 3 m room with a
reverberation time of 400 ms, rendered by image sources), each setup as configured for the
kiosk (its preset or positions, the default beamformer, looking at where the caller stands).

- listening: the caller's WER with nobody else talking, and with two and four people chatting
  2.8-4.4 m away at other angles, 10 and 5 dB below the caller at the first microphone;
- interruptions: the caller cutting into the agent's replies with the loudspeaker at echo 1.0
  (taken, onset -> playback stopped), through the beamformer and the echo canceller after it;
- the beamformer's CPU per second of audio and the latency it adds, measured on its output.

Every setup runs with `[audio] talker_gate = "level"`: what "auto" (the default) gives an
array, where the gate also hears from the beam where each frame came from; one microphone
needs it with people talking nearby (without it the first turn never ends), and it is what a
venue would set there.
"""

from __future__ import annotations

import dataclasses
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from edge_agent.audio.adaptive_beamformer import build_beamformer
from edge_agent.audio.array import MicArray
from edge_agent.audio.beamformer import ArrayBeamformer
from edge_agent.audio.device import MIC_RATE
from edge_agent.audio.pcm import to_pcm
from edge_agent.audio.room import Room
from edge_agent.audio.room_acoustics import RoomLayout
from edge_agent.bench.clipset import BABBLE_LINES
from edge_agent.bench.latency import INTERRUPTIONS, QUESTIONS, REPLY
from edge_agent.bench.rooms_calls import (
    CallRunner,
    interruption_call,
    line_json,
    line_outcomes,
    questions_call,
    room_config,
    wer_percent,
)
from edge_agent.bench.stats import summarize
from edge_agent.config import Config
from edge_agent.demo.talkers import Talker
from edge_agent.memory.record import record_events

CAFE = Room(echo_gain=0.3, delay_ms=40.0, reverb_ms=400.0, clip=0.5, seed=1,
            layout=RoomLayout(size_m=(8.0, 6.0, 3.0)))
"""The café: the caller 0.5 m in front of the kiosk, the loudspeaker in its box, the people
nearby at the room's spots for talkers (`room_acoustics.TALKER_SPOTS_M`)."""
INTERRUPTION_ECHO = 1.0
SHORT_REPLY = "Sure, one moment."
GATE = "level"
CPU_AUDIO_S = 60.0
"""Seconds of array audio the beamformer's CPU is measured on."""


@dataclass(frozen=True)
class ArraySetup:
    """A way the kiosk listens: one microphone, or an array."""

    name: str
    array: str = ""
    """A preset of `edge_agent.audio.array`."""
    positions_mm: tuple[tuple[float, float], ...] = ()
    """Another board's microphones."""

    def config(self, config: Config) -> Config:
        """`config` listening this way, looking where the café's caller stands."""
        layout = CAFE.layout
        assert layout is not None
        side, ahead, up = layout.caller_at_m
        audio = dataclasses.replace(
            config.audio, array=self.array,
            mic_positions_mm=[list(p) for p in self.positions_mm], mic_channels=[],
            input_channels=0, look_azimuth_deg=math.degrees(math.atan2(side, ahead)),
            look_elevation_deg=round(math.degrees(math.atan2(up, math.hypot(side, ahead))), 1))
        return dataclasses.replace(config, audio=audio)

    @property
    def is_array(self) -> bool:
        return bool(self.array or self.positions_mm)


SETUPS = (
    ArraySetup("1 mic"),
    ArraySetup("2-mic pair, 60 mm", positions_mm=((-30.0, 0.0), (30.0, 0.0))),
    ArraySetup("4-mic respeaker-4mic-hat", array="respeaker-4mic-hat"),
    ArraySetup("6-mic respeaker-6mic", array="respeaker-6mic"),
)
QUICK_SETUPS = (SETUPS[0], SETUPS[2])
SCENARIOS = ((0, 0.0), (2, -10.0), (2, -5.0), (4, -10.0), (4, -5.0))
"""(people talking nearby, their level against the caller's, dB)."""
QUICK_SCENARIOS = ((2, -10.0),)
TALKER_STARTS_S = (0.0, 0.9, 1.8, 2.7)
"""When the people nearby begin, in the runs of each scenario with talkers: the caller's first
question meets them at another point of their sentences in each. One start is not a
measurement: with two talkers 10 dB down the 4-mic array's superdirective beam read 2.1, 39.6,
79.2 and 31.2 % at these four (the first turn ran on with their sentences, or it did not)."""
QUICK_TALKER_STARTS_S = (0.0,)


def scenario_name(talkers: int, level_db: float) -> str:
    return "quiet room" if not talkers else f"{talkers} talkers {-level_db:g} dB down"


def cafe_talkers(count: int, level_db: float, start_s: float = 0.0) -> tuple[Talker, ...]:
    """`count` people chatting (espeak-ng voices, in turn), the first from `start_s`, the
    others a little apart."""
    lines = (BABBLE_LINES[:2], BABBLE_LINES[2:], BABBLE_LINES[1:],
             BABBLE_LINES[:1] + BABBLE_LINES[2:])
    return tuple(Talker(lines[i % len(lines)], level_db=level_db, start=start_s + 0.7 * i)
                 for i in range(count))


def measure_arrays(config: Config, quick: bool, lines: int, interruptions: int, seed: int,
                   say: Callable[[str], None], calls: CallRunner) -> dict[str, Any]:
    """Every setup in every scenario, and `interruptions` over the agent's replies in each
    (`quick`: one microphone and the 4-mic array, with two talkers 10 dB down; interruptions
    through the array only); the JSON of the rooms result's "arrays"."""
    setups = QUICK_SETUPS if quick else SETUPS
    scenarios = QUICK_SCENARIOS if quick else SCENARIOS
    questions = [QUESTIONS[i % len(QUESTIONS)] for i in range(lines)]
    starts = QUICK_TALKER_STARTS_S if quick else TALKER_STARTS_S
    listening = []
    for setup in setups:
        for talkers, level in scenarios:
            name = scenario_name(talkers, level)
            runs = []
            for start in starts if talkers else (0.0,):
                say(f"{len(questions)} questions in the café, {name}"
                    f"{f', from {start:g} s' if talkers else ''}, {setup.name}")
                call = questions_call(CAFE, questions, SHORT_REPLY,
                                      cafe_talkers(talkers, level, start))
                record = calls(room_config(setup.config(config), "off", GATE), call)
                outcomes = line_outcomes(call, record_events(record))
                say(f"  WER {wer_percent(outcomes)} %")
                runs.append((start, outcomes, len(call.lines) - len(outcomes)))
            every = [o for _, outcomes, _ in runs for o in outcomes]
            listening.append({"setup": setup.name, "scenario": name, "talkers": talkers,
                              "talkers_db": level, "wer_percent": wer_percent(every),
                              "talker_starts_s": [start for start, _, _ in runs],
                              "wer_by_start_percent": [wer_percent(o) for _, o, _ in runs],
                              "lines": [line_json(o) for o in every],
                              "unsaid": sum(unsaid for _, _, unsaid in runs)})
    rng = random.Random(seed)
    # One microphone's interruptions are the rest of `bench rooms`' (a quick run: the 4-mic's).
    over = [_interruptions(setup, config, interruptions, rng, say, calls)
            for setup in setups if not quick or setup.is_array]
    return {"room": {"size_m": list(CAFE.layout.size_m) if CAFE.layout else [],
                     "reverb_ms": CAFE.reverb_ms, "talker_gate": GATE},
            "listening": listening, "interruptions": over,
            "beamformers": [beamformer_cost(setup, config) for setup in setups
                            if setup.is_array]}


def _interruptions(setup: ArraySetup, config: Config, count: int, rng: random.Random,
                   say: Callable[[str], None], calls: CallRunner) -> dict[str, Any]:
    texts = [INTERRUPTIONS[i % len(INTERRUPTIONS)] for i in range(count)]
    cues = [round(rng.uniform(1.5, 3.0), 2) for _ in texts]
    say(f"{count} interruptions at echo {INTERRUPTION_ECHO} in the café, {setup.name}")
    room = dataclasses.replace(CAFE, echo_gain=INTERRUPTION_ECHO)
    call = interruption_call(room, QUESTIONS, texts, cues, REPLY, SHORT_REPLY)
    record = calls(room_config(setup.config(config), "off", GATE), call)
    outcomes = [o for o in line_outcomes(call, record_events(record))
                if o.kind == "interruption"]
    taken = [o for o in outcomes if o.taken]
    say(f"  {len(taken)} of {len(outcomes)} taken")
    return {"setup": setup.name, "echo_gain": INTERRUPTION_ECHO, "count": len(outcomes),
            "taken": len(taken), "stop_ms": summarize([o.stop_ms for o in taken
                                                       if o.stop_ms is not None]),
            "double_talk_wer_percent": wer_percent(outcomes),
            "lines": [line_json(o) for o in outcomes]}


def beamformer_cost(setup: ArraySetup, config: Config) -> dict[str, Any]:
    """The setup's beamformer on `CPU_AUDIO_S` of array noise in the loop's frames: CPU per
    second of audio, and the lag of its output behind a wave from the look direction."""
    audio = setup.config(config).audio
    array = audio.mic_array()
    assert array is not None

    def beamformer() -> ArrayBeamformer:
        return build_beamformer(array, MIC_RATE, audio.look_azimuth_deg,
                                audio.look_elevation_deg, audio.beamformer)

    rng = np.random.default_rng(7)
    frame = 512
    frames = [rng.normal(0, 1000, (frame, array.input_channels)).astype(np.int16).tobytes()
              for _ in range(16)]
    steering = beamformer()
    count = round(CPU_AUDIO_S * MIC_RATE / frame)
    started = time.process_time()
    for index in range(count):
        steering.process(frames[index % len(frames)])
    cpu_s = time.process_time() - started
    return {"setup": setup.name, "beamformer": audio.beamformer, "microphones": array.size,
            "percent_of_core": round(100 * cpu_s / CPU_AUDIO_S, 2),
            "cpu_s": round(cpu_s, 3), "audio_s": CPU_AUDIO_S,
            "added_latency_ms": round(1000 * _lag(array, beamformer(), (
                audio.look_azimuth_deg, audio.look_elevation_deg)) / MIC_RATE, 2)}


def _lag(array: MicArray, steering: ArrayBeamformer, look: tuple[float, float]) -> int:
    """Samples the beamformer's output trails the board's centre for noise arriving from the
    look direction (the peak of their cross-correlation)."""
    rng = np.random.default_rng(3)
    centre = rng.normal(0.0, 3000.0, MIC_RATE)
    size = 2 * len(centre)
    mics = np.zeros((len(centre), array.input_channels))
    mics[:, list(array.channels)] = array.plane_wave(centre, *look, MIC_RATE)
    out = np.frombuffer(steering.process(to_pcm(mics)), dtype=np.int16).astype(np.float64)
    correlation = np.fft.irfft(np.fft.rfft(out, size) * np.conj(np.fft.rfft(centre, size)),
                               size)
    return int(np.argmax(correlation[:MIC_RATE // 10]))
