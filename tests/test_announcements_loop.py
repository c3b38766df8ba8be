"""The house's announcements in the loop (fakes on a virtual clock): said when nobody talks,
each a unit of its own after the chime, cut like any reply (heard truth), never over a timer's
ring, opening a session while the agent waits for its wake word, and a flood refused."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from edge_agent.conversation.announcer import MAX_WAITING
from edge_agent.conversation.timekeeper import chime
from edge_agent.events import (
    BargeIn,
    PlaybackStarted,
    SessionStarted,
    TimerChanged,
    UnitFinalized,
)
from tests.fakes import FakeWakeWord, speech
from tests.test_timers_loop import START, events, harness, heard
from tests.timeline import stop

DINNER = "Dinner is ready."


def _never_two_at_once(h: object) -> None:
    """Each unit finished (finalized) before the next one started playing."""
    playing: str | None = None
    for entry in h.log.entries:  # type: ignore[attr-defined]
        if isinstance(entry.event, PlaybackStarted):
            assert playing is None, f"{entry.event.unit_id} began while {playing} played"
            playing = entry.event.unit_id
        elif isinstance(entry.event, UnitFinalized) and entry.event.finalize.unit_id == playing:
            playing = None


async def test_an_announcement_waits_for_the_reply_then_is_a_unit_of_its_own(
        tmp_path: Path) -> None:
    h = harness(tmp_path, ["tell me a story"], ["Once upon a time there was a kiosk."])
    task = await h.start()
    h.mic.say(speech(1.0))
    await h.run_until(lambda: h.conversation.replying)
    assert h.conversation.announce(DINNER) is None  # arrives while the agent answers
    await h.run_until(lambda: len(events(h, UnitFinalized)) == 2, limit=20)
    await stop(task)
    assert heard(h) == ["Once upon a time there was a kiosk.", DINNER]
    announced = events(h, UnitFinalized)[1].finalize
    assert not announced.interrupted
    words_ms = 3 * (300 + 100)  # FakeSpeech: 3 tokens of 300 ms and a 100 ms gap each
    assert announced.played_ms >= words_ms + len(chime(16000)) // 2 * 1000 // 16000 - 1
    _never_two_at_once(h)


async def test_an_interruption_cuts_an_announcement_and_keeps_what_was_heard(
        tmp_path: Path) -> None:
    h = harness(tmp_path, ["wait"], ["Yes?"])
    task = await h.start()
    h.conversation.announce("The washing machine is done and the laundry can come out now.")
    await h.run_until(lambda: (playing := h.conversation.now_playing()) is not None
                      and playing.heard != "")
    h.mic.say(speech(0.6))
    await h.run_until(lambda: len(events(h, UnitFinalized)) == 2, limit=20)
    await stop(task)
    cut = events(h, UnitFinalized)[0].finalize
    assert [b.by for b in events(h, BargeIn)] == ["voice"]
    assert cut.interrupted and cut.heard and cut.generated.startswith(cut.heard)
    assert cut.heard != cut.generated
    record = await h.record()
    said = [t["text"] for t in record["turns"] if t["role"] == "assistant"]
    assert said[0].startswith(cut.heard) and "laundry can come out" not in said[0]


async def test_an_announcement_never_plays_over_a_ring_nor_a_ring_over_it(
        tmp_path: Path) -> None:
    h = harness(tmp_path, ["set a timer for five seconds"])
    task = await h.start()
    h.mic.say(speech(1.0))
    await h.run_until(lambda: len(events(h, UnitFinalized)) == 1)
    await h.run_until(lambda: bool(events(h, TimerChanged)[1:]), limit=10)  # due: "ringing"
    h.conversation.announce(DINNER)  # in the same moment as the ring
    await h.run_until(lambda: DINNER in heard(h), limit=40)
    await stop(task)
    _never_two_at_once(h)
    rings = [said for said in heard(h)[1:] if said != DINNER]
    assert rings and all(said == "Your 5 second timer is done." for said in rings), heard(h)
    # It waited for the ringing to end (unanswered, after ring_for_s), not only a ring.
    ended = h.at(TimerChanged)[-1]
    announced = next(e.at for e in h.log.entries if isinstance(e.event, UnitFinalized)
                     and e.event.finalize.generated == DINNER)
    assert announced > ended


async def test_a_timer_due_while_an_announcement_plays_rings_after_it(tmp_path: Path) -> None:
    long = "The washing machine is done, the laundry can come out, and the dryer is free now."
    h = harness(tmp_path, ["set a timer for five seconds"])
    task = await h.start()
    h.mic.say(speech(1.0))
    await h.run_until(lambda: len(events(h, UnitFinalized)) == 1)
    h.conversation.announce(long)  # ~6 s of speech: the timer comes due while it plays
    await h.run_until(lambda: len(events(h, UnitFinalized)) == 3, limit=20)
    await stop(task)
    _never_two_at_once(h)
    assert heard(h)[1:] == [long, "Your 5 second timer is done."]
    # It came due while the announcement played, and rang once that was over.
    due = (datetime.fromisoformat(events(h, TimerChanged)[0].due) - START).total_seconds()
    announced_end = [e.at for e in h.log.entries if isinstance(e.event, UnitFinalized)][1]
    assert due < announced_end <= h.at(TimerChanged)[1]


async def test_an_announcement_opens_a_session_while_the_agent_waits_for_its_word(
        tmp_path: Path) -> None:
    h = harness(tmp_path, ["thanks"], ["You're welcome."], wake=FakeWakeWord(),
                session_start="wake", idle_end_s=3.0)
    task = await h.start()
    h.conversation.announce(DINNER)
    await h.run_until(lambda: len(events(h, UnitFinalized)) == 1)
    h.mic.say(speech(0.6))  # an answer, with no wake word
    await h.run_until(lambda: len(events(h, UnitFinalized)) == 2)
    await stop(task)
    assert [e.how for e in events(h, SessionStarted)] == ["announcement"]
    assert heard(h) == [DINNER, "You're welcome."]


async def test_a_flood_of_announcements_is_refused_past_the_few_that_wait(
        tmp_path: Path) -> None:
    h = harness(tmp_path, [])
    task = await h.start()
    answers = [h.conversation.announce(f"Message {n}.") for n in range(MAX_WAITING + 2)]
    await h.run_until(lambda: len(events(h, UnitFinalized)) == MAX_WAITING, limit=60)
    await stop(task)
    assert answers[:MAX_WAITING] == [None] * MAX_WAITING
    assert answers[MAX_WAITING:] == [f"{MAX_WAITING} announcements are waiting to be said "
                                     "already"] * 2
    assert heard(h) == [f"Message {n}." for n in range(MAX_WAITING)]
