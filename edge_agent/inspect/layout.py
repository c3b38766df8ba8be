"""The page's axis: a run cut into strips of equal length, read like lines of text (time runs
left to right, then down), with long stretches where nothing happened left out.

Strips keep a 30-minute session readable (a single axis would be 200,000 px wide) and let the
browser skip drawing strips that are off screen.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

STRIP_S = 10.0
"""Seconds per strip: about 110 px per second on a 1280 px page, room for each word."""
SKIP_S = 3.0
"""A stretch with nothing on it at least this long between strips is left out."""
MAX_STRIPS = 10_000
"""Strips one page may hold: 28 hours of things happening (a day-long session is a few
thousand); each strip is a few KB of the page."""


class AxisTooLongError(ValueError):
    """The busy stretches of a run would take more than `MAX_STRIPS` strips."""


@dataclass(frozen=True)
class Strip:
    """One line of the axis."""

    start: float
    end: float
    skipped: float
    """Seconds left out before it (nothing happened then)."""


def strips(busy: Iterable[tuple[float, float]], length: float = STRIP_S,
           skip: float = SKIP_S, limit: int = MAX_STRIPS) -> list[Strip]:
    """Strips of `length` seconds covering every `busy` (start, end) interval, starting on
    whole seconds; a gap of `skip` seconds or more with nothing busy is left out. More than
    `limit` strips: AxisTooLongError (found at the one past the limit)."""
    merged: list[list[float]] = []
    for start, end in sorted((a, max(a, b)) for a, b in busy):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    found: list[Strip] = []
    if not merged:
        return found
    moment, skipped, index = float(math.floor(merged[0][0])), 0.0, 0
    while True:
        end = moment + length
        found.append(Strip(moment, end, skipped))
        if len(found) > limit:
            busy_s = sum(b - a for a, b in merged)
            raise AxisTooLongError(
                f"a run with {busy_s / 3600:.3g} hours of things happening (from "
                f"{merged[0][0]:g} s to {merged[-1][1]:g} s on its clock) needs more than the "
                f"{limit} strips of {length:g} s left to the page")
        while index < len(merged) and merged[index][1] <= end:
            index += 1
        if index == len(merged):
            return found
        following = float(math.floor(merged[index][0]))
        if merged[index][0] > end and following - end >= skip:
            moment, skipped = following, following - end
        else:
            moment, skipped = end, 0.0


@dataclass
class StripBudget:
    """The strips left to one page, shared by its runs: a record of a thousand runs, each
    busy for a day, is refused like one run busy for a thousand days."""

    left: int = field(default=MAX_STRIPS)

    def lay(self, busy: Iterable[tuple[float, float]]) -> list[Strip]:
        """`strips(busy)`, counted against what is left (AxisTooLongError past it)."""
        laid = strips(busy, limit=self.left)
        self.left -= len(laid)
        return laid

