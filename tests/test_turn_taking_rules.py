"""The turn-taking component's decisions as a table: evidence in, decision out. No audio, no
recognizer, no clock."""

from __future__ import annotations

import dataclasses

import pytest

from edge_agent.conversation.backchannel import LexiconClassifier, Verdict
from edge_agent.conversation.echo import EchoFilter
from edge_agent.conversation.turn_taking import (
    Judgement,
    Onset,
    Outcome,
    OverlapEvidence,
    TurnRules,
    TurnTaking,
)
from edge_agent.conversation.voice_shape import VoiceShape

RULES = TurnRules(pause_on_speech=True, barge_in_min_ms=200, barge_in_min_words=2,
                  barge_in_force_ms=2500, echo_coherence=0.5, language="en")
HUM = VoiceShape(speech_ms=450.0, voiced_ratio=0.8, high_ratio=0.12, syllables=1)
"""A short voiced burst: it may still be a hum."""
SPEECH = VoiceShape(speech_ms=1200.0, voiced_ratio=0.6, high_ratio=0.3, syllables=6)
"""Longer than any hum."""
PLAYING = "we open at nine in the morning and close at eleven"


def ev(ms: float, words: str = "", echo: float = 0.1, sound: VoiceShape | None = SPEECH,
       playing: str = PLAYING) -> OverlapEvidence:
    return OverlapEvidence(speech_ms=ms, words=words, echo_score=echo, playing=playing,
                           sound=sound)


def taker(**changes: object) -> TurnTaking:
    return TurnTaking(dataclasses.replace(RULES, **changes), LexiconClassifier(), EchoFilter())


@pytest.mark.parametrize(("pause", "echo", "expected"), [
    (True, 0.1, Onset.PAUSE),          # someone speaks: hold the agent's voice
    (True, 0.55, Onset.PAUSE),         # a voice like the agent's, by chance: still hold it
    (True, 0.9, Onset.KEEP_PLAYING),   # it is the agent's own echo: no stutter
    (False, 0.1, Onset.KEEP_PLAYING),  # pause_on_speech off
])
def test_onset(pause: bool, echo: float, expected: Onset) -> None:
    assert taker(pause_on_speech=pause).at_onset(echo) is expected


@pytest.mark.parametrize(("speech_ms", "asked_at", "expected"), [
    (150, None, False),   # before barge_in_min_ms: nothing to ask yet
    (200, None, True),    # first look
    (250, 200, False),    # asked 50 ms ago
    (296, 200, True),     # recheck_ms (96) later
    (2510, 2480, True),   # just long enough to force: at once
    (2600, 2510, False),  # past it (an echo is kept waiting): every recheck_ms again,
    (2606, 2510, True),   # not on every frame
])
def test_when_to_ask_the_recognizer(speech_ms: float, asked_at: float | None,
                                    expected: bool) -> None:
    assert taker().wants_words(speech_ms, asked_at) is expected


@pytest.mark.parametrize(("speech_ms", "asked_at", "took_ms", "expected"), [
    (296, 200, 250, True),     # before the force point: every recheck_ms (96), whatever it costs
    (2510, 2400, 250, True),   # just long enough to force: at once
    (2700, 2600, 30, True),    # past it, a quick answer: recheck_ms later, as before
    (3000, 2600, 250, False),  # a long echo's readings, 250 ms each: 500 ms of speech apart
    (3100, 2600, 250, True),
])
def test_past_the_force_point_the_recognizer_is_asked_no_more_often_than_it_answers(
        speech_ms: float, asked_at: float, took_ms: float, expected: bool) -> None:
    assert taker().wants_words(speech_ms, asked_at, took_ms) is expected


@pytest.mark.parametrize(("evidence", "expected"), [
    (ev(150, "wait stop"), Judgement.WAIT),                       # too short
    (ev(300, "Wait,", sound=HUM), Judgement.BARGE_IN),            # opens with a stop word
    (ev(300, "And wait", sound=HUM), Judgement.BARGE_IN),         # after a lead-in
    (ev(300, "I'm not. I'", sound=HUM), Judgement.WAIT),          # a hum's garble: stop word later
    (ev(300, "Yeah", sound=HUM), Judgement.WAIT),                 # one word, not a stop word
    (ev(450, "A memo", sound=HUM), Judgement.WAIT),               # may still be a hum
    (ev(450, "Can I change", sound=HUM), Judgement.WAIT),         # ...so words wait for the end
    (ev(1200, "Can I change that"), Judgement.BARGE_IN),          # too long for a hum
    (ev(1200, "Yeah yeah okay"), Judgement.WAIT),                 # a long backchannel
    (ev(1200, "Can I change that", echo=0.8), Judgement.WAIT),    # echo by sound
    (ev(1200, "open at nine in the morning"), Judgement.WAIT),    # echo by words
    (ev(2600, ""), Judgement.BARGE_IN),                           # forced, whatever the words
    (ev(2600, "", echo=0.8), Judgement.WAIT),                     # ...unless it is echo
])
def test_while_the_user_speaks_over_the_agent(evidence: OverlapEvidence,
                                              expected: Judgement) -> None:
    assert taker().during(evidence) is expected


@pytest.mark.parametrize(("evidence", "expected"), [
    (ev(400, "", sound=HUM), Outcome.DROP),                       # a cough: nothing recognized
    (ev(400, "Okay.", sound=HUM), Outcome.BACKCHANNEL),
    (ev(450, "Mm, m, uh.", sound=HUM), Outcome.BACKCHANNEL),      # a garbled hum
    (ev(450, "Mm, m, uh.", sound=None), Outcome.ANSWER),          # ...but only by its sound
    (ev(400, "No.", sound=HUM), Outcome.ANSWER),
    (ev(900, "Can I change that?"), Outcome.ANSWER),
    (ev(900, "the morning and close", echo=0.2), Outcome.ECHO),   # by words
    (ev(900, "blast or", echo=0.9), Outcome.ECHO),                # by sound
])
def test_when_the_overlap_ends(evidence: OverlapEvidence, expected: Outcome) -> None:
    assert taker().at_end(evidence) is expected


def test_the_classifier_is_the_one_given_and_it_hears_the_sound() -> None:
    heard: list[tuple[str, VoiceShape | None]] = []

    class Recording:
        def classify(self, text: str, speech_ms: float, language: str,
                     sound: VoiceShape | None = None) -> Verdict:
            heard.append((text, sound))
            return Verdict.BACKCHANNEL

    taking = TurnTaking(dataclasses.replace(RULES, language="es"), Recording(), EchoFilter())
    assert taking.at_end(ev(900, "vale vale")) is Outcome.BACKCHANNEL
    assert taking.during(ev(1200, "claro que sí")) is Judgement.WAIT
    assert heard == [("vale vale", SPEECH), ("claro que sí", SPEECH)]
