"""Kiosk sessions on a virtual clock: opened by speech or a wake phrase, ended when idle, the
next one fresh."""

from __future__ import annotations

from edge_agent.events import LlmRequest, Notice, SessionEnded, SessionStarted, UnitFinalized
from tests.fakes import speech
from tests.timeline import Harness, stop


async def test_speech_opens_a_session_and_idle_ends_it_the_next_starts_fresh() -> None:
    h = Harness(transcripts=["what time do you open", "and on sunday"],
                replies=["At nine.", "At ten."], greeting="Hello!",
                overrides={"session_start": "speech", "idle_end_s": 5.0})
    task = await h.start()
    await h.clock.advance(3.0)
    assert h.events(SessionStarted) == [] and h.events(UnitFinalized) == []  # no greeting
    h.mic.say(speech(0.6))
    await h.run_until(lambda: len(h.events(UnitFinalized)) == 1)
    assert [(e.session, e.how) for e in h.events(SessionStarted)] == [(1, "speech")]  # type: ignore[attr-defined]
    finished = h.at(UnitFinalized)[0]
    await h.run_until(lambda: len(h.events(SessionEnded)) == 1)
    assert 4.9 <= h.at(SessionEnded)[0] - finished <= 5.2
    h.mic.say(speech(0.6))
    await h.run_until(lambda: len(h.events(UnitFinalized)) == 2)
    await stop(task)

    assert [(e.session, e.how) for e in h.events(SessionStarted)] == [  # type: ignore[attr-defined]
        (1, "speech"), (2, "speech")]
    # The next session starts with an empty history; what it knows of the previous one is
    # the end-of-session summary in the system message (heard text only).
    system, user = h.llm.requests[1]
    assert user == {"role": "user", "content": "and on sunday"}
    assert system["content"].startswith("SYSTEM\n\nMemory")
    assert "Their previous visit: " in system["content"] and "At nine." in system["content"]
    assert [[t.text for t in history.turns] for history in h.conversation.histories] == [
        ["what time do you open", "At nine."], ["and on sunday", "At ten."]]
    assert [r.turn for r in h.events(LlmRequest)] == [1, 2]  # type: ignore[attr-defined]


async def test_wake_phrase_opens_the_session_and_other_speech_is_not_answered() -> None:
    h = Harness(transcripts=["what time is it", "hello kiosk", "what time do you open"],
                replies=["At nine."], greeting="Hi, how can I help?",
                overrides={"session_start": "wake", "wake_phrase": "Hello, kiosk"})
    task = await h.start()
    h.mic.say(speech(0.6))
    await h.run_until(lambda: len(h.events(Notice)) == 1)
    assert "not the wake phrase" in h.events(Notice)[0].text  # type: ignore[attr-defined]
    h.mic.say(speech(0.6))
    await h.run_until(lambda: len(h.events(UnitFinalized)) == 1)  # the greeting
    h.mic.say(speech(0.6))
    await h.run_until(lambda: len(h.events(UnitFinalized)) == 2)
    await stop(task)
    assert [f.finalize.heard for f in h.events(UnitFinalized)] == [  # type: ignore[attr-defined]
        "Hi, how can I help?", "At nine."]
    assert [(t.role, t.text) for t in h.conversation.history.turns] == [
        ("assistant", "Hi, how can I help?"), ("user", "what time do you open"),
        ("assistant", "At nine.")]


async def test_wake_phrase_followed_by_a_question_answers_the_question() -> None:
    h = Harness(transcripts=["hello kiosk what time do you open"], replies=["At nine."],
                greeting="Hi, how can I help?",
                overrides={"session_start": "wake", "wake_phrase": "hello kiosk"})
    task = await h.start()
    h.mic.say(speech(0.6))
    await h.run_until(lambda: len(h.events(UnitFinalized)) == 1)
    await stop(task)
    assert h.llm.requests[0][-1] == {"role": "user", "content": "what time do you open"}
    assert h.events(UnitFinalized)[0].finalize.heard == "At nine."  # type: ignore[attr-defined]
