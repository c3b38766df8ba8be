"""The figures of `edge-agent bench screen` (`bench.screen` measures): the document it writes
(`ScreenResult`, in `bench.schema.json` as `screen_result`), made from the phases it ran and
the speaker's recording, and the table it prints."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypedDict

from edge_agent.bench.caption_timing import (
    Marks,
    SampleClock,
    WordSkew,
    fit_sample_clock,
    word_skews,
)
from edge_agent.bench.heard import unit_start
from edge_agent.bench.stats import percentile, summarize
from edge_agent.engines.base import SpeechAudio
from edge_agent.errors import EdgeAgentError
from edge_agent.heard.ledger import Unit
from edge_agent.heard.truncation import HeardPolicy
from edge_agent.screen.server import POLL_S

SKEW_PAGES = 1
"""The phase whose page's marks are timed against the recording."""
RECORDER_MS = 10
"""The monitor recorder's fragment: the resolution of "when it left the speaker"."""
SEARCH_S = 2.0
"""How far past a unit's write the recording is searched for it."""
TARGETS = {"skew_p95_ms": 50.0, "cpu_percent": 2.0, "lag_added_ms": 5.0}
"""The issue's targets, for the table and the record."""


class ScreenBenchError(EdgeAgentError):
    """The benchmark's pages could not follow the screen, or its recording is unusable."""


class PhaseFigures(TypedDict):
    """One phase: an idle stretch, then every unit, with `pages` pages open."""

    pages: int
    idle_s: float
    idle_loop_cpu_percent: float
    """CPU of the loop's thread while nothing played, % of one core."""
    talking_s: float
    talking_loop_cpu_percent: float
    """The same from the first unit's write to the last unit's end (the lag probe off)."""
    probed_s: float
    """The units' second pass, with the lag probe on."""
    loop_lag_ms: dict[str, Any]
    """How late each 5 ms sleep of the probe woke in that pass (`stats.summarize`)."""
    loop_lag_p99_ms: float
    snapshots: list[int]
    """Snapshots each page received."""


class WordRecord(TypedDict):
    """One word of the skew phase."""

    unit_id: str
    word: str
    left_speaker_s: float
    """When the policy's instant of the word left the speaker, seconds since the run began."""
    marked_s: float | None
    """When the page received the snapshot that marked it; None if none did."""
    skew_ms: float | None
    """marked - left: positive when the page was late."""


class ServerCpu(TypedDict):
    """The screen server's CPU: the loop's thread above the 0-page phase, % of one core."""

    idle_1_page: float
    talking_1_page: float
    talking_4_pages: float


class LoopLag(TypedDict):
    """Loop lag p99 while talking, ms."""

    pages_0: float
    pages_4: float
    added: float
    """pages_4 - pages_0."""


class RecorderFit(TypedDict):
    """The recording's clock (`caption_timing.fit_sample_clock`)."""

    chunks: int
    sample_rate: int
    """The sink's nominal rate (the voice's)."""
    rate_hz: float
    """Samples per second as the arrivals measured them: `sample_rate` if all is well."""
    late_p50_ms: float
    """How late the median chunk arrived after the fitted line."""


class ScreenResult(TypedDict):
    """What `edge-agent bench screen --json` writes."""

    benchmark: Literal["screen"]
    path: str
    policy: str
    poll_ms: float
    """How often the server reads the speaker while a page is open."""
    units: int
    words: int
    """Words spoken in the skew phase (each timed, or counted in `unmarked`)."""
    unmarked: int
    """Words the page never marked (a screen that missed them)."""
    skew_ms: dict[str, Any]
    """marked - left per word (`stats.summarize`, plus `min`): positive = the page late."""
    server_cpu_percent: ServerCpu
    loop_lag_p99_ms: LoopLag
    recorder: RecorderFit
    targets: dict[str, float]
    phases: list[PhaseFigures]
    word_skews: list[WordRecord]


@dataclass(frozen=True)
class Window:
    """A stretch of wall time and the loop thread's CPU in it."""

    start: float
    end: float
    cpu_s: float

    @property
    def cpu_percent(self) -> float:
        return 100 * self.cpu_s / (self.end - self.start) if self.end > self.start else 0.0


@dataclass(frozen=True)
class Played:
    """A unit as it was played: its ledger entry, its audio, when it was written."""

    unit: Unit
    audio: SpeechAudio
    written_at: float


@dataclass
class Phase:
    pages: int
    idle: Window
    talking: Window
    played: list[Played]
    arrivals: list[list[Marks]]
    """Each page's snapshots."""
    probed: Window
    """The second pass of the units, with the lag probe running."""
    lags: list[float]
    """The probe's lags in that pass, ms."""



def report(phases: Sequence[Phase], recording: bytes, arrivals: Sequence[tuple[int, float]],
           policy: HeardPolicy, began: float) -> ScreenResult:
    """The figures of a run: `recording` the speaker's monitor, `arrivals` its chunks' (samples
    so far, arrival), `began` when the first phase started."""
    clock = fit_sample_clock(arrivals)
    by_pages = {phase.pages: phase for phase in phases}
    timed = by_pages[SKEW_PAGES]
    skews = [skew for played in timed.played
             for skew in _unit_skews(played, recording, clock, policy, timed.arrivals[0])]
    values = [skew.skew_ms for skew in skews if skew.skew_ms is not None]
    skew: dict[str, Any] = summarize(values, digits=1)
    if values:
        skew["min"] = round(min(values), 1)
    base, one, four = by_pages[0], by_pages[1], by_pages[4]
    lag_0, lag_4 = _p99(base.lags), _p99(four.lags)
    return {
        "benchmark": "screen",
        "path": "Playback -> PyAudio (callback mode) -> ALSA pulse plugin -> PulseAudio null "
                f"sink -> monitor (parec, {RECORDER_MS} ms fragments); ScreenServer in the "
                "loop -> WebSocket -> pages in a child process",
        "policy": policy.value,
        "poll_ms": POLL_S * 1000,
        "units": len(timed.played),
        "words": len(skews),
        "unmarked": len(skews) - len(values),
        "skew_ms": skew,
        "server_cpu_percent": {
            "idle_1_page": _above(one.idle, base.idle),
            "talking_1_page": _above(one.talking, base.talking),
            "talking_4_pages": _above(four.talking, base.talking)},
        "loop_lag_p99_ms": {"pages_0": lag_0, "pages_4": lag_4, "added": round(lag_4 - lag_0, 3)},
        "recorder": {"chunks": len(arrivals), "sample_rate": timed.played[0].audio.sample_rate,
                     "rate_hz": round(clock.rate, 2),
                     "late_p50_ms": clock.residual_p50_ms},
        "targets": dict(TARGETS),
        "phases": [_phase_figures(phase) for phase in phases],
        "word_skews": [_word_record(skew, began) for skew in skews],
    }


def _unit_skews(played: Played, recording: bytes, clock: SampleClock, policy: HeardPolicy,
                arrivals: Sequence[Marks]) -> list[WordSkew]:
    """The unit's words against one page's snapshots. It is searched for in the recording from
    just before it was written (it cannot have played earlier; the same text plays again in
    later phases)."""
    unit, audio = played.unit, played.audio
    first = max(0, int(clock.sample_at(played.written_at) - 0.1 * clock.rate))
    end = first + audio.samples + int(SEARCH_S * clock.rate)
    try:
        start = first + unit_start(recording[2 * first:2 * end], audio.pcm)
    except ValueError as exc:
        raise ScreenBenchError(f"unit {unit.unit_id} is not in the speaker's recording: "
                               f"{exc}") from None
    return word_skews(unit.unit_id, unit.words, unit.audio_samples, policy, start, clock,
                      arrivals)


def _above(window: Window, baseline: Window) -> float:
    return round(window.cpu_percent - baseline.cpu_percent, 2)


def _p99(lags: Sequence[float]) -> float:
    return round(percentile(lags, 99), 3) if lags else 0.0


def _phase_figures(phase: Phase) -> PhaseFigures:
    return {"pages": phase.pages,
            "idle_s": round(phase.idle.end - phase.idle.start, 2),
            "idle_loop_cpu_percent": round(phase.idle.cpu_percent, 2),
            "talking_s": round(phase.talking.end - phase.talking.start, 2),
            "talking_loop_cpu_percent": round(phase.talking.cpu_percent, 2),
            "probed_s": round(phase.probed.end - phase.probed.start, 2),
            "loop_lag_ms": summarize(phase.lags, digits=3),
            "loop_lag_p99_ms": _p99(phase.lags),
            "snapshots": [len(page) for page in phase.arrivals]}


def _word_record(skew: WordSkew, began: float) -> WordRecord:
    skew_ms = skew.skew_ms
    return {"unit_id": skew.unit_id, "word": skew.word,
            "left_speaker_s": round(skew.spoken_at - began, 4),
            "marked_s": None if skew.marked_at is None else round(skew.marked_at - began, 4),
            "skew_ms": None if skew_ms is None else round(skew_ms, 1)}


def table(result: ScreenResult) -> str:
    skew, cpu, lag = result["skew_ms"], result["server_cpu_percent"], result["loop_lag_p99_ms"]
    targets = result["targets"]
    lines = [f"screen captions: {result['units']} units, {result['words']} words, policy "
             f"{result['policy']}, the speaker read every {result['poll_ms']:g} ms while a "
             f"page is open", f"{'':38}{'p50':>8}{'p95':>8}{'max':>8}"]
    if skew["n"]:
        lines.append(f"{'caption skew: page - speaker':38}{skew['p50']:>+8.1f}{skew['p95']:>+8.1f}"
                     f"{skew['max']:>+8.1f}  ms (min {skew['min']:+.1f}; positive: the page "
                     f"late; target p95 <= {targets['skew_p95_ms']:g})")
    if result["unmarked"]:
        lines.append(f"words the page never marked: {result['unmarked']} of {result['words']}")
    lines += [
        f"server CPU, % of a core: idle with 1 page {cpu['idle_1_page']:.2f}, talking with 1 "
        f"page {cpu['talking_1_page']:.2f}, with 4 {cpu['talking_4_pages']:.2f} (target <= "
        f"{targets['cpu_percent']:g})",
        f"loop lag p99 while talking: 0 pages {lag['pages_0']:.2f} ms, 4 pages "
        f"{lag['pages_4']:.2f} ms: {lag['added']:+.2f} ms (target <= +{targets['lag_added_ms']:g})"]
    return "\n".join(lines)
