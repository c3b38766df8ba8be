"""The wake word in the loop, on a virtual clock: while waiting only the VAD and the wake word
model hear the room; the word opens a session (greeted, or the words after it answered); said
over the agent it cuts in; an idle session ends and the room is not transcribed again."""

from __future__ import annotations

from pathlib import Path

from edge_agent.events import (
    BargeIn,
    PlaybackStarted,
    SessionEnded,
    SessionStarted,
    SpeculationCancelled,
    UnitFinalized,
    UserSpeechStarted,
    UserTurn,
)
from edge_agent.memory.kept_audio import kept_audio
from edge_agent.memory.store import MemoryStore
from tests.fakes import FakeRecognizer, FakeWakeWord, speech, wake_word
from tests.timeline import Harness, stop

RATE = 16000


def harness(transcripts: list[str], replies: list[str], **overrides: object) -> Harness:
    return Harness(transcripts=transcripts, replies=list(replies), greeting="Yes?",
                   wake=FakeWakeWord(),
                   overrides={"session_start": "wake", "idle_end_s": 5.0, **overrides})


def recognizer(h: Harness) -> FakeRecognizer:
    stt = h.conversation._engines.stt
    assert isinstance(stt, FakeRecognizer)
    return stt


def heard(h: Harness) -> list[str]:
    return [f.finalize.heard for f in h.events(UnitFinalized)]  # type: ignore[attr-defined]


async def test_the_room_is_not_transcribed_until_the_wake_word_which_the_greeting_answers() -> None:
    h = harness(["", "what time do you open"], ["At nine."])
    task = await h.start()
    h.mic.say(speech(1.5, seed=2))  # somebody talking near the kiosk
    await h.clock.advance(3.0)
    assert h.events(SessionStarted) == [] and h.events(UserSpeechStarted) == []
    assert recognizer(h).heard_samples == 0  # nothing of it reached the recognizer
    assert h.conversation._engines.wake.heard_samples >= 1.5 * RATE  # type: ignore[union-attr]

    h.mic.say(wake_word(0.5))
    await h.run_until(lambda: len(h.events(UnitFinalized)) == 1)
    assert [(e.session, e.how) for e in h.events(SessionStarted)] == [(1, "wake")]  # type: ignore[attr-defined]
    assert heard(h) == ["Yes?"]
    # The wake word itself was not transcribed: the recognizer heard from its end on.
    assert recognizer(h).heard_samples < 0.5 * RATE
    h.mic.say(speech(0.6))
    await h.run_until(lambda: len(h.events(UnitFinalized)) == 2)
    await stop(task)
    assert heard(h) == ["Yes?", "At nine."]
    assert [t.text for t in h.events(UserTurn)] == ["what time do you open"]  # type: ignore[attr-defined]


async def test_words_right_after_the_wake_word_are_the_first_turn_without_a_greeting() -> None:
    h = harness(["what time do you open"], ["At nine."])
    task = await h.start()
    h.mic.say(wake_word(0.5) + speech(0.8))
    await h.run_until(lambda: len(h.events(UnitFinalized)) == 1)
    await stop(task)
    assert heard(h) == ["At nine."]
    assert h.llm.requests[0][-1] == {"role": "user", "content": "what time do you open"}
    # From the wake word's end (64 ms back) and the silence that ended the turn: not the word.
    fed = recognizer(h).heard_samples / RATE
    assert 0.8 <= fed < 0.8 + 0.5, fed


async def test_the_wake_word_over_the_agent_cuts_in_and_what_follows_is_answered() -> None:
    long_reply = "Our opening hours are long and varied and I will tell you all of them now."
    # Words alone would need 6 to cut in: here the wake word does, at its end.
    h = harness(["", "tell me your hours", "and on sundays"], [long_reply, "At ten."],
                barge_in_min_words=6)
    task = await h.start()
    h.mic.say(wake_word(0.5))
    await h.run_until(lambda: len(h.events(UnitFinalized)) == 1)  # "Yes?"
    h.mic.say(speech(0.6))
    await h.run_until(lambda: len(h.events(PlaybackStarted)) == 2)
    await h.clock.advance(1.0)
    h.mic.say(wake_word(0.5) + speech(0.7))
    await h.run_until(lambda: len(h.events(UnitFinalized)) == 3)
    await stop(task)
    [barge] = h.events(BargeIn)
    assert barge.by == "wake"  # type: ignore[attr-defined]
    cut = h.events(UnitFinalized)[1].finalize  # type: ignore[attr-defined]
    assert cut.heard and cut.heard != long_reply
    assert [t.text for t in h.events(UserTurn)][-1] == "and on sundays"  # type: ignore[attr-defined]
    assert heard(h)[-1] == "At ten."


async def test_an_idle_session_ends_and_the_room_is_not_transcribed_again() -> None:
    h = harness(["hello"], ["Hi."])
    task = await h.start()
    h.mic.say(wake_word(0.5) + speech(0.5))
    await h.run_until(lambda: len(h.events(SessionEnded)) == 1)
    fed = recognizer(h).heard_samples
    h.mic.say(speech(1.0, seed=3))
    await h.clock.advance(3.0)
    await stop(task)
    assert recognizer(h).heard_samples == fed
    assert len(h.events(SessionStarted)) == 1 and heard(h) == ["Hi."]


async def test_only_the_callers_words_are_kept_never_the_room_or_the_wake_word(
        tmp_path: Path) -> None:
    h = Harness(transcripts=["", "what time do you open", "and on sundays"],
                replies=["At nine.", "At ten."], greeting="Yes?", wake=FakeWakeWord(),
                db_path=tmp_path / "m.db", keep_audio=True,
                overrides={"session_start": "wake"})
    task = await h.start()
    h.mic.say(speech(1.0, seed=2))  # the room, before the wake word
    await h.clock.advance(2.0)
    h.mic.say(wake_word(0.5))  # alone: the greeting answers it
    await h.run_until(lambda: len(h.events(UnitFinalized)) == 1)
    h.mic.say(speech(0.6))
    await h.run_until(lambda: len(h.events(UnitFinalized)) == 2)
    h.mic.say(wake_word(0.5) + speech(0.6))  # the word and a question, in the open session
    await h.run_until(lambda: len(h.events(UnitFinalized)) == 3)
    await stop(task)
    assert h.writer is not None
    await h.writer.close()
    clips = [c for c in kept_audio(MemoryStore.open(tmp_path / "m.db"), h.memory.session_ids)
             if c.kind == "caller"]
    assert [c.ref for c in clips] == ["c1", "c2"]
    # Each holds the words after the wake word: ~0.6 s and the silence that ended the turn.
    assert all(0.6 <= c.seconds <= 1.1 for c in clips), [c.seconds for c in clips]
    assert [t.text for t in h.events(UserTurn)] == ["what time do you open", "and on sundays"]  # type: ignore[attr-defined]


async def test_in_an_open_session_the_words_start_after_the_wake_word_even_past_a_pause() -> None:
    # The model fires 0.2 s after the word: the pause after it was already taken for the end of
    # the words so far (speculated, an answer prepared); those are dropped, and the recognizer
    # hears again from the word's end.
    h = Harness(transcripts=["", "what time do you open"], replies=["Yes?", "At nine."],
                greeting="Yes?", wake=FakeWakeWord(late_s=0.2),
                overrides={"session_start": "wake", "idle_end_s": 30.0})
    task = await h.start()
    h.mic.say(wake_word(0.5))
    await h.run_until(lambda: len(h.events(UnitFinalized)) == 1)  # "Yes?"
    h.mic.say(wake_word(0.5) + bytes(2 * RATE // 4) + speech(0.8))
    await h.run_until(lambda: len(h.events(UnitFinalized)) == 2)
    await stop(task)
    assert "the wake word" in [e.reason for e in h.events(SpeculationCancelled)]  # type: ignore[attr-defined]
    assert [t.text for t in h.events(UserTurn)] == ["what time do you open"]  # type: ignore[attr-defined]
    assert h.llm.requests[-1][-1] == {"role": "user", "content": "what time do you open"}
    # From 64 ms before the model fired: the pause's end, the words, the silence after them.
    fed = recognizer(h).fed_samples / RATE
    assert 0.8 <= fed < 0.8 + 0.1 + 0.5, fed
