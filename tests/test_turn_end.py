"""End of turn by sound and words: the decision table, and the loop asking the end-of-turn
model (a scripted fake here; the real Smart Turn in tests/test_turn_end_model.py)."""

from __future__ import annotations

import pytest

from edge_agent.audio.pcm import silence
from edge_agent.conversation.endpoint import EndpointRules, silence_needed
from edge_agent.events import Notice, SpeculationCancelled, UserSpeechEnded, UserTurn
from tests.fakes import speech
from tests.timeline import Harness, stop

RULES = EndpointRules(complete_ms=250, incomplete_ms=1000, unknown_ms=500, speculate_ms=128,
                      sound_done_ms=160, sound_threshold=0.5, sound_hold_below=0.2,
                      sound_sure_above=0.95, sure_ms=96)
FINISHED, UNFINISHED, SURE = 0.8, 0.1, 0.97


@pytest.mark.parametrize(("words", "sound", "silence_ms"), [
    # A finished sentence: the words' silence, unless it sounds unfinished (a phrase the
    # recognizer wrote as a sentence, then a pause, then more).
    ("What time do you open tomorrow?", FINISHED, 250),
    ("It's for my daughter's birthday.", UNFINISHED, 1000),
    ("What time do you open tomorrow?", None, 250),
    # ...clearly unfinished: a doubtful verdict does not overrule the words.
    ("Is the terrace open in the evening?", 0.32, 250),
    ("Is the terrace open in the evening?", 0.2, 250),
    ("Is the terrace open in the evening?", 0.19, 1000),
    ("what time do you open", 0.32, 1000),
    # Words that tell nothing (a comma, two words, no punctuation): the sound decides.
    ("It was the epoch of belief,", FINISHED, 160),
    ("It was the epoch of belief,", UNFINISHED, 1000),
    ("It was the epoch of belief,", None, 500),
    ("Six people.", FINISHED, 160),
    ("what time do you open", UNFINISHED, 1000),
    # One word is too little to tell a finished answer from a lead-in ("Hi," then more).
    ("Hi,", FINISHED, 500),
    ("Tonight.", FINISHED, 500),
    ("Tonight.", UNFINISHED, 1000),
    # A lone lead-in sounds finished and is not: more follows after a comma pause.
    ("Wait,", FINISHED, 500),
    ("Hold on.", FINISHED, 500),
    ("Hold on.", UNFINISHED, 1000),
    ("No, sorry,", FINISHED, 500),
    ("No thanks, just two.", FINISHED, 250),
    # Words that lead into more decide: the sound does not make them the whole turn.
    ("I'd like a table for", FINISHED, 1000),
    ("I'd like a table for", UNFINISHED, 1000),
    ("I'd like a table for", None, 1000),
    ("My phone number is 0612", FINISHED, 1000),
    # Exactly at the threshold counts as finished.
    ("Six people.", 0.5, 160),
    # A sound sure the turn is finished ends it sooner where the words let the sound decide...
    ("What time do you open tomorrow?", SURE, 96),
    ("What time do you open tomorrow?", 0.95, 96),
    ("It was the epoch of belief,", SURE, 96),
    ("Six people.", SURE, 96),
    # ...and nowhere else: one word, a lone lead-in, words that lead into more.
    ("Hi,", SURE, 500),
    ("Wait,", SURE, 500),
    ("Hold on.", SURE, 500),
    ("I'd like a table for", SURE, 1000),
    ("My phone number is 0612", SURE, 1000),
])
def test_words_and_sound_decide_the_silence(words: str, sound: float | None,
                                            silence_ms: int) -> None:
    assert silence_needed(RULES, words, sound) == silence_ms


def test_an_interruption_of_the_agent_is_never_shortened_by_its_sound() -> None:
    # "Wait, that sounds like too much." over the agent, its "Wait" clipped ("He," once).
    assert silence_needed(RULES, "He that,", FINISHED, interrupting=True) == 500
    assert silence_needed(RULES, "He that,", UNFINISHED, interrupting=True) == 1000
    assert silence_needed(RULES, "He that,", FINISHED) == 160
    assert silence_needed(RULES, "He that,", SURE, interrupting=True) == 500
    # Over the agent a sure sound shortens nothing: an interruption's clipped "Wait," read
    # "What do you?" is a finished sentence, and "that sounds like too much" follows its
    # comma pause (taken as two turns in a CI run when it did).
    assert silence_needed(RULES, "What do you?", SURE, interrupting=True) == 250
    assert silence_needed(RULES, "What do you?", SURE) == 96


def test_a_sure_sound_never_makes_a_turn_wait_longer() -> None:
    slow = EndpointRules(complete_ms=64, incomplete_ms=1000, unknown_ms=500, speculate_ms=32,
                         sound_done_ms=80, sound_threshold=0.5, sound_hold_below=0.2,
                         sound_sure_above=0.9, sure_ms=250)
    assert silence_needed(slow, "What time do you open tomorrow?", SURE) == 64
    assert silence_needed(slow, "It was the epoch of belief,", SURE) == 80


@pytest.mark.parametrize(("words", "silence_ms"), [
    # A verdict on its way is waited for up to the plain silence, never past the words' own.
    ("What time do you open tomorrow?", 500),
    ("Six people,", 500),
    ("I'd like a table for", 1000),
])
def test_a_verdict_on_its_way_holds_a_turn_up_to_the_plain_silence(words: str,
                                                                  silence_ms: int) -> None:
    assert silence_needed(RULES, words, sound_pending=True) == silence_ms


def test_before_the_words_are_known_the_plain_silence_holds_whatever_the_sound() -> None:
    assert silence_needed(RULES, None, FINISHED) == 500
    assert silence_needed(RULES, None, UNFINISHED) == 500


OVERRIDES = {"complete_ms": 250, "incomplete_ms": 900, "unknown_ms": 500, "speculate_ms": 128,
             "sound_done_ms": 160}


async def _ended_after(said: str, sounds: list[float | Exception], verdict_s: float = 0.0,
                       overrides: dict[str, int] | None = None) -> tuple[int, Harness]:
    h = Harness(transcripts=[said], partials=[said], replies=["Okay."], greeting="",
                overrides={**OVERRIDES, **(overrides or {})}, sounds=sounds,
                turn_end_delay=verdict_s)
    task = await h.start()
    h.mic.say(speech(0.6))
    await h.run_until(lambda: len(h.events(UserSpeechEnded)) == 1)
    await stop(task)
    return h.events(UserSpeechEnded)[0].silence_ms, h  # type: ignore[attr-defined]


@pytest.mark.parametrize(("said", "sound", "silence_ms"), [
    ("Four people,", FINISHED, 160),
    ("Four people,", UNFINISHED, 928),
    ("What time do you open?", FINISHED, 256),
    ("It's for my daughter's birthday.", UNFINISHED, 928),
    ("Wait,", FINISHED, 512),
    ("I'd like a table for", FINISHED, 928),
])
async def test_the_loop_ends_a_turn_by_its_words_and_its_sound(
        said: str, sound: float, silence_ms: int) -> None:
    waited, h = await _ended_after(said, [sound])
    # 32 ms frames: the first frame at or past each silence.
    assert waited == silence_ms
    assert h.turn_end is not None and len(h.turn_end.asked_samples) == 1
    assert h.events(UserSpeechEnded)[0].sounded_finished == sound  # type: ignore[attr-defined]
    assert [e.text for e in h.events(UserTurn)] == [said]  # type: ignore[attr-defined]


@pytest.mark.parametrize(("said", "sound", "verdict_s", "silence_ms"), [
    # Back at 128 + 200 ms: a finished sentence ends then, or is held by an unfinished sound.
    ("What time do you open?", FINISHED, 0.2, 352),
    ("It's for my daughter's birthday.", UNFINISHED, 0.2, 928),
    # Not back by the plain silence: the words decide then.
    ("What time do you open?", UNFINISHED, 1.0, 512),
    ("Four people,", FINISHED, 1.0, 512),
    ("I'd like a table for", FINISHED, 0.2, 928),
])
async def test_a_verdict_on_its_way_is_waited_for_up_to_the_plain_silence(
        said: str, sound: float, verdict_s: float, silence_ms: int) -> None:
    waited, h = await _ended_after(said, [sound], verdict_s)
    assert waited == silence_ms
    answered = h.events(UserSpeechEnded)[0].sounded_finished  # type: ignore[attr-defined]
    assert answered == (sound if verdict_s < 0.5 else None)


@pytest.mark.parametrize(("said", "silence_ms"), [
    # The words and the verdict come back on the frame after the speculation (128 ms): the
    # turn ends there, not at the words' silence (256) or the sound's (400 here).
    ("What time do you open?", 160),
    ("Four people,", 160),
    # Where the words do not let the sound decide, a sure sound changes nothing.
    ("Wait,", 512),
    ("I'd like a table for", 928),
])
async def test_a_sound_sure_the_turn_is_finished_ends_it_once_the_words_are_known(
        said: str, silence_ms: int) -> None:
    waited, h = await _ended_after(said, [SURE], overrides={"sound_done_ms": 400})
    assert waited == silence_ms
    assert [e.text for e in h.events(UserTurn)] == [said]  # type: ignore[attr-defined]


async def test_the_model_hears_the_turn_from_before_its_onset_to_the_silence() -> None:
    _, h = await _ended_after("Four people,", [FINISHED])
    assert h.turn_end is not None
    (asked,) = h.turn_end.asked_samples
    # The pre-roll (256 ms) before the onset, 0.6 s of speech, 128 ms of silence (whole frames).
    assert 16000 * (0.6 + 0.128) <= asked <= 16000 * (0.256 + 0.6 + 0.128 + 0.064)


async def test_a_model_that_fails_leaves_the_words_to_decide_and_says_so_once() -> None:
    failures: list[float | Exception] = [RuntimeError("onnxruntime: bad input")]
    h = Harness(transcripts=["Four people,", "and a dog"], partials=["Four people,", "and a dog"],
                replies=["Okay.", "Fine."], greeting="", overrides=OVERRIDES, sounds=failures)
    task = await h.start()
    h.mic.say(speech(0.6) + silence(3 * 16000) + speech(0.6, seed=2))
    await h.run_until(lambda: len(h.events(UserSpeechEnded)) == 2)
    await stop(task)
    assert h.turn_end is not None and len(h.turn_end.asked_samples) == 2
    assert [e.silence_ms for e in h.events(UserSpeechEnded)] == [512, 512]  # type: ignore[attr-defined]
    assert [e.sounded_finished for e in h.events(UserSpeechEnded)] == [None, None]  # type: ignore[attr-defined]
    notices = [e.text for e in h.events(Notice) if "end-of-turn" in e.text]  # type: ignore[attr-defined]
    assert notices == ["the end-of-turn model failed (onnxruntime: bad input); the words alone "
                       "decide when a turn ends"]


async def test_speech_that_resumes_asks_the_model_again_with_the_longer_turn() -> None:
    # "Four people," then, after a pause the model would call the end, more words.
    h = Harness(transcripts=["Four people, and a dog."], partials=["Four people,"],
                replies=["Okay."], greeting="", overrides={**OVERRIDES, "sound_done_ms": 400},
                sounds=[FINISHED, FINISHED])
    task = await h.start()
    h.mic.say(speech(0.6) + silence(int(0.3 * 16000)) + speech(0.5, seed=3))
    await h.run_until(lambda: len(h.events(UserSpeechEnded)) == 1)
    await stop(task)
    assert h.events(SpeculationCancelled)[0].reason == "speech resumed"  # type: ignore[attr-defined]
    assert h.turn_end is not None
    first, second = h.turn_end.asked_samples
    assert second > first + 16000 * 0.5
    assert [e.text for e in h.events(UserTurn)] == ["Four people, and a dog."]  # type: ignore[attr-defined]
