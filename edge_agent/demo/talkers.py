"""Background talkers for the simulator: other people talking near the kiosk, who are not the
caller and must neither open a turn nor enter a transcript.

Each talker says their sentences over and over from a start time, in a voice unlike the
agent's (espeak-ng voices by default: deterministic, the same samples every run), quieter than
the caller by `level_db` (measured on active speech, as the microphone hears both) and through
more of the room than the caller (they are farther away: a reverberant tail as strong as their
direct sound).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from edge_agent.audio.pcm import fft_convolve, resample
from edge_agent.audio.room import TALKER_DIRECT_TO_REVERB_DB, RoomTalk, reverberant_response
from edge_agent.audio.room_acoustics import RoomResponses
from edge_agent.demo.voices import RATE, VOICES, Voice, espeak
from edge_agent.engines.base import TextToSpeech

TALKER_VOICES = tuple(v.name for v in VOICES if v.engine == "espeak")
"""Voices a talker may have (espeak-ng's); talkers without one take them in turn."""
AGENT_VOICE = "agent"
"""A talker in the agent's own (Piper) voice: the hardest case for telling voices apart."""
LEVEL_DB_RANGE = (-40.0, 0.0)
"""A background talker is at most as loud as the caller."""
ACTIVE_FRAME_S = 0.02
ACTIVE_WITHIN_DB = 35.0
"""Speech level is the RMS of the 20 ms frames within 35 dB of the loudest one: the pauses
between words and sentences do not count (like ITU-T P.56's active speech level)."""


@dataclass(frozen=True)
class Talker:
    """Someone else talking near the kiosk ([[talker]] in a call file)."""

    say: tuple[str, ...]
    """What they say, sentence by sentence, then again from the first."""
    voice: str = ""
    """One of `TALKER_VOICES`, or "agent" (the agent's own voice); empty: the next espeak-ng
    voice in turn."""
    level_db: float = -10.0
    """Their speech level against the caller's at the microphone, dB (-10: twice as far away
    as the caller in a quiet room)."""
    start: float = 0.0
    """Seconds from the start of the call when they begin."""
    pause: float = 0.8
    """Seconds of silence between their sentences."""
    reverb_ms: float = 400.0
    """Reverberation of the room on their voice (RT60, ms; 0: none); in a room where everyone
    has a place, the room's own."""
    at_m: tuple[float, float, float] | None = None
    """Where they stand, relative to the kiosk's microphones (metres: to the side, in front,
    up), in a room where everyone has a place; None: one of the room's spots for talkers."""


def active_level(samples: np.ndarray, rate: int = RATE) -> float:
    """RMS of the active speech in `samples` (int16 scale), 0.0 for silence."""
    frame = max(1, round(ACTIVE_FRAME_S * rate))
    usable = len(samples) // frame * frame
    if not usable:
        return 0.0
    energies = np.mean(np.square(samples[:usable].reshape(-1, frame)), axis=1)
    loudest = float(np.max(energies))
    if loudest <= 0:
        return 0.0
    active = energies[energies >= loudest * 10 ** (-ACTIVE_WITHIN_DB / 10)]
    return float(np.sqrt(np.mean(active)))


def room_talk(talkers: Sequence[Talker], tts: TextToSpeech, caller_speech: Sequence[bytes],
              rate: int, seed: int, responses: RoomResponses | None = None) -> RoomTalk | None:
    """The talkers as the microphone hears them (None: there are none). `caller_speech`: the
    caller's lines at `rate` (int16), the level the talkers' `level_db` is against (as the
    first microphone hears both). With `responses` (a room where everyone has a place), each
    talker reaches every microphone through their own paths, and `reverb_ms` is the room's."""
    if not talkers:
        return None
    caller = np.concatenate([np.frombuffer(pcm, dtype=np.int16) for pcm in caller_speech]
                            or [np.zeros(0, dtype=np.int16)]).astype(np.float64)
    if responses is not None and len(caller):
        caller = fft_convolve(caller, responses.caller[0])
    reference = active_level(caller, rate) or 3000.0  # no caller line: a typical voice
    tracks = []
    for index, talker in enumerate(talkers):
        speech = _track(talker, _voice(talker, index), tts, rate)
        if responses is None:
            room = reverberant_response(rate, talker.reverb_ms, TALKER_DIRECT_TO_REVERB_DB,
                                        seed=seed * 1000 + index + 1)
            heard = _circular_convolve(speech, room)
            level = active_level(heard, rate)
        else:
            heard = np.stack([_circular_convolve(speech, path)
                              for path in responses.talkers[index]], axis=1)
            level = active_level(heard[:, 0], rate)
        gain = reference * 10 ** (talker.level_db / 20) / level if level else 0.0
        tracks.append((heard * gain, round(talker.start * rate)))
    return RoomTalk(tracks)


def _voice(talker: Talker, index: int) -> Voice | None:
    """The talker's espeak-ng voice; None for the agent's."""
    if talker.voice == AGENT_VOICE:
        return None
    name = talker.voice or TALKER_VOICES[index % len(TALKER_VOICES)]
    return next(v for v in VOICES if v.name == name)


def _track(talker: Talker, voice: Voice | None, tts: TextToSpeech, rate: int) -> np.ndarray:
    """One round of the talker's sentences, each followed by the pause."""
    pause = np.zeros(round(talker.pause * rate))
    pieces = []
    for sentence in talker.say:
        if voice is None:
            audio = tts.synthesize(sentence)
            pcm = resample(audio.pcm, audio.sample_rate, rate)
        else:
            pcm = resample(espeak(sentence, voice.espeak_voice, voice.words_per_minute,
                                  voice.pitch), RATE, rate)
        pieces += [np.frombuffer(pcm, dtype=np.int16).astype(np.float64), pause]
    return np.concatenate(pieces)


def _circular_convolve(track: np.ndarray, response: np.ndarray) -> np.ndarray:
    """`track` through `response` as a loop: the tail of the last sentence rings into the
    first one of the next round, with no seam where the track starts over."""
    size = len(track) + len(response) - 1
    wet = np.fft.irfft(np.fft.rfft(track, size) * np.fft.rfft(response, size), size)
    wrapped = np.pad(wet, (0, -size % len(track))).reshape(-1, len(track))
    result: np.ndarray = np.sum(wrapped, axis=0)
    return result
