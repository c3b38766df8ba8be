"""The venue's knowledge in the loop (virtual clock, scripted fakes, the real knowledge): its
own answers are units like any other, with no model call; heard truth still rules."""

from __future__ import annotations

from pathlib import Path

from edge_agent.events import (
    BargeIn,
    KnowledgeUsed,
    LlmRequest,
    PlaybackStarted,
    SpeculationCancelled,
    TurnStage,
    UnitFinalized,
)
from edge_agent.knowledge.ground import NOTE_HEADER
from tests.fakes import speech
from tests.test_knowledge_lookup import FALLBACK, _knowledge, _venue
from tests.timeline import Harness, stop

MODEL = "A reply from the model."


async def _two_turns(h: Harness) -> None:
    """The caller says two things, each once the agent has answered the one before."""
    task = await h.start()
    for answered in (1, 2):
        h.mic.say(speech(0.6))
        await h.run_until(lambda answered=answered: len(h.events(UnitFinalized)) == answered)
    await stop(task)


async def test_a_direct_answer_is_a_unit_with_no_model_call(tmp_path: Path) -> None:
    knowledge = _knowledge(_venue(tmp_path))
    h = Harness(transcripts=["how much is an adult ticket", "hello"], replies=[MODEL],
                partials=["how much is an adult ticket", "hello"], greeting="",
                knowledge=knowledge, db_path=tmp_path / "memory.db")
    await _two_turns(h)
    said, chat = (e.finalize for e in h.events(UnitFinalized))  # type: ignore[attr-defined]
    assert said.generated == said.heard == "An adult ticket costs 14 euros."
    # The knowledge answered the first turn itself: no request, no model stages; the model
    # answered the small talk, and saw the whole exchange in history.
    assert len(h.llm.requests) == 1 and chat.generated == MODEL
    assert h.llm.requests[0][1:] == [
        {"role": "user", "content": "how much is an adult ticket"},
        {"role": "assistant", "content": "An adult ticket costs 14 euros."},
        {"role": "user", "content": "hello"}]
    used = h.events(KnowledgeUsed)
    assert [(u.how, u.entries) for u in used] == [("direct", ("venue.toml:10",)),  # type: ignore[attr-defined]
                                                   ("chat", ())]
    assert [e.turn for e in h.events(LlmRequest)] == [2]  # type: ignore[attr-defined]
    first_stages = [e.stage for e in h.events(TurnStage) if e.turn == 1]  # type: ignore[attr-defined]
    assert "request" not in first_stages and "first_audio" in first_stages
    # Prepared while the silence ran, like any answer, and used.
    assert ("transcript", True) in [(e.stage, e.speculative) for e in h.events(TurnStage)  # type: ignore[attr-defined]
                                    if e.turn == 1]  # type: ignore[attr-defined]
    assert h.events(SpeculationCancelled) == []
    record = await h.record()
    assert [r["turn"] for r in record["llm_requests"]] == [2]
    assert [u["heard"] for u in record["units"]] == [said.heard, MODEL]


async def test_a_cut_direct_answer_keeps_only_what_was_heard(tmp_path: Path) -> None:
    knowledge = _knowledge(_venue(tmp_path))
    h = Harness(transcripts=["how much are tickets", "wait, hello"], replies=[MODEL],
                greeting="", knowledge=knowledge)
    task = await h.start()
    h.mic.say(speech(0.6))
    await h.run_until(lambda: len(h.events(PlaybackStarted)) == 1)
    await h.clock.advance(1.5)  # FakeSpeech: word k plays over [400k, 400k + 300) ms
    h.mic.say(speech(0.6))
    await h.run_until(lambda: len(h.events(UnitFinalized)) == 2)
    await stop(task)
    assert len(h.events(BargeIn)) == 1
    cut = h.events(UnitFinalized)[0].finalize  # type: ignore[attr-defined]
    assert cut.generated == ("An adult ticket costs 14 euros. Children under 12 go free. "
                             "Students pay 9 euros.")
    assert cut.heard == "An adult ticket costs"
    # The next prompt knows the caller did not get the price.
    assert h.llm.requests[0][-2:] == [
        {"role": "assistant", "content": "An adult ticket costs [interrupted]"},
        {"role": "user", "content": "wait, hello"}]


async def test_a_question_the_knowledge_does_not_cover_gets_the_fallback_line(
        tmp_path: Path) -> None:
    knowledge = _knowledge(_venue(tmp_path))
    h = Harness(transcripts=["what is the wifi password"], replies=[MODEL], greeting="",
                knowledge=knowledge)
    task = await h.start()
    h.mic.say(speech(0.6))
    await h.run_until(lambda: len(h.events(UnitFinalized)) == 1)
    await stop(task)
    assert h.events(UnitFinalized)[0].finalize.generated == FALLBACK  # type: ignore[attr-defined]
    assert h.llm.requests == [] and h.llm.withdrawn == []
    (used,) = h.events(KnowledgeUsed)
    assert used.how == "fallback"  # type: ignore[attr-defined]


async def test_the_model_gets_the_entries_before_the_words_and_history_stays_clean(
        tmp_path: Path) -> None:
    knowledge = _knowledge(_venue(tmp_path), direct="off")
    h = Harness(transcripts=["where can i park", "thanks"], replies=[MODEL, "Bye."],
                greeting="", knowledge=knowledge)
    await _two_turns(h)
    first, second = h.llm.requests
    asked = first[-1]["content"]
    assert asked.startswith(NOTE_HEADER + "\n- Parking: There is no car park")
    assert asked.endswith("\n\nwhere can i park")
    # Only in that request: the next one has the caller's words as they were said.
    assert second[1:] == [{"role": "user", "content": "where can i park"},
                          {"role": "assistant", "content": MODEL},
                          {"role": "user", "content": "thanks"}]
    assert [list(e.messages) for e in h.events(LlmRequest)] == [first, second]  # type: ignore[attr-defined]
    model_used = h.events(KnowledgeUsed)[0]
    assert model_used.how == "model" and model_used.entries[0] == "venue.md:3"  # type: ignore[attr-defined]


async def test_a_knowledge_file_changed_while_running_is_answered_from_at_once(
        tmp_path: Path) -> None:
    files = _venue(tmp_path)
    knowledge = _knowledge(files)
    h = Harness(transcripts=["where can i park"], replies=[MODEL], greeting="",
                knowledge=knowledge)
    task = await h.start()
    text = files[1].read_text(encoding="utf-8").replace("3 euros", "7 euros")
    files[1].write_text(text, encoding="utf-8")
    await h.clock.advance(2.5)  # [knowledge] reload_s: 2
    h.mic.say(speech(0.6))
    await h.run_until(lambda: len(h.events(UnitFinalized)) == 1)
    await stop(task)
    assert "7 euros an hour" in h.events(UnitFinalized)[0].finalize.generated  # type: ignore[attr-defined]
