"""`edge-agent bench heard`: the played position and the heard words, against the audio that
was actually played.

Each trial plays one Piper unit through PyAudio (the agent's own `PyAudioSpeaker`) into a
PulseAudio null sink, barges in at a random moment, finalizes the unit through the ledger, and
compares with a recording of the sink's monitor:

- position error = the speaker's played estimate at the barge-in − the unit samples that the
  recording holds (negative: the estimate says less was played than really was);
- heard words exact = the ledger's `heard` equals the heard prefix computed from the recorded
  length (the words whose audio lies entirely inside the recording, under the `completed`
  policy);
- stop latency = from the barge-in request until the last sample left: the `interrupt()` call
  plus whatever the recording holds beyond the estimate.

The sink runs at the voice's rate, so the monitor holds the played samples bit for bit. Digital
silence in the unit (exact zeros) is lifted to 1 LSB (inaudible) so the recording shows exactly
where playback stopped, even when it stopped in a pause.
"""

from __future__ import annotations

import contextlib
import random
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from edge_agent.audio.device import Speaker
from edge_agent.audio.pcm import first_loud_sample
from edge_agent.bench import pulse_rig
from edge_agent.bench.needs import SoundServerUnavailable
from edge_agent.bench.stats import summarize
from edge_agent.clock import MonotonicClock
from edge_agent.engines.base import SpeechAudio, TextToSpeech
from edge_agent.errors import AudioDeviceError
from edge_agent.heard.ledger import UnitLedger
from edge_agent.heard.truncation import HeardPolicy, heard_prefix

if TYPE_CHECKING:
    from edge_agent.audio.pyaudio_io import PyAudioSpeaker

REPLIES = (
    "We have three tables free tonight. One at 7 PM, one at 8 PM, and one at 9 PM. "
    "Which one would you like?",
    "Your total is 500 rupees. Shall I confirm the order?",
    "Dr. Rao sees patients from 7:30 to 11 a.m., e.g. on Mondays and Thursdays.",
    "The 2024 model costs $25 more, but it ships today and comes with a two-year warranty.",
    "Sure! Your booking, number 4417, is for Friday evening; we'll text you a reminder.",
)
"""Field-style replies: numbers, times, currency, abbreviations, several sentences."""

_PROBE_SAMPLES = 256
"""Length of the stretch of the unit searched for in the recording to find where it starts."""
_LOUD = 1000
"""A sample this loud is speech, not the near-silence Piper starts with."""


@dataclass(frozen=True)
class CutTrial:
    """One barge-in, measured."""

    text: str
    """The unit's generated text."""
    cut_after_ms: float
    """When the barge-in was requested, after the unit was written to the speaker."""
    sample_rate: int
    """Rate of the unit's audio and of the recording."""
    unit_samples: int
    """Length of the whole unit."""
    estimated_samples: int
    """The speaker's played position for the unit at the barge-in (what the ledger used)."""
    recorded_samples: int
    """Unit samples that the monitor recording holds: what really came out."""
    interrupt_ms: float
    """Duration of the `interrupt()` call: request -> stream aborted."""
    heard: str
    """The ledger's heard prefix."""
    heard_by_recording: str
    """The heard prefix implied by the recording."""
    boundary_words: int
    """Words whose last sample lies between the estimate and the recorded position: the only
    words an estimate this close could count differently from the recording."""

    @property
    def error_ms(self) -> float:
        return (self.estimated_samples - self.recorded_samples) * 1000 / self.sample_rate

    @property
    def stop_ms(self) -> float:
        tail = max(0, self.recorded_samples - self.estimated_samples)
        return self.interrupt_ms + tail * 1000 / self.sample_rate

    @property
    def words_exact(self) -> bool:
        return self.heard == self.heard_by_recording


def audible_everywhere(pcm: bytes) -> bytes:
    """Lift exact digital zeros to 1 LSB so that no played sample looks like idle silence."""
    samples = np.frombuffer(pcm, dtype=np.int16)
    return bytes(np.where(samples == 0, np.int16(1), samples).astype(np.int16).tobytes())


def recorded_length(recording: bytes, unit_pcm: bytes) -> int:
    """How many of the unit's samples the recording holds, from its first one.

    The recording must hold the unit at least past its speech onset. To find where a cut unit
    stopped, the unit must have no zero samples (see `audible_everywhere`): an idle sink records
    zeros. Raises ValueError when the unit cannot be found bit for bit in the recording.
    """
    heard = np.frombuffer(recording, dtype=np.int16)
    unit = np.frombuffer(unit_pcm, dtype=np.int16)
    start = unit_start(recording, unit_pcm)
    span = heard[start:start + len(unit)]
    differs = np.flatnonzero(span != unit[: len(span)])
    return int(differs[0]) if len(differs) else len(span)


def unit_start(recording: bytes, unit_pcm: bytes) -> int:
    """The recording's sample where the unit's first sample is, found by its audio from the
    speech onset on, bit for bit (the first place, where it was played more than once).
    ValueError when it is not there, or the recording started after the unit did."""
    heard = np.frombuffer(recording, dtype=np.int16)
    unit = np.frombuffer(unit_pcm, dtype=np.int16)
    probe_at = speech_onset(unit_pcm)
    probe = unit[probe_at:probe_at + _PROBE_SAMPLES]
    # Narrowed sample by sample rather than compared window by window: a recording of minutes
    # would need a window matrix of hundreds of megabytes.
    matches = np.flatnonzero(heard[: max(0, len(heard) - len(probe) + 1)] == probe[0])
    for offset in range(1, len(probe)):
        matches = matches[heard[matches + offset] == probe[offset]]
    if not len(matches):
        raise ValueError(
            "the unit's samples are not in the recording bit for bit: the sink must run at the "
            "voice's sample rate, mono, s16le, at 100 % volume")
    start = int(matches[0]) - probe_at
    if start < 0:
        raise ValueError("the recording started after the unit did")
    return start


def speech_onset(pcm: bytes) -> int:
    """The first loud sample: the recording is searched from there (ValueError if none)."""
    onset = first_loud_sample(pcm, _LOUD)
    if onset is None:
        raise ValueError("the unit has no audible speech to find in the recording")
    return onset


def run_trials(tts: TextToSpeech, runs: int, seed: int, policy: HeardPolicy,
               texts: Sequence[str] = REPLIES,
               progress: Callable[[CutTrial], None] | None = None, *,
               period: int) -> list[CutTrial]:
    """Start a private PulseAudio server and measure `runs` random barge-ins through it, the
    speaker handed `period` frames per callback (`[audio] output_period`)."""
    rng = random.Random(seed)
    units = {text: tts.synthesize(text) for text in texts[:runs]}  # the ones the runs play
    with contextlib.ExitStack() as stack:
        server, speaker = stack.enter_context(speaker_on_private_pulse("heard", tts.sample_rate,
                                                                        period))
        scratch = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="ea-bench-")))
        texts = list(units)
        trials = []
        for number in range(runs):
            text = texts[number % len(texts)]
            trial = _one_cut(server, scratch / f"cut{number}.raw", speaker, text,
                             units[text], rng, policy)
            trials.append(trial)
            if progress is not None:
                progress(trial)
        return trials


@contextlib.contextmanager
def speaker_on_private_pulse(part: str, rate: int, period: int
                             ) -> Iterator[tuple[pulse_rig.PulseServer, PyAudioSpeaker]]:
    """A private PulseAudio server whose speaker sink runs at `rate` (its monitor records the
    played samples bit for bit), this process its client, and the agent's own speaker open on
    it, running (silence) for a moment already. SoundServerUnavailable naming `part` when the
    server cannot start."""
    from edge_agent.audio.portaudio_start import open_pyaudio
    from edge_agent.audio.pyaudio_io import PyAudioSpeaker, find_device

    with contextlib.ExitStack() as stack:
        try:
            server = stack.enter_context(pulse_rig.pulse_server(speaker_rate=rate))
        except pulse_rig.PulseUnavailable as exc:
            raise SoundServerUnavailable(part, str(exc)) from None
        stack.enter_context(pulse_rig.client_environment(server.env))
        pa = open_pyaudio()
        stack.callback(pa.terminate)
        speaker = PyAudioSpeaker(pa, find_device(pa, "", output=True), rate, MonotonicClock(),
                                 period=period)
        stack.callback(speaker.close)
        time.sleep(0.5)  # the stream runs (silence) before anything is measured
        yield server, speaker


def _one_cut(server: pulse_rig.PulseServer, recording: Path, speaker: Speaker, text: str,
             audio: SpeechAudio, rng: random.Random, policy: HeardPolicy) -> CutTrial:
    pcm = audible_everywhere(audio.pcm)
    duration = audio.samples / audio.sample_rate
    earliest = (speech_onset(pcm) + _PROBE_SAMPLES) / audio.sample_rate + 0.05
    cut_after = rng.uniform(earliest, duration - 0.05)
    ledger = UnitLedger(policy)
    unit = ledger.open(audio.sample_rate)
    unit.add_text(text)
    unit.add_audio(audio.samples, audio.words, 0, len(text))
    recorder = server.record(recording, rate=audio.sample_rate)
    try:
        _wait_recording(recording)
        unit.device_start = speaker.write(pcm)
        time.sleep(cut_after)
        asked = time.perf_counter()
        played = speaker.interrupt()
        interrupt_ms = (time.perf_counter() - asked) * 1000
        [finalize] = ledger.finalize_all(played)
        time.sleep(0.25)  # let the monitor deliver the end of the recording
    finally:
        pulse_rig.stop(recorder)
    recorded = recorded_length(recording.read_bytes(), pcm)
    recording.unlink()
    truth = heard_prefix(text, unit.words, recorded, audio.samples, policy,
                         audio_text_end=len(text))
    low, high = sorted((finalize.played_samples, recorded))
    boundary = sum(1 for w in unit.words if low < w.end_sample <= high)
    return CutTrial(text=text, cut_after_ms=round(cut_after * 1000, 1),
                    sample_rate=audio.sample_rate, unit_samples=audio.samples,
                    estimated_samples=finalize.played_samples, recorded_samples=recorded,
                    interrupt_ms=round(interrupt_ms, 3), heard=finalize.heard,
                    heard_by_recording=truth, boundary_words=boundary)


def _wait_recording(path: Path, timeout: float = 5.0) -> None:
    """parec writes once its stream runs; playing before that would miss the unit's start."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.stat().st_size > 0:
            return
        time.sleep(0.01)
    raise AudioDeviceError(f"parec recorded nothing into {path} within {timeout:.0f} s")


def summary(trials: Sequence[CutTrial]) -> dict[str, Any]:
    errors = [abs(t.error_ms) for t in trials]
    stops = [t.stop_ms for t in trials]
    exact = sum(t.words_exact for t in trials)
    return {
        "runs": len(trials),
        "position_error_ms": {**_figures(errors),
                              "signed_min": round(min(t.error_ms for t in trials), 2),
                              "signed_max": round(max(t.error_ms for t in trials), 2)},
        "heard_words_exact": {"count": exact, "percent": round(100 * exact / len(trials), 1)},
        "stop_latency_ms": _figures(stops),
    }


def report(trials: Sequence[CutTrial], seed: int, policy: HeardPolicy) -> dict[str, Any]:
    return {
        "benchmark": "heard",
        "path": "PyAudio (callback mode) -> ALSA pulse plugin -> PulseAudio null sink -> monitor",
        "policy": policy.value,
        "seed": seed,
        "summary": summary(trials),
        "trials": [{**asdict(t), "error_ms": round(t.error_ms, 2), "stop_ms": round(t.stop_ms, 2),
                    "words_exact": t.words_exact} for t in trials],
    }


def table(result: dict[str, Any]) -> str:
    s = result["summary"]
    err, stop, exact = s["position_error_ms"], s["stop_latency_ms"], s["heard_words_exact"]
    return "\n".join([
        f"heard truth: {s['runs']} random barge-ins, {result['path']}, policy {result['policy']}",
        f"{'':34}{'p50':>8}{'p95':>8}{'max':>8}",
        f"{'position error |estimate-recorded|':34}{err['p50']:>8.2f}{err['p95']:>8.2f}"
        f"{err['max']:>8.2f}  ms (signed {err['signed_min']:+.2f} .. {err['signed_max']:+.2f})",
        f"{'stop latency (request -> last out)':34}{stop['p50']:>8.2f}{stop['p95']:>8.2f}"
        f"{stop['max']:>8.2f}  ms",
        f"heard words exact: {exact['count']}/{s['runs']} ({exact['percent']:.1f} %)",
    ])


def _figures(values: Sequence[float]) -> dict[str, Any]:
    """p50, p95, max (the trials list every value already)."""
    figures = summarize(values, digits=2)
    return {key: figures[key] for key in ("p50", "p95", "max")}
