"""The loop on a virtual clock with scripted fakes: barge-in, heard truth, history, prompts."""

from __future__ import annotations

from edge_agent.events import BargeIn, Notice, PlaybackStarted, TurnDropped, UnitFinalized, UserTurn
from tests.fakes import speech
from tests.timeline import Harness, stop

REPLY = "We have three tables free tonight. One at 7 PM, one at 8 PM."


async def test_barge_in_keeps_only_the_heard_words_and_marks_the_prompt() -> None:
    h = Harness(transcripts=["book a table", "seven pm"], replies=[REPLY, "Done."])
    task = await h.start()
    await h.run_until(lambda: len(h.events(UnitFinalized)) == 1)  # the greeting
    h.mic.say(speech(1.0))
    await h.run_until(lambda: len(h.events(PlaybackStarted)) == 2)
    reply_started = h.at(PlaybackStarted)[1]
    await h.clock.advance(1.2)
    h.mic.say(speech(0.6))
    await h.run_until(lambda: len(h.events(UnitFinalized)) == 2)
    cut = h.events(UnitFinalized)[1].finalize  # type: ignore[attr-defined]
    barge_at = h.at(BargeIn)[0]
    # Onset after 96 ms of speech, barge-in once 200 ms are heard and the recognizer has
    # answered (32 ms frames).
    assert 0.18 <= barge_at - reply_started - 1.2 <= 0.30
    assert abs(cut.played_ms - (barge_at - reply_started) * 1000) <= 1
    # FakeSpeech: word k spans [400k, 400k + 300) ms; "completed" counts words fully played.
    assert cut.generated == REPLY
    assert cut.heard == "We have three"
    await h.run_until(lambda: len(h.llm.requests) == 2)
    await h.run_until(lambda: len(h.events(UnitFinalized)) == 3)
    await stop(task)
    second_prompt = h.llm.requests[1]
    assert second_prompt == [
        {"role": "system", "content": "SYSTEM"},
        {"role": "assistant", "content": "Hello there."},
        {"role": "user", "content": "book a table"},
        {"role": "assistant", "content": "We have three [interrupted]"},
        {"role": "user", "content": "seven pm"},
    ]
    # Stored history is pure: the marker lives only in prompts.
    assert [t.text for t in h.conversation.history.turns] == [
        "Hello there.", "book a table", "We have three", "seven pm", "Done."]


async def test_unit_never_played_leaves_no_assistant_turn_and_user_commits_join() -> None:
    h = Harness(transcripts=["i want", "a table for two"], replies=["Sure thing.", "Okay."],
                greeting="", tts_delay=0.8)
    task = await h.start()
    h.mic.say(speech(0.6))
    await h.run_until(lambda: len(h.events(UserTurn)) == 1)
    # The user goes on talking before the reply's audio exists (TTS takes 0.8 s).
    h.mic.say(speech(0.6))
    await h.run_until(lambda: len(h.events(UnitFinalized)) == 1)
    never = h.events(UnitFinalized)[0].finalize  # type: ignore[attr-defined]
    assert never.generated == "Sure thing."
    assert never.heard == ""
    assert never.played_samples == 0
    await h.run_until(lambda: len(h.events(UnitFinalized)) == 2)
    await stop(task)
    turns = [(t.role, t.text) for t in h.conversation.history.turns]
    assert turns == [("user", "i want a table for two"), ("assistant", "Okay.")]
    assert h.llm.requests[1][-1] == {"role": "user", "content": "i want a table for two"}


async def test_speech_with_no_transcript_is_dropped_not_answered() -> None:
    h = Harness(transcripts=[""], replies=["Should never be said."], greeting="")
    task = await h.start()
    h.mic.say(speech(0.4))
    await h.run_until(lambda: len(h.events(TurnDropped)) == 1)
    await h.clock.advance(2.0)
    await stop(task)
    assert h.llm.requests == []
    assert h.events(UnitFinalized) == []
    assert h.conversation.history.turns == []


async def test_short_noise_does_not_start_a_turn_or_interrupt() -> None:
    h = Harness(transcripts=[], replies=[], greeting="One two three four five six seven.")
    task = await h.start()
    await h.run_until(lambda: len(h.events(PlaybackStarted)) == 1)
    h.mic.say(speech(0.05))  # a click: shorter than min_speech_ms
    await h.run_until(lambda: len(h.events(UnitFinalized)) == 1)
    await stop(task)
    greeting = h.events(UnitFinalized)[0].finalize  # type: ignore[attr-defined]
    assert greeting.heard == greeting.generated
    assert h.events(BargeIn) == []


async def test_empty_reply_finalizes_empty_and_adds_no_turn() -> None:
    h = Harness(transcripts=["hello"], replies=[""], greeting="")
    task = await h.start()
    h.mic.say(speech(0.5))
    await h.run_until(lambda: len(h.events(UnitFinalized)) == 1)
    await stop(task)
    empty = h.events(UnitFinalized)[0].finalize  # type: ignore[attr-defined]
    assert (empty.generated, empty.heard) == ("", "")
    assert [t.role for t in h.conversation.history.turns] == ["user"]
    assert any("empty" in n.text for n in h.events(Notice))  # type: ignore[attr-defined]


async def test_stopping_mid_reply_finalizes_at_the_played_position() -> None:
    h = Harness(transcripts=[], replies=[], greeting="Alpha beta gamma delta epsilon zeta.")
    task = await h.start()
    await h.run_until(lambda: len(h.events(PlaybackStarted)) == 1)
    await h.clock.advance(0.75)  # words end at 300 and 700 ms
    await stop(task)
    (finalize,) = [e.finalize for e in h.events(UnitFinalized)]  # type: ignore[attr-defined]
    assert finalize.heard == "Alpha beta"
    assert h.conversation.history.turns[0].text == "Alpha beta"
