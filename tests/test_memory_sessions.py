"""Memory across restarts on the real loop (virtual clock, scripted fakes, a real database):
resume within the TTL, close and preload after it, checkpoints while a unit plays."""

from __future__ import annotations

import sqlite3
from datetime import datetime, timedelta
from pathlib import Path

from edge_agent.events import (
    Notice,
    PlaybackStarted,
    SessionStarted,
    UnitFinalized,
    UserSpeechStarted,
)
from edge_agent.memory.conversation_memory import utc_now
from edge_agent.memory.store import MemoryStore
from tests.fakes import speech
from tests.timeline import Harness, stop

FIRST = "Nice to meet you, Maria. Your booking is noted."


def _later(minutes: float) -> datetime:
    return utc_now() + timedelta(minutes=minutes)


async def _first_visit(db: Path) -> Harness:
    h = Harness(transcripts=["my name is Maria Garcia and my booking number is 4471"],
                replies=[FIRST], greeting="Hello there.", db_path=db)
    task = await h.start()
    await h.run_until(lambda: len(h.events(UnitFinalized)) == 1)  # the greeting, heard whole
    h.mic.say(speech(0.6))
    await h.run_until(lambda: len(h.events(UnitFinalized)) == 2)
    await stop(task)
    assert h.writer is not None
    await h.writer.close()  # the agent stops: the next one may write the database
    return h


async def test_a_restart_within_the_ttl_resumes_the_open_session(tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    first = await _first_visit(db)
    h = Harness(transcripts=["and what time is it"], replies=["It is nine."], greeting="Hello!",
                db_path=db, wall=lambda: _later(10))
    task = await h.start()
    await h.run_until(lambda: bool(h.events(SessionStarted)))
    assert [(e.session, e.how) for e in h.events(SessionStarted)] == [(1, "resumed")]  # type: ignore[attr-defined]
    h.mic.say(speech(0.6))
    await h.run_until(lambda: len(h.events(UnitFinalized)) == 1)
    await stop(task)

    assert h.memory.session_ids == first.memory.session_ids  # the same session goes on
    assert h.llm.requests[0][1:] == [
        {"role": "assistant", "content": "Hello there."},
        {"role": "user", "content": "my name is Maria Garcia and my booking number is 4471"},
        {"role": "assistant", "content": FIRST},
        {"role": "user", "content": "and what time is it"}]
    # No greeting on resume; units are numbered after the ones the session already has.
    assert [e.finalize.unit_id for e in h.events(UnitFinalized)] == ["u3"]  # type: ignore[attr-defined]
    record = await h.record()
    assert [t["text"] for t in record["turns"]] == [
        "Hello there.", "my name is Maria Garcia and my booking number is 4471", FIRST,
        "and what time is it", "It is nine."]
    assert [u["unit_id"] for u in record["units"]] == ["u1", "u2", "u3"]


async def test_after_the_ttl_the_session_is_closed_and_its_memory_preloaded(
        tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    first = await _first_visit(db)
    h = Harness(transcripts=["the table for Garcia, at eight"], replies=["Of course."],
                greeting="Hello!", db_path=db, wall=lambda: _later(24 * 60))
    task = await h.start()
    await h.run_until(lambda: len(h.events(UnitFinalized)) == 1)
    h.mic.say(speech(0.6))
    await h.run_until(lambda: len(h.events(UnitFinalized)) == 2)
    await stop(task)

    assert [e.how for e in h.events(SessionStarted)] == ["start-up"]  # type: ignore[attr-defined]
    assert h.memory.session_ids != first.memory.session_ids
    system = h.llm.requests[0][0]["content"]
    assert "name: Maria Garcia" in system and "booking id: 4471" in system
    assert "Their previous visit: " in system and "Maria Garcia" in system
    store = MemoryStore.open_reader(db)  # a reader: the agent still holds the writer lock
    old = store.session(first.memory.session_ids[0])
    assert old is not None and old["state"] == "closed"
    summary = store.latest_summary(old["id"], "session")
    assert summary is not None and summary["last_seq"] == 2
    assert store.profile("anonymous")["name"] == "Maria Garcia"  # type: ignore[index]


async def test_a_playing_unit_is_checkpointed_and_recovered_no_further_than_played(
        tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    long_reply = "We have three tables free tonight, at seven, at eight and at nine o'clock."
    h = Harness(transcripts=["any tables tonight"], replies=[long_reply], greeting="",
                db_path=db)
    task = await h.start()
    h.mic.say(speech(0.6))
    await h.run_until(lambda: h.speaker.played_frames() > 16000 * 1.9)
    played_ms = h.speaker.played_frames() * 1000 / 16000
    assert h.writer is not None
    await h.writer.flushed()
    # The agent "dies" here: nothing more is written, and the kernel lets its writer lock go.
    # A new agent starts on the same file.
    assert h.writer.store.lock is not None
    h.writer.store.lock.release()
    store = MemoryStore.open_reader(db)
    (row,) = store.units(h.memory.session_ids, state="playing")
    assert long_reply.startswith(row["heard"]) and row["heard"]
    assert played_ms - 300 <= row["played_ms"] <= played_ms
    words_done = [w for w in long_reply.split()][: len(row["heard"].split())]
    assert row["heard"] == " ".join(words_done)
    store.close()

    after = Harness(transcripts=[], replies=[], greeting="", db_path=db,
                    wall=lambda: _later(1))
    resumed = await after.memory.start()
    assert resumed is not None
    assert [(t.role, t.text, t.generated) for t in resumed.turns][-1] == (
        "assistant", row["heard"], row["generated"])
    (notice,) = [n.text for n in after.events(Notice)]  # type: ignore[attr-defined]
    assert notice == resumed.recovered[0]
    assert notice.startswith(f"{row['unit_id']}: recovered after a crash, heard {row['heard']!r}")
    await stop(task)


async def test_what_the_model_is_sent_is_on_disk_first(tmp_path: Path) -> None:
    """Every turn before a request is committed when it is sent (a speculative request's own
    user turn is not a turn yet); the user turn is committed before its answer is heard."""
    db = tmp_path / "memory.db"
    at_request: list[list[tuple[str, str]]] = []
    at_playback: list[list[tuple[str, str]]] = []

    def on_disk() -> list[tuple[str, str]]:
        with sqlite3.connect(db) as reader:  # another connection: only committed rows
            return list(reader.execute("SELECT role, heard FROM turns ORDER BY seq"))

    h = Harness(transcripts=["a table for two", "at eight"], replies=["Sure.", "Done."],
                greeting="Hello there.", db_path=db,
                on_request=lambda _: at_request.append(on_disk()))
    h.log.listen(lambda e: isinstance(e.event, PlaybackStarted) and at_playback.append(on_disk()))
    task = await h.start()
    await h.run_until(lambda: len(h.events(UnitFinalized)) == 1)
    h.mic.say(speech(0.6))
    await h.run_until(lambda: len(h.events(UnitFinalized)) == 2)
    h.mic.say(speech(0.6))
    await h.run_until(lambda: len(h.events(UnitFinalized)) == 3)
    await stop(task)
    greeting, first, sure, second = (("assistant", "Hello there."), ("user", "a table for two"),
                                     ("assistant", "Sure."), ("user", "at eight"))
    assert [m[-1]["content"] for m in h.llm.requests] == ["a table for two", "at eight"]
    assert at_request == [[greeting], [greeting, first, sure]]
    assert at_playback[1:] == [[greeting, first], [greeting, first, sure, second]]


async def test_speech_onset_stops_background_model_work(tmp_path: Path) -> None:
    h = Harness(transcripts=["hello"], replies=["Hi."], greeting="", db_path=tmp_path / "m.db")
    task = await h.start()
    await h.clock.advance(0.5)
    assert not h.memory.stop_background.is_set()
    h.mic.say(speech(0.6))
    await h.run_until(lambda: bool(h.events(UserSpeechStarted)))
    assert h.memory.stop_background.is_set()
    await stop(task)
