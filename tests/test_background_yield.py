"""Background work on the model's thread never keeps a reply waiting: a prewarm, the prefix
save and a summary end soon after a request wants the model."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from edge_agent.app import conversation_settings
from edge_agent.clock import VirtualClock
from edge_agent.config import Config
from edge_agent.conversation.model import Model
from edge_agent.conversation.tools import Toolbox
from edge_agent.events import EventLog, Notice
from edge_agent.heard.ledger import Finalize
from edge_agent.memory.context import WindowSettings
from edge_agent.memory.conversation_memory import ConversationMemory
from edge_agent.memory.store import MemoryStore
from edge_agent.memory.writer import StoreWriter
from edge_agent.owner import OwnerThread
from tests.fakes import FakeLanguageModel, FakeSummarizer, InlineOwner

HOLD_S = 5.0
"""How long the scripted background work would take if nothing stopped it."""


def _memory(tmp_path: Path, summarizer: Any) -> ConversationMemory:
    clock = VirtualClock()
    log = EventLog(clock)
    settings = dataclasses.replace(conversation_settings(Config()).memory,
                                   system_prompt="SYSTEM", window=WindowSettings(4, 4, 24))
    store = MemoryStore.open(tmp_path / "memory.db")
    writer = StoreWriter(store, InlineOwner("store"), clock, warn=lambda t: log.publish(Notice(t)))
    memory = ConversationMemory(settings, log, writer=writer, summarizer=summarizer)
    memory.open_session("test")
    for turn in range(1, 4):
        memory.add_user(f"question {turn}")
        memory.add_finalize(Finalize(f"u{turn}", "ok", "ok", 1000, 16000, (), 0))
    return memory


async def _ask(model: Model) -> tuple[str, float]:
    """A request's reply and how long it took (real seconds)."""
    started = time.perf_counter()
    pieces = [piece async for piece in model.stream([{"role": "user", "content": "hello"}])]
    return "".join(str(p) for p in pieces), time.perf_counter() - started


async def test_a_request_stops_a_prewarm_in_progress_which_runs_again_later(
        tmp_path: Path) -> None:
    llm = FakeLanguageModel(["Hi.", "Again."], prewarm_hold_s=HOLD_S)
    model = Model(llm, OwnerThread("llm"), _memory(tmp_path, FakeSummarizer()), Toolbox(),
                  None)
    try:
        model.prewarm()
        while not llm.prewarmed:  # on the model's thread now, holding it
            await asyncio.sleep(0.01)
        reply, took = await _ask(model)
        assert reply == "Hi."
        assert took < HOLD_S / 2  # not after the prewarm's 5 s
        assert llm.prewarms_stopped == 1
        while model.warming:
            await asyncio.sleep(0.01)
        model.prewarm()  # the stopped one is owed: the same messages are prewarmed again
        assert model.warming
        while len(llm.prewarmed) < 2:
            await asyncio.sleep(0.01)
        assert llm.prewarmed[1] == llm.prewarmed[0]
        reply, took = await _ask(model)
        assert (reply, llm.prewarms_stopped) == ("Again.", 2)
        assert took < HOLD_S / 2
    finally:
        model.close()


async def test_a_request_stops_a_summary_in_progress(tmp_path: Path) -> None:
    memory = _memory(tmp_path, FakeSummarizer(hold_s=HOLD_S))
    llm = FakeLanguageModel(["Hi."])
    model = Model(llm, OwnerThread("llm"), memory, Toolbox(), None)
    try:
        assert memory.fold_due()
        folding = asyncio.create_task(memory.fold(model.run))
        await asyncio.sleep(0.2)  # the summary holds the model's thread
        assert not folding.done()
        reply, took = await _ask(model)
        assert reply == "Hi."
        assert took < HOLD_S / 2
        await folding
        assert not memory.apply_ready_fold()  # preempted: nothing to apply, retried later
    finally:
        model.close()


class StopAfter(threading.Event):
    """A stop event that sets itself at its `checks`-th look (a reply arriving mid-way)."""

    def __init__(self, checks: int) -> None:
        super().__init__()
        self._left = checks

    def is_set(self) -> bool:
        self._left -= 1
        if self._left <= 0:
            self.set()
        return super().is_set()


LONG_SYSTEM = "You are the kiosk of a restaurant. " + " ".join(
    f"Rule {n}: answer politely and briefly about the menu, the hours and the bookings."
    for n in range(1, 25))


@pytest.mark.models
def test_a_stopped_prewarm_keeps_what_it_evaluated_and_the_next_one_goes_on_from_there(
        smollm2: Any) -> None:
    from edge_agent.engines.llm import state as llm_state

    llm = smollm2(threads=0)
    messages = [{"role": "system", "content": LONG_SYSTEM}]
    tokens = llm._prefix_tokens(messages, ())
    assert tokens is not None and len(tokens) > 300
    llm.prewarm(messages, stop=StopAfter(3))
    evaluated = int(llm.llama.n_tokens)
    assert 0 < evaluated < len(tokens) / 2  # two chunks of at most 32 tokens
    assert llm_state.cached_prefix(llm.llama, tokens) == evaluated
    llm.prewarm(messages, stop=threading.Event())
    assert llm_state.cached_prefix(llm.llama, tokens) == len(tokens) == llm.llama.n_tokens
    reply = "".join(str(p) for p in llm.stream([*messages, {"role": "user",
                                                            "content": "When do you open?"}]))
    assert reply.strip()
