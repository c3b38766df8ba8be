"""`edge-agent bench memory`: what memory costs a long session, and what survives a crash.

- prompt assembly time at turns 5 / 100 / 300 (the hot cache; no disk, no model);
- first token with the real model at turns 5 / 100 / 300, the window moving in steps (each
  request preceded by the prewarm the agent runs while the user speaks), and, for contrast, a
  window that slides one turn per turn;
- commit time: a turn batch synced to disk (`synchronous=FULL`) and a playback checkpoint
  (`NORMAL`);
- first reply after a restart with and without the saved state of the stable prefix;
- durability: SIGKILLs of a real agent at random moments of a call (`bench.durability`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edge_agent.app import conversation_settings
from edge_agent.bench.durability import kill_trial
from edge_agent.bench.sizes import MEMORY_KILLS, MEMORY_TURNS
from edge_agent.bench.stats import percentile, summarize
from edge_agent.clock import MonotonicClock
from edge_agent.config import Config
from edge_agent.engines.base import ChatMessage
from edge_agent.engines.llm.llama import LlamaLanguageModel
from edge_agent.events import EventLog
from edge_agent.heard.ledger import Finalize
from edge_agent.memory.conversation_memory import ConversationMemory
from edge_agent.memory.history import History
from edge_agent.memory.store import MemoryStore
from edge_agent.memory.summarizer import (
    ExtractiveSummarizer,
    LlamaSummarizer,
    Summarizer,
    SummaryPreempted,
)
from edge_agent.memory.writer import StoreWriter
from edge_agent.owner import OwnerThread

Progress = Callable[[str], None]


@dataclass(frozen=True)
class MemoryPlan:
    """How much `run_memory` measures (the defaults: `bench memory`'s full run)."""

    turns: int = MEMORY_TURNS.full
    """Turns of the synthetic session; first tokens are measured at `measured_turns(turns)`."""
    kills: int = MEMORY_KILLS.full
    """SIGKILLs of a real agent at random moments of a call."""
    seed: int = 1
    """Random seed for the kill times and the summarizer's stop times."""
    repeats: int = 9
    """First-token requests per measured turn (their median is the figure)."""
    sliding: bool = True
    """Also measure the old window, sliding one turn per turn (seconds per request)."""
    restarts: int = 3
    """Model restarts timed, with and without the saved prefix state."""
    preemptions: int = 20
    """Summaries stopped at random moments."""


def measured_turns(turns: int) -> tuple[int, ...]:
    """The turns whose prompt and first token are measured: 5, a third of the way, the last
    (5, 100, 300 for the full 300 turns)."""
    return tuple(sorted({min(5, turns), max(1, turns // 3), turns}))


def user_line(turn: int) -> str:
    if turn == 3:
        return "Hi, this is Maria Garcia, my booking number is 4471, for four people at 8 PM."
    return f"Could you tell me if the terrace is open on day {turn} and whether dogs are allowed?"


def agent_line(turn: int) -> str:
    return (f"On day {turn} the terrace opens at noon, dogs are welcome outside, and we keep "
            "a table free for walk-ins until nine.")


async def _session(config: Config, db: Path, turns: int, summarizer: Summarizer,
                   at_turn: Callable[[int, ConversationMemory], None],
                   measured: Sequence[int]) -> dict[str, Any]:
    """A synthetic session of `turns` exchanges through the real memory and store; `at_turn`
    runs before each user turn is added (the prompt is then the prewarmed prefix)."""
    clock = MonotonicClock()
    log = EventLog(clock)
    owner = OwnerThread("store")
    store = await owner.call(MemoryStore.open, db)
    writer = StoreWriter(store, owner, clock, warn=print)
    memory = ConversationMemory(conversation_settings(config).memory, log, writer=writer,
                                summarizer=summarizer)
    memory.open_session("speech")
    assembly: dict[int, list[float]] = {}
    durable: list[float] = []
    for turn in range(1, turns + 1):
        at_turn(turn, memory)
        memory.add_user(user_line(turn))
        if turn in measured:
            assembly[turn] = _timed_assembly(memory)
        started = time.perf_counter()
        await memory.flushed()  # what the agent awaits before a request
        durable.append(time.perf_counter() - started)
        text = agent_line(turn)
        memory.add_finalize(Finalize(f"u{turn}", text, text, 22050, 22050, (), 0))
        if memory.fold_due():
            await memory.fold(_inline)
            memory.apply_ready_fold()
    await memory.flushed()
    checkpoints = []
    for step in range(100):
        started = time.perf_counter()
        memory.checkpoint("u-bench", "A long reply.", "A long", 250 * step)
        await memory.flushed()
        checkpoints.append(time.perf_counter() - started)
    await writer.close()
    owner.close()
    return {"assembly_ms": {str(t): summarize([v * 1000 for v in values], 3)
                            for t, values in assembly.items()},
            "commit_turn_ms": summarize([v * 1000 for v in durable], 2),
            "commit_checkpoint_ms": summarize([v * 1000 for v in checkpoints], 2)}


def _timed_assembly(memory: ConversationMemory) -> list[float]:
    values = []
    for _ in range(50):
        started = time.perf_counter()
        memory.messages()
        values.append(time.perf_counter() - started)
    return values


async def _inline(fn: Callable[..., Any], *args: Any) -> Any:
    return fn(*args)


def _first_token(llm: LlamaLanguageModel, messages: list[ChatMessage]) -> float:
    started = time.perf_counter()
    pieces = llm.stream(messages)
    try:
        next(pieces, None)
    finally:
        pieces.close()  # type: ignore[attr-defined]
    return time.perf_counter() - started


def _first_tokens(llm: LlamaLanguageModel, prewarmed: list[ChatMessage],
                  request: Callable[[str], list[ChatMessage]], turn: int,
                  repeats: int) -> list[float]:
    """Ms to the first token of the request for the next user turn, `repeats` times, each
    after the prewarm the agent runs while the user speaks (`prewarmed`: the prompt without
    it). Each repeat words the user turn differently from its first token on, so no repeat
    finds its own words in the cache."""
    times = []
    for repeat in range(repeats):
        llm.prewarm(prewarmed)
        pending = f"{['Hello', 'Hi', 'Please', 'So', 'Okay'][repeat % 5]}, {user_line(turn)}"
        times.append(round(_first_token(llm, request(pending)) * 1000, 1))
    return times


def _median(values: list[float]) -> float:
    """A measured turn's figure: the median of its first tokens (ms)."""
    return round(percentile(values, 50), 1)


def _sliding(memory: ConversationMemory, window: int, pending: str | None
             ) -> list[ChatMessage]:
    """The prompt the old window sent: the system prompt and the last `window` turns, the
    window sliding one turn per turn."""
    turns = memory.history.turns
    if pending is not None:
        turns = History.with_user(turns, pending)
    return [{"role": "system", "content": memory.context.system_prompt},
            *({"role": t.role, "content": t.text} for t in turns[-window:])]


def run_memory(config: Config, model_path: Path, plan: MemoryPlan, progress: Progress
               ) -> dict[str, Any]:
    llm_options: dict[str, Any] = {"context_tokens": config.llm.context_tokens, "threads": config.llm.threads,
                   "max_tokens": config.llm.max_tokens, "temperature": 0.0, "seed": config.llm.seed}
    llm = LlamaLanguageModel(model_path, **llm_options)
    samples: dict[str, dict[str, list[float]]] = {"stepped": {}, "sliding": {}}
    prewarm_ms: dict[str, float] = {}
    window = config.turns.history_turns
    measured = measured_turns(plan.turns)

    def at_turn(turn: int, memory: ConversationMemory) -> None:
        if turn not in measured:
            return
        before = memory.messages()
        started = time.perf_counter()
        llm.prewarm(before)
        prewarm_ms[str(turn)] = round((time.perf_counter() - started) * 1000, 1)
        samples["stepped"][str(turn)] = _first_tokens(
            llm, before, lambda pending: memory.context.messages(pending), turn, plan.repeats)
        if plan.sliding and turn > window // 2:
            samples["sliding"][str(turn)] = _first_tokens(
                llm, _sliding(memory, window, None),
                lambda pending: _sliding(memory, window, pending), turn, plan.repeats)
        progress(f"  turn {turn}: first token {_median(samples['stepped'][str(turn)])} ms "
                 f"(prewarm before it {prewarm_ms[str(turn)]} ms)")

    with tempfile.TemporaryDirectory(prefix="edge-agent-bench-") as work:
        progress(f"a {plan.turns}-turn session through the memory, the store and "
                 f"{model_path.name}")
        session = asyncio.run(_session(config, Path(work) / "memory.db", plan.turns,
                                       ExtractiveSummarizer(config.memory.summary_chars),
                                       at_turn, measured))
        restart = preemption = None
        if plan.restarts:
            progress("restart: first token with and without the saved prefix state")
            restart = _restart(config, model_path, llm_options, Path(work) / "state",
                               plan.restarts)
        if plan.preemptions:
            progress("the summarizer, stopped at random moments")
            preemption = _preemption(model_path, plan.preemptions, random.Random(plan.seed))
        trials = _durability(plan.kills, plan.seed, Path(work), progress)
    first_token = {kind: {turn: _median(values) for turn, values in by_turn.items()}
                   for kind, by_turn in samples.items()}
    return {"benchmark": "memory", "turns": plan.turns, "measured_turns": list(measured),
            "model": model_path.name, **session, "prewarm_ms": prewarm_ms,
            "first_token_ms": first_token, "first_token_samples_ms": samples,
            "restart": restart, "summarizer": preemption, "durability": trials}


def _restart(config: Config, model_path: Path, options: dict[str, Any], state: Path,
             repeats: int) -> dict[str, Any]:
    memory = ConversationMemory(conversation_settings(config).memory, EventLog(MonotonicClock()))
    memory.context.preload.last_session = ExtractiveSummarizer(config.memory.summary_chars).summarize(
        "", [("user", user_line(n)) for n in range(1, 12)], threading.Event()).text
    memory.context.preload.name = "Maria Garcia"
    stable = memory.context.stable_messages()
    question = [*stable, {"role": "user", "content": user_line(7)}]
    first = LlamaLanguageModel(model_path, **options)
    saved = first.save_prefix_state(stable, state)
    figures: dict[str, Any] = {"state_bytes": saved.stat().st_size if saved else 0}
    del first
    for label, restore in (("cold", False), ("restored", True)):
        runs = []
        for _ in range(repeats):
            started = time.perf_counter()
            llm = LlamaLanguageModel(model_path, **options)
            loaded = time.perf_counter()
            ok = llm.restore_prefix_state(stable, state) if restore else True
            restored = time.perf_counter()
            token = _first_token(llm, question)
            runs.append({"load_ms": (loaded - started) * 1000,
                         "restore_ms": (restored - loaded) * 1000, "restored": ok,
                         "first_token_ms": token * 1000})
            del llm
        figures[label] = {key: summarize([r[key] for r in runs]) for key in
                          ("load_ms", "restore_ms", "first_token_ms")}
        figures[label]["verified"] = all(r["restored"] for r in runs)
    return figures


def _preemption(model_path: Path, trials: int, rng: random.Random) -> dict[str, Any]:
    """The summarizer as the agent runs it (in the reply model's context, one thread, a
    conversation set aside) stopped at random moments: milliseconds from the stop event to
    SummaryPreempted, the conversation's cache back in place by then."""
    reply = LlamaLanguageModel(model_path, context_tokens=2048, threads=2, max_tokens=120,
                               temperature=0.3, seed=7)
    lines = [line for n in range(1, 9)
             for line in (("user", user_line(n)), ("assistant", agent_line(n)))]
    reply.prewarm([{"role": "user" if role == "user" else "assistant", "content": text}
                   for role, text in lines])  # a conversation cached, as when a fold starts
    summarizer = LlamaSummarizer(shared=reply.llama, threads=1)
    started = time.perf_counter()
    summarizer.summarize("", lines, threading.Event())
    whole = time.perf_counter() - started
    latencies = []
    for trial in range(trials):
        stop = threading.Event()
        set_at: list[float] = []
        timer = threading.Timer(rng.uniform(0.02, whole), _stopper(stop, set_at))
        timer.start()
        try:
            summarizer.summarize(f"Visit {trial}: a question about parking.", lines, stop)
        except SummaryPreempted:
            latencies.append((time.perf_counter() - set_at[0]) * 1000)
        timer.cancel()
        timer.join()
    return {"summarize_8_turns_s": round(whole, 2), "preempt_ms": summarize(latencies)}


def _stopper(stop: threading.Event, set_at: list[float]) -> Callable[[], None]:
    def fire() -> None:
        set_at.append(time.perf_counter())
        stop.set()

    return fire


def _durability(kills: int, seed: int, work: Path, progress: Progress) -> dict[str, Any]:
    rng = random.Random(seed)
    trials = []
    for number in range(kills):
        at = round(rng.uniform(0.5, 18.0), 2)
        folder = work / f"kill{number}"
        folder.mkdir()
        config = folder / "edge-agent.toml"
        config.write_text(f'data_dir = "{(folder / "data").as_posix()}"\n', encoding="utf-8")
        trial = kill_trial(config, folder / "data" / "edge-agent.db", None, at, folder)
        progress(f"  SIGKILL at {at:5.2f} s: {len(trial.printed)} turn(s) printed, "
                 f"{len(trial.missing)} lost, {len(trial.recovered)} unit(s) recovered, "
                 f"integrity {trial.integrity}")
        trials.append(dataclasses.asdict(trial))
    return {"kills": kills, "turns_lost": sum(len(t["missing"]) for t in trials),
            "overheard": sum(len(t["overheard"]) for t in trials),
            "integrity_ok": all(t["integrity"] == "ok" for t in trials), "trials": trials}


def table(result: dict[str, Any]) -> str:
    measured = result["measured_turns"]
    lines = [f"memory over {result['turns']} turns ({result['model']})",
             f"{'turn':32}" + "".join(f"{t:>10}" for t in measured)]
    assembly = result["assembly_ms"]
    lines.append(f"{'prompt assembly p50 (ms)':32}" + "".join(
        f"{assembly[str(t)]['p50']:>10.3f}" for t in measured))
    for kind in ("stepped", "sliding"):
        figures = result["first_token_ms"][kind]
        lines.append(f"{'first token, window ' + kind + ' (ms)':32}" + "".join(
            f"{figures.get(str(t), float('nan')):>10.0f}" for t in measured))
    turn, checkpoint = result["commit_turn_ms"], result["commit_checkpoint_ms"]
    lines.append(f"commit, turn (FULL) p50/p95: {turn['p50']}/{turn['p95']} ms; "
                 f"checkpoint (NORMAL): {checkpoint['p50']}/{checkpoint['p95']} ms")
    restart = result["restart"]
    if restart is not None:
        lines.append(f"first token after a restart: cold "
                     f"{restart['cold']['first_token_ms']['p50']} ms, restored state "
                     f"{restart['restored']['first_token_ms']['p50']} ms (+ "
                     f"{restart['restored']['restore_ms']['p50']} ms to load "
                     f"{restart['state_bytes'] / 1e6:.1f} MB)")
    summarizer = result["summarizer"]
    if summarizer is not None:
        preempt = summarizer["preempt_ms"]
        lines.append(f"summarizer: {summarizer['summarize_8_turns_s']} s for 8 turns; stopped "
                     f"{preempt.get('p50')}/{preempt.get('p95')}/{preempt.get('max')} ms "
                     "(p50/p95/max) after speech began")
    durability = result["durability"]
    lines.append(f"durability: {durability['kills']} SIGKILLs, {durability['turns_lost']} turn(s) "
                 f"lost, {durability['overheard']} unit(s) over-heard, integrity "
                 f"{'ok' if durability['integrity_ok'] else 'FAILED'}")
    return "\n".join(lines)
