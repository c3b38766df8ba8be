"""`bench rooms`' offline figures of the microphone's processing (`WebRtcProcessing`), on the
simulator's room with the agent's own Piper speech as the far end:

- **ERLE** (echo return loss enhancement): how much quieter the echo is after the canceller
  than before it, 10 log10(echo energy / residual energy), in one-second windows from the
  echo's onset; the first second (the canceller still learning the room) and the steady state
  (from 2 s on) over their windows' total energy;
- **CPU**: process CPU time spent in `process` over the seconds of audio it cleaned (% of one
  core; the module runs in the calling thread and livekit's own, so the process's CPU time);
- **added latency**: the lag of the cleaned microphone behind the raw one, found by
  cross-correlation of speech passed through with the canceller on and a silent far end
  (nothing to cancel: what comes out is what went in, later by the framing and the filters).

The microphone's frames are 512 samples at 16 kHz, as the agent's, and the residual is read
`lag` samples later so that each window compares the same sound.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from edge_agent.audio.device import MIC_FRAME, MIC_RATE
from edge_agent.audio.echo_cancel import APM_FRAME_SECONDS, WebRtcProcessing
from edge_agent.audio.pcm import first_loud_sample, lag_samples, resample
from edge_agent.audio.room import Room, RoomEcho
from edge_agent.engines.base import TextToSpeech

"""The agent's microphone frame (32 ms at 16 kHz)."""
LONGEST_LAG = MIC_RATE // 10
"""The longest lag the processing's added latency is looked for at (100 ms)."""
STEADY_AFTER_S = 2
"""Seconds after the echo's onset from which the canceller counts as converged."""
QUANTIZATION_FLOOR = 1 / 12
"""Energy per sample of int16 rounding (1 LSB uniform): a residual cannot be measured below
it, so an output of exact zeros reads as this floor, not as infinite ERLE."""
FAR_END_TEXTS = (
    "We have three tables free tonight. One at seven, one at eight, and one at nine. "
    "Which one would you like?",
    "The kitchen takes the last orders at half past ten, and on weekends we serve brunch "
    "from ten until three in the afternoon.",
    "Your total is forty euros. Shall I confirm the order and send you a text message when "
    "it is ready?",
    "Sure, your booking is for Friday evening, and we will keep the table for fifteen minutes.",
)
"""What the agent says while the echo is measured: replies of several sentences, pauses
between them, as a kiosk talks."""


@dataclass(frozen=True)
class Erle:
    """The echo removed at one echo gain."""

    echo_gain: float
    per_second_db: tuple[float, ...]
    """Each second from the echo's onset (a silent second, between replies, counts too)."""
    first_second_db: float
    steady_db: float
    """From `STEADY_AFTER_S` to the end, total energy over total energy."""
    cpu_s: float
    audio_s: float


def far_end_speech(tts: TextToSpeech, texts: Sequence[str]) -> np.ndarray:
    """The agent's voice saying `texts` one after the other, at the microphone's rate."""
    pcm = b"".join(resample(tts.synthesize(text).pcm, tts.sample_rate, MIC_RATE)
                   for text in texts)
    return np.frombuffer(pcm, dtype=np.int16).astype(np.float64)


def room_echo(far: np.ndarray, room: Room) -> np.ndarray:
    """What the microphone hears of `far` through `room` (the simulator's own echo path)."""
    return RoomEcho(room, MIC_RATE).process(far)


def process(near: np.ndarray, far: np.ndarray, processing: WebRtcProcessing
            ) -> tuple[np.ndarray, float]:
    """`near` cleaned frame by frame as the agent does, and the process CPU seconds it took."""
    near16 = np.clip(np.round(near), -32768, 32767).astype(np.int16)
    far16 = np.clip(np.round(far), -32768, 32767).astype(np.int16)
    out: list[bytes] = []
    started = time.process_time()
    for at in range(0, len(near16) - MIC_FRAME + 1, MIC_FRAME):
        out.append(processing.process(near16[at:at + MIC_FRAME].tobytes(),
                                      far16[at:at + MIC_FRAME].tobytes()))
    cpu = time.process_time() - started
    return np.frombuffer(b"".join(out), dtype=np.int16).astype(np.float64), cpu


def measure_lag(speech: np.ndarray) -> int:
    """The processing's added latency in samples: speech through the canceller with a silent
    far end, against itself."""
    out, _ = process(speech, np.zeros_like(speech), WebRtcProcessing(MIC_RATE))
    return lag_samples(speech, out, longest=LONGEST_LAG)


def erle(far: np.ndarray, room: Room, lag: int) -> Erle:
    """The echo of `far` through `room`, cancelled; ERLE per second from the echo's onset."""
    echo = room_echo(far, room)
    residual, cpu = process(echo, far, WebRtcProcessing(MIC_RATE))
    residual = residual[lag:]
    onset = first_loud_sample(np.clip(np.round(echo), -32768, 32767).astype(np.int16)
                              .tobytes(), 300) or 0
    seconds = (len(residual) - onset) // MIC_RATE

    def db(start: int, end: int) -> float:
        window = slice(onset + start * MIC_RATE, onset + end * MIC_RATE)
        before = float(np.sum(echo[window] ** 2))
        after = max(float(np.sum(residual[window] ** 2)),
                    QUANTIZATION_FLOOR * (end - start) * MIC_RATE)
        return round(10 * math.log10(max(before, 1e-9) / after), 1)

    if seconds <= STEADY_AFTER_S:
        raise ValueError(f"{seconds} s of echo is too short for a steady state (more than "
                         f"{STEADY_AFTER_S} s needed): give the far end more speech")
    return Erle(echo_gain=room.echo_gain,
                per_second_db=tuple(db(s, s + 1) for s in range(seconds)),
                first_second_db=db(0, 1), steady_db=db(STEADY_AFTER_S, seconds),
                cpu_s=cpu, audio_s=len(echo) / MIC_RATE)


def suppression_cpu(far: np.ndarray, room: Room) -> tuple[float, float]:
    """(CPU s, audio s) of echo cancellation and noise suppression together on the echo."""
    echo = room_echo(far, room)
    _, cpu = process(echo, far, WebRtcProcessing(MIC_RATE, noise_suppression=True))
    return cpu, len(echo) / MIC_RATE


def measure_canceller(tts: TextToSpeech, room: Room, gains: Sequence[float],
                      texts: Sequence[str]) -> dict[str, Any]:
    """The canceller's part of `bench rooms`' JSON: ERLE at each of `gains` in `room`, CPU,
    and the added latency."""
    far = far_end_speech(tts, texts)
    lag = measure_lag(far)
    measured = [erle(far, dataclasses.replace(room, echo_gain=gain), lag) for gain in gains]
    both_cpu, both_audio = suppression_cpu(far, dataclasses.replace(room, echo_gain=gains[-1]))
    cancel_cpu = sum(e.cpu_s for e in measured)
    cancel_audio = sum(e.audio_s for e in measured)
    return {
        "engine": "webrtc-aec3 (livekit)",
        "far_end": "the agent's voice",
        "far_end_seconds": round(len(far) / MIC_RATE, 2),
        "erle": [{"echo_gain": e.echo_gain, "first_second_db": e.first_second_db,
                  "steady_db": e.steady_db, "per_second_db": list(e.per_second_db)}
                 for e in measured],
        "cpu": [_cpu("echo cancellation", cancel_cpu, cancel_audio),
                _cpu("echo cancellation + noise suppression", both_cpu, both_audio)],
        "lag": {"samples": lag, "ms": round(1000 * lag / MIC_RATE, 1),
                "framing_ms": round(1000 * APM_FRAME_SECONDS, 1),
                "method": "cross-correlation of speech through the canceller, far end silent"},
    }


def _cpu(processing: str, cpu_s: float, audio_s: float) -> dict[str, Any]:
    return {"processing": processing, "cpu_s": round(cpu_s, 3), "audio_s": round(audio_s, 2),
            "percent_of_core": round(100 * cpu_s / audio_s, 2)}
