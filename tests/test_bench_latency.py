"""`bench latency`'s reading of a two-channel recording and of the event log, on synthetic data
where every figure is known."""

from __future__ import annotations

import numpy as np
import pytest

from edge_agent.bench.document import schema
from edge_agent.bench.latency import (
    LINE_SETS,
    MID_TURN_PAUSE_S,
    NATURAL_LINES,
    PAUSE_MARK,
    latency_call,
    with_pauses,
)
from edge_agent.bench.latency_figures import ScriptedLine, analyze, from_events
from edge_agent.bench.recording import audible_spans
from edge_agent.events import (
    Backchannel,
    BargeIn,
    CallerSpoke,
    LoggedEvent,
    PlaybackStarted,
    TurnStage,
    UnitFinalized,
    UserSpeechEnded,
    UserSpeechStarted,
    UserTurn,
)
from edge_agent.heard.ledger import Finalize

RATE = 16000


def _tone(samples: np.ndarray, start: float, end: float, level: int = 3000) -> None:
    a, b = int(start * RATE), int(end * RATE)
    samples[a:b] = (level * np.sin(np.arange(b - a) * 0.3)).astype(np.int16)


def test_audible_spans_are_sample_exact_and_bridge_short_gaps() -> None:
    x = np.zeros(5 * RATE, dtype=np.int16)
    _tone(x, 0.5, 1.0)
    _tone(x, 1.2, 1.5)  # 200 ms gap: one utterance with a comma pause
    _tone(x, 3.0, 3.25)
    spans = audible_spans(x, bridge_ms=300)
    assert len(spans) == 2
    assert abs(spans[0][0] - 0.5) < 0.001 and abs(spans[0][1] - 1.5) < 0.001
    assert abs(spans[1][0] - 3.0) < 0.001 and abs(spans[1][1] - 3.25) < 0.001
    assert len(audible_spans(x, bridge_ms=100)) == 3


def test_gaps_stops_and_event_figures() -> None:
    script = [ScriptedLine("question", "What time do you open?"),
              ScriptedLine("backchannel", "yeah"),
              ScriptedLine("question", "Can I bring my dog?"),
              ScriptedLine("interruption", "Wait, what?")]
    caller = np.zeros(20 * RATE, dtype=np.int16)
    agent = np.zeros(20 * RATE, dtype=np.int16)
    _tone(caller, 1.0, 2.0)      # question 1 ends at 2.0
    _tone(agent, 2.55, 6.0)      # answered 550 ms later
    _tone(caller, 3.0, 3.4)      # a backchannel over the answer
    _tone(caller, 7.0, 8.0)      # question 2 ends at 8.0
    _tone(agent, 8.6, 13.0)      # 600 ms
    _tone(caller, 10.0, 10.8)    # an interruption: the agent stops 180 ms after its onset
    agent[int(10.18 * RATE):int(13.0 * RATE)] = 0
    events = [
        LoggedEvent(1.0, CallerSpoke("What time do you open?", 0)),
        LoggedEvent(2.4, UserSpeechEnded(2.4, 300)),
        LoggedEvent(2.41, UserTurn("What time do you open?", ())),
        LoggedEvent(2.35, TurnStage(1, "transcript", True)),
        LoggedEvent(2.5, TurnStage(1, "first_audio", False)),
        LoggedEvent(3.0, CallerSpoke("yeah", 0)),
        LoggedEvent(3.6, Backchannel("Yeah.", 400)),
        LoggedEvent(7.0, CallerSpoke("Can I bring my dog?", 0)),
        LoggedEvent(8.45, UserSpeechEnded(8.45, 400)),
        LoggedEvent(8.46, UserTurn("Can I bring my dock?", ())),
        LoggedEvent(10.0, CallerSpoke("Wait, what?", 0.0)),
        LoggedEvent(10.35, BargeIn("u2", "Wait,")),
        LoggedEvent(11.3, UserTurn("Wait, what?", ())),
    ]
    result = analyze(caller, agent, script, events)
    assert result["answer_gap_ms"]["values"] == pytest.approx([550.0, 600.0], abs=0.2)
    assert result["stop_ms"]["values"] == pytest.approx([180.0], abs=0.2)
    assert result["questions_unanswered"] == 0
    assert result["barge_in_confirmed_ms"]["values"] == [350.0]
    assert result["interruptions"] == {"count": 1, "missed": 0, "said_in_silence": 0,
                                       "said_as_it_ended": 0}
    assert result["backchannels"] == {"count": 1, "false_interruptions": 0}
    # Stages of turn 1, from the end of speech as the agent heard it (2.4 - 0.3 s).
    assert result["stages_ms"]["transcript"]["values"] == [250.0]
    assert result["stages_ms"]["first_audio"]["values"] == [400.0]
    # "dock" for "dog": one error in 5 + 5 + 2 words said.
    assert result["user_turns_wer_percent"] == round(100 / 12, 1)


def test_the_call_alternates_questions_with_backchannels_and_interruptions() -> None:
    call, script = latency_call(6, seed=3, scripted=True)
    kinds = [line.kind for line in script]
    assert kinds == ["question", "backchannel", "question", "backchannel", "question",
                     "interruption"] * 2
    assert [line.say for line in script] == [line.say for line in call.lines]
    assert call.replies is not None and len(call.replies) >= kinds.count("question") + 2
    assert call.greeting == ""


def test_the_quick_call_interrupts_every_second_exchange_with_its_own_reply() -> None:
    call, script = latency_call(2, seed=1, scripted=True, reply="Short.", interrupt_every=2)
    assert [line.kind for line in script] == ["question", "backchannel", "question",
                                              "interruption"]
    assert call.replies is not None and set(call.replies) == {"Short."}


def test_a_question_taken_as_two_turns_counts_as_cut_off() -> None:
    script = [ScriptedLine("question", "I'd like a table for | four people."),
              ScriptedLine("backchannel", "yeah"),
              ScriptedLine("question", "Six people,")]
    events = [
        _spoke(1.0, "I'd like a table for | four people."),
        LoggedEvent(2.3, UserSpeechEnded(2.3, 300)),
        LoggedEvent(2.31, UserTurn("I'd like a table for it.", ())),
        LoggedEvent(3.9, UserSpeechEnded(3.9, 300)),
        LoggedEvent(3.91, UserTurn("Four people.", ())),
        _spoke(5.0, "yeah"),
        _spoke(8.0, "Six people,"),
        LoggedEvent(9.0, UserSpeechEnded(9.0, 160)),
        LoggedEvent(9.01, UserTurn("Six people.", ())),
    ]
    assert from_events(script, events)["questions_cut_off"] == 1


def test_the_natural_call_takes_its_turns_from_the_natural_lines() -> None:
    _, script = latency_call(3, seed=1, scripted=True, questions=NATURAL_LINES)
    questions = [line.say for line in script if line.kind == "question"]
    assert questions == list(NATURAL_LINES[:3])
    assert any(PAUSE_MARK in line for line in NATURAL_LINES)
    # The schema names the same line sets the benchmark has.
    line_set = schema()["$defs"]["latency_result"]["properties"]["line_set"]
    assert line_set["enum"] == list(LINE_SETS)


def test_a_pause_inside_a_line_is_that_long_from_sound_to_sound() -> None:
    def said(text: str) -> bytes:  # a voice with 0.25 s of its own silence around each part
        samples = np.zeros(RATE, dtype=np.int16)
        _tone(samples, 0.25, 0.75)
        return samples.tobytes()

    line = np.frombuffer(with_pauses("I'd like a table for | four.", said), dtype=np.int16)
    spans = audible_spans(line, bridge_ms=0)
    assert len(spans) == 2
    assert spans[1][0] - spans[0][1] == pytest.approx(MID_TURN_PAUSE_S, abs=0.002)
    assert np.frombuffer(with_pauses("Six people,", said), dtype=np.int16).size == RATE


def _spoke(at: float, text: str) -> LoggedEvent:
    return LoggedEvent(at, CallerSpoke(text))


def _finalize(unit_id: str) -> Finalize:
    """A unit that played whole (its text does not matter to the figures)."""
    return Finalize(unit_id, "", "", 0, 22050, (), 0)


def test_more_caller_events_than_lines_are_reported_not_a_crash() -> None:
    """A line said twice (an event more than the script has lines) used to index past the
    end of the kinds (IndexError): each event is matched to its line by text, in order."""
    script = [ScriptedLine("question", "Can I bring my dog?"),
              ScriptedLine("interruption", "Wait, what about Sunday?")]
    events = [
        _spoke(1.0, "Can I bring my dog?"),
        LoggedEvent(2.4, UserSpeechEnded(2.4, 300)),
        LoggedEvent(2.41, UserTurn("Can I bring my dog?", ())),
        _spoke(4.0, "Wait, what about Sunday?"),
        LoggedEvent(4.3, BargeIn("u1", "Wait,")),
        LoggedEvent(5.0, UserTurn("Wait, what about Sunday?", ())),
        _spoke(7.0, "Wait, what about Sunday?"),  # the same line again: no line left for it
        LoggedEvent(7.5, BargeIn("u2", "Wait,")),
        _spoke(9.0, "Something nobody scripted"),
    ]
    result = from_events(script, events)
    assert result["unmatched_caller_events"] == ["Wait, what about Sunday?",
                                                 "Something nobody scripted"]
    assert result["lines_unsaid"] == 0
    # The interruption's figure is its own event's, not the repeat's.
    assert result["barge_in_confirmed_ms"]["values"] == [300.0]
    assert result["interruptions"] == {"count": 1, "missed": 0, "said_in_silence": 0,
                                       "said_as_it_ended": 0}
    assert result["backchannels"] == {"count": 0, "false_interruptions": 0}


def test_a_line_never_said_is_counted_and_the_next_one_still_matched() -> None:
    script = [ScriptedLine("question", "What time do you open?"),
              ScriptedLine("backchannel", "mm-hmm"),
              ScriptedLine("question", "Can I bring my dog?"),
              ScriptedLine("backchannel", "yeah")]
    events = [_spoke(1.0, "What time do you open?"),
              _spoke(6.0, "Can I bring my dog?"),  # "mm-hmm" was never said
              _spoke(9.0, "yeah"),
              LoggedEvent(9.4, BargeIn("u2", "yeah"))]
    result = from_events(script, events)
    assert result["lines_unsaid"] == 1
    assert result["unmatched_caller_events"] == []
    assert result["backchannels"] == {"count": 2, "false_interruptions": 1}


TWO_INTERRUPTIONS = [ScriptedLine("question", "Can I bring my dog?"),
                     ScriptedLine("interruption", "Hold on, is it open on Monday?"),
                     ScriptedLine("question", "Do you take credit cards?"),
                     ScriptedLine("interruption", "Wait, what about Sunday?")]
"""Two questions, each interrupted."""


def test_an_interruption_after_the_reply_ended_is_not_a_missed_one() -> None:
    """A short reply can end before the scripted interruption begins: that line interrupts
    nothing and is counted apart; one begun while the agent spoke that cut nothing is missed."""
    script = TWO_INTERRUPTIONS
    events = [
        _spoke(1.0, "Can I bring my dog?"),
        LoggedEvent(2.5, PlaybackStarted("u1")),
        LoggedEvent(3.5, UnitFinalized(_finalize("u1"))),
        _spoke(4.0, "Hold on, is it open on Monday?"),  # u1 had ended
        LoggedEvent(6.0, PlaybackStarted("u2")),
        _spoke(7.0, "Do you take credit cards?"),
        LoggedEvent(8.5, PlaybackStarted("u3")),
        _spoke(9.0, "Wait, what about Sunday?"),  # u3 plays on: missed
        LoggedEvent(11.0, UnitFinalized(_finalize("u3"))),
    ]
    result = from_events(script, events)
    assert result["interruptions"] == {"count": 2, "missed": 1, "said_in_silence": 1,
                                       "said_as_it_ended": 0}


def test_an_interruption_the_reply_ended_under_before_it_was_heard_is_not_a_missed_one() -> None:
    """A short reply can end on its own just after the interruption begins: if the agent had
    not heard speech begin by then, there was nothing to cut yet. Once it had, a reply that
    plays on to its end passed the interruption over: missed."""
    script = TWO_INTERRUPTIONS
    events = [
        _spoke(1.0, "Can I bring my dog?"),
        LoggedEvent(2.5, PlaybackStarted("u1")),
        _spoke(4.0, "Hold on, is it open on Monday?"),
        LoggedEvent(4.15, UnitFinalized(_finalize("u1"))),  # ended before speech was heard
        LoggedEvent(4.2, UserSpeechStarted(3.2)),
        _spoke(7.0, "Do you take credit cards?"),
        LoggedEvent(8.5, PlaybackStarted("u2")),
        _spoke(9.0, "Wait, what about Sunday?"),
        LoggedEvent(9.2, UserSpeechStarted(8.2)),
        LoggedEvent(9.25, UnitFinalized(_finalize("u2"))),  # heard, and played on to its end
    ]
    result = from_events(script, events)
    assert result["interruptions"] == {"count": 2, "missed": 1, "said_in_silence": 0,
                                       "said_as_it_ended": 1}
