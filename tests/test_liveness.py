"""Liveness: the agent never goes mute. A barge-in frees the voice within one bounded clause
whatever was queued, a reply without punctuation starts after a few words, a first line that
waits for an agent that will not speak is said at once, and the loop never stalls.

The real-engine calls run in-process under a watchdog that measures how late the loop wakes.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncGenerator, AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from edge_agent.app import conversation_settings
from edge_agent.clock import MonotonicClock
from edge_agent.config import Config
from edge_agent.conversation.model import Model
from edge_agent.conversation.tools import Toolbox
from edge_agent.engines.llm.scripted import ScriptedLanguageModel
from edge_agent.events import (
    CallerSpoke,
    Event,
    EventLog,
    TurnStage,
    UserTurn,
)
from edge_agent.memory.conversation_memory import ConversationMemory
from edge_agent.owner import OwnerThread
from tests.logged import read_events

LOOP_STALL_LIMIT_S = 1.0


class LoopWatchdog:
    """Wakes every `tick` seconds and keeps the worst lateness: how long the loop was held,
    once armed (loading the models, before the conversation, is not a stall of it)."""

    def __init__(self, tick: float = 0.05) -> None:
        self.tick = tick
        self.armed = False
        self.worst = 0.0
        self.stalls: list[tuple[float, float]] = []
        """(loop time at the wake-up, seconds late) of every wake-up later than a tenth of
        a second."""

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            before = loop.time()
            await asyncio.sleep(self.tick)
            late = loop.time() - before - self.tick
            if not self.armed:
                continue
            if late > 0.1:
                self.stalls.append((loop.time(), late))
            self.worst = max(self.worst, late)


@contextlib.asynccontextmanager
async def watched() -> AsyncIterator[LoopWatchdog]:
    watchdog = LoopWatchdog()
    task = asyncio.create_task(watchdog.run())
    try:
        yield watchdog
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert watchdog.worst < LOOP_STALL_LIMIT_S, f"the loop stalled: {watchdog.stalls}"


async def _call(tmp_path: Path, text: str, max_seconds: float = 120.0
                ) -> tuple[dict[str, Any], list[str]]:
    from edge_agent.demo.callfile import parse_call
    from edge_agent.runner import run_demo

    printed: list[str] = []
    async with watched() as watchdog:

        def printer(line: str) -> None:
            watchdog.armed = True  # the first line is the conversation's first event
            printed.append(line)

        record = await run_demo(Config(data_dir=str(tmp_path)), parse_call(text, "call.toml"),
                                printer=printer, max_seconds=max_seconds)
    return dict(record), printed


def _at(record: dict[str, Any], kind: type[Event], **fields: Any) -> list[float]:
    return [e.at for e in read_events(record["events"]) if isinstance(e.event, kind)
            and all(getattr(e.event, k) == v for k, v in fields.items())]


UNPUNCTUATED = " ".join(["the terrace has twelve tables heated in winter and a quiet room at "
                         "the back for groups"] * 40)  # 680 words, not one full stop


@pytest.mark.models
@pytest.mark.realtime
async def test_a_long_reply_without_punctuation_plays_at_once_and_a_barge_in_frees_the_voice(
        tmp_path: Path) -> None:
    record, printed = await _call(tmp_path, f'''
[agent]
greeting = ""
replies = ["{UNPUNCTUATED}", "Of course. On Sunday we open at ten."]
[[caller]]
say = "Tell me about the terrace."
at = 0.5
[[caller]]
say = "Wait, what about Sunday?"
barge_in_after = 3.0
''')
    turns = _at(record, UserTurn)
    first_audio = _at(record, TurnStage, stage="first_audio")
    assert len(turns) == 2 and len(first_audio) == 2, printed
    # Before: 680 words were one clause, synthesized whole (8.6 s for 600 words) before a
    # sound, and the cut reply's synthesis held the voice for 24 s after the barge-in.
    assert first_audio[0] - turns[0] < 3.0, printed
    assert first_audio[1] - turns[1] < 3.0, printed
    cut, answer = record["units"][0], record["units"][1]
    assert cut["interrupted"] and UNPUNCTUATED.startswith(cut["heard"])
    assert answer["heard"] == "Of course. On Sunday we open at ten."


@pytest.mark.models
@pytest.mark.realtime
async def test_a_first_line_after_an_agent_that_does_not_greet_is_said_at_once(
        tmp_path: Path) -> None:
    record, printed = await _call(tmp_path, '''
[agent]
greeting = ""
replies = ["Hello."]
[[caller]]
say = "Hi there."
after_agent_done = true
''')
    spoke = _at(record, CallerSpoke)
    assert spoke and spoke[0] < 2.0, printed  # before: 45 s waiting for a reply never coming
    assert not [line for line in printed if "did not finish its reply" in line]


@pytest.mark.models
@pytest.mark.realtime
async def test_a_line_cut_short_by_the_time_limit_is_not_called_never_said(
        tmp_path: Path) -> None:
    long_line = " ".join(["one two three four five six seven eight nine ten"] * 4)
    _, printed = await _call(tmp_path, f'''
[agent]
greeting = ""
replies = []
[[caller]]
say = "{long_line}"
at = 0.2
''', max_seconds=3.0)
    notes = [line for line in printed if "limit" in line]
    assert len(notes) == 1 and "while the caller was saying" in notes[0], printed
    assert "never said" not in notes[0]


# ----------------------------------------------------------------- a request never started


async def _abandon_while_the_thread_is_busy(owner: OwnerThread,
                                            stream: AsyncGenerator[Any, None]) -> None:
    """Ask `stream` for its first item while `owner`'s thread is held by another call, give the
    request up before the thread is free, then free it: the request was queued, never run."""
    release = threading.Event()
    blocker = asyncio.ensure_future(owner.call(release.wait, 10.0))
    reader = asyncio.ensure_future(stream.__anext__())
    # One loop turn: the blocker's first step, then the reader's, hand their work to the thread
    # in that order (neither suspends before it: the memory has no writer to wait for).
    await asyncio.sleep(0)
    assert not reader.done()  # waiting behind the blocker
    reader.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await reader
    await stream.aclose()
    release.set()
    await blocker


async def test_a_request_abandoned_before_the_model_thread_took_it_never_starts() -> None:
    owner = OwnerThread("model")
    started: list[str] = []

    def items() -> Iterator[str]:
        started.append("started")
        yield "never"

    await _abandon_while_the_thread_is_busy(owner, owner.stream(items))
    await owner.call(lambda: None)  # everything queued before it has run
    owner.close()
    assert started == []


async def test_withdrawing_a_preparation_the_model_never_saw_gives_nothing_back() -> None:
    script = ScriptedLanguageModel(["First.", "Second."])
    owner = OwnerThread("model")
    memory = ConversationMemory(conversation_settings(Config()).memory,
                                EventLog(MonotonicClock()))
    model = Model(script, owner, memory, Toolbox(), None)
    try:
        first = [piece async for piece in model.stream([])]
        assert "".join(str(p) for p in first) == "First."
        await _abandon_while_the_thread_is_busy(owner, model.stream([]))
        await model.withdraw()  # the model never saw it: "First." must not come again
        again = [piece async for piece in model.stream([])]
        assert "".join(str(p) for p in again) == "Second."
    finally:
        owner.close()


def test_withdrawing_a_request_that_found_the_script_run_out_gives_nothing_back() -> None:
    """A preparation for the last line of a call (the script has run out) thrown away must not
    hand back the entry before it: the demo said a long reply again, for minutes, after the
    caller cut it."""
    script = ScriptedLanguageModel(["A very long reply.", "Bye."])
    assert "".join(map(str, script.stream([]))) == "A very long reply."
    script.withdraw()  # a speculation thrown away: the same entry comes again
    assert "".join(map(str, script.stream([]))) == "A very long reply."
    assert "".join(map(str, script.stream([]))) == "Bye."
    assert list(script.stream([])) == []  # run out
    script.withdraw()
    assert list(script.stream([])) == []
    script.withdraw()
    script.withdraw()
    assert list(script.stream([])) == []
