"""A speech clip set for measuring recognizers on voices nobody tuned them for.

Every clip is synthesized when it is needed (nothing is stored): kiosk sentences spoken by
espeak-ng voices (accents, speeds, pitches: formant synthesis, unlike any recording a recognizer
was trained on) and by the Piper voice at two speeds, each under one acoustic condition — clean,
steady noise, babble (other synthetic talkers behind), or a room (a reverberant impulse
response). Noise and rooms come from fixed seeds: the same clip set every run.

Each sentence is spoken by every voice; the condition rotates over sentence and voice, so every
voice meets every condition and every sentence meets every voice.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from edge_agent.demo.voices import RATE, VOICES, Voice, espeak, speak
from edge_agent.engines.tts import PiperSpeech

SENTENCES = (
    "What time do you open tomorrow?",
    "Do you have vegetarian dishes on the menu?",
    "I would like a table for four people at eight thirty.",
    "Is there parking near the restaurant?",
    "Can I bring my dog to the terrace?",
    "How much is the set menu for two?",
    "My name is Maria and my booking number is seven one five.",
    "Could you repeat the opening hours please?",
    "We will arrive around seven in the evening.",
    "Do you take credit cards or only cash?",
    "Cancel my reservation for Friday.",
    "Is the kitchen still open after ten?",
)

BABBLE_LINES = (
    "The weather was lovely all week and we walked by the river every morning.",
    "She said the train would be late again, so we took the bus instead.",
    "Another coffee please, and could we get the bill when you have a moment?",
)


CONDITIONS = ("clean", "noise-15db", "babble-10db", "room")


@dataclass(frozen=True)
class Clip:
    """One spoken sentence."""

    text: str
    """What is said."""
    voice: Voice
    """Who says it."""
    condition: str
    """One of `CONDITIONS`."""
    pcm: bytes
    """16 kHz mono int16, with 0.3 s of (conditioned) silence either side."""

    @property
    def seconds(self) -> float:
        return len(self.pcm) / 2 / RATE


def clip_count(every: int = 1) -> int:
    """How many clips `clip_set(..., every=every)` yields."""
    return len(VOICES) * len(SENTENCES) // every


def clip_set(piper: PiperSpeech, quick: bool = False, every: int | None = None
             ) -> Iterator[Clip]:
    """The clips, synthesized one by one: all 96, or every `every`-th (`quick`: every fourth,
    24). Every voice speaks in each subset as long as `every` <= 12."""
    step = every or (4 if quick else 1)
    babble = _babble()
    index = 0
    for v, voice in enumerate(VOICES):
        for s, text in enumerate(SENTENCES):
            condition = CONDITIONS[(v + s) % len(CONDITIONS)]
            index += 1
            if index % step:
                continue
            speech = speak(piper, voice, text)
            yield Clip(text, voice, condition,
                       apply_condition(speech, condition, babble, seed=index))


def apply_condition(speech: bytes, condition: str, babble: np.ndarray, seed: int) -> bytes:
    """Pad `speech` with 0.3 s of silence each side and put it in `condition`."""
    rng = np.random.default_rng(seed)
    pad = np.zeros(int(0.3 * RATE))
    signal = np.concatenate([pad, np.frombuffer(speech, dtype=np.int16).astype(np.float64), pad])
    if condition == "noise-15db":
        signal = _mix(signal, _pink_noise(len(signal), rng), snr_db=15.0)
    elif condition == "babble-10db":
        start = int(rng.integers(0, max(1, len(babble) - len(signal))))
        behind = np.resize(babble[start:], len(signal))
        signal = _mix(signal, behind, snr_db=10.0)
    elif condition == "room":
        signal = _reverberate(signal, rng, rt60=0.5)
    elif condition != "clean":
        raise ValueError(f"unknown condition {condition!r}")
    peak = np.max(np.abs(signal)) or 1.0
    if peak > 32000:
        signal *= 32000 / peak
    return np.round(signal).astype(np.int16).tobytes()


def _babble() -> np.ndarray:
    """Three talkers at once, 16 kHz (espeak-ng: deterministic, unlike Piper's sampling)."""
    voices = (Voice("b1", "espeak", "en-us+m2", 170, 45), Voice("b2", "espeak", "en-gb", 160, 40),
              Voice("b3", "espeak", "en-us+f4", 180, 70))
    tracks = [np.frombuffer(espeak(" ".join(BABBLE_LINES), voice.espeak_voice, voice.words_per_minute,
                                     voice.pitch), dtype=np.int16)
              .astype(np.float64) for voice in voices]
    length = max(len(t) for t in tracks)
    return sum((np.resize(t, length) for t in tracks), np.zeros(length))


def _pink_noise(samples: int, rng: np.random.Generator) -> np.ndarray:
    spectrum = np.fft.rfft(rng.standard_normal(samples))
    spectrum /= np.sqrt(np.maximum(np.arange(len(spectrum)), 1.0))
    return np.fft.irfft(spectrum, samples)


def _mix(signal: np.ndarray, noise: np.ndarray, snr_db: float) -> np.ndarray:
    speech = signal[np.abs(signal) > 0]
    speech_power = float(np.mean(speech**2)) if speech.size else 1.0
    noise_power = float(np.mean(noise**2)) or 1.0
    gain = np.sqrt(speech_power / noise_power / 10 ** (snr_db / 10))
    return np.asarray(signal + noise * gain, dtype=np.float64)


def _reverberate(signal: np.ndarray, rng: np.random.Generator, rt60: float,
                 direct_to_reverberant_db: float = 3.0) -> np.ndarray:
    """A synthetic room: the direct sound, a few early reflections and a diffuse tail decaying
    60 dB in `rt60` seconds, `direct_to_reverberant_db` below the direct sound (+3 dB: a
    talker about half a metre from the microphone in a furnished shop)."""
    length = int(rt60 * RATE)
    times = np.arange(length) / RATE
    tail = rng.standard_normal(length) * np.exp(-6.9 * times / rt60)
    tail[: int(0.005 * RATE)] = 0.0
    tail *= np.sqrt(10 ** (-direct_to_reverberant_db / 10) / float(np.sum(tail**2)))
    response = tail
    response[0] = 1.0
    for delay_ms, gain in ((7, 0.5), (13, 0.35), (23, 0.25)):
        response[int(delay_ms * RATE / 1000)] += gain
    wet = np.fft.irfft(np.fft.rfft(signal, len(signal) + length) *
                       np.fft.rfft(response, len(signal) + length))[: len(signal)]
    level = float(np.sqrt(np.mean(signal**2))) / (float(np.sqrt(np.mean(wet**2))) or 1.0)
    return np.asarray(wet * level, dtype=np.float64)
