"""Echo rejection on real speech: Piper's reply comes back through the mic, PocketSphinx writes it.

The echo is the reply's own audio at half level with a little noise (about 30 dB below it),
resampled to 16 kHz as the mic delivers it. The played words come from the reply's real Piper
word timings. PocketSphinx misrecognizes much of a 1.5 s cut of running speech (the words at the
cut edges especially) and Piper's audio differs a little from run to run, so echo is judged by
the share classified right (9-14 of 18 windows measured); a user talking must never be taken for
echo (24 of 24 measured, every run).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from edge_agent.audio.pcm import resample
from edge_agent.conversation.echo import EchoFilter, words_played
from edge_agent.engines.base import SpeechAudio
from edge_agent.engines.stt import PocketSphinxRecognizer

pytestmark = pytest.mark.models

REPLY = ("We have a table for four at 7:30 tonight, by the window. The tasting menu costs $45 per "
         "person, and the chef recommends the mushroom risotto. Would you like me to book it under "
         "your name?")
USERS = (
    "Actually can you make it eight o'clock instead",
    "No, I want to cancel my order.",
    "Do you have anything vegetarian on the menu?",
    "Wait, how much is the parking?",
    "Is there a table by the window for five?",
    "I would like the mushroom soup, please.",
)
ECHO_GAIN = 0.5
NOISE_RMS = 50.0
WINDOW_S = 1.5


@pytest.fixture(scope="module")
def stt(model_path: Any) -> PocketSphinxRecognizer:
    return PocketSphinxRecognizer(model_path("pocketsphinx-en-us"))


@pytest.fixture(scope="module")
def reply(piper: Any) -> SpeechAudio:
    audio: SpeechAudio = piper.synthesize(REPLY)
    assert audio.words, "Piper gave no word timings"
    return audio


def _samples(audio: SpeechAudio) -> np.ndarray:
    return np.frombuffer(audio.pcm, dtype=np.int16).astype(np.float64)


def _transcribe(stt: PocketSphinxRecognizer, signal: np.ndarray, rate: int) -> str:
    pcm = np.clip(np.round(signal), -32768, 32767).astype(np.int16).tobytes()
    pcm16 = resample(pcm, rate, stt.sample_rate)
    stt.begin()
    for i in range(0, len(pcm16), 3200):  # 100 ms chunks, as the mic streams them
        stt.feed(pcm16[i : i + 3200])
    return stt.end().text


def _echo(reply: SpeechAudio, start: int, end: int, rng: np.random.Generator) -> np.ndarray:
    return _samples(reply)[start:end] * ECHO_GAIN + rng.normal(0.0, NOISE_RMS, end - start)


def test_windows_of_the_agents_own_speech_are_echo(stt: PocketSphinxRecognizer,
                                                   reply: SpeechAudio) -> None:
    rng = np.random.default_rng(7)
    echo = EchoFilter()
    rate = reply.sample_rate
    window = int(WINDOW_S * rate)
    results = []
    for start in range(rate // 2, reply.samples - window - rate // 10, rate // 2):
        recognized = _transcribe(stt, _echo(reply, start, start + window, rng), rate)
        playing = words_played(REPLY, reply.words, start, start + window)
        results.append((echo.is_echo(recognized, playing), recognized, playing))
    right = sum(ok for ok, _, _ in results)
    print(f"\necho windows classified echo: {right}/{len(results)}")
    for ok, recognized, playing in results:
        print(f"  {'echo' if ok else 'MISS'}  heard {recognized!r}  playing {playing!r}")
    assert len(results) >= 15
    # Measured 9-14 of 18 (Piper's output varies from run to run): PocketSphinx on cut running
    # speech is the limit, not the matcher. A matcher that rejects echo finds next to none.
    assert right >= 0.35 * len(results)


def test_whole_clauses_of_echo_are_echo(stt: PocketSphinxRecognizer, reply: SpeechAudio) -> None:
    rng = np.random.default_rng(8)
    echo = EchoFilter()
    rate = reply.sample_rate
    pad = rate // 10
    # A clause runs from its first word to the word that ends with punctuation.
    clauses: list[tuple[int, int]] = []
    opening = 0
    for index, word in enumerate(reply.words):
        if word.text[-1] in ",.?":
            start = max(0, reply.words[opening].start_sample - pad)
            clauses.append((start, min(reply.samples, word.end_sample + pad)))
            opening = index + 1
    right = 0
    for start, end in clauses:
        recognized = _transcribe(stt, _echo(reply, start, end, rng), rate)
        playing = words_played(REPLY, reply.words, start, end)
        ok = echo.is_echo(recognized, playing)
        right += ok
        print(f"  {'echo' if ok else 'MISS'}  heard {recognized!r}  playing {playing!r}")
    print(f"whole clauses classified echo: {right}/{len(clauses)}")
    assert len(clauses) == 5
    # Measured 3-4 of 5: the short "by the window." is misheard ("level one though").
    assert right >= 2


def test_a_user_talking_during_the_agents_speech_is_not_echo(stt: PocketSphinxRecognizer, piper: Any,
                                                             reply: SpeechAudio) -> None:
    rng = np.random.default_rng(9)
    echo = EchoFilter()
    rate = reply.sample_rate
    cases = []
    for sentence in USERS:
        user = _samples(piper.synthesize(sentence))
        for at_s in (1.0, 3.0, 5.5):
            start = int(at_s * rate)
            end = min(start + len(user), reply.samples)
            # The mic hears the user at full level over the echo of what the agent is saying.
            mixed = user[: end - start] + _echo(reply, start, end, rng)
            recognized = _transcribe(stt, mixed, rate)
            playing = words_played(REPLY, reply.words, start, end)
            cases.append((echo.is_echo(recognized, playing), recognized, playing))
        # And alone, while the agent says the words of the middle of its reply.
        recognized = _transcribe(stt, user + rng.normal(0.0, NOISE_RMS, len(user)), rate)
        playing = words_played(REPLY, reply.words, 3 * rate, 3 * rate + len(user))
        cases.append((echo.is_echo(recognized, playing), recognized, playing))
    wrong = [case for case in cases if case[0]]
    print(f"\nuser speech classified not echo: {len(cases) - len(wrong)}/{len(cases)}")
    for _, recognized, playing in wrong:
        print(f"  FALSE ECHO  heard {recognized!r}  playing {playing!r}")
    assert sum(1 for _, recognized, _ in cases if recognized) >= 0.9 * len(cases)
    assert not wrong
