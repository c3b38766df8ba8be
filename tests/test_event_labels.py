"""The one labeller of events: what the console prints and what `inspect`'s page marks are the
same words, and a kiosk without transcripts shows none of what was said."""

from __future__ import annotations

import pytest

from edge_agent.console import CONSOLE_QUIET, SPEECH_KINDS, describe, label
from edge_agent.events import (
    CommandAnswered,
    Event,
    LlmRequest,
    LoggedEvent,
    PlaybackPaused,
    PlaybackResumed,
    PlaybackStarted,
    TurnStage,
    UserSpeechEnded,
    UserSpeechStarted,
)
from edge_agent.inspect.timeline import build_timeline
from tests.inspect_sessions import SessionBuilder
from tests.test_event_json import ONE_OF_EACH

UNLABELLED = (UserSpeechStarted, UserSpeechEnded, PlaybackStarted, PlaybackPaused,
              PlaybackResumed, LlmRequest, TurnStage, CommandAnswered)
"""Steps of the machinery, shown elsewhere (the page's lanes and latency) or not at all."""
SAID = ("hi there", "wait", "Hello", "booked", "people", "mm-hm", "we open", "Hello?", "OSError: x")
"""Words of what was said, or quoted from it, in `ONE_OF_EACH`."""


@pytest.mark.parametrize("event", ONE_OF_EACH, ids=lambda e: type(e).__name__)
def test_the_console_line_is_the_label(event: Event) -> None:
    found = label(event)
    line = describe(LoggedEvent(1.5, event))
    if isinstance(event, UNLABELLED):
        assert found is None and line is None
        return
    assert found is not None and found.text
    if found.kind in CONSOLE_QUIET:
        assert line is None
    else:
        assert line == f"[  1.50] {found.text}"


@pytest.mark.parametrize("event", ONE_OF_EACH, ids=lambda e: type(e).__name__)
def test_without_transcripts_nothing_said_is_shown(event: Event) -> None:
    found = label(event, transcripts=False)
    if found is None:
        return
    shown = found.text.split(":", 1)[-1] if found.kind in SPEECH_KINDS else found.text
    assert not [words for words in SAID if words in shown], found.text


def test_the_page_marks_what_is_not_speech_with_the_consoles_words() -> None:
    built = SessionBuilder()
    answer = built.caller("what time do you open", 1.0, 1.2)
    built.agent("we open at nine and close at ten", answer, cut_at=answer + 0.9)
    events = [entry for entry in ONE_OF_EACH if not isinstance(entry, UNLABELLED)]
    for n, event in enumerate(events):
        built.event(answer + 2 + n * 0.1, event)
    run = build_timeline(built.record()).runs[0]
    marked = [(marker.kind, marker.label) for marker in run.markers]
    expected = [(found.kind, found.text) for found in map(label, events)
                if found is not None and found.kind not in SPEECH_KINDS]
    assert marked[-len(expected):] == expected
    assert {kind for kind, _ in marked} == {"barge-in", "dropped", "tool", "backchannel",
                                           "echo", "session", "cancelled", "failed", "knowledge",
                                           "notice", "timer"}
