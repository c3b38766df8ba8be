"""JSON checked against a shape before anything is built from it: the one validator of records
(`record_check`) and of events read back (`events.LoggedEvent.from_json`).

A shape is a `Kind` (text, a number, a whole number in a range, ...) or a frozen dataclass,
whose fields' type hints give the kinds: `str`, `int`, `float`, `bool`, `X | None`,
`tuple[T, ...]`, `dict[str, Any]`, another dataclass, and `Annotated[int | float, Bound(...)]`
for a number with a range. A value that does not fit is a `ShapeError` naming where it is
("events[3].finalize.words[2].start_sample") and what it must be; a record is user input
(edited, cut short, from another program), so every number's range is checked before it sizes
anything, and a message never holds more than a preview of what it found.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeVar

T = TypeVar("T")


class Bound(NamedTuple):
    """A number's range, for `Annotated[int, Bound(...)]`."""

    low: float
    high: float
    unit: str = ""
    """What the number counts, said in the message ("milliseconds, an hour at most")."""


@dataclass(frozen=True)
class Kind:
    """What a value must hold: `name` says it in a message, `fits` is its type, `low`..`high`
    its range for a number (in `unit`)."""

    name: str
    fits: Callable[[Any], bool]
    low: float | None = None
    high: float | None = None
    unit: str = ""

    def bounded(self, bound: Bound) -> Kind:
        return dataclasses.replace(self, low=bound.low, high=bound.high, unit=bound.unit)


def _is_number(value: Any) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    return _is_whole(value)  # any int, however long (its range is checked next)


def _is_whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


NUMBER = Kind("a number", _is_number)
WHOLE = Kind("a whole number", _is_whole)
TEXT = Kind("text", lambda v: isinstance(v, str))
FLAG = Kind("true or false", lambda v: isinstance(v, bool))
OBJECT = Kind("an object", lambda v: isinstance(v, dict))
LIST = Kind("a list", lambda v: isinstance(v, list | tuple))
ANYTHING = Kind("anything", lambda v: True)


class ShapeError(ValueError):
    """A value that does not fit its shape."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}" if path else reason)
        self.path = path
        """Where the value is, from the top ("events[3].text"; "" for the top itself)."""
        self.reason = reason
        """What it must be and what it is ("must be text, got nothing")."""


def require(value: Any, path: str, kind: Kind) -> Any:
    """`value` if it is of `kind` and in its range; else a ShapeError at `path`."""
    if not kind.fits(value):
        raise ShapeError(path, f"must be {kind.name}, got {seen(value)}")
    out_of_range = (kind.low is not None and value < kind.low) or (
        kind.high is not None and value > kind.high)
    if out_of_range:
        unit = f" ({kind.unit})" if kind.unit else ""
        raise ShapeError(path, f"must be from {_bound(kind.low)} to {_bound(kind.high)}{unit}, "
                         f"got {preview(value)}")
    return value


def fields(value: Any, path: str, wanted: Mapping[str, Kind]) -> dict[str, Any]:
    """`value`, an object whose keys in `wanted` each hold their kind (others are kept)."""
    item: dict[str, Any] = require(value, path, OBJECT)
    for key, kind in wanted.items():
        require(item.get(key), _at(path, key), kind)
    return item


def decode(shape: type[T], value: Any, path: str = "") -> T:
    """`value` (parsed JSON) as an instance of the dataclass `shape`: every field of its kind,
    a missing field with a default given its default, keys it does not have ignored."""
    return typing.cast(T, _decode(shape, value, path))


def _decode(hint: Any, value: Any, path: str) -> Any:
    origin = typing.get_origin(hint)
    if origin is typing.Annotated:
        inner, *extras = typing.get_args(hint)
        bound = next((e for e in extras if isinstance(e, Bound)), None)
        if bound is not None and inner in (int, float):
            return require(value, path, (WHOLE if inner is int else NUMBER).bounded(bound))
        return _decode(inner, value, path)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(hint)
        if value is None and type(None) in options:
            return None
        others = [o for o in options if o is not type(None)]
        if len(others) == 1:
            try:
                return _decode(others[0], value, path)
            except ShapeError as error:
                if value is None or error.path != path:
                    raise
                raise ShapeError(path, f"must be {_name(others[0])} or null, got "
                                 f"{seen(value)}") from None
        return require(value, path, ANYTHING)
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        item = require(value, path, OBJECT)
        hints = typing.get_type_hints(hint, include_extras=True)
        given = {}
        for field in dataclasses.fields(hint):
            if field.name not in item and (field.default is not dataclasses.MISSING or
                                           field.default_factory is not dataclasses.MISSING):
                continue
            given[field.name] = _decode(hints[field.name], item.get(field.name),
                                        _at(path, field.name))
        return hint(**given)
    if origin is tuple:
        args = typing.get_args(hint)
        items = require(value, path, LIST)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_decode(args[0], v, f"{path}[{i}]") for i, v in enumerate(items))
        if len(items) != len(args):
            raise ShapeError(path, f"must be a list of {len(args)}, got {preview(items)}")
        return tuple(_decode(a, v, f"{path}[{i}]") for i, (a, v) in enumerate(zip(args, items, strict=True)))
    if origin is dict:
        return require(value, path, OBJECT)
    if hint is Any:
        return value
    if hint is bool:
        return require(value, path, FLAG)
    if hint is int:
        return require(value, path, WHOLE)
    if hint is float:
        return float(require(value, path, NUMBER))
    if hint is str:
        return require(value, path, TEXT)
    raise TypeError(f"no JSON shape for {hint!r}")


def _name(hint: Any) -> str:
    plain = typing.get_args(hint)[0] if typing.get_origin(hint) is typing.Annotated else hint
    names = {str: TEXT.name, int: WHOLE.name, float: NUMBER.name, bool: FLAG.name}
    return names.get(plain, OBJECT.name if dataclasses.is_dataclass(plain) else "a value")


def _at(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _bound(value: float | None) -> str:
    return f"{value:.0f}" if value is not None and float(value).is_integer() else f"{value}"


def seen(value: Any) -> str:
    """What was found, for a message: "nothing", or its type and a preview."""
    return "nothing" if value is None else f"{type(value).__name__} {preview(value)}"


def preview(value: Any, depth: int = 2) -> str:
    """`value` as JSON, cut short: never the whole of a list that may be the whole record."""
    if isinstance(value, str):
        return json.dumps(value[:60])
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**20:
        return f"a {len(str(abs(value)))}-digit number"  # (str() is capped at 4300 digits)
    if isinstance(value, list):
        if depth == 0:
            return "[...]"
        shown = [preview(item, depth - 1) for item in value[:3]]
        return f"[{', '.join(shown)}{', ...' if len(value) > 3 else ''}]"
    if isinstance(value, dict):
        if depth == 0:
            return "{...}"
        shown = [f"{json.dumps(str(key)[:20])}: {preview(item, depth - 1)}"
                 for key, item in itertools.islice(value.items(), 3)]
        return f"{{{', '.join(shown)}{', ...' if len(value) > 3 else ''}}}"
    return json.dumps(value)
