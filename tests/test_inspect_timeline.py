"""`edge-agent inspect`'s model of a session, without a browser: words placed across pauses,
heard and unheard words, runs, decisions, latency stages, envelopes and strips."""

from __future__ import annotations

import math

import pytest

from edge_agent.engines.base import ToolCall
from edge_agent.events import (
    Backchannel,
    EchoIgnored,
    ReplyFailed,
    SpeculationCancelled,
    ToolUsed,
    TurnDropped,
    TurnStage,
    UserSpeechEnded,
    UserTurn,
)
from edge_agent.inspect.envelope import BUCKET_S, envelope
from edge_agent.inspect.layout import strips
from edge_agent.inspect.model import Pause, UnitView
from edge_agent.inspect.placement import Playback, heard_words
from edge_agent.inspect.timeline import build_timeline
from edge_agent.memory.kept_audio import AudioClip
from tests.inspect_sessions import SessionBuilder, long_session, tone


def _starts(unit: UnitView) -> list[float]:
    return [round(w.start, 3) for w in unit.words]


def test_words_after_a_pause_play_later_by_its_length() -> None:
    built = SessionBuilder()
    # Words at 0, 300, 600, 900 ms; held at 1.45 s on the clock (450 ms in) for 0.8 s.
    built.agent("one two three four", 1.0, pause=(1.45, 0.8))
    unit = build_timeline(built.record()).runs[0].units[0]
    assert _starts(unit) == [1.0, 1.3, 2.4, 2.7]
    assert [round(w.end, 3) for w in unit.words][1] == 1.55 + 0.8  # held mid-word: ends later
    assert unit.pauses == (Pause(1.45, 2.25, resumed=True),)
    assert [(round(a, 3), round(b, 3)) for a, b in unit.playing] == [(1.0, 1.45), (2.25, 2.95)]
    assert all(w.heard for w in unit.words)


def test_a_barge_in_splits_heard_from_never_heard_words() -> None:
    built = SessionBuilder()
    built.agent("alpha bravo charlie delta echo", 2.0, cut_at=2.7)  # 700 ms: two whole words
    unit = build_timeline(built.record()).runs[0].units[0]
    assert unit.heard == "alpha bravo" and unit.interrupted
    assert [w.heard for w in unit.words] == [True, True, False, False, False]
    # Never-heard words sit where they would have played had playback gone on.
    assert _starts(unit) == [2.0, 2.3, 2.6, 2.9, 3.2]
    assert unit.pauses == (Pause(2.7, 3.101, resumed=False),)
    assert [(round(a, 3), round(b, 3)) for a, b in unit.playing] == [(2.0, 2.7)]


def test_heard_words_follow_the_heard_text_not_the_clock() -> None:
    texts = ["We", "have", "7", "PM,", "one"]
    generated = "We have 7 PM, one"
    assert heard_words(texts, generated, "We have 7 PM,", [1, 2, 3, 4, 5], 0) == 4
    assert heard_words(texts, generated, "We have 7 P", [1, 2, 3, 4, 5], 9999) == 3
    assert heard_words(texts, generated, "", [1, 2, 3, 4, 5], 9999) == 0
    # Words that do not spell the generated text: the ones that ended within the played audio.
    assert heard_words(["x", "y", "z"], generated, "We", [100, 200, 300], 250) == 2


def test_playback_moves_only_past_resumed_pauses() -> None:
    playback = Playback(10.0, (Pause(10.5, 11.0, True), Pause(11.5, 12.0, False)))
    assert playback.at(0.4) == pytest.approx(10.4)
    assert playback.at(0.5) == pytest.approx(11.0)  # the first sample after the hold
    assert playback.at(0.9) == pytest.approx(11.4)
    assert playback.at(2.0) == pytest.approx(12.5)  # past the cut: where it would have been
    assert [pytest.approx(s) for s in playback.playing(1000)] == [(10.0, 10.5), (11.0, 11.5)]


def test_decisions_turn_numbers_and_latency_stages() -> None:
    built = SessionBuilder()
    built.agent("hello how can I help", 0.2)
    answer = built.caller("what time do you open", 2.0, 1.2, silence_ms=350)
    built.agent("we open at nine", answer)
    built.overlap(Backchannel, "okay", answer + 0.3, 0.4)
    built.overlap(EchoIgnored, "open at nine", answer + 2.0, 0.5)
    built.speech(8.0, 0.3)
    built.event(8.8, UserSpeechEnded(audio_time=8.77, silence_ms=500))
    built.event(8.81, TurnDropped(audio_time=8.77))
    # Recognized, but only a speculative transcript and no answer: no session was open.
    built.speech(10.0, 0.8)
    built.event(11.05, TurnStage(turn=2, stage="transcript", speculative=True))
    built.event(11.1, UserSpeechEnded(audio_time=11.07, silence_ms=300))
    built.event(11.11, UserTurn(text="hey kiosk", words=()))
    # A speculation thrown away (speech resumed): the stages published again are the answer's.
    built.speech(13.0, 0.5)
    built.event(13.8, TurnStage(turn=2, stage="transcript", speculative=True))
    built.event(13.85, SpeculationCancelled(turn=2, reason="speech resumed"))
    built.event(14.6, TurnStage(turn=2, stage="transcript", speculative=True))
    built.event(14.7, UserSpeechEnded(audio_time=14.67, silence_ms=300))
    built.event(14.71, UserTurn(text="book a table", words=()))
    built.event(14.75, TurnStage(turn=2, stage="first_token", speculative=False))
    built.event(14.9, TurnStage(turn=2, stage="first_audio", speculative=False))
    built.agent("for how many", 14.9)
    run = build_timeline(built.record()).runs[0]

    assert [(c.decision, c.turn) for c in run.caller] == [
        ("answered", 1), ("backchannel", None), ("echo", None), ("dropped", None),
        ("not answered", None), ("answered", 2)]
    assert [c.text for c in run.caller][1:3] == ["okay", "open at nine"]
    why = run.caller[1].why
    assert isinstance(why, Backchannel) and why.speech_ms == 400
    first = run.caller[0]
    # The onset is the microphone's, moved onto the events' clock; the end is the real one.
    assert first.start == pytest.approx(2.0) and first.end == pytest.approx(3.2)
    assert first.detected == pytest.approx(3.55)
    assert [r.decision for r in run.rows] == ["greeting", "answered", "backchannel", "echo",
                                              "dropped", "not answered", "answered"]
    assert [r.unit_ids for r in run.rows] == [("u1",), ("u2",), (), (), (), (), ("u3",)]
    stages = {s.name: (s.after_ms, s.speculative) for s in run.rows[1].stages}
    assert stages == {"turn_end": (350, False), "transcript": (250, True),
                      "request": (251, True), "first_token": (260, True),
                      "first_piece": (449, False), "first_audio": (450, False)}
    last = {s.name: (s.after_ms, s.speculative) for s in run.rows[-1].stages}
    # From where the resumed speech really ended (14.7 - 0.3 s): not the cancelled 13.8 one.
    assert last["transcript"] == (200, True)
    assert last["first_audio"] == (500, False)
    assert [m.kind for m in run.markers] == ["backchannel", "echo", "dropped", "cancelled"]


def test_tool_calls_and_failures_belong_to_their_turn() -> None:
    built = SessionBuilder()
    answer = built.caller("book a table for four", 1.0, 1.5)
    built.agent("let me book that", answer)
    call = ToolCall("c1", "book_table", '{"people": 4}')
    built.event(answer + 1.5, ToolUsed(turn=1, call=call, result="booked #12"))
    built.event(answer + 1.6, ReplyFailed(turn=1, stage="llm", error="RuntimeError: x",
                                          recovery="fallback"))
    built.agent("sorry something went wrong", answer + 1.7)
    (row,) = build_timeline(built.record()).runs[0].rows
    assert row.unit_ids == ("u1", "u2")
    assert [(m.kind, m.label) for m in row.happenings] == [
        ("tool", 'tool book_table({"people": 4}) -> booked #12'),
        ("failed", "turn 1: the llm failed (RuntimeError: x); said the fallback line")]


def test_a_resumed_session_is_one_run_per_clock() -> None:
    built = SessionBuilder()
    answer = built.caller("my name is Ana", 1.0, 1.0)
    built.agent("nice to meet you Ana", answer)
    built.new_run("run-b")  # the agent restarted; its clock starts again near 0
    answer = built.caller("what is my name", 0.8, 1.0)
    built.agent("your name is Ana", answer, cut_at=answer + 0.5)
    timeline = build_timeline(built.record())
    first, second = timeline.runs
    assert (first.run_id, second.run_id) == ("run-a", "run-b")
    assert [u.unit_id for u in first.units] == ["u1"] and [u.unit_id for u in second.units] == ["u2"]
    assert second.units[0].start == pytest.approx(answer)
    assert answer < (first.units[0].start or 0)
    assert [c.turn for c in second.caller] == [1]  # turns are counted per run
    assert [w.heard for w in second.units[0].words] == [True, False, False, False]
    assert second.rows[0].unit_ids == ("u2",)


def test_units_without_events_are_still_drawn_in_order() -> None:
    built = SessionBuilder()
    built.agent("first words", 0.5)
    built.agent("second words", 3.0)
    record = built.record()
    record["events"] = []  # expired by retention: turns and units outlive events
    timeline = build_timeline(record)
    (run,) = timeline.runs
    assert run.rows[0].decision == "untimed" and run.rows[0].unit_ids == ("u1", "u2")
    assert run.units[1].start is not None and run.units[1].start > run.units[0].end


def test_envelopes_are_buckets_of_min_and_max() -> None:
    points = envelope(tone(0.1, 16000, 0.5), 16000)
    assert len(points) == math.ceil(0.1 / BUCKET_S)
    assert points[1][0] == pytest.approx(BUCKET_S)
    assert all(-0.51 < lo < -0.45 and 0.45 < hi < 0.51 for _, lo, hi in points)
    assert envelope(b"", 16000) == []


def test_kept_audio_becomes_waves_on_the_run_clock() -> None:
    built = SessionBuilder()
    answer = built.caller("hello there", 1.0, 1.0)
    built.agent("one two three four", answer, pause=(answer + 0.45, 0.5))
    record = built.record()
    clips = [AudioClip("caller", "c1", "run-a", 0.9, 16000, tone(1.2, 16000, 0.3)),
             AudioClip("agent", "u1", "run-a", answer, 22050, tone(1.15, 22050, 0.6)),
             AudioClip("agent", "u9", "other-run", 0.0, 22050, tone(0.2, 22050, 0.6))]
    timeline = build_timeline(record, clips)
    assert timeline.audio_kept
    caller, agent = timeline.runs[0].waves
    assert (caller.kind, caller.ref, agent.kind, agent.ref) == ("caller", "c1", "agent", "u1")
    assert caller.points[0][0] == pytest.approx(0.9)
    times = [t for t, _, _ in agent.points]
    # Nothing is drawn inside the pause: the audio after it is moved by its length.
    assert not any(answer + 0.45 + 0.02 < t < answer + 0.95 for t in times)
    assert max(times) == pytest.approx(answer + 1.15 + 0.5, abs=BUCKET_S)
    assert not build_timeline(record).audio_kept


def test_strips_cover_everything_and_leave_out_long_silences() -> None:
    laid = strips([(0.4, 2.0), (9.5, 12.0), (95.2, 96.0)], length=10, skip=3)
    assert [(s.start, s.end, s.skipped) for s in laid] == [
        (0, 10, 0.0), (10, 20, 0.0), (95, 105, 75)]
    assert strips([]) == []


def test_a_long_session_keeps_every_turn() -> None:
    run = build_timeline(long_session(300)).runs[0]
    assert sum(1 for c in run.caller if c.turn) == 300
    assert [c.turn for c in run.caller if c.turn] == list(range(1, 301))
    assert sum(1 for c in run.caller if c.decision == "barge-in") == 29
    assert sum(1 for c in run.caller if c.decision == "backchannel") == 42 - 4  # 70, 140, ... were cut
    assert all(r.stages[-1].after_ms == 400 for r in run.rows if r.decision == "answered")
    # The onset: the microphone's audio time moved onto the clock by the lag seen at the end.
    assert run.caller[0].start == pytest.approx(0.5)
