"""Events round-trip typed: what `LoggedEvent.to_json` writes (a record's events, a database
row's data), `LoggedEvent.from_json` reads back as the same dataclass, every field checked
against its type hints; a type this version does not know is left out, a bad field named."""

from __future__ import annotations

import json
import typing

import pytest

from edge_agent.engines.base import ToolCall
from edge_agent.events import (
    EVENT_TYPES,
    AudioHealth,
    Backchannel,
    BargeIn,
    CallerSpoke,
    CommandAnswered,
    EchoIgnored,
    Event,
    KnowledgeUsed,
    LlmRequest,
    LoggedEvent,
    Notice,
    PlaybackPaused,
    PlaybackResumed,
    PlaybackStarted,
    ReplyFailed,
    SessionEnded,
    SessionStarted,
    SpeculationCancelled,
    TimerChanged,
    ToolUsed,
    TurnDropped,
    TurnStage,
    UnitFinalized,
    UserSpeechEnded,
    UserSpeechStarted,
    UserTurn,
)
from edge_agent.heard.ledger import Finalize
from edge_agent.heard.timings import WordTiming
from edge_agent.memory.record import record_events
from edge_agent.shapes import ShapeError

ONE_OF_EACH: tuple[Event, ...] = (
    UserSpeechStarted(1.25), UserSpeechEnded(2.5, 300, 0.91), UserTurn("hi there", (
        ("hi", 0.1, 0.3), ("there", None, None))), TurnDropped(3.0),
    PlaybackStarted("u1"), BargeIn("u1", "wait"), BargeIn(None),
    UnitFinalized(Finalize("u1", "Hello there.", "Hello", 11025, 22050,
                           (WordTiming("Hello", 0, 5, 0, 9000, exact=False),), 1)),
    LlmRequest(1, 2, ({"role": "user", "content": "hi"},)),
    ToolUsed(1, ToolCall("c1", "book_table", '{"people": 4}'), "booked"),
    Backchannel("mm-hm", 400), EchoIgnored("we open", "we open at nine"),
    CallerSpoke("Hello?", 0.05), PlaybackPaused("u1"), PlaybackResumed(None),
    SessionStarted(1, "speech"), SessionEnded(1), TurnStage(1, "first_audio", False),
    SpeculationCancelled(2, "speech resumed"), ReplyFailed(3, "tts", "OSError: x", "fallback"),
    KnowledgeUsed(4, "direct", ("museum.toml:35",), 0.92, 0.4),
    CommandAnswered(5),
    TimerChanged(3, "timer", "ringing", "2026-12-06T15:05:00+01:00", late=True),
    AudioHealth("real-time (SCHED_FIFO 10)", 1, 2, 0),
    Notice("a note"),
)


def test_every_event_type_is_covered_here() -> None:
    assert {type(e) for e in ONE_OF_EACH} == set(typing.get_args(Event)) == set(
        EVENT_TYPES.values())


@pytest.mark.parametrize("event", ONE_OF_EACH, ids=lambda e: type(e).__name__)
def test_an_event_reads_back_as_it_was_written(event: Event) -> None:
    logged = LoggedEvent(12.3456, event, run_id="run-b")
    written = json.loads(json.dumps(logged.to_json()))  # as a record file holds it
    assert written["type"] == type(event).__name__
    assert LoggedEvent.from_json(written) == LoggedEvent(12.3456, event, "run-b")


def test_an_unknown_type_is_left_out_and_a_bad_field_named() -> None:
    record = {"events": [{"at": 1.0, "type": "SomethingNewer", "x": 1},
                         {"at": 2.0, "type": "Notice", "text": "kept"}]}
    assert record_events(record) == [LoggedEvent(2.0, Notice("kept"))]  # type: ignore[arg-type]
    with pytest.raises(ShapeError) as error:
        LoggedEvent.from_json({"at": 1.0, "type": "UnitFinalized", "finalize": {
            "unit_id": "u1", "generated": "a", "heard": "a", "played_samples": 1,
            "sample_rate": 22050, "words": [{"text": "a", "char_start": 0}],
            "inexact_words": 0}})
    assert error.value.path == "finalize.words[0].char_end"
    assert error.value.reason == "must be a whole number, got nothing"
    with pytest.raises(ShapeError, match="must be from 0 to 3600000"):
        LoggedEvent.from_json({"at": 1.0, "type": "Backchannel", "text": "ok",
                               "speech_ms": 10**7})
