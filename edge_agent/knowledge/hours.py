"""Opening hours: the venue's week, its special dates, and answers on the device's clock.

A knowledge file gives hours per weekday ("10:00-17:00", "10:00-13:00, 14:00-18:00", "closed";
"daily", "weekdays" and "weekends" as shorthands a named day overrides; a span past midnight,
"20:00-02:00", belongs to the day it starts), special dates ("2026-12-25" = "closed"), and the
hours of other places inside the venue (a café, a shop) with the names callers use for them.

"Are you open now?", "What time do you close on Saturday?", "Is the café open tomorrow at 3
pm?", "When are you open?" are answered from those hours and the wall clock in the venue's time
zone, never by a model: a time a caller acts on must be exact.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta

from edge_agent.knowledge.text import fold, words

DAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
SHORTHANDS: Mapping[str, tuple[int, ...]] = {
    "daily": tuple(range(7)), "weekdays": tuple(range(5)), "weekends": (5, 6)}
"""Keys that set several days at once; a day named on its own overrides them."""
CLOSED = "closed"
MINUTES_PER_DAY = 24 * 60
_SPAN = re.compile(r"^\s*(\d{1,2})(?::(\d{2}))?\s*(am|pm)?\s*-\s*(\d{1,2})(?::(\d{2}))?\s*(am|pm)?\s*$")


class HoursError(ValueError):
    """A value of an hours table that cannot be read; the message says what is expected."""


@dataclass(frozen=True)
class Span:
    """Open from `start` to `end`, minutes after the day's midnight (`end` may pass 1440: the
    span runs into the next day)."""

    start: int
    end: int


Day = tuple[Span, ...]
"""A day's spans, in order; () is closed."""


def parse_day(text: str) -> Day:
    """ "10:00-17:00", "9am-5pm", "10:00-13:00, 14:00-18:00" or "closed"."""
    if fold(text).strip() == CLOSED:
        return ()
    spans: list[Span] = []
    for part in text.split(","):
        match = _SPAN.match(part.lower())
        if match is None:
            raise HoursError(f"{part.strip()!r} is not a span of hours: write \"10:00-17:00\", "
                             "\"9am-5pm\", several separated by commas, or \"closed\"")
        start = _minutes(match.group(1), match.group(2), match.group(3), part)
        end = _minutes(match.group(4), match.group(5), match.group(6), part)
        if end <= start:
            end += MINUTES_PER_DAY  # past midnight
        if spans and start < spans[-1].end:
            raise HoursError(f"{text.strip()!r}: spans must follow each other in the day")
        spans.append(Span(start, end))
    return tuple(spans)


def _minutes(hour_text: str, minute_text: str | None, half: str | None, part: str) -> int:
    hour, minute = int(hour_text), int(minute_text or 0)
    if half is not None:
        if not 1 <= hour <= 12:
            raise HoursError(f"{part.strip()!r}: {hour} {half} is not an hour")
        hour = hour % 12 + (12 if half == "pm" else 0)
    if not (0 <= hour <= 24 and 0 <= minute < 60) or (hour == 24 and minute):
        raise HoursError(f"{part.strip()!r}: {hour_text}:{minute_text or '00'} is not a time of day")
    return hour * 60 + minute


@dataclass(frozen=True)
class Schedule:
    """One place's hours."""

    place: str
    """How answers name it: "" for the venue itself ("we"), else "the café"."""
    names: tuple[str, ...]
    """What callers call it (folded words); the venue's own names for the venue."""
    week: tuple[Day, ...]
    """Monday to Sunday."""
    dates: Mapping[date, Day] = field(default_factory=dict)
    """Special days (holidays, late openings), which replace the weekday."""

    def day(self, when: date) -> Day:
        return self.dates.get(when, self.week[when.weekday()])


def parse_schedule(place: str, names: Sequence[str], table: Mapping[str, str],
                   dates: Mapping[str, str]) -> Schedule:
    """A place's hours from its keys (weekday names and shorthands) and special dates."""
    week: list[Day | None] = [None] * 7
    for key in sorted(table, key=lambda k: k not in SHORTHANDS):  # shorthands first
        days = SHORTHANDS.get(key) or ((DAYS.index(key),) if key in DAYS else None)
        if days is None:
            raise HoursError(f"{key!r} is not a day: use {', '.join(DAYS)}, "
                             f"{', '.join(SHORTHANDS)}, or [hours.dates]")
        for day in days:
            week[day] = parse_day(table[key])
    missing = [DAYS[i] for i, day in enumerate(week) if day is None]
    if missing:
        raise HoursError(f"no hours for {', '.join(missing)}: give every day (\"closed\" where "
                         "it is), or \"daily\" / \"weekdays\" / \"weekends\"")
    special = {}
    for key, value in dates.items():
        try:
            special[date.fromisoformat(key)] = parse_day(value)
        except ValueError as exc:
            if isinstance(exc, HoursError):
                raise
            raise HoursError(f"{key!r} is not a date: write it as 2026-12-25") from None
    return Schedule(place, tuple(" ".join(words(n)) for n in names if words(n)),
                    tuple(d for d in week if d is not None), special)


# -- the question -----------------------------------------------------------------------------

_OPEN_WORDS = frozenset({"open", "opens", "opened", "opening"})
_CLOSE_WORDS = frozenset({"close", "closes", "closed", "closing", "shut", "shuts"})
_HOURS_WORDS = frozenset({"hours", "hour", "times", "schedule"})
_NOW_WORDS = frozenset({"now", "currently", "still"})
_YES_NO_STARTS = frozenset({"are", "is", "will", "do", "does", "can", "could", "would", "were",
                            "was", "shall", "open", "still"})
_NUMBERS = {w: i for i, w in enumerate(("zero", "one", "two", "three", "four", "five", "six",
                                         "seven", "eight", "nine", "ten", "eleven", "twelve"))}
_MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august",
           "september", "october", "november", "december")
_HOLIDAYS = {("christmas", "eve"): (12, 24), ("christmas",): (12, 25), ("boxing", "day"): (12, 26),
             ("new", "year", "eve"): (12, 31), ("new", "years", "eve"): (12, 31),
             ("new", "year", "day"): (1, 1), ("new", "years", "day"): (1, 1)}


@dataclass(frozen=True)
class HoursQuestion:
    """What a caller asks about the hours."""

    aspect: str
    """"yes_no" (are you open?), "opens" (what time do you open?), "closes", or "hours"."""
    days: tuple[date, ...]
    """The days asked about (two for "this weekend"); () for no day named."""
    now: bool
    """Asked about this moment ("now", "still", "currently")."""
    at: int | None
    """A time of day asked about, in minutes ("at 3 pm")."""


def hours_question(text: str, today: date) -> HoursQuestion | None:
    """The hours question `text` asks, if it asks one: it speaks of opening, closing or hours."""
    said = words(text)
    found = set(said)
    opens, closes = bool(found & _OPEN_WORDS), bool(found & _CLOSE_WORDS)
    if not (opens or closes or found & _HOURS_WORDS):
        return None
    days, now, at = when_asked(text, today)
    first = said[0] if said else ""
    asks_when = "when" in found or ("what" in found and "time" in found) or "until" in found
    if found & _HOURS_WORDS and not asks_when and first not in _YES_NO_STARTS:
        aspect = "hours"
    elif asks_when and closes:
        aspect = "closes"
    elif asks_when and opens and not days and not now and "when" in found and "time" not in found:
        aspect = "hours"  # "when are you open?": the week
    elif asks_when and opens:
        aspect = "opens"
    elif closes and at is not None:
        aspect = "closes"  # "do you close at 5?"
    elif first in _YES_NO_STARTS or now or at is not None:
        aspect = "yes_no"
    else:
        aspect = "hours"
    return HoursQuestion(aspect, days, now, at)


def when_asked(text: str, today: date) -> tuple[tuple[date, ...], bool, int | None]:
    """The days `text` names, whether it asks about now, and the time of day it names (see
    `HoursQuestion`): "and on Sunday at 3?" asks about a day without asking about hours."""
    said = words(text)
    found = set(said)
    now = bool(found & _NOW_WORDS) or ("right" in found and "now" in found) or (
        "moment" in found)
    return _days(said, today), now, _time_of_day(said)


def _days(said: list[str], today: date) -> tuple[date, ...]:
    found: list[date] = []
    for i, word in enumerate(said):
        if word in ("today", "tonight") or (word == "this" and i + 1 < len(said) and said[i + 1]
                                             in ("evening", "afternoon", "morning")):
            found.append(today)
        elif word == "tomorrow":
            found.append(today + timedelta(days=1))
        elif word.rstrip("s") in DAYS:
            ahead = (DAYS.index(word.rstrip("s")) - today.weekday()) % 7
            found.append(today + timedelta(days=ahead))
        elif word in ("weekend", "weekends"):
            ahead = (5 - today.weekday()) % 7 if today.weekday() != 6 else -1
            saturday = today + timedelta(days=ahead)
            found.extend(d for d in (saturday, saturday + timedelta(days=1)) if d >= today)
    for phrase, (month, day) in _HOLIDAYS.items():
        if _contains(said, phrase):
            found.append(_next_date(today, month, day))
            break
    dated = _month_day(said, today)
    if dated is not None:
        found.append(dated)
    return tuple(dict.fromkeys(found))


def _contains(said: list[str], phrase: tuple[str, ...]) -> bool:
    return any(tuple(said[i:i + len(phrase)]) == phrase for i in range(len(said)))


def _month_day(said: list[str], today: date) -> date | None:
    """ "december 25", "25 december", "the 25th of december"."""
    for i, word in enumerate(said):
        if word not in _MONTHS or (word == "may" and not _day_number(said, i)):
            continue
        number = _day_number(said, i)
        if number is not None:
            return _next_date(today, _MONTHS.index(word) + 1, number)
    return None


def _day_number(said: list[str], i: int) -> int | None:
    for j in (i + 1, i - 1, i - 2):
        if 0 <= j < len(said):
            match = re.fullmatch(r"(\d{1,2})(?:st|nd|rd|th)?", said[j])
            if match and 1 <= int(match.group(1)) <= 31:
                return int(match.group(1))
    return None


def _next_date(today: date, month: int, day: int) -> date:
    for year in (today.year, today.year + 1):
        try:
            candidate = date(year, month, day)
        except ValueError:
            continue
        if candidate >= today:
            return candidate
    return today


def _time_of_day(said: list[str]) -> int | None:
    """ "at 3 pm", "at 15:30", "at three", "at 3 p.m.", "at 8pm" (in minutes); None if none."""
    for i, word in enumerate(said[:-1]):
        if word not in ("at", "after", "before", "around", "by"):
            continue
        match = re.fullmatch(r"(\d{1,2})(?:[:.](\d{2}))?(am|pm)?", said[i + 1])
        hour: int | None = None
        minute = 0
        rest = said[i + 2:i + 4]
        if match is not None:
            hour, minute = int(match.group(1)), int(match.group(2) or 0)
            rest = [match.group(3)] if match.group(3) else rest  # "8pm"
        elif said[i + 1] in _NUMBERS:
            hour = _NUMBERS[said[i + 1]]
        elif said[i + 1] in ("noon", "midday"):
            return 12 * 60
        if hour is None or hour > 24 or minute >= 60:
            continue
        if rest[:1] == ["pm"] or rest[:2] == ["p", "m"]:
            hour = hour % 12 + 12
        elif rest[:1] == ["am"] or rest[:2] == ["a", "m"]:
            hour %= 12
        elif 1 <= hour <= 7:
            hour += 12  # "at five": a visitor means the afternoon
        return hour * 60 + minute
    return None


# -- the answer -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Phrasing:
    """How times are said."""

    clock: str = "12h"
    """"12h" ("5:30 PM") or "24h" ("17:30")."""


def answer(question: HoursQuestion, schedule: Schedule, now: datetime,
           phrasing: Phrasing) -> str:
    """The answer to `question` about `schedule`, `now` being the venue's local time."""
    say = _Sayer(schedule, phrasing, now.date())
    today, minute = now.date(), now.hour * 60 + now.minute
    if question.aspect == "hours" and not question.days:
        return say.week()
    if question.now or (question.aspect == "yes_no" and not question.days
                        and question.at is None):
        return say.now(today, minute)
    if question.aspect == "opens" and not question.days:
        return say.next_opening(today, minute)
    said = [say.on_day(day, question.aspect, question.at, minute if day == today else None)
            for day in question.days or (today,)]
    # "Yes, on Saturday ... Yes, on Sunday ...": the second answer is said without its "Yes, ".
    return " ".join([said[0], *(_sentence(s.removeprefix("Yes, ")) for s in said[1:])])


class _Sayer:
    """Sentences about one place: "we" for the venue itself, its name for another place."""

    def __init__(self, schedule: Schedule, phrasing: Phrasing, today: date) -> None:
        self.schedule = schedule
        self.phrasing = phrasing
        self.today = today
        self.subject = schedule.place or "we"

    def be(self) -> str:
        """ "we're" or "the café is"."""
        return f"{self.subject} is" if self.schedule.place else "we're"

    def does(self, verb: str) -> str:
        """ "we open" or "the café opens"."""
        return f"{self.subject} {verb}s" if self.schedule.place else f"we {verb}"

    def clock(self, minutes: int) -> str:
        minutes %= MINUTES_PER_DAY
        hour, minute = divmod(minutes, 60)
        if self.phrasing.clock == "24h":
            return f"{hour:02d}:{minute:02d}"
        if minutes == 0:
            return "midnight"
        if minutes == 12 * 60:
            return "noon"
        half = "AM" if hour < 12 else "PM"
        shown = hour % 12 or 12
        return f"{shown}:{minute:02d} {half}" if minute else f"{shown} {half}"

    def when(self, day: date) -> str:
        if day == self.today:
            return "today"
        if day == self.today + timedelta(days=1):
            return "tomorrow"
        weekday = DAYS[day.weekday()].capitalize()
        if day - self.today < timedelta(days=7) and day not in self.schedule.dates:
            return f"on {weekday}"
        return f"on {weekday}, {_MONTHS[day.month - 1].capitalize()} {day.day}"

    def spans(self, day: Day) -> str:
        return " and ".join(f"from {self.clock(s.start)} to {self.clock(s.end)}" for s in day)

    def open_spans(self, when: date) -> list[tuple[int, int]]:
        """Open intervals on `when`, in minutes from its midnight, including the end of a span
        that started the day before and runs past midnight."""
        spans = [(s.start, s.end) for s in self.schedule.day(when)]
        spans += [(0, s.end - MINUTES_PER_DAY)
                  for s in self.schedule.day(when - timedelta(days=1)) if s.end > MINUTES_PER_DAY]
        return sorted(spans)

    def now(self, today: date, minute: int) -> str:
        for start, end in self.open_spans(today):
            if start <= minute < end:
                return f"Yes, {self.be()} open now, until {self.clock(end)}."
        return f"No, {self.be()} closed right now. {self.next_opening(today, minute)}"

    def next_opening(self, today: date, minute: int) -> str:
        for start, end in self.open_spans(today):
            if start <= minute < end:
                return _sentence(f"{self.be()} open now, until {self.clock(end)}.")
            if minute < start:
                return _sentence(f"{self.does('open')} today at {self.clock(start)}.")
        for ahead in range(1, 15):
            day = today + timedelta(days=ahead)
            spans = self.schedule.day(day)
            if spans:
                return _sentence(f"{self.does('open')} again {self.when(day)} at "
                                 f"{self.clock(spans[0].start)}.")
        return _sentence(f"{self.be()} closed for the next two weeks.")

    def on_day(self, day: date, aspect: str, at: int | None, minute: int | None) -> str:
        """About `day`; `minute`: now, when `day` is today."""
        spans = self.schedule.day(day)
        when = self.when(day)
        yes_no = aspect == "yes_no" or at is not None
        if not spans:
            return f"No, {when} {self.be()} closed." if yes_no else \
                _sentence(f"{when} {self.be()} closed.")
        closing = spans[-1].end
        if aspect == "closes" and at is not None:  # "do you close at 5?"
            yes = "Yes" if at == closing else "No"
            return f"{yes}, {when} {self.does('close')} at {self.clock(closing)}."
        if aspect == "closes" and minute is not None and minute >= closing:
            return (_sentence(f"{self.subject} closed at {self.clock(closing)} today. ")
                    + self.next_opening(day, minute))
        if at is not None:
            if any(s.start <= at < s.end for s in spans):
                return f"Yes, {when} at {self.clock(at)} {self.be()} open, {self.spans(spans)}."
            return (f"No, not at {self.clock(at)}. "
                    + _sentence(f"{when} {self.be()} open {self.spans(spans)}."))
        if aspect == "closes":
            return _sentence(f"{when} {self.does('close')} at {self.clock(spans[-1].end)}.")
        if aspect == "opens":
            return _sentence(f"{when} {self.does('open')} at {self.clock(spans[0].start)}.")
        if yes_no:
            return f"Yes, {when} {self.be()} open {self.spans(spans)}."
        return _sentence(f"{when} {self.be()} open {self.spans(spans)}.")

    def week(self) -> str:
        runs: list[tuple[int, int, Day]] = []
        for index, day in enumerate(self.schedule.week):
            if runs and runs[-1][2] == day:
                runs[-1] = (runs[-1][0], index, day)
            else:
                runs.append((index, index, day))
        parts = []
        for first, last, day in runs:
            names = DAYS[first].capitalize()
            if last == first + 1:
                names += f" and {DAYS[last].capitalize()}"
            elif last > first:
                names += f" to {DAYS[last].capitalize()}"
            parts.append(f"{names}: {self.spans(day) if day else 'closed'}")
        whose = f"{self.schedule.place}'s" if self.schedule.place else "our"
        text = _sentence(f"{whose} opening hours: {'; '.join(parts)}.")
        upcoming = [d for d in sorted(self.schedule.dates)
                    if self.today <= d <= self.today + timedelta(days=13)]
        for special in upcoming[:3]:
            hours_then = self.schedule.dates[special]
            state = f"open {self.spans(hours_then)}" if hours_then else "closed"
            text += " " + _sentence(f"{self.when(special)} {self.be()} {state}.")
        return text


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:]
