"""`edge-agent bench rooms`: the part's JSON against the shipped schema, its rows in the one
table, and what each caller line of a call became (fake calls, a fake voice: the canceller's
measurement itself runs); and, with the models, the rooms part of the session's `bench
--quick` (the same plan) on the real engines."""

from __future__ import annotations

import copy
import dataclasses
import io
import json
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np
import pytest

from edge_agent.audio.pcm import lag_samples
from edge_agent.bench import parts as bench_parts
from edge_agent.bench.document import FORMAT, schema
from edge_agent.bench.rooms import LISTENING_SCENARIOS, RoomsPlan, quick_plan, run_rooms, table
from edge_agent.bench.rooms_calls import interruption_call, line_outcomes
from edge_agent.bench.rooms_canceller import LONGEST_LAG
from edge_agent.bench.suite import PARTS, run_suite
from edge_agent.bench.summary import rooms_rows
from edge_agent.bench.workbench import Plan, Workbench
from edge_agent.cli import main
from edge_agent.config import Config
from edge_agent.events import (
    BargeIn,
    CallerSpoke,
    LlmRequest,
    LoggedEvent,
    PlaybackPaused,
    PlaybackResumed,
    PlaybackStarted,
    UserTurn,
)
from tests.cli import BenchRun, write_config
from tests.fakes import FakeRoomCalls, FakeSpeech
from tests.logged import kinds

INTERRUPTED = "Wait, what about Sunday?"


def _result(calls: FakeRoomCalls, plan: RoomsPlan | None = None) -> dict[str, Any]:
    said: list[str] = []
    result = run_rooms(Config(), FakeSpeech(), plan or quick_plan(seed=3), said.append,
                       calls=calls)
    assert said, "no progress lines"
    return json.loads(json.dumps(result))  # as the results file holds it


def _document(result: dict[str, Any]) -> dict[str, Any]:
    machine = {"hostname": "kiosk", "cpu_model": "x", "cpu_cores": 2, "ram_total_mb": 4000,
               "os": "Debian", "kernel": "6.1", "arch": "x86_64", "python": "3.11",
               "edge_agent": "0.1.0", "date": "2026-12-01T10:00:00+01:00",
               "load_before": [0.1, 0.1, 0.1], "load_after": [0.2, 0.2, 0.2]}
    model = {"kind": "tts", "engine": "piper", "name": "joe", "path": "/m/j.onnx",
             "problem": ""}
    return {"format": FORMAT, "quick": True, "seed": 3, "ok": True, "seconds": 100.0,
            "machine": machine, "models": [model],
            "parts": [{"name": "rooms", "title": "rooms", "status": "ok", "reason": "",
                       "seconds": 90.0, "settings": {}, "result": result,
                       "rows": rooms_rows(result)}]}


def _errors(document: dict[str, Any]) -> list[str]:
    return [e.message for e in jsonschema.Draft202012Validator(schema()).iter_errors(document)]


def test_the_rooms_part_keeps_every_line_and_validates() -> None:
    calls = FakeRoomCalls(stop_ms=180.0, heard={INTERRUPTED: "Great. What about Sunday?"})
    result = _result(calls)
    assert _errors(_document(result)) == []
    # 2 interruption calls, the replies call, one call per listening scenario; in the café
    # (quick) one microphone's and the 4-mic array's listening, and the array's interruptions
    assert len(calls.calls) == 3 + len(LISTENING_SCENARIOS) + 3
    assert all(config.audio.echo_cancel == "on" for config, _ in calls.calls)
    listening = slice(3, 3 + len(LISTENING_SCENARIOS))
    suppression = [config.audio.noise_suppression for config, _ in calls.calls[listening]]
    assert suppression == [s.noise_suppression for s in LISTENING_SCENARIOS]
    cafe = calls.calls[3 + len(LISTENING_SCENARIOS):]
    assert [config.audio.array for config, _ in cafe] == ["", "respeaker-4mic-hat",
                                                          "respeaker-4mic-hat"]
    assert all(call.room.layout is not None and config.audio.talker_gate == "level"
               for config, call in cafe)
    # Looking where the café's caller stands: straight ahead, ~31 degrees up.
    assert cafe[1][0].audio.look_azimuth_deg == 0.0
    assert cafe[1][0].audio.look_elevation_deg == pytest.approx(31.0)
    arrays = result["arrays"]
    assert [(e["setup"], e["talkers"], e["talkers_db"]) for e in arrays["listening"]] == [
        ("1 mic", 2, -10.0), ("4-mic respeaker-4mic-hat", 2, -10.0)]
    [over] = arrays["interruptions"]
    assert (over["count"], over["taken"], over["stop_ms"]["values"]) == (2, 2, [180.0, 180.0])
    [cost] = arrays["beamformers"]
    assert cost["microphones"] == 4 and cost["added_latency_ms"] == 8.0
    assert 0 < cost["percent_of_core"] < 15
    quiet, loud = result["interruptions"]
    assert (quiet["echo_gain"], loud["echo_gain"]) == (0.3, 1.0)
    said = [line["say"] for line in quiet["lines"] if line["kind"] == "interruption"]
    assert said[0] == INTERRUPTED and len(said) == 2
    # "Great" for "Wait": 1 error in the 4 + 6 words of the two interruptions
    assert quiet["double_talk_wer_percent"] == 10.0
    assert loud["first_reply"]["taken"] == 1 and loud["later_replies"]["count"] == 1
    assert loud["first_reply"]["stop_ms"]["values"] == [180.0]
    assert LlmRequest not in kinds(loud["events"])
    own = result["self_interruptions"]
    assert (own["replies"], own["barge_ins"], own["echo_gain"]) == (5, 0, 1.0)
    erle = result["canceller"]["erle"]
    assert [e["echo_gain"] for e in erle] == [0.3, 1.0]
    assert all(e["steady_db"] > 10 for e in erle), erle
    assert 10 <= result["canceller"]["lag"]["ms"] <= 30


def test_a_missed_interruption_counts_its_words_and_a_self_interruption_is_reported() -> None:
    result = _result(FakeRoomCalls(missed=[INTERRUPTED], self_barge_ins=1))
    quiet = result["interruptions"][0]
    missed = quiet["lines"][1]
    assert (missed["taken"], missed["heard"], missed["stop_ms"]) == (False, "", None)
    assert missed["echo_ignored"] == [INTERRUPTED] and missed["errors"] == missed["words"] == 4
    assert quiet["first_reply"] == {"count": 1, "taken": 0, "already_paused": 0,
                                    "stop_ms": {"n": 0}}
    rows = {row["figure"]: row for row in rooms_rows(result)}
    taken = rows["  interruptions taken, first reply (echo 0.3)"]
    assert (taken["value"], taken["note"]) == (0.0, "0 of 1")
    loud = rows["  interruptions taken, first reply (echo 1.0)"]
    assert (loud["value"], loud["note"]) == (100.0, "1 of 1; target 100 %")
    own = rows["self-interruptions per 100 replies (echo 1.0)"]
    assert (own["value"], own["n"]) == (20.0, 5) and "target 0" in own["note"]
    assert result["self_interruptions"]["units_not_heard_whole"] == 1
    assert _errors(_document(result)) == []


def test_the_table_shows_each_figure_with_its_target() -> None:
    printed = table(_result(FakeRoomCalls()))
    for figure in ("ERLE, steady after 2 s (echo 1.0)", "target >= 30 dB",
                   "caller WER in double talk (echo 1.0)", "target <= 250 ms",
                   "caller WER, steady noise -35 dBFS pink, suppression on",
                   "CPU of echo cancellation", "target <= 10 %",
                   "latency added by the processing"):
        assert figure in printed, printed


@pytest.mark.parametrize("breakage", ["no lines", "no per-second ERLE", "stop as text",
                                      "unknown kind"])
def test_a_broken_rooms_result_is_refused(breakage: str) -> None:
    document = copy.deepcopy(_document(_result(FakeRoomCalls())))
    result = document["parts"][0]["result"]
    if breakage == "no lines":
        result["interruptions"][0]["lines"] = []
    elif breakage == "no per-second ERLE":
        result["canceller"]["erle"][0]["per_second_db"] = []
    elif breakage == "stop as text":
        result["interruptions"][0]["lines"][1]["stop_ms"] = "200 ms"
    else:
        result["interruptions"][0]["lines"][1]["kind"] = "backchannel"
    assert _errors(document), breakage


def test_a_pause_that_resumed_is_not_the_stop_and_the_turns_until_the_next_line_count() -> None:
    call = interruption_call(LISTENING_SCENARIOS[0].room, ["Hello?"],
                             ["Hold on.", "Stop."], [2.0, 2.0], "A long reply.", "Okay.")
    events = [
        LoggedEvent(0.5, CallerSpoke("Hello?", 0.1)),
        LoggedEvent(2.0, UserTurn("Hello?", ())),
        LoggedEvent(5.0, CallerSpoke("Hold on.", 0.1)),
        LoggedEvent(5.2, PlaybackPaused("u1")), LoggedEvent(5.5, PlaybackResumed("u1")),
        LoggedEvent(5.7, PlaybackPaused("u1")), LoggedEvent(5.9, BargeIn("u1")),
        LoggedEvent(7.0, UserTurn("Hold", ())),
        LoggedEvent(7.5, UserTurn("on.", ())),
        LoggedEvent(12.0, CallerSpoke("Stop.", 0.0)),
        LoggedEvent(12.2, PlaybackPaused("u2")), LoggedEvent(12.6, PlaybackResumed("u2")),
    ]
    first, hold, stop = line_outcomes(call, events)
    assert (first.kind, first.taken, first.errors) == ("question", False, 0)
    assert (hold.taken, hold.stop_ms, hold.heard, hold.errors) == (True, 600.0, "Hold on.", 0)
    assert (stop.taken, stop.stop_ms, stop.heard, stop.errors) == (False, None, "", 1)


def test_playback_paused_on_echo_before_the_caller_spoke_is_a_stop_at_once() -> None:
    call = interruption_call(LISTENING_SCENARIOS[0].room, ["Hello?"], ["Hold on."], [2.0],
                             "A long reply.", "Okay.")
    events = [
        LoggedEvent(0.5, CallerSpoke("Hello?")),
        LoggedEvent(3.0, PlaybackStarted("u1")), LoggedEvent(3.6, PlaybackPaused("u1")),
        LoggedEvent(5.0, CallerSpoke("Hold on.", 0.1)),
        LoggedEvent(9.0, BargeIn("u1")), LoggedEvent(9.5, UserTurn("Hold on.", ())),
    ]
    _, hold = line_outcomes(call, events)
    assert (hold.taken, hold.already_paused, hold.stop_ms) == (True, True, 0.0)
    rows = {r["figure"]: r for r in rooms_rows(_result(FakeRoomCalls()))}
    assert rows["  onset -> playback stopped, first reply (echo 1.0)"]["note"] == (
        "target <= 250 ms")


def test_the_lag_is_found_by_cross_correlation() -> None:
    signal = FakeSpeech().synthesize("one two three four five six")
    samples = np.frombuffer(signal.pcm, dtype=np.int16).astype(np.float64)
    delayed = np.concatenate([np.zeros(287), samples])[:len(samples)]
    assert lag_samples(samples, delayed, LONGEST_LAG) == 287
    assert lag_samples(samples, samples, LONGEST_LAG) == 0


def test_bench_runs_rooms_with_the_quick_sizes_and_prints_its_rows() -> None:
    rooms = next(p for p in PARTS if p.name == "rooms")
    calls = FakeRoomCalls()

    def run(bench: Workbench, plan: Plan) -> dict[str, Any]:
        return run_rooms(bench.config, FakeSpeech(), plan.rooms, bench.say, calls=calls)

    document = run_suite(Config(), quick=True, seed=4, out=io.StringIO(),
                         selection=[dataclasses.replace(rooms, needs=(), run=run)])
    [record] = document["parts"]
    assert record["status"] == "ok", record["reason"]
    assert record["settings"] == {"interruptions": 2, "replies": 5, "listening_lines": 2,
                                  "far_end_texts": 2, "array_lines": 2,
                                  "array_interruptions": 2}
    assert record["result"]["seed"] == 4
    replies_call = calls.calls[2][1]
    assert len(replies_call.lines) == 5
    assert _errors(json.loads(json.dumps(document))) == []


def test_the_subcommand_takes_quick_and_its_own_sizes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plans: list[RoomsPlan] = []

    def measured(bench: Workbench, plan: RoomsPlan) -> dict[str, Any]:
        plans.append(plan)
        return _result(FakeRoomCalls(), plan)

    monkeypatch.setattr(bench_parts, "rooms_part", measured)
    config = write_config(tmp_path)
    written = tmp_path / "rooms.json"
    assert main(["-c", str(config), "bench", "rooms", "--quick", "--replies", "3", "--seed",
                 "9", "--json", str(written)]) == 0
    assert main(["-c", str(config), "bench", "rooms", "--interruptions", "1", "--json",
                 str(tmp_path / "full.json")]) == 0
    assert plans == [dataclasses.replace(quick_plan(9), replies=3),
                     dataclasses.replace(RoomsPlan(), interruptions=1)]
    assert json.loads(written.read_text(encoding="utf-8"))["benchmark"] == "rooms"


@pytest.mark.models
@pytest.mark.audio
@pytest.mark.realtime
def test_bench_rooms_quick_on_the_real_engines(bench_quick: BenchRun) -> None:
    # The rooms part of the session's `bench --quick` (the same plan as `bench rooms --quick`,
    # sizes.py; the subcommand's own path is the test above).
    [rooms] = [part for part in bench_quick.document["parts"] if part["name"] == "rooms"]
    assert rooms["settings"] == {"interruptions": 2, "replies": 5, "listening_lines": 2,
                                 "far_end_texts": 2, "array_lines": 2,
                                 "array_interruptions": 2}
    result = rooms["result"]
    assert _errors(_document(result)) == []
    canceller = result["canceller"]
    assert all(e["steady_db"] > 10 for e in canceller["erle"]), canceller["erle"]
    assert all(c["percent_of_core"] < 50 for c in canceller["cpu"]), canceller["cpu"]
    assert 10 <= canceller["lag"]["ms"] <= 30, canceller["lag"]
    loud = result["interruptions"][1]
    assert loud["echo_gain"] == 1.0
    assert loud["first_reply"]["taken"] + loud["later_replies"]["taken"] >= 1, loud["lines"]
    assert result["self_interruptions"]["replies"] == 5
    quiet = [s for s in result["listening"] if not s["talkers_db"]]
    assert quiet and all(s["wer_percent"] <= 50 for s in quiet), result["listening"]
    assert [s["talkers_db"] for s in result["listening"] if s["talkers_db"]] == [
        [-10.0, -10.0], [-10.0, -10.0], [-5.0, -5.0]]
    assert "ERLE, steady after 2 s (echo 1.0)" in bench_quick.done.stdout


def test_each_cafe_with_people_talking_is_heard_at_every_moment_they_may_begin() -> None:
    from edge_agent.bench.latency import QUESTIONS
    from edge_agent.bench.rooms_arrays import SCENARIOS, SETUPS, TALKER_STARTS_S, measure_arrays

    fake = FakeRoomCalls()
    starts: list[float] = []

    def calls(config: Config, call: Any) -> Any:
        first = call.talkers[0].start if call.talkers else None
        if first is not None:
            starts.append(first)
        # The first question misheard only where the people nearby begin 1.8 s in.
        fake.heard = {QUESTIONS[0]: "What time"} if first == 1.8 else {}
        return fake(config, call)

    arrays = json.loads(json.dumps(measure_arrays(Config(), False, 2, 1, 1, lambda _: None,
                                                  calls)))
    cells = arrays["listening"]
    assert len(cells) == len(SETUPS) * len(SCENARIOS)
    talking = [cell for cell in cells if cell["talkers"]]
    assert starts == list(TALKER_STARTS_S) * len(talking)
    for cell in talking:
        assert cell["talker_starts_s"] == list(TALKER_STARTS_S)
        # "What time" for "What time do you open tomorrow?": 4 errors in the 6 + 8 words of
        # the run from 1.8 s; the cell's WER is over every run's lines.
        assert cell["wer_by_start_percent"] == [0.0, 0.0, 28.6, 0.0]
        assert cell["wer_percent"] == 7.1
        assert len(cell["lines"]) == 2 * len(TALKER_STARTS_S)
    quiet = [cell for cell in cells if not cell["talkers"]]
    assert all(cell["talker_starts_s"] == [0.0] for cell in quiet)
    result = {**_result(FakeRoomCalls()), "arrays": arrays}
    assert _errors(_document(result)) == []
    printed = table(result)
    assert "runs 0 / 0 / 28.6 / 0 %" in printed, printed
