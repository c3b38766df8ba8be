"""`sessions replay`: decisions read off hand-made event lists, their alignment, and the report
(text, JSON, exit code). No models."""

from __future__ import annotations

import dataclasses

from edge_agent.events import (
    Backchannel,
    BargeIn,
    EchoIgnored,
    Event,
    LoggedEvent,
    Notice,
    PlaybackPaused,
    PlaybackResumed,
    PlaybackStarted,
    SessionStarted,
    SpeculationCancelled,
    TurnDropped,
    TurnStage,
    UserSpeechStarted,
    UserTurn,
)
from edge_agent.replay import EXIT_DIFFERS
from edge_agent.replay.agent_script import AgentScript
from edge_agent.replay.decisions import Decision, compare, decisions, differences
from edge_agent.replay.report import report_json, report_lines
from edge_agent.replay.run import ReplayResult
from tests.logged import finalized


def ev(event: Event, at: float) -> LoggedEvent:
    return LoggedEvent(at, event)


def final(unit_id: str, generated: str, heard: str, at: float) -> LoggedEvent:
    return ev(finalized(unit_id, generated, heard, played_samples=1), at)


GREETING = "Hi, Luigi's."
TABLES = "We have three tables. One at 7, one at 8."


def recorded_events() -> list[LoggedEvent]:
    return [
        ev(SessionStarted(session=1, how="start-up"), 0.0),
        ev(PlaybackStarted(unit_id="u1"), 0.1), final("u1", GREETING, GREETING, 1.0),
        ev(UserSpeechStarted(audio_time=1.4), 1.5),
        ev(TurnStage(turn=1, stage="transcript", speculative=True), 2.0),
        ev(SpeculationCancelled(turn=1, reason="speech resumed"), 2.1),
        ev(UserTurn(text="A table for four.", words=()), 2.5),
        ev(PlaybackStarted(unit_id="u2"), 2.6),
        ev(PlaybackPaused(unit_id="u2"), 3.0),
        ev(Backchannel(text="Mm-hm", speech_ms=300), 3.4),
        ev(PlaybackResumed(unit_id="u2"), 3.4),
        ev(EchoIgnored(text="one at seven", playing="One at 7"), 3.8),
        ev(TurnDropped(audio_time=3.8), 3.9),
        ev(PlaybackPaused(unit_id="u2"), 4.0),
        ev(BargeIn(unit_id="u2", words="wait"), 4.2),
        final("u2", TABLES, "We have three tables.", 4.2),
        ev(UserTurn(text="Wait, at 8.", words=()), 5.0),
    ]


def test_the_turn_taking_outcomes_are_read_in_order() -> None:
    found = decisions(recorded_events())
    assert [(d["kind"], d["unit"], d["text"], d["interrupted"]) for d in found] == [
        ("heard", 1, GREETING, False),
        ("answered", None, "A table for four.", None),
        ("paused", 2, "", None),
        ("backchannel", None, "Mm-hm", None),
        ("echo", None, "one at seven", None),
        ("dropped", None, "", None),
        ("paused", 2, "", None),
        ("barge-in", 2, "wait", None),
        ("heard", 2, "We have three tables.", True),
        ("answered", None, "Wait, at 8.", None),
    ]
    assert found[7]["at"] == 4.2


def test_the_same_decisions_at_other_times_are_the_same() -> None:
    recorded = decisions(recorded_events())
    replayed = decisions([dataclasses.replace(entry, at=entry.at - 0.3)
                          for entry in recorded_events()])
    rows = compare(recorded, replayed)
    assert [row["status"] for row in rows] == ["same"] * len(recorded)
    assert differences(rows) == 0


def test_differences_are_paired_by_kind_and_unit_or_stand_alone() -> None:
    recorded = decisions(recorded_events())
    events = recorded_events()
    # The replay: no pause at the second onset, the cut one word later, the backchannel taken
    # for an interruption (a barge-in and an answer more).
    events[13] = ev(Notice(text="no pause"), 4.0)
    events[15] = final("u2", TABLES, "We have three tables. One", 4.2)
    events[9] = ev(BargeIn(unit_id="u2", words="Mm-hm"), 3.4)
    events.insert(10, ev(UserTurn(text="Mm-hm.", words=()), 3.5))
    rows = compare(recorded, decisions(events))
    summary = [(row["status"], (row["recorded"] or row["replay"] or {"kind": None})["kind"])
               for row in rows]
    assert summary == [
        ("same", "heard"), ("same", "answered"), ("same", "paused"),
        ("recorded only", "backchannel"), ("replay only", "barge-in"), ("replay only", "answered"),
        ("same", "echo"), ("same", "dropped"),
        ("recorded only", "paused"),
        ("same", "barge-in"),
        ("changed", "heard"),
        ("same", "answered"),
    ]
    changed = rows[10]
    assert changed["recorded"] is not None and changed["replay"] is not None
    assert changed["replay"]["text"] == "We have three tables. One"
    assert differences(rows) == 5


def _result(recorded: list[Decision], replayed: list[Decision]) -> ReplayResult:
    script = AgentScript("immediate", GREETING, ("Sure.",), (), ("a note",))
    return ReplayResult("abc123", "kept clips", (), script, tuple(recorded), tuple(replayed),
                        tuple(compare(recorded, replayed)), ("a note",), 12.5, 4.25, 1.0)


def test_the_report_marks_each_row_and_says_what_differs() -> None:
    recorded = decisions(recorded_events())
    same = report_lines(_result(recorded, recorded))
    assert same[-1].startswith(f"no differences: {len(recorded)} decisions compared (")
    assert "1 barge-in" in same[-1] and "1 backchannel" in same[-1]
    assert "12.5 s of call replayed in 3.2 s (+ 1.0 s loading models)" in same[-1]
    assert "note: a note" in same
    rows = [line for line in same if line.startswith("  = ")]
    assert len(rows) == len(recorded)
    assert any("barge-in     unit 2, on 'wait'" in line for line in rows)

    replayed = [d for d in recorded if d["kind"] != "backchannel"]
    replayed[-2] = {**replayed[-2], "text": "We have three tables. One"}
    differing = report_lines(_result(recorded, replayed))
    assert differing[-1].startswith(f"2 of {len(recorded)} decisions differ from the recording")
    assert any(line.startswith("  - ") and "backchannel  'Mm-hm'" in line for line in differing)
    changed = [i for i, line in enumerate(differing) if line.startswith("  ! ")]
    assert len(changed) == 1
    assert "(cut): 'We have three tables.'" in differing[changed[0]]
    assert "(cut): 'We have three tables. One'" in differing[changed[0] + 1]

    shape = report_json(_result(recorded, replayed))
    assert shape["differences"] == 2 and shape["compared"] == len(recorded)
    assert shape["model_replies"] == 1 and shape["caller_audio"] == "kept clips"
    assert [row["status"] for row in shape["rows"]].count("recorded only") == 1
    assert EXIT_DIFFERS == 11
