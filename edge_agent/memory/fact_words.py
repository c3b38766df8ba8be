"""Word tables for the fact extractor (:mod:`edge_agent.memory.facts`), the regular-expression
fragments built from them, and the conversion of spoken numbers to digits.

Kept apart so the rules in ``facts`` stay readable. Every table is lowercase; fragments are meant
for patterns compiled with ``re.IGNORECASE``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

UNITS: dict[str, int] = {
    "zero": 0,
    "oh": 0,
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
}
"""Single-digit words; "oh" is zero inside digit sequences ("five five oh one")."""

TEENS: dict[str, int] = {
    "ten": 10,
    "eleven": 11,
    "twelve": 12,
    "thirteen": 13,
    "fourteen": 14,
    "fifteen": 15,
    "sixteen": 16,
    "seventeen": 17,
    "eighteen": 18,
    "nineteen": 19,
}

TENS: dict[str, int] = {
    "twenty": 20,
    "thirty": 30,
    "forty": 40,
    "fifty": 50,
    "sixty": 60,
    "seventy": 70,
    "eighty": 80,
    "ninety": 90,
}

NUMBERS: dict[str, int] = {**UNITS, **TEENS, **TENS}

NUMBER_WORDS: frozenset[str] = frozenset([*NUMBERS, "double", "triple", "hundred"])
"""Every word that can be part of a spoken digit sequence."""

_ORD_UNITS: dict[str, int] = {
    "first": 1,
    "second": 2,
    "third": 3,
    "fourth": 4,
    "fifth": 5,
    "sixth": 6,
    "seventh": 7,
    "eighth": 8,
    "ninth": 9,
}

ORDINALS: dict[str, int] = {
    **_ORD_UNITS,
    "tenth": 10,
    "eleventh": 11,
    "twelfth": 12,
    "thirteenth": 13,
    "fourteenth": 14,
    "fifteenth": 15,
    "sixteenth": 16,
    "seventeenth": 17,
    "eighteenth": 18,
    "nineteenth": 19,
    "twentieth": 20,
    **{f"twenty {word}": 20 + n for word, n in _ORD_UNITS.items()},
    "thirtieth": 30,
    "thirty first": 31,
}
"""Day-of-month ordinals; in patterns a space here also matches a hyphen ("twenty-first")."""

WEEKDAYS: tuple[str, ...] = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")

MONTHS: tuple[str, ...] = (
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
)

TIME_WORDS: frozenset[str] = frozenset(
    {
        "today", "tonight", "tomorrow", "yesterday", "noon", "midday", "midnight", "morning", "afternoon",
        "evening", "night", "weekend", "week", "lunch", "dinner", "breakfast", "brunch", "christmas",
        "easter", "thanksgiving", "halloween", "valentine", "mother", "father", "birthday", "anniversary",
        "eve", "new",
    }
)
"""Words that follow "table for" as a time or an occasion, never as a name."""

NOT_NAMES: frozenset[str] = frozenset(
    {
        "i", "me", "my", "mine", "myself", "you", "your", "yours", "he", "him", "his", "she", "her", "it",
        "its", "we", "us", "our", "they", "them", "their", "this", "that", "these", "those", "a", "an", "the",
        "some", "any", "no", "every", "each", "all", "both", "either", "neither", "what", "which", "who",
        "whom", "whose", "where", "when", "why", "how", "and", "or", "but", "so", "if", "then", "than",
        "because", "as", "at", "by", "for", "from", "in", "into", "of", "off", "on", "onto", "out", "over",
        "to", "up", "with", "without", "about", "after", "before", "under", "until", "again", "also", "just",
        "only", "really", "very", "still", "already", "actually", "maybe", "perhaps", "please", "thanks",
        "thank", "sorry", "hello", "hi", "hey", "bye", "goodbye", "yes", "yeah", "yep", "nope", "not", "okay",
        "ok", "well", "now", "here", "there", "later", "soon", "back", "away", "too", "anyway", "right",
        "wrong", "sure", "fine", "good", "great", "nice", "cool", "glad", "happy", "sad", "tired", "hungry",
        "thirsty", "busy", "ready", "done", "late", "early", "new", "old", "sick", "cold", "hot", "warm",
        "lost", "confused", "interested", "afraid", "alone", "alright", "calling", "coming", "waiting",
        "wondering", "leaving", "staying", "asking", "hoping", "thinking", "planning", "trying", "going",
        "looking", "booking", "is", "was", "am", "are", "be", "been", "being", "would", "can", "could",
        "should", "have", "has", "had", "do", "does", "did", "gonna", "wanna", "spelled", "spelt", "spelling",
        "correct", "same", "different", "other", "another", "lucky", "favorite", "favourite", "big", "large",
        "small", "total", "whole", "odd", "even", "random", "next", "last", "first", "second", "such",
        "crazy", "pleased", "excited", "allergic", "vegetarian", "vegan", "staff", "customer", "guest",
        "guests", "manager", "table", "party", "group", "name", "number", "everyone", "someone", "anyone",
        "nobody", "somebody", "everybody", "mister", "mr", "mrs", "ms", "miss", "dr", "sir", "madam",
        "sorted", "free", "open", "closed", "full", "available", "outside", "inside", "upstairs",
        "downstairs", "american", "australian", "british", "canadian", "chinese", "dutch", "english",
        "european", "french", "german", "greek", "indian", "irish", "italian", "japanese", "korean",
        "mexican", "polish", "portuguese", "russian", "scottish", "spanish", "swedish", "swiss", "turkish",
        "welsh", "local", "visiting",
    }
)
"""Common words that can follow "I'm", "this is", "call me" or "table for" without being a name."""


def alt(items: Iterable[str]) -> str:
    """A regex alternation of `items`; a space in an item matches spaces or a hyphen."""
    # Longest first, so "seventeen" is tried before "seven".
    return "|".join(re.escape(x).replace(r"\ ", r"[\s-]+") for x in sorted(items, key=len, reverse=True))


_UNIT = alt(k for k, v in UNITS.items() if v)
_TENS = alt(TENS)
_TEENS = alt(TEENS)
_SPOKEN = alt([*NUMBERS, "double", "triple"])

COUNT = rf"(?:\d{{1,2}}|(?:{_TENS})(?:[\s-]+(?:{_UNIT}))?|{_TEENS}|{_UNIT})"
"""A count of 1 to 99: "4", "four", "twenty two"."""
HOUR = rf"(?:\d{{1,2}}|{alt([*(k for k, v in UNITS.items() if v), 'ten', 'eleven', 'twelve'])})"
"""An hour: up to two digits, or "one" to "twelve"."""
MINUTES = rf"(?:oh\s+(?:{_UNIT})|(?:{_TENS})(?:[\s-]+(?:{_UNIT}))?|{_TEENS})"
"""Spoken minutes after an hour: "oh five", "fifteen", "forty five"."""
SPOKEN_START = rf"(?:{_SPOKEN})\b"
"""A word that can begin a spoken digit sequence."""
SPOKEN_DIGITS = rf"(?:\b(?:{_SPOKEN})\b(?:[\s,-]+(?:{_SPOKEN}|hundred(?:\s+and)?)\b)*)"
"""A spoken digit sequence: "four four seven one", "double five oh", "seventy seven eighty one"."""
WEEKDAY = alt(WEEKDAYS)
MONTH = alt(MONTHS)
DAY = rf"(?:\d{{1,2}}(?:st|nd|rd|th)?|{alt(ORDINALS)})"
"""A day of the month: "3", "3rd", "third", "twenty-first"."""


def number(raw: str) -> int | None:
    """Digits, or number words summed ("twenty two" -> 22, "oh five" -> 5); None if not a number."""
    raw = raw.lower()
    if raw.isdigit():
        return int(raw)
    parts = [p for p in re.split(r"[\s-]+", raw) if p != "oh"]
    if not parts or any(p not in NUMBERS for p in parts):
        return None
    return sum(NUMBERS[p] for p in parts)


def spoken_digits(raw: str) -> str:
    """Digits of a spoken sequence: "double five oh one" -> "5501", "seventy seven eighty one" -> "7781"."""
    out, fill, times = "", 0, 1
    for tok in re.findall(r"[a-z]+|\d+", raw.lower()):
        if tok in ("double", "triple"):
            times = 2 if tok == "double" else 3
            continue
        if tok == "plus":
            out += "+"
        elif tok == "hundred":
            out, fill = out + "00", 2
        elif tok.isdigit():
            out, fill = out + tok, 0
        elif tok in UNITS:
            digit = str(UNITS[tok])
            # "seventy one" fills the zero of "seventy"; "five hundred one" the last zero of "500".
            out = out[:-1] + digit if fill and times == 1 and UNITS[tok] else out + digit * times
            fill = 0
        elif tok in NUMBERS:
            out = (out[:-2] if fill == 2 else out) + str(NUMBERS[tok])
            fill = 1 if tok in TENS else 0
        times = 1
    return out
