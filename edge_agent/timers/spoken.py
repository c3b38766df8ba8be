"""Durations and clock times as people say them, and as the agent says them back.

The recognizer writes numbers either way ("10 minutes", "ten minutes", "7:30 a.m.", "seven
thirty"), so both are read: digits, number words up to the hundreds ("twenty five", "one
hundred twenty"), "a"/"an" before a unit, halves and quarters ("an hour and a half", "half an
hour", "a quarter of an hour", "one and a half minutes"), and clock times with or without a
meridiem ("7 am", "seven thirty pm", "half past six", "quarter to eight", "noon", "6 in the
morning"). Times the agent says back use digits ("7:30 AM", "10 minutes"): the voice reads them
as words.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta, tzinfo

from edge_agent.memory.fact_words import NUMBERS, TENS, UNITS

UNIT_SECONDS: dict[str, int] = {
    "second": 1, "seconds": 1, "sec": 1, "secs": 1,
    "minute": 60, "minutes": 60, "min": 60, "mins": 60,
    "hour": 3600, "hours": 3600, "hr": 3600, "hrs": 3600,
}
"""Units a duration is said in, by word."""

_MERIDIEM_AFTER = {
    ("am",): "am", ("pm",): "pm", ("a", "m"): "am", ("p", "m"): "pm",
    ("in", "the", "morning"): "am", ("in", "the", "afternoon"): "pm",
    ("in", "the", "evening"): "pm", ("at", "night"): "pm", ("tonight",): "pm",
    ("this", "morning"): "am", ("this", "afternoon"): "pm", ("this", "evening"): "pm",
}


def words_of(text: str) -> list[str]:
    """`text` as lowercase words: punctuation gone, "a.m." -> "am", "10am" -> "10", "am",
    "twenty-five" -> "twenty", "five", "what's" -> "whats"."""
    text = text.lower()
    text = re.sub(r"\b([ap])\.\s?m\b\.?", r"\1m", text)
    text = text.replace("o'clock", "oclock").replace("'", "").replace("\u2019", "")
    text = re.sub(r"(\d)([a-z])", r"\1 \2", text)
    text = re.sub(r"(\d)\.(?!\d)", r"\1", text)  # a sentence's full stop after a number
    return re.findall(r"\d+(?:[:.]\d+)?|[a-z]+", text)


def number_at(words: list[str], i: int) -> tuple[float, int] | None:
    """The number said from `words[i]` on, and the index after it; None if none starts there.
    "a"/"an" is not one (only before a unit, see `duration_at`)."""
    if i >= len(words):
        return None
    word = words[i]
    if re.fullmatch(r"\d+(?:\.\d+)?", word):
        value, j = float(word), i + 1
    elif word in NUMBERS and word != "oh":
        value, j = float(NUMBERS[word]), i + 1
        if j < len(words) and words[j] == "hundred":
            value, j = value * 100, j + 1
            if j < len(words) and words[j] == "and" and _number_word(words, j + 1):
                j += 1
            if _number_word(words, j):
                rest = number_at(words, j)
                if rest is not None:
                    value, j = value + rest[0], rest[1]
        elif word in TENS and j < len(words) and words[j] in UNITS and words[j] not in (
                "zero", "oh"):
            value, j = value + UNITS[words[j]], j + 1
    else:
        return None
    if words[j:j + 3] == ["and", "a", "half"]:
        value, j = value + 0.5, j + 3
    return value, j


def _number_word(words: list[str], i: int) -> bool:
    return i < len(words) and (words[i] in NUMBERS or words[i].isdigit())


def duration_at(words: list[str], i: int) -> tuple[float, int] | None:
    """The duration said from `words[i]` on, in seconds, and the index after it ("1 hour and
    20 minutes", "an hour and a half", "half an hour", "ninety seconds"); None if none."""
    total, j, found = 0.0, i, False
    while j < len(words):
        part = _part_at(words, j)
        if part is None:
            break
        seconds, j = part
        total, found = total + seconds, True
        if j < len(words) - 1 and words[j] in ("and", "plus") and _part_at(words, j + 1):
            j += 1
    return (total, j) if found else None


def _part_at(words: list[str], i: int) -> tuple[float, int] | None:
    """One "<number> <unit>" (or "half an hour", "a quarter of an hour")."""
    if words[i:i + 1] == ["half"] and words[i + 1:i + 2] in (["a"], ["an"]):
        unit = UNIT_SECONDS.get(words[i + 2]) if i + 2 < len(words) else None
        return (unit / 2, i + 3) if unit is not None else None
    quarter = i + (1 if words[i:i + 1] in (["a"], ["one"]) else 0)
    if words[quarter:quarter + 1] == ["quarter"]:
        rest = words[quarter + 1:quarter + 4]
        if rest[:1] == ["hour"]:
            return 900.0, quarter + 2
        if rest in (["of", "an", "hour"], ["of", "a", "hour"]):
            return 900.0, quarter + 4
        return None
    if words[i] in ("a", "an"):
        value, j = 1.0, i + 1
    else:
        number = number_at(words, i)
        if number is None:
            return None
        value, j = number
    if j >= len(words) or words[j] not in UNIT_SECONDS:
        return None
    unit = UNIT_SECONDS[words[j]]
    j += 1
    if words[j:j + 3] == ["and", "a", "half"]:
        value, j = value + 0.5, j + 3
    return value * unit, j


def find_duration(words: list[str]) -> tuple[float, int, int] | None:
    """The first duration in `words`: (seconds, first index, index after)."""
    for i in range(len(words)):
        found = duration_at(words, i)
        if found is not None:
            return found[0], i, found[1]
    return None


@dataclass(frozen=True)
class ClockTime:
    """A time of day as said: which of the day's two it is may be open."""

    hour: int
    """0-23 as said ("7" is 7, "19:00" is 19)."""
    minute: int
    """0-59."""
    meridiem: str
    """"am", "pm" or "" (not said: the next of the two)."""


def clock_at(words: list[str], i: int) -> tuple[ClockTime, int] | None:
    """The time of day said from `words[i]` on, and the index after it; None if none."""
    if i >= len(words):
        return None
    word = words[i]
    if word in ("noon", "midday"):
        return ClockTime(12, 0, "pm"), i + 1
    if word == "midnight":
        return ClockTime(0, 0, "am"), i + 1
    relative = _relative_at(words, i)
    if relative is not None:
        return relative
    match = re.fullmatch(r"(\d{1,2})(?:[:.](\d{2}))?|(\d{1,2})(\d{2})", word)
    if match is not None:
        hour = int(match.group(1) or match.group(3))
        minute = int(match.group(2) or match.group(4) or 0)
        j = i + 1
    elif word in NUMBERS and 1 <= NUMBERS[word] <= 12 and word not in TENS:
        hour, minute, j = NUMBERS[word], 0, i + 1
        minutes = _minutes_at(words, j)
        if minutes is not None:
            minute, j = minutes
    else:
        return None
    if hour > 23 or minute > 59:
        return None
    if words[j:j + 1] == ["oclock"]:
        j += 1
    meridiem, j = _meridiem_at(words, j)
    if meridiem and not 1 <= hour <= 12:
        return None
    return ClockTime(hour, minute, meridiem), j


def _minutes_at(words: list[str], i: int) -> tuple[int, int] | None:
    """The minutes after a spoken hour: "thirty", "forty five", "oh five", "15"."""
    if i >= len(words):
        return None
    if words[i] == "oh" and i + 1 < len(words) and words[i + 1] in UNITS:
        return UNITS[words[i + 1]], i + 2
    if words[i].isdigit() and len(words[i]) == 2:
        return int(words[i]), i + 1
    if words[i] in NUMBERS and NUMBERS[words[i]] >= 10:
        number = number_at(words, i)
        if number is not None and number[0] < 60 and number[0] == int(number[0]):
            return int(number[0]), number[1]
    return None


def _relative_at(words: list[str], i: int) -> tuple[ClockTime, int] | None:
    """ "half past seven", "quarter to eight", "ten past six", "twenty to nine"."""
    if words[i] == "half":
        minutes, j = 30, i + 1
    elif words[i] == "quarter" or words[i:i + 2] == ["a", "quarter"]:
        minutes, j = 15, i + (2 if words[i] == "a" else 1)
    else:
        number = number_at(words, i)
        if number is None or not 1 <= number[0] < 60 or number[0] != int(number[0]):
            return None
        minutes, j = int(number[0]), number[1]
        if words[j:j + 1] in (["minutes"], ["minute"]):
            j += 1
    if j >= len(words) or words[j] not in ("past", "after", "to", "before"):
        return None
    before = words[j] in ("to", "before")
    hour = clock_at(words, j + 1)
    if hour is None or hour[0].minute:
        return None
    said, end = hour
    total = said.hour * 60 + (-minutes if before else minutes)
    return ClockTime((total // 60) % 24, total % 60, said.meridiem), end


def _meridiem_at(words: list[str], i: int) -> tuple[str, int]:
    for said, meridiem in _MERIDIEM_AFTER.items():
        if tuple(words[i:i + len(said)]) == said:
            return meridiem, i + len(said)
    return "", i


def next_at(said: ClockTime, now: datetime, zone: tzinfo | None, tomorrow: bool) -> datetime:
    """The next moment after `now` that is `said` on the local clock (`zone`, None: the
    device's), from tomorrow on if `tomorrow`; a time said without a meridiem is the sooner of
    its two ("7" at 8 AM is 7 PM)."""
    if said.meridiem == "am":
        hours = [said.hour % 12]
    elif said.meridiem == "pm":
        hours = [said.hour % 12 + 12]
    elif 1 <= said.hour <= 12:
        hours = [said.hour % 12, said.hour % 12 + 12]
    else:
        hours = [said.hour]
    today = local(now, zone).date()
    start = today + timedelta(days=1) if tomorrow else today
    for day in (start, start + timedelta(days=1)):
        for hour in sorted(hours):
            moment = _on_clock(day, time(hour, said.minute), zone)
            if moment > now:
                return moment
    raise AssertionError("a time of day comes again within two days")  # pragma: no cover


def local(moment: datetime, zone: tzinfo | None) -> datetime:
    """`moment` on the local clock (`zone`; None: the device's)."""
    return moment.astimezone(zone) if zone is not None else moment.astimezone()


def _on_clock(day: date, at: time, zone: tzinfo | None) -> datetime:
    if zone is not None:
        return datetime.combine(day, at, tzinfo=zone)
    return datetime.combine(day, at).astimezone()  # the C library knows the device's DST


def say_duration(seconds: float) -> str:
    """ "10 minutes", "1 hour and 30 minutes", "2 minutes and 5 seconds", "45 seconds"."""
    whole = max(0, round(seconds))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [f"{n} {unit}{'' if n == 1 else 's'}"
             for n, unit in ((hours, "hour"), (minutes, "minute"), (secs, "second")) if n]
    if not parts:
        return "0 seconds"
    return " and ".join(parts) if len(parts) <= 2 else f"{parts[0]}, {parts[1]} and {parts[2]}"


def say_left(seconds: float) -> str:
    """Time left, as precisely as a listener wants it: to the second under 10 minutes, to the
    minute under 10 hours, else to the hour."""
    if seconds < 600:
        return say_duration(seconds)
    if seconds < 36000:
        return say_duration(round(seconds / 60) * 60)
    return say_duration(round(seconds / 3600) * 3600)


def say_clock(moment: datetime, now: datetime, zone: tzinfo | None) -> str:
    """ "7:30 AM", "7 AM", "tomorrow at 7 AM", "on Monday at 9:15 PM" (on the local clock)."""
    when, today = local(moment, zone), local(now, zone).date()
    hour = when.hour % 12 or 12
    clock = f"{hour}:{when.minute:02d}" if when.minute else f"{hour}"
    clock += " AM" if when.hour < 12 else " PM"
    days = (when.date() - today).days
    if days == 0:
        return clock
    if days == 1:
        return f"tomorrow at {clock}"
    if days == -1:
        return f"yesterday at {clock}"
    return f"on {when.strftime('%A')} at {clock}"
