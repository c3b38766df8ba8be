"""End of turn judged from the words: how much silence ends a turn."""

from __future__ import annotations

import pytest

from edge_agent.conversation.endpoint import (
    Completeness,
    EndpointRules,
    completeness,
    silence_needed,
)

RULES = EndpointRules(complete_ms=250, incomplete_ms=1000, unknown_ms=500, speculate_ms=128,
                      sound_done_ms=250, sound_threshold=0.5, sound_hold_below=0.2,
                      sound_sure_above=0.9, sure_ms=96)


@pytest.mark.parametrize(("text", "expected"), [
    # Moonshine punctuates: a finished question or sentence of three words or more.
    ("What time do you open tomorrow?", Completeness.COMPLETE),
    ("I would like a table for four.", Completeness.COMPLETE),
    ("Thank you very much!", Completeness.COMPLETE),
    ("I'll take that.", Completeness.COMPLETE),
    ("Yes, I can.", Completeness.COMPLETE),
    # Stopping on a word that leads into more (Moonshine writes a period even there).
    ("I would like a table for.", Completeness.INCOMPLETE),
    ("I'd like a table for", Completeness.INCOMPLETE),
    ("Tonight at eight and", Completeness.INCOMPLETE),
    ("Can you tell me, um", Completeness.INCOMPLETE),
    ("My name is Maria and my", Completeness.INCOMPLETE),
    ("The code is -", Completeness.INCOMPLETE),
    ("Well...", Completeness.INCOMPLETE),
    # Digits after "number"/"phone"/"code": people pause between groups.
    ("My booking number is seven one.", Completeness.INCOMPLETE),
    ("My phone number is 0612", Completeness.INCOMPLETE),
    ("Table for 4.", Completeness.COMPLETE),
    # One or two words are not trusted to be the whole turn ("Hold on," then more).
    ("Hold on.", Completeness.UNKNOWN),
    ("Wait.", Completeness.UNKNOWN),
    ("Four people,", Completeness.UNKNOWN),
    # No punctuation to go by (PocketSphinx, Vosk), nothing incomplete.
    ("what time do you open", Completeness.UNKNOWN),
    ("", Completeness.UNKNOWN),
    ("...", Completeness.INCOMPLETE),
])
def test_completeness(text: str, expected: Completeness) -> None:
    assert completeness(text) is expected


def test_silence_needed() -> None:
    assert silence_needed(RULES, None) == 500  # not transcribed yet
    assert silence_needed(RULES, "What time do you open?") == 250
    assert silence_needed(RULES, "a table for") == 1000
    assert silence_needed(RULES, "what time do you open") == 500
