"""An engine failing mid-reply (the model, the voice, a tool, a speculative preparation) ends
that reply, never the loop: what had played is recorded as heard, the unplayed rest is
dropped, the fallback line is said as a unit of its own, the failure is published, and the
next user turn is answered normally."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

from edge_agent.conversation.failures import FALLBACK_LINE
from edge_agent.conversation.tools import Tool, Toolbox
from edge_agent.engines.base import ChatMessage, ToolCall
from edge_agent.events import (
    Event,
    ReplyFailed,
    SpeculationCancelled,
    ToolUsed,
    UnitFinalized,
    UserTurn,
)
from edge_agent.heard.ledger import Finalize
from tests.fakes import FakeSpeech, speech
from tests.logged import read_events
from tests.timeline import Harness, stop

SOUP = "Our soup today is tomato. It comes with fresh bread and butter."
SOUP_HEARD = "Our soup today is tomato."
"""The first clause of SOUP: played before the failure, and nothing after it."""
NO_SPECULATION = {"speculate_ms": 60_000}
"""The answer is requested when the turn ends, so the model fails in the reply itself."""


E = TypeVar("E", bound=Event)


def of(h: Harness, kind: type[E]) -> list[E]:
    return [e.event for e in h.log.entries if isinstance(e.event, kind)]


def finals(h: Harness) -> list[Finalize]:
    return [e.finalize for e in of(h, UnitFinalized)]


def failures(h: Harness) -> list[tuple[int, str, str]]:
    return [(e.turn, e.stage, e.recovery) for e in of(h, ReplyFailed)]


async def ask(h: Harness, units: int, seed: int = 1) -> None:
    """The user says a line once the agent is quiet; wait until `units` units are final."""
    await h.run_until(lambda: not h.conversation.busy)
    h.mic.say(speech(0.6, seed=seed))
    await h.run_until(lambda: len(finals(h)) >= units and not h.conversation.busy)


async def test_the_model_failing_mid_reply_keeps_the_heard_part_and_says_the_fallback(
        tmp_path: Path) -> None:
    prompts: list[list[ChatMessage]] = []
    voice = FakeSpeech()
    # The first request yields seven pieces ("Our soup today is tomato. It comes ") and fails.
    h = Harness(transcripts=["what is the soup", "and the bread"],
                replies=[SOUP, "Yes, the bread is homemade."], greeting="", tts=voice,
                llm_fail_after={1: 7}.get, overrides=NO_SPECULATION,
                db_path=tmp_path / "memory.db",
                on_request=lambda messages: prompts.append([dict(m) for m in messages]))
    task = await h.start()
    await ask(h, units=2)
    assert failures(h) == [(1, "llm", "fallback")]
    (failed,) = of(h, ReplyFailed)
    assert failed.error == "RuntimeError: the model failed on request 1"
    cut, fallback = finals(h)
    # "It comes" was generated, never synthesized: not heard.
    assert (cut.generated, cut.heard) == ("Our soup today is tomato. It comes", SOUP_HEARD)
    assert (fallback.generated, fallback.heard) == (FALLBACK_LINE, FALLBACK_LINE)
    # The speaker played the first clause and then the fallback, nothing else.
    assert "".join(voice.synthesized) == "Our soup today is tomato. " + FALLBACK_LINE
    assert h.speaker.played_frames() == cut.played_samples + fallback.played_samples

    await ask(h, units=3, seed=2)  # the loop is alive: the next turn is answered normally
    await stop(task)
    assert finals(h)[2].heard == "Yes, the bread is homemade."
    assert prompts[1] == [
        {"role": "system", "content": "SYSTEM"},
        {"role": "user", "content": "what is the soup"},
        {"role": "assistant", "content": SOUP_HEARD + " [interrupted]"},
        {"role": "assistant", "content": FALLBACK_LINE},
        {"role": "user", "content": "and the bread"},
    ]
    record = await h.record()
    assert [(u["unit_id"], u["heard"], u["interrupted"]) for u in record["units"]] == [
        ("u1", SOUP_HEARD, True), ("u2", FALLBACK_LINE, False),
        ("u3", "Yes, the bread is homemade.", False)]
    assert [t["text"] for t in record["turns"] if t["role"] == "assistant"] == [
        SOUP_HEARD, FALLBACK_LINE, "Yes, the bread is homemade."]
    (failed,) = [e.event for e in read_events(record["events"])
                 if isinstance(e.event, ReplyFailed)]
    assert (failed.turn, failed.stage, failed.recovery) == (1, "llm", "fallback")


async def test_the_voice_failing_on_the_second_clause() -> None:
    voice = FakeSpeech(fail_when=lambda text: text.startswith("It comes"))
    h = Harness(transcripts=["what is the soup", "and the bread"],
                replies=[SOUP, "Yes, the bread is homemade."], greeting="", tts=voice)
    task = await h.start()
    await ask(h, units=2)
    assert failures(h) == [(1, "tts", "fallback")]
    (failed,) = of(h, ReplyFailed)
    assert failed.error.startswith("RuntimeError: the voice failed on 'It comes")
    cut, fallback = finals(h)
    assert (cut.generated, cut.heard) == (SOUP, SOUP_HEARD)
    assert (fallback.generated, fallback.heard) == (FALLBACK_LINE, FALLBACK_LINE)
    assert voice.failed == ["It comes with fresh bread and butter."]

    await ask(h, units=3, seed=2)
    await stop(task)
    assert finals(h)[2].heard == "Yes, the bread is homemade."
    assert h.llm.requests[-1][-3:] == [
        {"role": "assistant", "content": SOUP_HEARD + " [interrupted]"},
        {"role": "assistant", "content": FALLBACK_LINE},
        {"role": "user", "content": "and the bread"},
    ]


async def test_a_voice_that_always_fails_leaves_the_turn_silent_and_the_loop_listening() -> None:
    voice = FakeSpeech(fail_when=lambda text: True)
    h = Harness(transcripts=["hello", "can you hear me", "and now"],
                replies=["Hi there.", "Yes I can.", "Loud and clear."], tts=voice)
    task = await h.start()
    await ask(h, units=3)
    # The greeting failed (nothing was asked: no fallback); the turn's speculative preparation
    # failed and was generated again; the reply failed; its fallback failed too.
    assert failures(h) == [(0, "tts", "silent"), (1, "tts", "retry"), (1, "tts", "fallback"),
                           (1, "tts", "silent")]
    assert [(f.generated, f.heard) for f in finals(h)] == [
        ("Hello there.", ""), ("Hi there.", ""), (FALLBACK_LINE, "")]
    assert h.speaker.played_frames() == 0 and voice.synthesized == []
    assert [(t.role, t.text) for t in h.conversation.history.turns] == [("user", "hello")]

    # The next turn is tried again (and fails the same way, once, no retry loop).
    tried = len(voice.failed)
    await ask(h, units=5, seed=2)
    assert failures(h)[4:] == [(2, "tts", "retry"), (2, "tts", "fallback"), (2, "tts", "silent")]
    assert len(voice.failed) == tried + 3  # the preparation, the reply, the fallback

    voice.fail_when = None  # the voice is back: the next turn is answered and heard
    await ask(h, units=6, seed=3)
    await stop(task)
    assert finals(h)[5].heard == "Loud and clear."
    # Nothing the agent said was heard: the user's turns join, as after any silence.
    assert h.llm.requests[-1] == [
        {"role": "system", "content": "SYSTEM"},
        {"role": "user", "content": "hello can you hear me and now"}]


async def test_a_model_that_always_fails_gets_the_fallback_every_turn() -> None:
    h = Harness(transcripts=["one", "two", "three"], replies=[], greeting="",
                llm_fail_after=lambda request: 0, overrides=NO_SPECULATION)
    task = await h.start()
    for turn in (1, 2, 3):
        await ask(h, units=turn, seed=turn)
    await stop(task)
    assert failures(h) == [(turn, "llm", "fallback") for turn in (1, 2, 3)]
    assert [f.heard for f in finals(h)] == [FALLBACK_LINE] * 3
    assert len(h.llm.requests) == 3  # one request per turn: no spinning
    assert [(t.role, t.text) for t in h.conversation.history.turns] == [
        ("user", "one"), ("assistant", FALLBACK_LINE), ("user", "two"),
        ("assistant", FALLBACK_LINE), ("user", "three"), ("assistant", FALLBACK_LINE)]


def _booking_tools(run: Callable[..., str]) -> list[Tool]:
    return [Tool("book_table", "Book a table.",
                 {"type": "object", "properties": {"people": {"type": "integer"}}}, run)]


BOOK = ToolCall("call-1", "book_table", json.dumps({"people": 2}))


async def test_a_tool_that_raises_is_an_error_result_the_model_answers() -> None:
    def book_table(people: int) -> str:
        raise OSError("the booking system is down")

    h = Harness(transcripts=["a table for two"], greeting="",
                replies=[[BOOK], "Sorry, I could not book that."],
                tools=Toolbox(_booking_tools(book_table)))
    task = await h.start()
    await ask(h, units=1)
    await stop(task)
    assert of(h, ReplyFailed) == []
    (used,) = of(h, ToolUsed)
    assert used.result == "error: book_table failed: the booking system is down"
    assert finals(h)[0].heard == "Sorry, I could not book that."


class BrokenToolbox(Toolbox):
    """A toolbox whose machinery itself raises (not a tool's error, which it reports)."""

    def run(self, call: ToolCall) -> str:
        raise RuntimeError("the toolbox broke")


async def test_a_toolbox_that_raises_ends_the_reply_with_the_fallback() -> None:
    h = Harness(transcripts=["a table for two", "thanks"], greeting="",
                replies=[["Let me check. ", BOOK], "You are welcome."],
                tools=BrokenToolbox(_booking_tools(lambda people: "booked")))
    task = await h.start()
    await ask(h, units=2)
    assert failures(h) == [(1, "tool", "fallback")]
    assert [(f.generated, f.heard) for f in finals(h)] == [
        ("Let me check. ", "Let me check. "), (FALLBACK_LINE, FALLBACK_LINE)]
    (used,) = of(h, ToolUsed)
    assert used.result == "error: book_table could not run: the toolbox broke"

    await ask(h, units=3, seed=2)
    await stop(task)
    assert finals(h)[2].heard == "You are welcome."  # the next turn is answered normally
    # The call is in history with its error (recorded when it ran, before the unit before it
    # had played out), then what was heard.
    roles = [(m["role"], m.get("content")) for m in h.llm.requests[-1]]
    assert roles[1:] == [
        ("user", "a table for two"), ("assistant", ""),
        ("tool", "error: book_table could not run: the toolbox broke"),
        ("assistant", "Let me check. "), ("assistant", FALLBACK_LINE), ("user", "thanks")]


async def test_a_failed_preparation_is_discarded_and_the_answer_generated_again() -> None:
    # The speculative request (the first) fails; the request sent when the turn ends works.
    h = Harness(transcripts=["what is the soup"], replies=[SOUP], greeting="",
                llm_fail_after={1: 3}.get)
    task = await h.start()
    await ask(h, units=1)
    await stop(task)
    assert failures(h) == [(1, "llm", "retry")]
    (cancelled,) = of(h, SpeculationCancelled)
    assert cancelled.reason == "preparation failed"
    assert len(h.llm.withdrawn) == 1 and len(h.llm.requests) == 1
    (reply,) = finals(h)
    assert reply.heard == SOUP
    assert [(t.role, t.text) for t in h.conversation.history.turns] == [
        ("user", "what is the soup"), ("assistant", SOUP)]


async def test_a_preparation_failing_again_when_the_turn_ends_falls_back() -> None:
    h = Harness(transcripts=["what is the soup", "thanks"], replies=[SOUP, "You are welcome."],
                greeting="", llm_fail_after={1: 3, 2: 7}.get)
    task = await h.start()
    await ask(h, units=2)
    assert failures(h) == [(1, "llm", "retry"), (1, "llm", "fallback")]
    assert [f.heard for f in finals(h)] == [SOUP_HEARD, FALLBACK_LINE]
    await ask(h, units=3, seed=2)
    await stop(task)
    assert finals(h)[2].heard == "You are welcome."
    assert len(of(h, UserTurn)) == 2


async def test_a_used_preparation_failing_mid_reply_falls_back() -> None:
    # The voice takes 0.5 s: the preparation is still synthesizing its first piece when the
    # turn ends, so it is used; the model fails after that, while the reply plays.
    h = Harness(transcripts=["what is the soup", "thanks"], replies=[SOUP, "You are welcome."],
                greeting="", llm_fail_after={1: 7}.get, tts_delay=0.5)
    task = await h.start()
    await ask(h, units=2)
    assert failures(h) == [(1, "llm", "fallback")]
    assert h.llm.withdrawn == [] and of(h, SpeculationCancelled) == []
    assert [(f.generated, f.heard) for f in finals(h)] == [
        ("Our soup today is tomato. It comes", SOUP_HEARD), (FALLBACK_LINE, FALLBACK_LINE)]
    await ask(h, units=3, seed=2)
    await stop(task)
    assert finals(h)[2].heard == "You are welcome."
    assert len(h.llm.requests) == 2  # one per turn: the failed one was not sent again


class Halt(BaseException):
    """Not an engine failure: like a cancellation, a Ctrl-C or an exit, it ends the loop."""


async def test_what_is_not_an_exception_still_ends_the_loop() -> None:
    def halt(text: str) -> bool:
        raise Halt

    h = Harness(transcripts=[], replies=[], greeting="Hello there.",
                tts=FakeSpeech(fail_when=halt))
    task = await h.start()
    await h.run_until(task.done)
    with pytest.raises(Halt):
        await task
    assert of(h, ReplyFailed) == []
