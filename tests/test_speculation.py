"""Answers prepared while the user's silence runs, on a virtual clock with scripted fakes: used
when the turn really ended, thrown away without a trace when the user speaks again."""

from __future__ import annotations

import json
from pathlib import Path

from edge_agent.audio.pcm import silence
from edge_agent.engines.cpu_share import CpuShare
from edge_agent.events import (
    LlmRequest,
    PlaybackStarted,
    SpeculationCancelled,
    TurnStage,
    UnitFinalized,
    UserSpeechEnded,
    UserTurn,
)
from tests.fakes import FakeSpeech, ScriptedMeter, speech
from tests.timeline import Harness, stop

REPLY = "Sure, a table for two. What time?"


def _gap(seconds: float) -> bytes:
    return silence(int(seconds * 16000))


async def test_a_prepared_answer_is_used_when_the_turn_ends() -> None:
    h = Harness(transcripts=["a table for two"], replies=[REPLY], greeting="")
    task = await h.start()
    h.mic.say(speech(0.6))
    await h.run_until(lambda: len(h.events(UnitFinalized)) == 1)
    await h.run_until(lambda: len(h.llm.prewarmed) == 2)
    await stop(task)
    # The stable prompt was evaluated ahead: at start-up, and once the reply had played.
    assert h.llm.prewarmed == [
        [{"role": "system", "content": "SYSTEM"}],
        [{"role": "system", "content": "SYSTEM"},
         {"role": "user", "content": "a table for two"},
         {"role": "assistant", "content": REPLY}]]
    request = h.at(TurnStage)[[e.stage for e in h.events(TurnStage)].index("request")]
    ended = h.at(UserSpeechEnded)[0]
    # The request went out while the silence was still running...
    assert request < ended
    assert [(e.stage, e.speculative) for e in h.events(TurnStage)][:2] == [
        ("transcript", True), ("request", True)]
    # ...once: the reply used it, and its first piece ("Sure, ") was synthesized once.
    assert len(h.llm.requests) == 1 and h.llm.withdrawn == []
    assert h.tts.synthesized.count("Sure, ") == 1  # type: ignore[attr-defined]
    assert [list(e.messages) for e in h.events(LlmRequest)] == h.llm.requests  # type: ignore[attr-defined]
    assert h.events(SpeculationCancelled) == []
    # Nothing was played before the turn ended.
    assert h.at(PlaybackStarted)[0] >= ended


async def test_speech_that_resumes_throws_the_prepared_answer_away_without_a_trace(
        tmp_path: Path) -> None:
    h = Harness(transcripts=["i want a table for two"], replies=[REPLY, "Never said."],
                greeting="", db_path=tmp_path / "memory.db")
    task = await h.start()
    # A pause longer than speculate_after_ms (32) but shorter than the end of a turn (320).
    h.mic.say(speech(0.45) + _gap(0.25) + speech(0.6, seed=2))
    await h.run_until(lambda: len(h.events(UnitFinalized)) == 1)
    await stop(task)

    (cancelled,) = h.events(SpeculationCancelled)
    assert cancelled.turn == 1 and cancelled.reason == "speech resumed"  # type: ignore[attr-defined]
    # The thrown-away request was withdrawn: the scripted model gives its reply again.
    assert len(h.llm.withdrawn) == 1
    assert h.llm.withdrawn[0][-1]["content"] != "i want a table for two"
    assert len(h.llm.requests) == 1
    assert h.llm.requests[0][-1] == {"role": "user", "content": "i want a table for two"}
    # History, the requests on record and the record itself hold only the committed turn.
    assert [(t.role, t.text) for t in h.conversation.history.turns] == [
        ("user", "i want a table for two"), ("assistant", REPLY)]
    assert [e.text for e in h.events(UserTurn)] == ["i want a table for two"]  # type: ignore[attr-defined]
    record = await h.record()
    assert [r["messages"] for r in record["llm_requests"]] == h.llm.requests
    partial = h.llm.withdrawn[0][-1]["content"]
    assert all(m["content"] != partial for r in record["llm_requests"] for m in r["messages"])
    assert f'"{partial}"' not in json.dumps(record)
    # Nothing of it was played: the only unit is the committed reply, played after the turn.
    assert [e.finalize.generated for e in h.events(UnitFinalized)] == [REPLY]  # type: ignore[attr-defined]
    assert h.at(PlaybackStarted)[0] > h.at(SpeculationCancelled)[0]


async def test_a_final_transcript_that_differs_starts_the_answer_over() -> None:
    h = Harness(transcripts=["a table for two please"], partials=["a table for"],
                replies=[REPLY], greeting="")
    task = await h.start()
    h.mic.say(speech(0.6))
    await h.run_until(lambda: len(h.events(UnitFinalized)) == 1)
    await stop(task)
    (cancelled,) = h.events(SpeculationCancelled)
    assert cancelled.reason == "words changed"  # type: ignore[attr-defined]
    assert [r[-1]["content"] for r in h.llm.withdrawn] == ["a table for"]
    assert [r[-1]["content"] for r in h.llm.requests] == ["a table for two please"]
    assert [e.finalize.heard for e in h.events(UnitFinalized)] == [REPLY]  # type: ignore[attr-defined]


async def test_the_words_decide_how_much_silence_ends_a_turn() -> None:
    overrides = {"complete_ms": 200, "incomplete_ms": 900, "unknown_ms": 500}
    waits = {}
    for said in ("What time do you open?", "I'd like a table for", "what time do you open"):
        h = Harness(transcripts=[said], partials=[said], replies=["Okay."], greeting="",
                    overrides=overrides)
        task = await h.start()
        h.mic.say(speech(0.6))
        await h.run_until(lambda h=h: len(h.events(UserSpeechEnded)) == 1)
        await stop(task)
        waits[said] = h.events(UserSpeechEnded)[0].silence_ms  # type: ignore[attr-defined]
    # 32 ms frames: the first frame at or past each silence.
    assert waits == {"What time do you open?": 224, "I'd like a table for": 928,
                     "what time do you open": 512}


async def test_the_model_is_held_only_while_the_listener_waits_for_the_first_piece() -> None:
    """Prepared or not, a reply's first piece is synthesized with the model held (nothing is
    playing: the listener waits for it); the pieces after it are not (the first one plays)."""
    share = CpuShare(2, ScriptedMeter(0.0))
    # The first turn's words changed after it was prepared: the reply synthesizes its first
    # piece again itself. The second turn is answered from its preparation.
    h = Harness(transcripts=["a table for two", "at eight please"], partials=["a table"],
                replies=[REPLY, "Eight it is. See you then."], greeting="Hello there. Welcome.",
                tts=FakeSpeech(share=share), cpu=share)
    task = await h.start()
    await h.run_until(lambda: len(h.events(UnitFinalized)) == 1)
    h.mic.say(speech(0.6))
    await h.run_until(lambda: len(h.events(UnitFinalized)) == 2)
    h.mic.say(_gap(1.0) + speech(0.6, seed=2))
    await h.run_until(lambda: len(h.events(UnitFinalized)) == 3)
    await stop(task)
    voice = h.tts
    assert isinstance(voice, FakeSpeech)
    assert [(e.turn, e.reason) for e in h.events(SpeculationCancelled)] == [  # type: ignore[attr-defined]
        (1, "words changed")]
    assert list(zip(voice.synthesized, voice.listener_waited, strict=True)) == [
        ("Hello there. ", True), ("Welcome.", False),  # the greeting
        ("Sure, ", True),  # prepared, then thrown away
        ("Sure, ", True), ("a table for two. ", False), ("What time?", False),
        ("Eight it is. ", True), ("See you then.", False)]  # prepared and used
    assert not share.hold_while_listener_waits(at_most_s=0.0)  # nobody waits once it is over
