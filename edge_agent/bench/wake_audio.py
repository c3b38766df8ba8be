"""The sounds `bench wake` plays to the wake word models: the wake words said by every voice of
the machine under a room's conditions, and an hour (or less) of room speech without them.

Voices: the agent's Piper voice and espeak-ng's variants (`demo.voices.VOICES`: accents,
pitches, speeds), each also 20 % faster. Conditions, each the caller's saying with a second of
silence before and after:

- **quiet**: nothing else;
- **noise**: steady pink noise at -35 dBFS (a fan, a fridge);
- **talkers**: two espeak-ng talkers, each 10 dB under the caller's speech level, talking on
  (a café);
- **echo**: the agent's own voice at echo gain 1.0 through a furnished room (40 ms, RT60 150 ms)
  talking for 3 s before the caller and on, through the agent's echo canceller (WebRTC's AEC3)
  with the agent's voice as its reference: the wake word said over the agent, as it is heard;
- **cafe**: `bench rooms`' café (8 x 6 x 3 m, RT60 400 ms, image sources): the caller 0.5 m in
  front of the kiosk, the two talkers at their spots 2.9 and 3.6 m away, each 10 dB under the caller
  at the microphone; one microphone;
- **cafe-array**: the same room heard by a 4-mic board (respeaker-4mic-hat) and the agent's
  beamformer steered at the caller.

The speech without the wake words: kiosk questions and everyday talk at home and in a café
(its "okay", "hey" and "Alex" included) by every voice, one talker after another with pauses, a
second talker 6-12 dB under the first half the time, over pink noise at -50 dBFS, drawn from a
seed: the same audio in every run. Near misses ("okay, now boo", "hey, my crafts are done",
"Alexander") are said apart, once by each voice, and counted apart.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from edge_agent.audio.adaptive_beamformer import build_beamformer
from edge_agent.audio.device import MIC_RATE
from edge_agent.audio.echo_cancel import WebRtcProcessing
from edge_agent.audio.pcm import fft_convolve
from edge_agent.audio.room import Room, RoomNoise
from edge_agent.audio.room_acoustics import render
from edge_agent.bench.clipset import BABBLE_LINES, SENTENCES
from edge_agent.bench.recording import audible_spans
from edge_agent.bench.rooms_canceller import process, room_echo
from edge_agent.config import Config
from edge_agent.demo.talkers import active_level
from edge_agent.demo.voices import VOICES, Voice, espeak, speak
from edge_agent.engines.tts import PiperSpeech

CONDITIONS = ("quiet", "noise", "talkers", "echo", "cafe", "cafe-array")
NOISE_DBFS = -35.0
TALKERS_UNDER_DB = 10.0
ECHO_GAIN = 1.0
ECHO_LEAD_S = 3.0
"""The agent has been talking this long when the caller says the wake word (the canceller
converged, as mid-reply)."""
FASTER = 1.2
AGENT_REPLY = ("We open at nine every morning and close at six, except on Sundays, when the "
               "museum opens at eleven. Tickets are twelve euros for adults and free for "
               "children under twelve.")
CONVERSATION = (
    "Did you see the match last night? It went to penalties again.",
    "I think we should leave before the traffic gets bad.",
    "Can you pass me the salt and the pepper, please?",
    "My sister is coming over on Saturday with the kids.",
    "The heating has been making that noise all week.",
    "Let's order pizza tonight, I really can't be bothered to cook.",
    "Have you fed the cat yet? She keeps looking at me.",
    "I'll call the plumber tomorrow morning, first thing.",
    "That film was far too long, but the ending was good.",
    "Where did you put the car keys? They were on the table.",
    "We need milk, eggs, bread and something for lunch.",
    "Okay, I'll be there in five minutes.",
    "Hey, how was your day at work?",
    "Alex said the meeting moved to Thursday afternoon.",
    "Turn the music down a bit, the baby is asleep.",
    "It's going to rain all weekend, apparently.",
    "Okay, let me check the calendar and get back to you.",
    "Hey, do you remember the name of that restaurant by the river?",
    "I need a new phone, this one dies by lunchtime.",
    "The train was cancelled, so I walked most of the way home.",
)
"""Everyday talk at home and in a café (with the everyday "okay", "hey" and "Alex"), for false
wakes per hour."""
NEAR_MISSES = (
    "Okay, nobody move.", "Okay, now boo!", "Okay, I know, but not now.", "Hey, Travis!",
    "Hey Harvey, is that you?", "Hey, are these yours?", "Alexander is running late.",
    "That is a lexicon of old words.", "Alex, say that again.", "Hey, my crafts are done.",
    "Hey, microwave the soup, please.", "Hey Mike, roughly how far is it?",
    "Okay, Noah, come over here.", "Jarvis and Nabil went home.", "Hey, a tiny microphone.",
    "Okay, a banana for you.",
)
"""Sentences that sound like a wake word, said once by each voice: how often each model wakes
on a near miss (not counted in the false wakes per hour of everyday talk)."""
TALKER_VOICES = (Voice("t1", "espeak", "en-us+m2", 170, 45), Voice("t2", "espeak", "en-gb", 160, 40))


def speakers(quick: bool) -> list[Voice]:
    """Every voice at its own speed and 20 % faster (quick: Piper's and one espeak-ng voice)."""
    voices = [v for v in VOICES if v.name in ("piper-joe", "espeak-us")] if quick else VOICES
    return [speed for voice in voices for speed in (voice, faster(voice))]


def faster(voice: Voice) -> Voice:
    return dataclasses.replace(voice, name=f"{voice.name}-fast",
                               words_per_minute=round(voice.words_per_minute * FASTER),
                               length_scale=round(voice.length_scale / FASTER, 3))


def sayings(phrase: str) -> tuple[str, str]:
    """The wake word alone, and followed by a question in one breath."""
    return f"{phrase}.", f"{phrase}, what time is it?"


@dataclass(frozen=True)
class Said:
    """A saying padded for the trials."""

    samples: np.ndarray
    """16 kHz, int16 scale (float64), a second of silence before and after."""
    speech_end: int
    """The sample just after the last audible sound of the saying."""


def said(piper: PiperSpeech, voice: Voice, text: str) -> Said:
    speech = np.frombuffer(speak(piper, voice, text), dtype=np.int16).astype(np.float64)
    spans = audible_spans(speech, bridge_ms=0)
    end = round(spans[-1][1] * MIC_RATE) if spans else len(speech)
    pad = np.zeros(MIC_RATE)
    return Said(np.concatenate([pad, speech, pad]), MIC_RATE + end)


class Conditions:
    """Builds each condition's microphone signal around a saying (the talkers and the agent's
    reply synthesized once)."""

    def __init__(self, piper: PiperSpeech, seed: int) -> None:
        self._seed = seed
        self._cafe: Cafe | None = None
        self._talkers = [np.frombuffer(espeak(" ".join(BABBLE_LINES[i:] + BABBLE_LINES[:i]),
                                              v.espeak_voice, v.words_per_minute, v.pitch),
                                       dtype=np.int16).astype(np.float64)
                         for i, v in enumerate(TALKER_VOICES)]
        self._agent = np.frombuffer(speak(piper, VOICES[0], AGENT_REPLY),
                                    dtype=np.int16).astype(np.float64)
        self._room = Room(echo_gain=ECHO_GAIN, delay_ms=40, reverb_ms=150, seed=seed)
        self._canceller: WebRtcProcessing | None = None
        """One canceller for every trial: the kiosk's, converged on its room."""

    def heard(self, saying: Said, condition: str, trial: int) -> np.ndarray:
        """What the wake word model hears (int16 scale; the saying's speech ends where it did,
        `Said.speech_end`)."""
        x = saying.samples
        if condition == "quiet":
            return x
        if condition == "noise":
            noise = RoomNoise(Room(noise_db=NOISE_DBFS, seed=self._seed + trial), MIC_RATE)
            noisy: np.ndarray = x + noise.take(len(x))
            return noisy
        rng = np.random.default_rng([self._seed, trial])
        talk = [np.resize(np.roll(t, -int(rng.integers(len(t)))), len(x)) for t in self._talkers]
        if condition == "talkers":
            level = active_level(x) * 10 ** (-TALKERS_UNDER_DB / 20)
            mixed: np.ndarray = x + np.sum([track * level / (active_level(track) or 1.0)
                                            for track in talk], axis=0)
            return mixed
        if condition == "echo":
            lead = round(ECHO_LEAD_S * MIC_RATE)
            far = np.resize(self._agent, lead + len(x))
            near = room_echo(far, self._room)
            near[lead:] += x
            if self._canceller is None:
                self._canceller = WebRtcProcessing(MIC_RATE)
            cleaned, _ = process(near, far, self._canceller)
            return cleaned[lead:]
        if condition in ("cafe", "cafe-array"):
            if self._cafe is None:
                self._cafe = Cafe()
            return self._cafe.heard(x, talk, steered=condition == "cafe-array")
        raise ValueError(f"unknown condition {condition!r}")


class Cafe:
    """`bench rooms`' café and its 4-mic board, the rooms rendered once (pyroomacoustics, the
    `[rooms]` extra)."""

    def __init__(self) -> None:
        from edge_agent.bench.rooms_arrays import CAFE, SETUPS

        layout = CAFE.layout
        assert layout is not None
        [board] = [setup for setup in SETUPS if setup.array == "respeaker-4mic-hat"]
        audio = board.config(Config()).audio
        array = audio.mic_array()
        assert array is not None
        self._array = array
        self._responses = render(layout, CAFE.reverb_ms, array.centred_m,
                                 [layout.talker_at(i, None) for i in range(len(TALKER_VOICES))],
                                 MIC_RATE)
        self._look = (audio.look_azimuth_deg, audio.look_elevation_deg, audio.beamformer)

    def heard(self, caller: np.ndarray, talkers: Sequence[np.ndarray], steered: bool
              ) -> np.ndarray:
        """What the first microphone (or, `steered`, the beamformer) hears of the caller and
        the talkers, each talker 10 dB under the caller at the first microphone."""
        mics = _through(caller, self._responses.caller)
        level = active_level(mics[:, 0]) * 10 ** (-TALKERS_UNDER_DB / 20)
        for talker, response in zip(talkers, self._responses.talkers, strict=True):
            talking = _through(talker, response)
            mics += talking * level / (active_level(talking[:, 0]) or 1.0)
        if not steered:
            return mics[:, 0]
        return build_beamformer(self._array, MIC_RATE, *self._look).steer(mics)


def _through(signal: np.ndarray, responses: np.ndarray) -> np.ndarray:
    """`signal` as each microphone hears it (samples x microphones), as long as `signal`."""
    return np.stack([fft_convolve(signal, response)[:len(signal)] for response in responses],
                    axis=1)


def speech_pool(piper: PiperSpeech, voices: Sequence[Voice]) -> list[tuple[str, np.ndarray]]:
    """Every everyday line by every voice (text, 16 kHz int16 scale): what `room_speech` draws
    from, synthesized once."""
    texts = (*SENTENCES, *BABBLE_LINES, *CONVERSATION)
    return [(text, np.frombuffer(speak(piper, voice, text), dtype=np.int16).astype(np.float64))
            for voice in voices for text in texts]


def room_speech(pool: Sequence[tuple[str, np.ndarray]], minutes: float, seed: int
                ) -> Iterator[tuple[np.ndarray, str]]:
    """Speech without any wake word, scene by scene (int16 scale, 16 kHz) with the text of its
    first talker, until `minutes` of audio: the same scenes for the same pool and seed."""
    rng = random.Random(seed)
    noise = RoomNoise(Room(noise_db=-50.0, seed=seed), MIC_RATE)
    total = round(minutes * 60 * MIC_RATE)
    while total > 0:
        text, first = rng.choice(pool)
        scene = np.concatenate([first, np.zeros(round(rng.uniform(0.2, 1.0) * MIC_RATE))])
        if rng.random() < 0.5:
            _, second = rng.choice(pool)
            at = rng.randrange(len(scene))
            overlap = second[:len(scene) - at] * 10 ** (-rng.uniform(6, 12) / 20)
            scene[at:at + len(overlap)] += overlap
        scene = scene[:total]
        total -= len(scene)
        yield scene + noise.take(len(scene)), text
