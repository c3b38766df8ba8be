"""The one value validator for every file a user writes (config, call files, manifests).

A value is checked for its type, then its text or number rules; an error names the file, the
key and the fix (ConfigError, exit 2). A value that works but is unlikely to be meant ("the agent
would answer after 9 s of silence") is kept and warned about on the "edge_agent" logger.
"""

from __future__ import annotations

import logging
import math
import types
import typing
import unicodedata
from dataclasses import dataclass
from typing import Any

from edge_agent.errors import ConfigError
from edge_agent.printable import shown

log = logging.getLogger("edge_agent")

ALLOWED_CONTROLS = frozenset("\t\n\r")
"""Control characters a text value may hold (they read as spaces when spoken)."""
MAX_TEXT = 100_000
"""Longest text value, in characters: far above any prompt a model's context holds."""
_INVISIBLE_CATEGORIES = frozenset(("Cc", "Cf", "Cn", "Co", "Cs", "Zs", "Zl", "Zp", "Mn", "Me"))
"""Controls, format characters (U+200B zero-width space, U+2060 word joiner, U+FEFF), spaces and
marks that only combine with a character before them: none shows anything on its own."""
_BLANK_LETTERS = frozenset("\u115f\u1160\u3164\uffa0\u2800")
"""Fillers Unicode files as letters or symbols that render as blank (Hangul fillers, the blank
Braille pattern)."""


@dataclass(frozen=True)
class Bounds:
    """The numbers a key takes, and the ones it is advised to take."""

    low: float
    high: float
    open_low: bool = False
    """`low` itself is refused."""
    open_high: bool = False
    """`high` itself is refused."""
    why: str = ""
    """Why an excluded end cannot work, appended to the error."""
    advised: tuple[float, float] | None = None
    """Outside this (but within the bounds) the value works but is suspicious: a warning."""
    advice: str = ""
    """What goes wrong outside `advised`, for the warning."""
    off: float | None = None
    """A value that switches the feature off: never suspicious."""

    def interval(self) -> str:
        return (f"{'(' if self.open_low else '['}{number(self.low)}, {number(self.high)}"
                f"{')' if self.open_high else ']'}")

    def admits(self, value: float) -> bool:
        above = value > self.low if self.open_low else value >= self.low
        below = value < self.high if self.open_high else value <= self.high
        return above and below

    def suspicious(self, value: float) -> bool:
        if self.advised is None or value == self.off:
            return False
        return not self.advised[0] <= value <= self.advised[1]


@dataclass(frozen=True)
class TextRule:
    """What a text value may hold."""

    required: bool = False
    """Text with no visible character ("", spaces, a zero-width space) is refused."""
    why: str = ""
    """Why it may not be empty."""
    max_words: int | None = None
    """More words than this works but is suspicious: a warning."""
    advice: str = ""
    max_chars: int = MAX_TEXT
    """Longer is refused (a key: a database indexes it, and an index entry has a size limit)."""
    max_chars_why: str = ""


def check_value(expected: Any, value: Any, source: str, key: str, *,
                bounds: Bounds | None = None, choices: tuple[str, ...] = (),
                text: TextRule | None = None) -> Any:
    """`value` as type `expected` (bool, int, float, str, list[...] and dict[str, ...] of
    those, Any), within
    `bounds` or `choices`, following `text` for strings; ConfigError naming the file and key."""
    if isinstance(expected, types.UnionType):
        expected = expected.__args__[0]
    if expected is Any:
        return value
    if typing.get_origin(expected) is dict:
        _, item = typing.get_args(expected)
        if not isinstance(value, dict):
            raise ConfigError(source, key, f"must be a table, got {_seen(value)}")
        return {name: check_value(item, v, source, f"{key}.{name}", bounds=bounds,
                                  choices=choices, text=text) for name, v in value.items()}
    if typing.get_origin(expected) is list:
        (item,) = typing.get_args(expected)
        if not isinstance(value, list):
            raise ConfigError(source, key, f"must be a list, got {_seen(value)}")
        return [check_value(item, v, source, f"{key}[{i}]", bounds=bounds, choices=choices,
                            text=text) for i, v in enumerate(value)]
    if expected is bool:
        ok = isinstance(value, bool)
    elif expected is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif expected is float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        value = float(value) if ok else value
    else:
        ok = isinstance(value, expected)
    if not ok:
        raise ConfigError(source, key, f"must be {_type_word(expected)}, got {_seen(value)}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(source, key, f"must be a finite number, got {value!r}")
    if isinstance(value, str):
        check_text(value, source, key, text or TextRule())
    if choices and value not in choices:
        listed = ", ".join(repr(c) for c in choices)
        raise ConfigError(source, key, f"must be one of {listed}, got {_seen(value)}")
    if bounds is not None and isinstance(value, int | float):
        _check_number(value, source, key, bounds)
    return value


def check_text(value: str, source: str, key: str, rule: TextRule) -> str:
    """`value` if it follows `rule` and holds no control character; ConfigError otherwise."""
    bad = next((i for i, c in enumerate(value)
                if c not in ALLOWED_CONTROLS and _is_control(c)), None)
    if bad is not None:
        raise ConfigError(source, key, f"holds a control character ({shown(value[bad])} at "
                          f"character {bad + 1}); remove it")
    if len(value) > rule.max_chars:
        why = f" ({rule.max_chars_why})" if rule.max_chars_why else ""
        raise ConfigError(source, key, f"is {len(value)} characters long; the most is "
                          f"{rule.max_chars}{why}")
    if rule.required and not has_visible_text(value):
        raise ConfigError(source, key, f"must not be empty{': ' + rule.why if rule.why else ''}")
    if rule.max_words is not None and len(value.split()) > rule.max_words:
        warn(source, key, f"{len(value.split())} words: {rule.advice}")
    return value


def has_visible_text(value: str) -> bool:
    """Whether `value` shows at least one character: text of spaces, zero-width and other
    invisible characters counts as empty wherever text is required."""
    return any(unicodedata.category(c) not in _INVISIBLE_CATEGORIES and c not in _BLANK_LETTERS
               and not c.isspace() for c in value)


def _is_control(char: str) -> bool:
    return unicodedata.category(char) in ("Cc", "Cs", "Co", "Cn") or char in "\u2028\u2029"


def _check_number(value: float, source: str, key: str, bounds: Bounds) -> None:
    if not bounds.admits(value):
        why = f": {bounds.why}" if bounds.why and value in (bounds.low, bounds.high) else ""
        raise ConfigError(source, key, f"must be between {number(bounds.low)} and "
                          f"{number(bounds.high)} "
                          f"{bounds.interval()}, got {value!r}{why}")
    if bounds.suspicious(value):
        assert bounds.advised is not None
        low, high = bounds.advised
        warn(source, key, f"{value!r} is outside the advised {low:g}..{high:g}: {bounds.advice}")


def number(value: float) -> str:
    """A bound as a person writes it: whole numbers in full (4294967295, not 4.29497e+09)."""
    if float(value).is_integer() and abs(value) < 1e16:
        return str(int(value))
    return f"{value:g}"


def warn(source: str, key: str, reason: str) -> None:
    """A legal but suspicious value: said once, on the "edge_agent" logger."""
    log.warning("%s: %s: %s", shown(source, 300), shown(key, 80), reason)


def _seen(value: Any) -> str:
    return f"{type(value).__name__} {shown(repr(value), 80)}"


def _type_word(expected: Any) -> str:
    return {bool: "true or false", int: "an integer", float: "a number", str: "a string"}.get(
        expected, getattr(expected, "__name__", str(expected))
    )
