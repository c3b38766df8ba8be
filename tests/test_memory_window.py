"""The hot cache over a long session: a bounded prompt, a prefix that only changes at a step,
facts that never fade, and nothing unheard anywhere."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from edge_agent.app import conversation_settings
from edge_agent.clock import VirtualClock
from edge_agent.config import Config
from edge_agent.events import EventLog, Notice
from edge_agent.heard.ledger import Finalize
from edge_agent.memory.context import WindowSettings
from edge_agent.memory.conversation_memory import ConversationMemory
from edge_agent.memory.store import MemoryStore
from edge_agent.memory.writer import StoreWriter
from edge_agent.owner import OwnerThread
from tests.fakes import FakeSummarizer, InlineOwner


def _memory(tmp_path: Path, summarizer: Any, window: int = 20, fold: int = 8
            ) -> tuple[ConversationMemory, EventLog, MemoryStore]:
    clock = VirtualClock()
    log = EventLog(clock)
    settings = dataclasses.replace(conversation_settings(Config()).memory, system_prompt="SYSTEM",
                                   window=WindowSettings(window, fold, 24))
    store = MemoryStore.open(tmp_path / "memory.db")
    writer = StoreWriter(store, InlineOwner("store"), clock, warn=lambda t: log.publish(Notice(t)))
    return ConversationMemory(settings, log, writer=writer, summarizer=summarizer), log, store


def _finalize(number: int, generated: str, heard: str) -> Finalize:
    return Finalize(f"u{number}", generated, heard, 1000, 16000, (), 0)


async def _run_on_model(fn: Callable[..., Any], *args: Any) -> Any:
    return fn(*args)


def _user_line(turn: int) -> str:
    if turn == 3:
        return "My booking number is 4471, and my name is Maria Garcia."
    return f"Tell me about the opening hours on day {turn}."


async def test_300_turns_stay_bounded_keep_facts_and_never_hold_unheard_words(
        tmp_path: Path) -> None:
    summarizer = FakeSummarizer()
    memory, _, store = _memory(tmp_path, summarizer)
    memory.open_session("speech")
    prompts: list[list[dict[str, Any]]] = []
    for turn in range(1, 301):
        memory.add_user(_user_line(turn))
        prompts.append(memory.messages())
        await memory.flushed()
        generated = f"Answer {turn}. UNHEARD{turn} booking number B9{turn} at 11 PM."
        heard = f"Answer {turn}." if turn % 3 == 0 else generated.replace(
            f" UNHEARD{turn} booking number B9{turn} at 11 PM.", " Anything else?")
        memory.add_finalize(_finalize(turn, generated if turn % 3 == 0 else heard, heard))
        if memory.fold_due():
            await memory.fold(_run_on_model)
            assert memory.apply_ready_fold()
    await memory.flushed()

    sizes = [sum(len(m["content"]) for m in p) for p in prompts]
    assert max(len(p) for p in prompts) <= 1 + 20 + 8 + 1
    assert max(sizes[100:]) <= 1.1 * max(sizes[30:100])  # bounded: no growth after the window fills
    last_system = prompts[-1][0]["content"]
    assert "booking id: 4471" in last_system and "name: Maria Garcia" in last_system
    everything = json.dumps([prompts, summarizer.inputs, store.facts(),
                             list(store.db.query("SELECT text FROM summaries"))])
    assert "UNHEARD" not in everything and "B9" not in everything and "11 PM" not in everything
    assert {f["key"]: f["value"] for f in store.open_facts()} == {
        "booking_id": "4471", "name": "Maria Garcia"}
    # Every turn is on disk, heard and generated side by side.
    turns = store.turns(memory.session_ids[0])
    assert len(turns) == 600
    assert turns[5]["heard"] == "Answer 3." and "UNHEARD3" in turns[5]["generated"]


async def test_the_prompt_start_changes_only_at_a_step(tmp_path: Path) -> None:
    memory, _, _ = _memory(tmp_path, FakeSummarizer(), window=6, fold=4)
    memory.open_session("speech")
    previous: list[dict[str, Any]] | None = None
    steps = 0
    for turn in range(1, 41):
        memory.add_user(f"question {turn}")
        prompt = memory.messages()
        if previous is not None and prompt[0] == previous[0]:
            # Between steps each prompt starts with the whole previous one (and its answer).
            assert prompt[:len(previous)] == previous
        elif previous is not None:
            steps += 1
        memory.add_finalize(_finalize(turn, f"answer {turn}", f"answer {turn}"))
        previous = [*prompt, {"role": "assistant", "content": f"answer {turn}"}]
        if memory.fold_due():
            await memory.fold(_run_on_model)
            memory.apply_ready_fold()
    # 80 history turns (40 exchanges): a step per 4 folded turns once the first 6 are there,
    # instead of a changed start on every exchange.
    assert 16 <= steps <= 19


async def test_a_failing_summarizer_loses_nothing_and_the_window_still_moves(
        tmp_path: Path) -> None:
    memory, log, store = _memory(tmp_path, FakeSummarizer(fail=1000), window=4, fold=2)
    memory.open_session("speech")
    memory.add_user("My phone number is 555 123 4567.")
    for turn in range(1, 12):
        memory.add_finalize(_finalize(turn, "Noted.", "Noted."))
        if memory.fold_due():
            await memory.fold(_run_on_model)
        memory.add_user(f"question {turn}")
    await memory.flushed()
    notices = [e.event.text for e in log.entries if isinstance(e.event, Notice)]
    assert len([n for n in notices if "summarizer failed" in n]) == 1
    assert memory.context.window_start > 0  # folded without it (extractive) when overdue
    assert len(memory.context.window) <= 4 + 2 + 1
    assert "phone: 5551234567" in memory.messages()[0]["content"]
    assert len(store.turns(memory.session_ids[0])) == 23


async def test_a_summary_yields_the_model_when_speech_starts(tmp_path: Path) -> None:
    memory, _, _ = _memory(tmp_path, FakeSummarizer(hold_s=5.0), window=4, fold=4)
    memory.open_session("speech")
    for turn in range(1, 4):
        memory.add_user(f"question {turn}")
        memory.add_finalize(_finalize(turn, "ok", "ok"))
    model = OwnerThread("llm")
    assert isinstance(memory.stop_background, threading.Event)  # set from the loop, seen on the thread
    folding = asyncio.create_task(memory.fold(model.call))
    await asyncio.sleep(0.2)
    assert not folding.done()
    started = time.perf_counter()
    memory.stop_background.set()  # what the loop does at a speech onset
    await folding
    ran_after: list[float] = []
    await model.call(lambda: ran_after.append(time.perf_counter()))
    # It stopped on the event, not after its 5 s of work (the latency is a bench figure), and
    # the model's thread is free again.
    assert ran_after and ran_after[0] - started < 2.0
    assert not memory.apply_ready_fold()  # nothing to apply: it will be tried again
    model.close()


async def test_a_fact_extractor_that_breaks_never_costs_the_turn(tmp_path: Path) -> None:
    def broken(text: str) -> list[Any]:
        raise ValueError("a rule broke")

    clock = VirtualClock()
    log = EventLog(clock)
    store = MemoryStore.open(tmp_path / "memory.db")
    writer = StoreWriter(store, InlineOwner("store"), clock, warn=print)
    memory = ConversationMemory(conversation_settings(Config()).memory, log, writer=writer,
                                extract=broken)
    memory.open_session("speech")
    memory.add_user("My phone number is 555 123 4567.")
    memory.add_user("And my name is Ana.")
    await memory.flushed()
    assert [t["heard"] for t in store.turns(memory.session_ids[0])] == [
        "My phone number is 555 123 4567. And my name is Ana."]
    notices = [e.event.text for e in log.entries if isinstance(e.event, Notice)]
    assert len(notices) == 1 and "fact extraction failed" in notices[0]
