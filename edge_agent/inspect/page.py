"""The inspection page: one self-contained HTML file (inline CSS, SVG and script; nothing is
fetched, the device is offline) drawn from a `Timeline`.

The server draws everything (`inspect.strip`); the script only explains: click a word, a span,
a marker or a table row for its details, read from the session data embedded as JSON. Every
text came from callers and models, so every one is escaped: in HTML as entities, in the JSON
block with `<` written as `\\u003c` (a transcript saying "</script>" cannot end the block).
"""

from __future__ import annotations

import bisect
import dataclasses
import json
from html import escape
from importlib import resources
from pathlib import Path
from typing import Any

from edge_agent.events import LoggedEvent, event_json
from edge_agent.files.jsonfile import write_private
from edge_agent.inspect.layout import StripBudget
from edge_agent.inspect.model import RunView, Timeline, TurnRow, UnitView
from edge_agent.inspect.strip import Items, strip_svg

_STAGE_COLUMNS = (("turn_end", "end detected"), ("transcript", "transcript"),
                  ("first_token", "first token"), ("first_audio", "first audio"))


def render_page(timeline: Timeline) -> str:
    """The whole page, as text (AxisTooLongError: more than `layout.MAX_STRIPS` strips)."""
    css = resources.files("edge_agent.inspect").joinpath("page.css").read_text("utf-8")
    script = resources.files("edge_agent.inspect").joinpath("page.js").read_text("utf-8")
    budget = StripBudget()
    runs = "".join(_run_section(run, len(timeline.runs), budget) for run in timeline.runs)
    title = f"edge-agent session {timeline.session_id}"
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{escape(title)}</title><style>{css}</style></head><body>"
            f"{_header(timeline)}<main>{runs}</main>"
            '<aside id="detail" hidden><button type="button" class="close" '
            'aria-label="close">×</button><div class="body"></div></aside>'
            f'<script type="application/json" id="session-data">{_data(timeline)}</script>'
            f"<script>{script}</script></body></html>\n")


def write_page(text: str, path: Path) -> None:
    """Write the page whole or not at all, readable by its owner only (it holds
    transcripts)."""
    write_private(text, path)


def _header(timeline: Timeline) -> str:
    engines = " · ".join(f"{escape(k)}: {escape(v)}" for k, v in timeline.engines.items())
    turns = sum(1 for run in timeline.runs for speech in run.caller if speech.turn)
    audio = ("waveforms of the kept audio" if timeline.audio_kept else
             "no audio kept: speech spans from the events")
    sessions = "" if len(timeline.sessions) <= 1 else \
        f" · sessions {escape(', '.join(timeline.sessions))}"
    return (f'<header><h1>Session <code>{escape(timeline.session_id)}</code></h1>'
            f'<p class="meta">{len(timeline.runs)} run(s) · {turns} answered turn(s) · {audio}'
            f"{sessions}</p><p class=\"meta\">{engines}</p>{_LEGEND}</header>")


_LEGEND = (
    '<p class="legend">'
    '<span class="key caller"></span>caller speech '
    '<span class="key silence"></span>end-of-turn silence '
    '<span class="key agent"></span>agent playing '
    '<span class="key pause"></span>paused '
    '<span class="sample heard">heard</span> '
    '<span class="sample unheard">never heard</span> '
    '<span class="sample inexact">(italic: timing bounds)</span> '
    '<span class="key cut"></span>barge-in '
    '<span class="key latency"></span>speech end → first audio (dashed: speculative)</p>')


def _run_section(run: RunView, runs: int, budget: StripBudget) -> str:
    label = f"Run {run.number}" if runs > 1 or run.number > 1 else "Timeline"
    ident = f"run {escape(run.run_id)} · " if run.run_id else ""
    span = f"{_seconds(run.start)}–{_seconds(run.end)} on its clock"
    return (f'<section class="run" id="run-{run.number}" data-run="{run.number}">'
            f"<h2>{label} <small>{ident}{span}</small></h2>"
            f'<div class="strips">{_strips(run, budget)}</div>{_table(run)}</section>')


def _strips(run: RunView, budget: StripBudget) -> str:
    scales = _wave_scales(run)
    # (span on the clock, item) of each kind: the strips are laid to cover every span.
    caller = [((c.start, c.detected), c) for c in run.caller]
    units = [(_unit_span(u), u) for u in run.units]
    rows = [((r.caller.end, r.stages[-1].at), r) for r in run.rows
            if r.caller is not None and r.stages]
    markers = [((m.at, m.at), (f"r{run.number}-m{n}", m)) for n, m in enumerate(run.markers)]
    waves = [((w.points[0][0], w.points[-1][0]), (w, scales[w.kind])) for w in run.waves
             if w.points]
    laid = budget.lay(span for kind in (caller, units, rows, markers, waves) for span, _ in kind)
    starts = [s.start for s in laid]
    row_of_unit = {unit_id: row.key for row in run.rows for unit_id in row.unit_ids}
    on_strip = [Items(caller=[], units=[], rows=[], markers=[], waves=[],
                      row_of_unit=row_of_unit, run=run.number) for _ in laid]

    def covering(span: tuple[float, float]) -> list[Items]:
        """What the strips the span falls on hold."""
        start, end = span
        first = max(0, bisect.bisect_right(starts, start) - 1)
        return [on_strip[i] for i in range(first, bisect.bisect_right(starts, end))
                if laid[i].end > start]

    for span, speech in caller:
        for items in covering(span):
            items.caller.append(speech)
    for span, unit in units:
        for items in covering(span):
            items.units.append(unit)
    for span, row in rows:
        for items in covering(span):
            items.rows.append(row)
    for span, marker in markers:
        for items in covering(span):
            items.markers.append(marker)
    for span, wave in waves:
        for items in covering(span):
            items.waves.append(wave)
    html = []
    for strip, items in zip(laid, on_strip, strict=True):
        if strip.skipped:
            html.append(f'<div class="gap">{_duration(strip.skipped)} with nothing</div>')
        html.append(f'<div class="strip" data-start="{strip.start}" data-end="{strip.end}">'
                    f"{strip_svg(strip, items)}</div>")
    return "".join(html)


def _unit_span(unit: UnitView) -> tuple[float, float]:
    """From its first sample (or, never played, its end) or first word to its last."""
    first = unit.start if unit.start is not None else unit.end
    return (min([first, *(w.start for w in unit.words)]),
            max([unit.end, *(w.end for w in unit.words)]))


def _wave_scales(run: RunView) -> dict[str, float]:
    """Per lane, the gain that makes its loudest moment fill the lane."""
    peaks = {"caller": 0.0, "agent": 0.0}
    for wave in run.waves:
        for _, lo, hi in wave.points:
            peaks[wave.kind] = max(peaks[wave.kind], -lo, hi)
    return {kind: 1 / max(peak, 0.02) for kind, peak in peaks.items()}


def _table(run: RunView) -> str:
    units = {u.unit_id: u for u in run.units}
    head = "".join(f"<th>{name}</th>" for _, name in _STAGE_COLUMNS)
    body = "".join(_row(row, units) for row in run.rows)
    return ('<table class="turns"><caption>Latency columns: milliseconds after the caller\'s '
            "speech really ended; <i>spec</i>: done while the end of the turn was not yet "
            "certain (speculatively).</caption><thead><tr><th>#</th><th>caller</th>"
            f"<th>decision</th><th>agent (heard, <s>never heard</s>)</th>{head}</tr></thead>"
            f"<tbody>{body}</tbody></table>")


def _row(row: TurnRow, units: dict[str, UnitView]) -> str:
    caller = row.caller
    number = str(caller.turn) if caller is not None and caller.turn else ""
    said = escape(caller.text) if caller is not None else ""
    agent = "".join(_said(units[u]) for u in row.unit_ids if u in units)
    agent += "".join(f'<div class="{m.kind}">{escape(m.label)}</div>' for m in row.happenings)
    stages = {s.name: s for s in row.stages}
    cells = "".join(
        f'<td class="ms{" speculative" if s.speculative else ""}">{s.after_ms}</td>'
        if (s := stages.get(name)) else "<td></td>" for name, _ in _STAGE_COLUMNS)
    kind = "turn-row" if caller is not None else "turn-row agent-only"
    return (f'<tr class="{kind}" data-key="{row.key}" data-decision="{row.decision}">'
            f'<td class="n">{number}</td><td class="said-caller">{said}</td>'
            f'<td><span class="decision {row.decision.replace(" ", "-")}">{row.decision}</span>'
            f"</td><td>{agent}</td>{cells}</tr>")


def _said(unit: UnitView) -> str:
    unheard = unit.generated[len(unit.heard):] if unit.generated.startswith(unit.heard) else ""
    return (f'<div class="said" data-unit="{escape(unit.unit_id)}"><span class="unit-name">'
            f'{escape(unit.unit_id)}</span> <span class="said-heard">{escape(unit.heard)}</span>'
            f'<s class="said-unheard">{escape(unheard)}</s></div>')


def _data(timeline: Timeline) -> str:
    runs = []
    for run in timeline.runs:
        runs.append({
            "number": run.number, "run_id": run.run_id, "start": run.start, "end": run.end,
            "caller": [{**dataclasses.asdict(c),
                        "why": event_json(c.why) if c.why is not None else {}}
                       for c in run.caller],
            "units": [dataclasses.asdict(u) for u in run.units],
            "markers": {f"r{run.number}-m{i}": {**dataclasses.asdict(m),
                                                "event": LoggedEvent(m.at, m.event).to_json()}
                        for i, m in enumerate(run.markers)},
            "rows": {row.key: {**dataclasses.asdict(row),
                               "caller": row.caller.index if row.caller else None}
                     for row in run.rows},
            "waves": [{"kind": w.kind, "ref": w.ref, "points": len(w.points)}
                      for w in run.waves]})
    data = {"session_id": timeline.session_id, "sessions": list(timeline.sessions),
            "engines": timeline.engines, "audio_kept": timeline.audio_kept, "runs": runs}
    text = json.dumps(_rounded(data), ensure_ascii=False, separators=(",", ":"))
    # Inside <script>, only "<" can end the block ("</script", "<!--"): JSON may write it
    # as \u003c in a string, and it appears nowhere else.
    return text.replace("<", "\\u003c")


def _rounded(value: Any) -> Any:
    if isinstance(value, float):
        return round(value, 3)
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_rounded(v) for v in value]
    return value


def _seconds(value: float) -> str:
    return f"{value:.1f} s"


def _duration(seconds: float) -> str:
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest} s" if minutes else f"{rest} s"
