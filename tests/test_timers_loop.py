"""Timers in the loop, on a virtual clock with a real SQLite file: a command is answered without
the model; a timer that comes due rings (a chime and its label, a unit of its own, finalized
where playback leaves it) until stopped by voice, touch or the wake word, or until it has rung
long enough; "snooze" puts it off; one that came due while the agent was off rings at start
with "While I was off"."""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TypeVar
from zoneinfo import ZoneInfo

from edge_agent.clock import VirtualClock
from edge_agent.conversation.timekeeper import RingSettings, chime
from edge_agent.events import (
    BargeIn,
    CommandAnswered,
    SessionStarted,
    TimerChanged,
    UnitFinalized,
    UserTurn,
)
from edge_agent.timers.desk import TimerDesk
from edge_agent.timers.store import TimerStore
from tests.fakes import FakeWakeWord, speech, wake_word
from tests.timeline import Harness, stop

START = datetime(2026, 12, 6, 14, 0, tzinfo=UTC)
ZONE = ZoneInfo("Europe/Amsterdam")  # UTC+1 in December: 14:00 UTC is 3 PM there
RINGS = RingSettings(ring_for_s=20.0, ring_pause_s=4.0, snooze_s=60.0)


def wall_of(clock: VirtualClock) -> Callable[[], datetime]:
    return lambda: START + timedelta(seconds=clock.now())


def harness(tmp_path: Path, transcripts: list[str], replies: list[str] | None = None,
            wake: FakeWakeWord | None = None, **overrides: object) -> Harness:
    clock = VirtualClock()
    store = TimerStore(tmp_path / "edge-agent.db", retention_days=30)
    return Harness(transcripts=transcripts, replies=list(replies or []), greeting="",
                   clock=clock, wall=wall_of(clock), db_path=tmp_path / "edge-agent.db",
                   timers=TimerDesk(store, ZONE), wake=wake,
                   overrides={"rings": RINGS, **overrides})


E = TypeVar("E")


def events(h: Harness, kind: type[E]) -> list[E]:
    return [e.event for e in h.log.entries if isinstance(e.event, kind)]


def said_count(h: Harness, count: int) -> bool:
    return len(events(h, UnitFinalized)) == count


def heard(h: Harness) -> list[str]:
    return [f.finalize.heard for f in events(h, UnitFinalized)]


def changes(h: Harness) -> list[tuple[int, str]]:
    return [(e.timer, e.change) for e in events(h, TimerChanged)]


def states(tmp_path: Path) -> list[tuple[str, str | None]]:
    with sqlite3.connect(tmp_path / "edge-agent.db") as db:
        return db.execute("SELECT state, ended_by FROM timers ORDER BY id").fetchall()


async def test_a_timer_is_set_without_the_model_and_rings_until_it_has_rung_long_enough(
        tmp_path: Path) -> None:
    h = harness(tmp_path, ["set a pasta timer for ten seconds"])
    task = await h.start()
    h.mic.say(speech(1.0))
    await h.run_until(lambda: len(events(h, UnitFinalized)) == 1)
    assert heard(h) == ["Pasta timer set for 10 seconds."]
    assert h.llm.requests == []  # the model was never asked
    await h.run_until(lambda: len(events(h, UnitFinalized)) == 2, limit=15)
    first_ring = h.at(UnitFinalized)[1]
    # Due 10 s after it was set (read every 0.5 s), then a chime before the words.
    set_at, rang_at = h.at(TimerChanged)[:2]
    assert 10.0 <= rang_at - set_at <= 10.6
    assert heard(h)[1] == "Your pasta timer is done."
    finals = [e.finalize for e in events(h, UnitFinalized)]
    ring = finals[1]
    assert not ring.interrupted
    words_ms = 5 * (300 + 100)  # FakeSpeech: 5 tokens of 300 ms and a 100 ms gap each
    assert ring.played_ms >= words_ms + len(chime(16000)) // 2 * 1000 // 16000 - 1
    # It rings again after each pause, for ring_for_s, then ends unanswered.
    await h.run_until(lambda: ("unanswered" in [c for _, c in changes(h)]), limit=40)
    await stop(task)
    rings = heard(h)[1:]
    assert rings == ["Your pasta timer is done."] * len(rings) and 3 <= len(rings) <= 5
    assert changes(h) == [(1, "set"), (1, "ringing"), (1, "unanswered")]
    assert first_ring < h.at(TimerChanged)[2]
    assert states(tmp_path) == [("unanswered", "")]


async def test_stop_said_over_the_ring_cuts_it_keeps_the_heard_prefix_and_ends_it(
        tmp_path: Path) -> None:
    h = harness(tmp_path, ["set a timer for five seconds", "stop"])
    task = await h.start()
    h.mic.say(speech(1.0))
    await h.run_until(lambda: changes(h)[-1:] == [(1, "ringing")], limit=20)
    await h.run_until(lambda: (playing := h.conversation.now_playing()) is not None
                      and playing.heard != "")
    h.mic.say(speech(0.5))  # "stop", over the ring
    await h.run_until(lambda: (1, "done") in changes(h))
    await h.clock.advance(3.0)
    await stop(task)
    ring = [e.finalize for e in events(h, UnitFinalized)][1]
    assert ring.interrupted and ring.heard and ring.heard != ring.generated
    assert ring.generated.startswith(ring.heard)
    assert [b.by for b in events(h, BargeIn)] == ["voice"]
    # "stop" was a turn of its own, answered with nothing: no model, no unit.
    assert [t.text for t in events(h, UserTurn)] == [
        "set a timer for five seconds", "stop"]
    assert len(events(h, UnitFinalized)) == 2 and h.llm.requests == []
    assert states(tmp_path) == [("done", "voice")]
    record = await h.record()
    said = [t["text"] for t in record["turns"] if t["role"] == "assistant"]
    assert said[-1] == ring.heard + " [interrupted]" or said[-1].startswith(ring.heard)


async def test_the_stop_button_ends_a_ring(tmp_path: Path) -> None:
    h = harness(tmp_path, ["set a timer for five seconds"])
    task = await h.start()
    h.mic.say(speech(1.0))
    await h.run_until(lambda: changes(h)[-1:] == [(1, "ringing")], limit=20)
    await h.run_until(lambda: h.conversation.replying)
    assert await h.conversation.stop_by_touch()
    await h.run_until(lambda: (1, "done") in changes(h))
    await h.clock.advance(10.0)  # no second ring
    await stop(task)
    assert [b.by for b in events(h, BargeIn)] == ["touch"]
    assert len(events(h, UnitFinalized)) == 2
    assert states(tmp_path) == [("done", "touch")]


async def test_stop_in_a_pause_ends_the_ring_and_stop_with_nothing_ringing_goes_to_the_model(
        tmp_path: Path) -> None:
    h = harness(tmp_path, ["set a timer for five seconds", "stop", "stop"], ["Stopped what?"])
    task = await h.start()
    h.mic.say(speech(1.0))
    await h.run_until(lambda: len(events(h, UnitFinalized)) == 2, limit=20)  # the first ring
    h.mic.say(speech(0.5))  # "stop", in the pause after it
    await h.run_until(lambda: (1, "done") in changes(h))
    await h.clock.advance(30.0)  # past the grace: "stop" is the caller's again
    h.mic.say(speech(0.5))
    await h.run_until(lambda: len(events(h, UnitFinalized)) == 3)
    await stop(task)
    assert heard(h)[2] == "Stopped what?" and len(h.llm.requests) == 1
    # The turns the rules answered are marked (a replay says their words again); not the third.
    assert [e.turn for e in events(h, CommandAnswered)] == [1, 2]
    assert states(tmp_path) == [("done", "voice")]


async def test_snooze_puts_the_ring_off(tmp_path: Path) -> None:
    h = harness(tmp_path, ["set a timer for five seconds", "snooze"])
    task = await h.start()
    h.mic.say(speech(1.0))
    await h.run_until(lambda: len(events(h, UnitFinalized)) == 2, limit=20)
    h.mic.say(speech(0.5))
    await h.run_until(lambda: len(events(h, UnitFinalized)) == 3)
    assert heard(h)[2] == "OK, I'll ring again in 1 minute."
    await h.run_until(lambda: changes(h).count((1, "ringing")) == 2, limit=70)
    await stop(task)
    snoozed_at, rang_again_at = h.at(TimerChanged)[2:4]
    assert 60.0 <= rang_again_at - snoozed_at <= 60.6
    assert changes(h)[:4] == [(1, "set"), (1, "ringing"), (1, "snoozed"), (1, "ringing")]


async def test_a_timer_that_came_due_while_the_agent_was_off_rings_at_start(
        tmp_path: Path) -> None:
    store = TimerStore(tmp_path / "edge-agent.db", 30)
    store.add("timer", "pasta", START - timedelta(minutes=3), START - timedelta(minutes=11),
              480.0)
    ringing = store.add("alarm", "", START - timedelta(minutes=1), START - timedelta(hours=9),
                        None)
    store.move([ringing.timer_id], "ringing", START - timedelta(minutes=1))  # cut by a crash
    store.add("timer", "eggs", START + timedelta(minutes=5), START, 300.0)
    store.close()
    h = harness(tmp_path, [])
    task = await h.start()
    await h.run_until(lambda: len(events(h, UnitFinalized)) == 1)
    await stop(task)
    assert heard(h) == ["While I was off, your pasta timer went off at 2:57 PM and your alarm "
                        "went off at 2:59 PM."]
    late = [(e.timer, e.late) for e in events(h, TimerChanged)]
    assert late == [(1, True), (2, True)]
    assert [s for s, _ in states(tmp_path)] == ["ringing", "ringing", "set"]  # stopped mid-ring


async def test_a_ring_waits_for_the_reply_in_progress(tmp_path: Path) -> None:
    long = "Here is a long answer about the museum and its many rooms and halls."
    h = harness(tmp_path, ["set a timer for five seconds", "tell me about the museum"], [long])
    task = await h.start()
    h.mic.say(speech(1.0))
    await h.run_until(lambda: len(events(h, UnitFinalized)) == 1)
    await h.clock.advance(2.0)
    h.mic.say(speech(1.0))
    await h.run_until(lambda: len(events(h, UnitFinalized)) == 3, limit=30)
    await stop(task)
    assert heard(h)[1:] == [long, "Your 5 second timer is done."]
    assert not [e for e in events(h, UnitFinalized) if e.finalize.interrupted]


async def test_for_how_long_is_asked_and_the_next_turn_answers_it(tmp_path: Path) -> None:
    h = harness(tmp_path, ["set a timer", "eight minutes", "what timers are running",
                           "cancel the timer", "what's the weather"], ["Sunny."])
    task = await h.start()
    for count in (1, 2, 3, 4, 5):
        h.mic.say(speech(0.8))
        await h.run_until(functools.partial(said_count, h, count))
        await h.clock.advance(1.0)
    await stop(task)
    said = heard(h)
    assert said[:2] == ["For how long?", "Timer set for 8 minutes."]
    assert said[2].startswith("You have 1 timer: an 8 minute timer with 7 minutes and 5")
    assert said[3:] == ["Cancelled the 8 minute timer.", "Sunny."]
    assert len(h.llm.requests) == 1  # only the weather went to the model
    assert states(tmp_path) == [("cancelled", "voice")]


async def test_a_ring_opens_a_session_while_waiting_for_the_wake_word(tmp_path: Path) -> None:
    h = harness(tmp_path, ["set a timer for ten seconds", "stop"], wake=FakeWakeWord(),
                session_start="wake", idle_end_s=3.0)
    task = await h.start()
    h.mic.say(wake_word(0.5) + speech(1.0))
    await h.run_until(lambda: len(events(h, UnitFinalized)) == 1)
    await h.run_until(lambda: len(events(h, SessionStarted)) == 2, limit=20)  # idle, then rung
    assert [e.how for e in events(h, SessionStarted)] == ["wake", "timer"]
    await h.run_until(lambda: len(events(h, UnitFinalized)) == 2)
    h.mic.say(speech(0.5))  # "stop", with no wake word: the ring opened the session
    await h.run_until(lambda: (1, "done") in changes(h))
    await stop(task)
    assert [t.text for t in events(h, UserTurn)][-1] == "stop"
