"""`edge-agent bench wake`: the wake word models, measured on the sounds of `bench.wake_audio`.

For each built-in model (okay-nabu, hey-jarvis, alexa, hey-mycroft):

- **detection rate**: the word alone and followed by a question, said by every voice at two
  speeds, under each condition (quiet, pink noise -35 dBFS, two talkers 10 dB down, the
  agent's own voice at echo 1.0 through the echo canceller); a trial is detected when the model
  fires at least once;
- **wake -> listening**: from the last audible sound of the word said alone (quiet) to the end
  of the 32 ms frame in which the model fired: from that frame on the agent listens (the session
  is open and the recognizer hears what follows);
- **false wakes per hour** on room speech without any wake word (`wake_audio.room_speech`),
  with the sentences that woke it; and apart, the **near misses** it wakes on (sentences that
  sound like a wake word, `wake_audio.NEAR_MISSES`, once by every voice);
- **CPU**: of each model, of the VAD (both run on every frame while waiting), and, for the
  comparison, what waiting on a wake phrase costs (`wake_word = ""`): the VAD and the
  recognizer on every stretch of speech, on the first minutes of the same room speech.

Every figure is % of one core: process CPU time over the seconds of audio heard.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TypedDict

import numpy as np

from edge_agent.audio.device import MIC_FRAME, MIC_RATE
from edge_agent.audio.pcm import to_pcm
from edge_agent.bench.stats import summarize
from edge_agent.bench.wake_audio import (
    CONDITIONS,
    NEAR_MISSES,
    Conditions,
    room_speech,
    said,
    sayings,
    speakers,
    speech_pool,
)
from edge_agent.engines.base import SpeechRecognizer, VoiceActivityDetector
from edge_agent.engines.tts import PiperSpeech
from edge_agent.engines.wake_word import MicroWakeWordDetector

Pool = Sequence[tuple[str, np.ndarray]]
"""Everyday lines by every voice (`wake_audio.speech_pool`)."""
WAKE_MODELS = ("okay-nabu", "hey-jarvis", "alexa", "hey-mycroft")
RECOGNIZER_MINUTES = 5.0
"""Room speech the always-on recognizer is timed on (it costs ~100x a wake model)."""


class WordFigures(TypedDict):
    """One wake word model's figures."""

    model: str
    """Its catalog name."""
    phrase: str
    """What it hears ("Okay Nabu")."""
    detected: dict[str, list[int]]
    """Per condition: [trials detected, trials]."""
    detection_rate: float
    """Trials detected over all trials, every condition."""
    missed: list[str]
    """"voice / condition / saying" of each trial not detected."""
    latency_ms: dict[str, object]
    """Wake -> listening (ms): n, p50, p95, max, values (`bench.stats.summarize`)."""
    false_wakes: int
    """Wakes on the room speech without any wake word."""
    false_wakes_per_hour: float
    false_wake_texts: list[str]
    """What was being said (the scene's first talker) at each false wake."""
    near_misses: list[int]
    """[sayings of a near miss it woke on, near-miss sayings]."""
    near_miss_texts: list[str]
    """"voice / text" of each near miss it woke on."""
    cpu_percent: float
    """The model alone, % of one core."""


class WakeResult(TypedDict):
    """`bench wake`'s JSON."""

    voices: list[str]
    conditions: list[str]
    trials_per_model: int
    room_speech_minutes: float
    models: list[WordFigures]
    vad_cpu_percent: float
    waiting_cpu_percent: float
    """The VAD and the okay-nabu model: what waiting for the wake word costs."""
    recognizer: str
    recognizer_minutes: float
    always_on_cpu_percent: float
    """The VAD and the recognizer on every stretch of speech: waiting for a wake phrase."""


def frames_heard(detector: MicroWakeWordDetector, samples: np.ndarray) -> list[int]:
    """The frames (32 ms) in which `detector` fired, from a fresh start."""
    detector.reset()
    pcm = to_pcm(samples)
    return [at for at in range(len(pcm) // (2 * MIC_FRAME))
            if detector.heard(pcm[2 * MIC_FRAME * at:2 * MIC_FRAME * (at + 1)])]


def run_wake(piper: PiperSpeech, detectors: dict[str, MicroWakeWordDetector],
             vad: VoiceActivityDetector, recognizer: tuple[str, SpeechRecognizer], *,
             quick: bool, minutes: float, seed: int, say: Callable[[str], None]) -> WakeResult:
    """Every figure of the module docstring; `say` gets progress lines."""
    voices = speakers(quick)
    conditions = Conditions(piper, seed)
    figures = {name: _empty(name, detector.phrase) for name, detector in detectors.items()}
    for name, detector in detectors.items():
        say(f"{name}: {len(voices)} voices x 2 sayings x {len(CONDITIONS)} conditions")
        word = figures[name]
        latencies: list[float] = []
        trial = 0
        for voice in voices:
            for number, text in enumerate(sayings(detector.phrase)):
                saying = said(piper, voice, text)
                for condition in CONDITIONS:
                    trial += 1
                    fired = frames_heard(detector, conditions.heard(saying, condition, trial))
                    word["detected"][condition][0] += bool(fired)
                    word["detected"][condition][1] += 1
                    if not fired:
                        word["missed"].append(f"{voice.name} / {condition} / {text}")
                    elif condition == "quiet" and number == 0:
                        latencies.append(1000 * ((fired[0] + 1) * MIC_FRAME - saying.speech_end)
                                         / MIC_RATE)
        detected = sum(d[0] for d in word["detected"].values())
        word["detection_rate"] = round(detected / max(1, trial), 4)
        word["latency_ms"] = summarize(latencies, 0)
    say(f"near misses: {len(NEAR_MISSES)} sentences x {len(voices)} voices")
    for voice in voices:
        for text in NEAR_MISSES:
            saying = said(piper, voice, text)
            for name, detector in detectors.items():
                woke = bool(frames_heard(detector, saying.samples))
                figures[name]["near_misses"][0] += woke
                figures[name]["near_misses"][1] += 1
                if woke:
                    figures[name]["near_miss_texts"].append(f"{voice.name} / {text}")
    say(f"room speech without a wake word: {minutes:g} min")
    pool = speech_pool(piper, voices)
    vad_cpu, waiting_audio = _room(pool, minutes, seed, detectors, vad, figures)
    for word in figures.values():
        word["false_wakes_per_hour"] = round(word["false_wakes"] * 3600 / waiting_audio, 2)
    recognizer_minutes = min(minutes, RECOGNIZER_MINUTES)
    say(f"the always-on recognizer ({recognizer[0]}): {recognizer_minutes:g} min")
    always_on = _always_on(pool, recognizer_minutes, seed, vad, recognizer[1])
    vad_percent = round(100 * vad_cpu / waiting_audio, 2)
    nabu = figures.get("okay-nabu", next(iter(figures.values())))
    return WakeResult(
        voices=[v.name for v in voices], conditions=list(CONDITIONS),
        trials_per_model=len(voices) * 2 * len(CONDITIONS), room_speech_minutes=minutes,
        models=list(figures.values()), vad_cpu_percent=vad_percent,
        waiting_cpu_percent=round(vad_percent + nabu["cpu_percent"], 2),
        recognizer=recognizer[0], recognizer_minutes=recognizer_minutes,
        always_on_cpu_percent=always_on)


def _empty(name: str, phrase: str) -> WordFigures:
    return WordFigures(model=name, phrase=phrase,
                       detected={condition: [0, 0] for condition in CONDITIONS},
                       detection_rate=0.0, missed=[], latency_ms={"n": 0}, false_wakes=0,
                       false_wakes_per_hour=0.0, false_wake_texts=[], near_misses=[0, 0],
                       near_miss_texts=[], cpu_percent=0.0)


def _room(pool: Pool, minutes: float, seed: int,
          detectors: dict[str, MicroWakeWordDetector], vad: VoiceActivityDetector,
          figures: dict[str, WordFigures]) -> tuple[float, float]:
    """Room speech through the VAD and every model, frame by frame as the loop feeds them:
    (the VAD's CPU seconds, the seconds of audio)."""
    cpu = dict.fromkeys(detectors, 0.0)
    vad_cpu = 0.0
    carry = np.zeros(0)
    heard_samples = 0
    for detector in detectors.values():
        detector.reset()
    for scene, text in room_speech(pool, minutes, seed):
        stream = np.concatenate([carry, scene])
        whole = len(stream) // MIC_FRAME * MIC_FRAME
        carry = stream[whole:]
        pcm = to_pcm(stream[:whole])
        heard_samples += whole
        for at in range(0, len(pcm), 2 * MIC_FRAME):
            frame = pcm[at:at + 2 * MIC_FRAME]
            started = time.process_time()
            vad.speech_probability(frame)
            vad_cpu += time.process_time() - started
            for name, detector in detectors.items():
                started = time.process_time()
                woke = detector.heard(frame)
                cpu[name] += time.process_time() - started
                if woke:
                    figures[name]["false_wakes"] += 1
                    figures[name]["false_wake_texts"].append(text)
    audio_s = heard_samples / MIC_RATE
    for name in detectors:
        figures[name]["cpu_percent"] = round(100 * cpu[name] / audio_s, 2)
    return vad_cpu, audio_s


def _always_on(pool: Pool, minutes: float, seed: int,
               vad: VoiceActivityDetector, stt: SpeechRecognizer) -> float:
    """% of one core for the VAD on every frame and the recognizer on every scene of speech."""
    cpu = 0.0
    audio = 0
    for scene, _ in room_speech(pool, minutes, seed):
        pcm = to_pcm(scene)
        started = time.process_time()
        for at in range(0, len(pcm) - 2 * MIC_FRAME + 1, 2 * MIC_FRAME):
            vad.speech_probability(pcm[at:at + 2 * MIC_FRAME])
        stt.begin()
        stt.feed(pcm)
        stt.end()
        cpu += time.process_time() - started
        audio += len(scene)
    return round(100 * cpu * MIC_RATE / max(1, audio), 2)


def table(result: WakeResult) -> str:
    """The figures as the command prints them."""
    conditions = result["conditions"]
    lines = [f"wake words: {len(result['voices'])} voices x 2 sayings x {len(conditions)} "
             f"conditions = {result['trials_per_model']} trials each; "
             f"{result['room_speech_minutes']:g} min of room speech without them",
             f"  {'model':<12} {'detected':>9} "
             + " ".join(f"{c:>{max(8, len(c))}}" for c in conditions)
             + f" {'wake->listen p50/p95':>21} {'false/h':>8} {'near misses':>12} {'CPU':>6}"]
    for word in result["models"]:
        per = " ".join(f"{f'{d[0]}/{d[1]}':>{max(8, len(c))}}"
                       for c, d in word["detected"].items())
        latency = word["latency_ms"]
        timing = (f"{latency['p50']:.0f}/{latency['p95']:.0f} ms" if latency.get("n")
                  else "-")
        lines.append(f"  {word['model']:<12} {100 * word['detection_rate']:>8.1f}% {per} "
                     f"{timing:>21} {word['false_wakes_per_hour']:>8.2f} "
                     f"{word['near_misses'][0]:>5}/{word['near_misses'][1]:<6} "
                     f"{word['cpu_percent']:>5.2f}%")
    lines.append(f"waiting for the wake word (VAD {result['vad_cpu_percent']:.2f}% + okay-nabu): "
                 f"{result['waiting_cpu_percent']:.2f}% of one core; for a wake phrase (VAD + "
                 f"{result['recognizer']} on all speech, {result['recognizer_minutes']:g} min): "
                 f"{result['always_on_cpu_percent']:.2f}%")
    for word in result["models"]:
        for missed in word["missed"][:6]:
            lines.append(f"  missed {word['model']}: {missed}")
        for text in word["false_wake_texts"][:6]:
            lines.append(f"  false wake {word['model']}: {text!r}")
        for text in word["near_miss_texts"][:6]:
            lines.append(f"  near miss {word['model']}: {text}")
    return "\n".join(lines)
