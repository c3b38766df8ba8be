"""One strip of a run's axis as inline SVG: the caller's lane, the agent's lane, the words
heard and never heard, each turn's latency and the moments that decided turns.

Drawn on the server: the browser only parses the page (no script lays out thousands of words),
and each strip is a separate element it can skip while off screen.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from html import escape

from edge_agent.inspect.envelope import BUCKET_S
from edge_agent.inspect.layout import STRIP_S, Strip
from edge_agent.inspect.model import CallerSpeech, Marker, TurnRow, UnitView, Wave

WIDTH, HEIGHT = 1200, 258
LEFT, RIGHT = 88, 1192
SCALE = (RIGHT - LEFT) / STRIP_S
"""Pixels per second."""
CALLER_MID, AGENT_MID, LANE_HALF = 38, 102, 19
CALLER_TEXT_Y = 74
HEARD_Y, UNHEARD_Y = (136, 149, 162), (178, 191, 204)
"""Word rows: a word goes on the first row where the one before has ended, so words spoken
quickly do not overlap."""
CHAR_PX = 8.0
"""About the width of a character of a word (11 px bold sans), to find a free row."""
LATENCY_Y = 218
MARKER_Y = (239, 252)

Place = Callable[[float], float]
"""A clock time to its x on the strip."""


@dataclass(frozen=True)
class Items:
    """What falls on one strip (already filtered to it)."""

    caller: list[CallerSpeech]
    units: list[UnitView]
    rows: list[TurnRow]
    markers: list[tuple[str, Marker]]
    """(page key, marker)."""
    waves: list[tuple[Wave, float]]
    """(wave, amplitude scale)."""
    row_of_unit: dict[str, str]
    run: int


def strip_svg(strip: Strip, items: Items) -> str:
    def x(t: float) -> float:
        return round(LEFT + (t - strip.start) * SCALE, 1)

    def inside(t: float) -> bool:
        return strip.start <= t < strip.end

    parts = [f'<svg class="axis" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} '
             f'{HEIGHT}" role="img" aria-label="{escape(_clock(strip.start))} to '
             f'{escape(_clock(strip.end))}">', _frame(strip)]
    for speech in items.caller:
        row = f"r{items.run}-c{speech.index}"
        parts.append(_rect(x(speech.start), x(speech.end), CALLER_MID, "span caller", row))
        if speech.detected > speech.end:
            parts.append(_rect(x(speech.end), x(speech.detected), CALLER_MID, "span silence",
                               row, half=4))
        if inside(speech.start):
            label = speech.text or f"({speech.decision})"
            parts.append(f'<text class="caller-text {speech.decision}" data-row="{row}" '
                         f'x="{x(speech.start)}" y="{CALLER_TEXT_Y}">{escape(label)}</text>')
    for unit in items.units:
        row = items.row_of_unit.get(unit.unit_id, "")
        for a, b in unit.playing:
            parts.append(_rect(x(a), x(b), AGENT_MID, "span agent", row))
        for pause in unit.pauses:
            parts.append(_rect(x(pause.start), x(pause.end), AGENT_MID, "pause", row))
        if unit.start is not None and inside(unit.start):
            parts.append(f'<text class="unit-id" x="{x(unit.start) + 2}" '
                         f'y="{AGENT_MID - LANE_HALF + 9}">{escape(unit.unit_id)}</text>')
    for wave, scale in items.waves:
        parts.append(_wave(wave, scale, strip, x))
    parts.extend(_words(items.units, items.run, x, inside))
    for answered in items.rows:
        parts.append(_latency(answered, x))
    for number, (key, marker) in enumerate(items.markers):
        parts.append(_marker(key, marker, x(marker.at), MARKER_Y[number % 2]))
    parts.append("</svg>")
    return "".join(parts)


def _frame(strip: Strip) -> str:
    lanes = [(CALLER_MID, "caller"), (AGENT_MID, "agent")]
    parts = [f'<rect class="lane" x="{LEFT}" y="{mid - LANE_HALF}" width="{RIGHT - LEFT}" '
             f'height="{2 * LANE_HALF}"/><text class="lane-name" x="4" y="{mid + 4}">{name}'
             "</text>" for mid, name in lanes]
    parts += [f'<text class="lane-name" x="4" y="{HEARD_Y[0] + 4}">heard</text>',
              f'<text class="lane-name unheard" x="4" y="{UNHEARD_Y[0] + 4}">never heard</text>',
              f'<text class="lane-name" x="4" y="{LATENCY_Y + 4}">latency</text>',
              f'<text class="lane-name" x="4" y="{MARKER_Y[0] + 4}">events</text>']
    second = int(strip.start)
    while second <= strip.end:
        at = round(LEFT + (second - strip.start) * SCALE, 1)
        parts.append(f'<line class="tick" x1="{at}" x2="{at}" y1="12" y2="{HEIGHT}"/>')
        if second < strip.end:
            parts.append(f'<text class="tick-label" x="{at + 2}" y="10">{_clock(second)}</text>')
        second += 1
    return "".join(parts)


def _rect(a: float, b: float, mid: int, kind: str, row: str, half: int = LANE_HALF) -> str:
    a, b = max(a, LEFT), min(b, RIGHT)
    if b <= a:
        return ""
    return (f'<rect class="{kind}" data-row="{row}" x="{a}" y="{mid - half}" '
            f'width="{round(b - a, 1)}" height="{2 * half}"/>')


def _words(units: list[UnitView], run: int, x: Place, inside: Callable[[float], bool]
           ) -> Iterable[str]:
    """The words starting on this strip, heard ones first, each unit's in order."""
    for heard, rows in ((True, HEARD_Y), (False, UNHEARD_Y)):
        ends = [float("-inf")] * len(rows)
        placed = sorted(((x(word.start), unit.unit_id, word) for unit in units
                         for word in unit.words if word.heard == heard and inside(word.start)),
                        key=lambda item: item[0])
        for at, unit_id, word in placed:
            row = next((r for r, end in enumerate(ends) if end <= at), ends.index(min(ends)))
            width = CHAR_PX * len(word.text)
            ends[row] = at + width + 6
            at = round(max(LEFT, min(at, WIDTH - 2 - width)), 1)  # a last word stays whole
            state = "heard" if heard else "unheard"
            inexact = "" if word.exact else " inexact"
            yield (f'<text class="word {state}{inexact}" data-run="{run}" '
                   f'data-unit="{escape(unit_id)}" data-index="{word.index}" x="{at}" '
                   f'y="{rows[row]}">{escape(word.text)}</text>')


def _wave(wave: Wave, scale: float, strip: Strip, x: Place) -> str:
    mid = CALLER_MID if wave.kind == "caller" else AGENT_MID
    pieces: list[list[tuple[float, float, float]]] = []
    for point in wave.points:
        if not strip.start - BUCKET_S <= point[0] < strip.end:
            continue
        if pieces and point[0] - pieces[-1][-1][0] <= 3 * BUCKET_S:
            pieces[-1].append(point)
        else:
            pieces.append([point])
    paths = []
    for piece in pieces:
        top = [f"{max(LEFT, x(t))},{round(mid - hi * scale * LANE_HALF, 1)}" for t, _, hi in piece]
        bottom = [f"{max(LEFT, x(t))},{round(mid - lo * scale * LANE_HALF, 1)}"
                  for t, lo, _ in reversed(piece)]
        paths.append("M" + " ".join(top + bottom) + "Z")
    if not paths:
        return ""
    return (f'<path class="wave {wave.kind}" data-ref="{escape(wave.ref)}" '
            f'd="{"".join(paths)}"/>')


def _latency(row: TurnRow, x: Place) -> str:
    if not row.stages or row.caller is None:
        return ""
    start, last = row.caller.end, row.stages[-1]
    parts = [f'<g class="latency" data-row="{row.key}">',
             f'<line class="latency-bar" x1="{x(start)}" x2="{x(last.at)}" y1="{LATENCY_Y}" '
             f'y2="{LATENCY_Y}"/>']
    for stage in row.stages:
        kind = " speculative" if stage.speculative else ""
        parts.append(f'<line class="stage {stage.name}{kind}" x1="{x(stage.at)}" '
                     f'x2="{x(stage.at)}" y1="{LATENCY_Y - 5}" y2="{LATENCY_Y + 5}"/>')
    parts.append(f'<text class="latency-label" x="{x(last.at) + 4}" y="{LATENCY_Y + 4}">'
                 f"{last.after_ms} ms</text></g>")
    return "".join(parts)


def _marker(key: str, marker: Marker, at: float, y: int) -> str:
    line = ""
    if marker.kind == "barge-in":
        line = (f'<line class="cut" x1="{at}" x2="{at}" y1="{CALLER_MID - LANE_HALF}" '
                f'y2="{UNHEARD_Y[-1] + 3}"/>')
    return (f'<g class="marker {marker.kind}" data-marker="{key}">{line}'
            f'<circle cx="{at}" cy="{y - 4}" r="3"/>'
            f'<text x="{at + 5}" y="{y}">{escape(marker.label[:90])}</text></g>')


def _clock(seconds: float) -> str:
    whole = int(seconds)
    return f"{whole // 60}:{whole % 60:02d}"
