"""Opening hours answered on the clock: the question read, the answer exact."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from edge_agent.knowledge.hours import (
    HoursError,
    Phrasing,
    Schedule,
    Span,
    answer,
    hours_question,
    parse_day,
    parse_schedule,
)

MUSEUM = parse_schedule("", ["museum"], {"daily": "10:00-17:00", "monday": "closed",
                                         "thursday": "10:00-21:00"},
                        {"2026-12-25": "closed", "2026-12-24": "10:00-14:00"})
CAFE = parse_schedule("the cafe", ["cafe"], {"weekdays": "9:30am-4:30pm", "weekends": "closed"},
                      {})
BAR = parse_schedule("the bar", ["bar"], {"daily": "20:00-02:00"}, {})
THURSDAY = datetime(2026, 12, 3, 15, 0)  # a Thursday


def _ask(text: str, at: datetime = THURSDAY, schedule: Schedule = MUSEUM, clock: str = "12h"
         ) -> str:
    question = hours_question(text, at.date())
    assert question is not None, text
    return answer(question, schedule, at, Phrasing(clock))


def test_days_are_read_in_every_form() -> None:
    assert parse_day("closed") == () and parse_day(" Closed ") == ()
    assert parse_day("10:00-17:00") == (Span(600, 1020),)
    assert parse_day("9am-5:30pm") == (Span(540, 1050),)
    assert parse_day("10-13, 14-18") == (Span(600, 780), Span(840, 1080))
    assert parse_day("20:00-02:00") == (Span(1200, 1560),)  # past midnight
    for bad in ("ten to five", "25:00-26:00", "13pm-2pm", "14-18, 10-13", "10:75-12:00"):
        with pytest.raises(HoursError):
            parse_day(bad)


@pytest.mark.parametrize(("text", "at", "said"), [
    ("Are you open now?", THURSDAY, "Yes, we're open now, until 9 PM."),
    ("Are you still open?", datetime(2026, 12, 1, 16, 45), "Yes, we're open now, until 5 PM."),
    ("Are you open right now?", datetime(2026, 12, 7, 12, 0),
     "No, we're closed right now. We open again tomorrow at 10 AM."),
    ("Are you open now?", datetime(2026, 12, 6, 18, 0),  # Sunday evening; Monday closed
     "No, we're closed right now. We open again on Tuesday at 10 AM."),
    ("Are you open now?", datetime(2026, 12, 1, 8, 0),
     "No, we're closed right now. We open today at 10 AM."),
    ("What time do you close today?", THURSDAY, "Today we close at 9 PM."),
    ("What time do you open?", datetime(2026, 12, 1, 8, 0), "We open today at 10 AM."),
    ("What time do you open on Saturday?", THURSDAY, "On Saturday we open at 10 AM."),
    ("Are you open on Monday?", THURSDAY, "No, on Monday we're closed."),
    ("Are you open tomorrow at 3 pm?", THURSDAY,
     "Yes, tomorrow at 3 PM we're open, from 10 AM to 5 PM."),
    ("Are you open at 8pm on Friday?", THURSDAY,
     "No, not at 8 PM. Tomorrow we're open from 10 AM to 5 PM."),
    ("Do you close at five on Saturday?", THURSDAY, "Yes, on Saturday we close at 5 PM."),
    ("Do you close at 6 p.m. on Saturday?", THURSDAY, "No, on Saturday we close at 5 PM."),
    ("Are you open on Christmas Day?", THURSDAY,
     "No, on Friday, December 25 we're closed."),
    ("What are your opening hours on December 24th?", THURSDAY,
     "On Thursday, December 24 we're open from 10 AM to 2 PM."),
    ("Are you open this weekend?", THURSDAY,
     "Yes, on Saturday we're open from 10 AM to 5 PM. On Sunday we're open from 10 AM to 5 PM."),
    ("What are your opening hours?", datetime(2026, 12, 20, 12, 0),
     "Our opening hours: Monday: closed; Tuesday and Wednesday: from 10 AM to 5 PM; Thursday: "
     "from 10 AM to 9 PM; Friday to Sunday: from 10 AM to 5 PM. On Thursday, December 24 we're "
     "open from 10 AM to 2 PM. On Friday, December 25 we're closed."),
])
def test_the_venues_hours_are_answered_on_its_clock(text: str, at: datetime, said: str) -> None:
    assert _ask(text, at) == said


def test_another_place_is_answered_with_its_own_name_and_hours() -> None:
    assert _ask("Is the cafe open now?", datetime(2026, 12, 1, 17, 0), CAFE) == (
        "No, the cafe is closed right now. The cafe opens again tomorrow at 9:30 AM.")
    assert _ask("When does the cafe close?", datetime(2026, 12, 1, 18, 0), CAFE) == (
        "The cafe closed at 4:30 PM today. The cafe opens again tomorrow at 9:30 AM.")
    assert _ask("Is the cafe open on Saturday?", THURSDAY, CAFE) == (
        "No, on Saturday the cafe is closed.")


def test_a_span_past_midnight_is_open_after_midnight_and_said_in_24_hours() -> None:
    assert _ask("Is the bar open now?", datetime(2026, 12, 4, 1, 30), BAR, "24h") == (
        "Yes, the bar is open now, until 02:00.")
    assert _ask("Is the bar open now?", datetime(2026, 12, 4, 3, 0), BAR, "24h") == (
        "No, the bar is closed right now. The bar opens today at 20:00.")


def test_a_question_about_something_else_is_not_an_hours_question() -> None:
    assert hours_question("Where can I park?", THURSDAY.date()) is None
    assert hours_question("What time does the tour start?", THURSDAY.date()) is None


@given(st.integers(0, 7 * 24 * 60 - 1))
def test_open_now_is_yes_exactly_inside_a_span(minute_of_week: int) -> None:
    at = datetime(2026, 11, 30) + timedelta(minutes=minute_of_week)  # from a Monday
    said = _ask("Are you open now?", at)
    day = MUSEUM.day(at.date())
    minute = at.hour * 60 + at.minute
    inside = any(s.start <= minute < s.end for s in day)
    assert said.startswith("Yes") == inside
    if not inside:  # the next opening it names is the real one
        assert "open" in said and ("today" in said or "tomorrow" in said or " on " in said)
