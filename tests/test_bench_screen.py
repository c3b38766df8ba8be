"""`edge-agent bench screen`: its arithmetic on synthetic inputs (the recording's clock, when the
policy counts each word heard, when a page marked it, the skew), and the benchmark itself as a
user runs it (real Piper units on a private PulseAudio server, real pages)."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from edge_agent.bench import pulse_rig
from edge_agent.bench.caption_timing import (
    SampleClock,
    first_marked,
    fit_sample_clock,
    heard_after,
    word_skews,
)
from edge_agent.bench.document import schema
from edge_agent.bench.heard import REPLIES
from edge_agent.heard.timings import WordTiming
from edge_agent.heard.truncation import HeardPolicy, heard_prefix
from tests.cli import edge_agent, write_config

RATE = 22050


def _arrivals(start: float, rate: float, chunks: int, seed: int) -> list[tuple[int, float]]:
    """Chunks of ~10 ms, each read some time after its last sample played: mostly a little,
    now and then a lot (a busy machine), a few at once."""
    rng = random.Random(seed)
    arrivals, samples = [], 0
    for number in range(chunks):
        samples += rng.choice((220, 221, 441))
        delay = 0.0 if number % 50 == 7 else rng.expovariate(1 / 0.003)
        if rng.random() < 0.02:
            delay += rng.uniform(0.02, 0.08)
        arrivals.append((samples, start + samples / rate + delay))
    return arrivals


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_recordings_clock_is_the_line_under_the_arrivals(seed: int) -> None:
    start, rate = 1234.5, RATE * 1.0002  # the sink's clock a little off nominal
    arrivals = _arrivals(start, rate, 6000, seed)  # a minute
    clock = fit_sample_clock(arrivals)
    for samples in (0, 300_000, arrivals[-1][0]):
        truth = start + samples / rate
        assert abs(clock.at(samples) - truth) < 0.0015, (samples, clock)
        assert abs(clock.sample_at(truth) - samples) < 0.0015 * rate
    assert all(clock.at(samples) <= arrived + 1e-9 for samples, arrived in arrivals)
    assert 0 < clock.residual_p50_ms < 10


def test_a_recording_of_one_chunk_has_no_clock() -> None:
    with pytest.raises(ValueError, match="two chunks"):
        fit_sample_clock([(441, 10.0), (441, 10.5)])


def _unit() -> tuple[str, list[WordTiming]]:
    """A unit with a token spoken as nothing ("—") and two tokens sharing safe bounds
    (inexact: "7:30 sharp," spoke as phoneme words that did not match them one to one)."""
    text = "We open — at 7:30 sharp, okay?"
    spans = [(0, 2, 100, 900), (3, 7, 1000, 2000), (8, 9, 2000, 2000), (10, 12, 2100, 2600),
             (13, 17, 2700, 4200), (18, 24, 2700, 4200), (25, 30, 4300, 4900)]
    words = [WordTiming(text[a:b], a, b, start, end, exact=(a not in (13, 18)))
             for a, b, start, end in spans]
    return text, words


@pytest.mark.parametrize("policy", list(HeardPolicy))
def test_each_word_is_heard_from_the_sample_the_policy_counts_it(policy: HeardPolicy) -> None:
    text, words = _unit()
    audio_samples = 5000
    after = heard_after(words, audio_samples, policy)
    for played in range(audio_samples + 2):
        heard = heard_prefix(text, words, played, audio_samples, policy)
        expected = sum(1 for word in words if word.char_end <= len(heard))
        assert sum(1 for sample in after if sample <= played) == expected, (played, heard)


def test_a_word_is_marked_by_the_first_snapshot_that_covers_it() -> None:
    arrivals = [(1.0, {}), (1.1, {"u1": 0}), (1.2, {"u1": 7, "u2": 30}), (1.3, {"u1": 7}),
                (1.4, {"u1": 12}), (1.5, {"u2": 40})]
    assert first_marked(arrivals, "u1", [2, 7, 9, 12, 20]) == [1.2, 1.2, 1.4, 1.4, None]
    assert first_marked(arrivals, "u3", [2]) == [None]


def test_skew_is_the_mark_minus_when_the_words_instant_left_the_speaker() -> None:
    text, words = _unit()
    clock = SampleClock(start=100.0, rate=1000.0, residual_p50_ms=0.0)
    recorded_start = 500  # the unit's first sample is the recording's 500th: at 100.5 s
    # The page learns of "We" 30 ms after its last sample left, of "open —" 10 ms before.
    arrivals = [(100.5 + 0.9 + 0.03, {"u7": 2}), (100.5 + 2.0 - 0.01, {"u7": 9}),
                (106.0, {"u7": len(text)})]
    skews = word_skews("u7", words[:4], 5000, HeardPolicy.COMPLETED, recorded_start, clock,
                       arrivals)
    assert [s.word for s in skews] == ["We", "open", "—", "at"]
    assert [round(s.spoken_at, 6) for s in skews] == [101.4, 102.5, 102.5, 103.1]
    got = [None if s.skew_ms is None else round(s.skew_ms, 6) for s in skews]
    assert got == [30.0, -10.0, -10.0, 2900.0]
    never = word_skews("u7", words[:1], 5000, HeardPolicy.COMPLETED, 0, clock, [])
    assert never[0].marked_at is None and never[0].skew_ms is None


def _screen_errors(result: dict[str, Any]) -> list[str]:
    defs = schema()["$defs"]
    validator = jsonschema.Draft202012Validator({"$defs": defs, "$ref": "#/$defs/screen_result"})
    return [f"{list(error.path)}: {error.message}" for error in validator.iter_errors(result)]


@pytest.mark.audio
@pytest.mark.models
@pytest.mark.realtime
def test_bench_screen_times_every_spoken_word_and_writes_a_valid_document(
        tmp_path: Path) -> None:
    try:
        pulse_rig.check_tools()
    except pulse_rig.PulseUnavailable as exc:
        pytest.skip(f"PulseAudio not available: {exc}")
    results = tmp_path / "out.json"
    done = edge_agent("bench", "screen", "--units", "2", "--json", results,
                      config=write_config(tmp_path), timeout=300)
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr[-3000:]}"
    assert "caption skew" in done.stdout and "loop lag p99" in done.stdout, done.stdout
    result = json.loads(results.read_text(encoding="utf-8"))
    assert _screen_errors(result) == []

    spoken = [word for text in REPLIES[:2] for word in text.split()]
    assert result["units"] == 2 and result["words"] == len(spoken)
    assert [w["word"] for w in result["word_skews"]] == spoken
    assert result["unmarked"] == 0  # the finalized unit marks every word at the latest
    skews = [w["skew_ms"] for w in result["word_skews"]]
    assert all(math.isfinite(skew) for skew in skews)
    summary = result["skew_ms"]
    assert summary["n"] == len(spoken) and abs(summary["p95"]) < 500, summary  # sanity only
    recorder = result["recorder"]
    assert abs(recorder["rate_hz"] / recorder["sample_rate"] - 1) < 0.01, recorder
    phases = {phase["pages"]: phase for phase in result["phases"]}
    assert sorted(phases) == [0, 1, 4]
    for phase in phases.values():
        assert 0 <= phase["idle_loop_cpu_percent"] <= 100, phase
        assert 0 <= phase["talking_loop_cpu_percent"] <= 100, phase
        assert phase["loop_lag_ms"]["n"] > 100 and phase["loop_lag_p99_ms"] >= 0
        assert len(phase["snapshots"]) == phase["pages"]
        assert all(count >= 2 for count in phase["snapshots"]), phase["snapshots"]
    assert all(-100 <= value <= 100 for value in result["server_cpu_percent"].values())
    lag = result["loop_lag_p99_ms"]
    assert lag["pages_0"] == phases[0]["loop_lag_p99_ms"]
    assert lag["pages_4"] == phases[4]["loop_lag_p99_ms"]
    assert lag["added"] == pytest.approx(lag["pages_4"] - lag["pages_0"], abs=0.002)
