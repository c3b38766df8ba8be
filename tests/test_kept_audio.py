"""`[memory] keep_audio`: the caller's segments and the played units in the memory database
(the real loop on a virtual clock with scripted fakes, a real SQLite file)."""

from __future__ import annotations

from pathlib import Path

from edge_agent.config import Config
from edge_agent.events import PlaybackStarted, UnitFinalized, UserSpeechEnded, UserSpeechStarted
from edge_agent.memory.kept_audio import kept_audio
from edge_agent.memory.record import session_record
from edge_agent.memory.store import MemoryStore
from tests.fakes import speech
from tests.timeline import Harness, stop

REPLY = "We have three tables free tonight at seven and at eight."


async def _barge_in_call(tmp_path: Path, keep_audio: bool) -> Harness:
    h = Harness(transcripts=["book a table", "seven pm"], replies=[REPLY, "Done."],
                db_path=tmp_path / "m.db", keep_audio=keep_audio)
    task = await h.start()
    await h.run_until(lambda: len(h.events(UnitFinalized)) == 1)  # the greeting
    h.mic.say(speech(1.0))
    await h.run_until(lambda: len(h.events(PlaybackStarted)) == 2)
    await h.clock.advance(1.2)
    h.mic.say(speech(0.6))  # cuts the reply
    await h.run_until(lambda: len(h.events(UnitFinalized)) == 3)
    await stop(task)
    assert h.writer is not None
    await h.writer.close()  # one writer per database: the test's store is the next
    return h


async def test_kept_audio_holds_each_caller_segment_and_what_each_unit_played(
        tmp_path: Path) -> None:
    h = await _barge_in_call(tmp_path, keep_audio=True)
    store = MemoryStore.open(tmp_path / "m.db")
    clips = kept_audio(store, h.memory.session_ids)
    caller = [c for c in clips if c.kind == "caller"]
    agent = [c for c in clips if c.kind == "agent"]
    assert [c.ref for c in caller] == ["c1", "c2"]
    assert {c.run_id for c in clips} == {h.memory.run_id}

    # Each caller clip runs from its pre-roll to the end of its turn, on the events' clock.
    starts, ends = h.at(UserSpeechStarted), h.at(UserSpeechEnded)
    for clip, started, ended in zip(caller, starts, ends, strict=True):
        assert clip.sample_rate == h.mic.sample_rate
        assert clip.at < started < ended
        assert abs(clip.at + clip.seconds - ended) <= 0.04  # one frame
        assert clip.seconds >= 0.6  # the speech itself is inside

    # Each unit's clip starts at its PlaybackStarted and holds exactly what was played.
    finalized = [e.finalize for e in h.events(UnitFinalized)]  # type: ignore[attr-defined]
    assert [c.ref for c in agent] == [f.unit_id for f in finalized]
    for clip, finalize, started_at in zip(agent, finalized, h.at(PlaybackStarted), strict=True):
        assert clip.at == round(started_at, 4)
        assert len(clip.pcm) == 2 * finalize.played_samples
    cut = finalized[1]
    assert cut.heard != cut.generated  # the barge-in: its clip ends where playback stopped,
    assert cut.words[-1].end_sample > cut.played_samples  # before the reply's last word

    # The record's events say which run's clock their times are on.
    record = session_record(store, h.memory.session_ids)
    assert {e["run_id"] for e in record["events"]} == {h.memory.run_id}

    # Forgetting the session forgets its audio.
    store.delete_session(h.memory.session_ids[0])
    assert kept_audio(store, h.memory.session_ids) == []
    store.close()


async def test_no_audio_is_kept_by_default(tmp_path: Path) -> None:
    assert Config().memory.keep_audio is False
    h = await _barge_in_call(tmp_path, keep_audio=False)
    store = MemoryStore.open(tmp_path / "m.db")
    assert kept_audio(store, h.memory.session_ids) == []
    store.close()
