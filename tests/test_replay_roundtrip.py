"""`sessions replay` end to end on scripted fakes (no models): a call recorded on the virtual
clock into a real database, with its audio kept, then replayed from the record; the replay
decides everything as the recording did, and a changed setting shows."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from edge_agent.config import Config
from edge_agent.conversation.agent import Engines
from edge_agent.events import PlaybackStarted, UnitFinalized
from edge_agent.memory.kept_audio import kept_audio
from edge_agent.memory.store import MemoryStore
from edge_agent.replay.decisions import differences
from edge_agent.replay.report import report_lines
from edge_agent.replay.run import ReplayResult, replay_with
from tests.fakes import FakeLanguageModel, FakeRecognizer, FakeSpeech, FakeVad, speech
from tests.timeline import Harness, stop

TRANSCRIPTS = ["what time do you open", "wait what about sunday"]
HOURS = "We open at nine in the morning and close at eleven at night, every day of the week."


async def _record(tmp_path: Path) -> tuple[dict[str, Any], list[Any]]:
    # The voice takes 13.7 ms of virtual time per piece: units start between frames, as the
    # recorded agent's did on a real machine.
    h = Harness(transcripts=list(TRANSCRIPTS), replies=[HOURS, "On Sunday at ten."],
                db_path=tmp_path / "m.db", keep_audio=True, pause_on_speech=True,
                tts_delay=0.0137)
    task = await h.start()
    await h.run_until(lambda: len(h.events(UnitFinalized)) == 1)  # the greeting
    await h.clock.advance(0.3)
    h.mic.say(speech(1.0))
    await h.run_until(lambda: len(h.events(PlaybackStarted)) == 2)
    await h.clock.advance(1.2813)
    h.mic.say(speech(0.8, seed=2))  # "wait ...": cuts the reply
    await h.run_until(lambda: len(h.events(UnitFinalized)) == 3)
    await h.clock.advance(1.0)
    await stop(task)
    assert h.writer is not None
    record = dict(await h.record())
    await h.writer.flushed()
    clips = kept_audio(MemoryStore.open_reader(tmp_path / "m.db"), h.memory.session_ids)
    return record, clips


def _config(**turns: Any) -> Config:
    config = Config()
    return dataclasses.replace(
        config, vad=dataclasses.replace(config.vad, end_silence_ms=320),  # as the Harness's
        turns=dataclasses.replace(config.turns, **turns))


async def _replay(config: Config, record: dict[str, Any], clips: list[Any]) -> ReplayResult:
    engines = Engines(FakeVad(), FakeRecognizer(list(TRANSCRIPTS)), FakeLanguageModel([]),
                      FakeSpeech())
    return await replay_with(config, engines, record, clips, lambda text: speech(1.0),
                             printer=lambda line: None)


async def test_a_replay_of_the_recording_decides_everything_as_it_did(tmp_path: Path) -> None:
    record, clips = await _record(tmp_path)
    result = await _replay(_config(), record, clips)
    assert result.caller_audio == "kept clips"
    kinds = [d["kind"] for d in result.recorded]
    assert {"paused", "barge-in", "heard", "answered"} <= set(kinds)
    assert differences(result.rows) == 0, "\n".join(report_lines(result))
    cut = [d for d in result.replayed if d["kind"] == "heard" and d["interrupted"]]
    assert len(cut) == 1 and cut[0]["text"] and HOURS.startswith(cut[0]["text"])
    # The caller cut in relative to the reply, not at its recorded time.
    cue = result.lines[1].cue
    assert cue is not None and cue.event is PlaybackStarted and cue.unit == "u2"
    assert result.notes == ()
    # The same replay again: the same result (the virtual clock, engines inline).
    again = await _replay(_config(), record, clips)
    assert again.replayed == result.replayed


async def test_a_changed_setting_shows_in_the_replay(tmp_path: Path) -> None:
    record, clips = await _record(tmp_path)
    result = await _replay(_config(pause_on_speech=False), record, clips)
    assert differences(result.rows) > 0
    statuses = {(row["status"], (row["recorded"] or row["replay"] or {"kind": ""})["kind"])
                for row in result.rows}
    assert ("recorded only", "paused") in statuses  # no pause at the onset any more
    assert ("changed", "heard") in statuses  # the cut falls when the words decide, later
    assert "differ from the recording" in report_lines(result)[-1]


async def test_without_kept_audio_the_transcripts_are_spoken_again(tmp_path: Path) -> None:
    record, _ = await _record(tmp_path)
    result = await _replay(_config(), record, [])
    assert result.caller_audio == "transcripts"
    assert [line.segment.text for line in result.lines] == TRANSCRIPTS
    assert any("spoken again by the voice" in note for note in result.notes)
    answered = [d["text"] for d in result.replayed if d["kind"] == "answered"]
    assert answered == TRANSCRIPTS
