"""The conversation's memory: the hot cache the prompts come from, and everything recorded.

The loop changes history only through this object (user turns, tool results, Finalizes), so
each change reaches both the hot cache (`MemoryContext`) and the write queue (`StoreWriter`) at
once: the loop never waits on disk, and `flushed()` (awaited before every model request) puts
what the model is about to see on disk first. Every event of the log is recorded too.

Facts are extracted deterministically from each user turn, from tool results, and from what
the agent said and the listener heard when the user's next turn confirms it; a fact never
comes from unheard text. Folding the window into the running summary (`fold`) runs in the
background on the model's thread, is preempted when the user starts to speak, and is applied
(`apply_ready_fold`) only while the conversation is idle.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from edge_agent.engines.base import ChatMessage, ToolCall
from edge_agent.events import EventLog, LlmRequest, LoggedEvent, Notice
from edge_agent.heard.ledger import Finalize
from edge_agent.memory import lifecycle
from edge_agent.memory.consolidate import consolidate, expires_at
from edge_agent.memory.context import Fact, MemoryContext, Preload, WindowSettings, heard_lines
from edge_agent.memory.facts import FactCandidate, confirmed_facts, extract_facts
from edge_agent.memory.history import History, Turn
from edge_agent.memory.record import unit_words
from edge_agent.memory.schema import (
    EventRow,
    FactRow,
    LlmRequestRow,
    SessionRow,
    SummaryRow,
    TurnRow,
    UnitRow,
)
from edge_agent.memory.store import MemoryStore, dumps
from edge_agent.memory.summarizer import (
    ExtractiveSummarizer,
    Summarizer,
    Summary,
    SummaryPreempted,
)
from edge_agent.memory.writer import StoreWriter

RunOnModel = Callable[..., Awaitable[Any]]
"""Runs a blocking call on the language model's owner thread."""


@dataclass(frozen=True)
class MemorySettings:
    system_prompt: str
    """Put first in every prompt."""
    marker: str
    """Added in prompts to an assistant turn that was cut."""
    window: WindowSettings
    """Verbatim window and the fold step."""
    identity: str
    """Whose profile and facts this deployment keeps ("anonymous" by default)."""
    session_ttl_s: float
    """A restarted agent resumes an open session active this recently; older ones close."""
    summary_chars: int
    """Longest running or end-of-session summary, in characters."""


def utc_now() -> datetime:
    return datetime.now(UTC)


def iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="milliseconds")


@dataclass
class _ReadyFold:
    context: MemoryContext
    first: int
    end: int
    summary: Summary


class ConversationMemory:
    def __init__(self, settings: MemorySettings, log: EventLog, *,
                 writer: StoreWriter | None = None, summarizer: Summarizer | None = None,
                 engines: dict[str, str] | None = None,
                 wall: Callable[[], datetime] = utc_now,
                 extract: Callable[[str], list[FactCandidate]] = extract_facts) -> None:
        self.settings = settings
        self._log = log
        self.writer = writer
        self._extractive = ExtractiveSummarizer(max_chars=settings.summary_chars)
        """For folds that cannot wait for the summarizer: no model, instant."""
        self._summarizer = summarizer or self._extractive
        self._engines = engines or {}
        self._wall = wall
        self._extract = extract
        self._extract_failed = False
        self.run_id = uuid.uuid4().hex[:12]
        self.context = self._new_context(Preload())
        self._preload = Preload()
        self._closed: list[History] = []
        self.session_id: str | None = None
        self.session_ids: list[str] = []
        """Sessions opened or resumed by this run, in order."""
        self._pending_events: list[LoggedEvent] = []
        self._unit_seq = 0
        self._last_heard = ""
        self.stop_background = threading.Event()
        """Set when the user starts to speak: background model work stops at once."""
        self._ready: _ReadyFold | None = None
        self._failed_folds = 0
        self._background: set[asyncio.Task[None]] = set()
        log.listen(self._on_event)

    @property
    def history(self) -> History:
        return self.context.history

    @property
    def histories(self) -> list[History]:
        return [*self._closed, self.context.history]

    # -- session life -------------------------------------------------------------------------

    async def start(self) -> lifecycle.Resumed | None:
        """Recover what a crash left, resume an open session within its TTL (returned) or
        close it, and load the preload for the next session."""
        if self.writer is None:
            return None
        now = self._wall()
        identity, settings = self.settings.identity, self.settings
        oldest = iso(now - timedelta(seconds=settings.session_ttl_s))

        def begin(store: MemoryStore) -> tuple[lifecycle.Resumed | None, Preload]:
            with store.transaction(durable=True):
                resumed = lifecycle.resume_or_close(store, identity, iso(now), oldest,
                                                    settings.summary_chars)
                consolidate(store, iso(now))
            return resumed, lifecycle.preload(store, identity)

        resumed, self._preload = await self.writer.read(begin)
        if resumed is not None:
            self._resume(resumed)
        else:
            self.context = self._new_context(self._preload)  # prewarmed before a session opens
        return resumed

    def reload_preload(self) -> None:
        """The database's memory of this identity changed from elsewhere (the venue sync took
        another kiosk's newer facts): read the preload again for the next session (the open
        one goes on with what it has)."""
        if self.writer is None:
            return
        identity = self.settings.identity

        async def reload(writer: StoreWriter) -> None:
            self._preload = await writer.read(lambda store: lifecycle.preload(store, identity))
            if self.session_id is None:
                self.context = self._new_context(self._preload)

        task = asyncio.get_running_loop().create_task(reload(self.writer), name="preload")
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _resume(self, resumed: lifecycle.Resumed) -> None:
        session_facts = {f.key for f in resumed.facts}
        preload = dataclasses.replace(
            self._preload, facts=[f for f in self._preload.facts if f.key not in session_facts])
        self.context = self._new_context(preload)
        self.context.history.turns = list(resumed.turns)
        self.context.window_start = min(resumed.window_start, len(resumed.turns))
        self.context.summary = resumed.summary
        for fact in resumed.facts:
            self.context.add_fact(fact)
        self.session_id = resumed.session_id
        self.session_ids.append(resumed.session_id)
        self._unit_seq = resumed.finalized
        self._submit(lambda s: s.update_session(resumed.session_id, {
            "run_id": self.run_id, "last_active_at": self._now(),
            "engines": dumps(self._engines)}), "resume session")
        for line in resumed.recovered:
            self._log.publish(Notice(line))

    def open_session(self, how: str) -> None:
        """A new session: empty history, the preload of earlier sessions."""
        self.context = self._new_context(self._preload)
        session_id = uuid.uuid4().hex[:12]
        self.session_id = session_id
        self.session_ids.append(session_id)
        self._unit_seq = 0
        self._last_heard = ""
        now = self._now()
        row: SessionRow = {"id": session_id, "identity": self.settings.identity, "run_id": self.run_id,
               "how": how, "state": "open", "started_at": now, "last_active_at": now,
               "ended_at": None, "engines": dumps(self._engines)}
        self._submit(lambda s: s.insert_session(row), "open session")
        self._flush_pending_events()

    def end_session(self) -> None:
        """Close the session: its end-of-session summary becomes the next session's preload
        at once (the store gets the same writeback)."""
        session_id = self.session_id
        if session_id is None:
            return
        context = self.context
        summary = lifecycle.session_summary(
            context.summary, heard_lines(context.history.turns[context.window_start:]),
            self.settings.summary_chars)
        facts = {f.key: f for f in context.preload.facts}
        for fact in context.facts.values():
            facts.pop(fact.key, None)
            facts[fact.key] = Fact(fact.key, fact.value, None)
        name = facts["name"].value if "name" in facts else context.preload.name
        self._preload = Preload(name, summary if context.history.turns else
                                context.preload.last_session, list(facts.values()))
        now = self._now()

        def close(store: MemoryStore) -> None:
            row = store.session(session_id)
            if row is not None:
                lifecycle.close_session(store, row, now, self.settings.summary_chars, summary)
            consolidate(store, now)  # sleep-time work: the session just ended

        self._submit(close, "close session")
        self._closed.append(context.history)
        self.context = self._new_context(self._preload)
        self.session_id = None

    # -- history ------------------------------------------------------------------------------

    def add_user(self, text: str) -> None:
        """A user turn (joined to a user turn right before it, as in `History`)."""
        history = self.history
        history.add_user(text)
        seq = len(history.turns) - 1
        self._put_turn(seq, history.turns[seq])
        heard, self._last_heard = self._last_heard, ""
        if heard:
            self._add_facts(self._facts_in(confirmed_facts, heard, text), seq, "agent-confirmed")
        self._add_facts(self._facts_in(self._extract, text), seq, "user")
        self._fold_if_overdue()

    def add_tool(self, call: ToolCall, result: str) -> Turn:
        turn = self.history.add_tool(call, result)
        seq = len(self.history.turns) - 1
        self._put_turn(seq, turn)
        self._add_facts(self._facts_in(self._extract, result), seq, "tool")
        return turn

    def add_finalize(self, finalize: Finalize) -> Turn | None:
        """Record a unit's Finalize (the unit row) and its heard text as a turn."""
        session_id = self.session_id
        if session_id is not None:
            row: UnitRow = {
                "session_id": session_id, "unit_id": finalize.unit_id, "state": "final",
                "seq": self._unit_seq, "generated": finalize.generated, "heard": finalize.heard,
                "played_ms": finalize.played_ms, "inexact_words": finalize.inexact_words,
                "words": dumps(unit_words(finalize)), "updated_at": self._now()}
            self._submit(lambda s: s.put_unit(row), f"finalize {finalize.unit_id}")
        self._unit_seq += 1
        turn = self.history.add_finalize(finalize)
        if turn is not None:
            self._put_turn(len(self.history.turns) - 1, turn)
            self._last_heard = turn.text
            self._fold_if_overdue()
        return turn

    def checkpoint(self, unit_id: str, generated: str, heard: str, played_ms: int) -> None:
        """Where a playing unit is: a crash recovers it with this heard prefix (cheap write:
        not synced to disk on its own)."""
        session_id = self.session_id
        if session_id is None:
            return
        row: UnitRow = {"session_id": session_id, "unit_id": unit_id, "state": "playing",
               "generated": generated, "heard": heard, "played_ms": played_ms,
               "updated_at": self._now()}
        self._submit(lambda s: s.put_unit(row), f"checkpoint {unit_id}", durable=False)

    def messages(self, pending_user: str | None = None, note: str = "") -> list[ChatMessage]:
        return self.context.messages(pending_user, note)

    async def flushed(self) -> None:
        if self.writer is not None:
            await self.writer.flushed()

    # -- folding ------------------------------------------------------------------------------

    def fold_due(self) -> bool:
        return self._ready is None and self.context.fold_due() is not None

    async def fold(self, run_on_model: RunOnModel) -> None:
        """Summarize the next block on the model's thread, preempted by `stop_background`
        (speech began, a reply wants the model: the caller clears it before, in the same step
        as it decides to fold); the result waits in `ready` until `apply_ready_fold`."""
        context = self.context
        due = context.fold_due()
        if due is None:
            return
        first, end = due
        lines = heard_lines(context.history.turns[first:end])
        try:
            summary = await run_on_model(self._summarizer.summarize, context.summary, lines,
                                         self.stop_background)
        except SummaryPreempted:
            return
        except Exception as exc:  # the summarizer is swappable code; a failure costs nothing
            self._failed_folds += 1
            if self._failed_folds == 1:
                self._log.publish(Notice(f"memory: the summarizer failed ({type(exc).__name__}: "
                                         f"{exc}); facts are kept, it will be retried"))
            return
        self._failed_folds = 0
        if context is self.context:
            self._ready = _ReadyFold(context, first, end, summary)

    def apply_ready_fold(self) -> bool:
        """Move the window one step (call only while idle); True if the prompt changed."""
        ready, self._ready = self._ready, None
        if ready is None or ready.context is not self.context:
            return False
        self._apply(ready.first, ready.end, ready.summary)
        return True

    def _fold_if_overdue(self) -> None:
        """The window is a whole block past its size (the summarizer could not keep up): fold
        at once with the extractive summary; the facts are kept either way."""
        context = self.context
        if not context.overdue():
            return
        due = context.fold_due()
        if due is None:
            return
        first, end = due
        self._ready = None
        summary = self._extractive.summarize(
            context.summary, heard_lines(context.history.turns[first:end]), threading.Event())
        self._apply(first, end, summary)

    def _apply(self, first: int, end: int, summary: Summary) -> None:
        context, session_id = self.context, self.session_id
        for key, value in summary.facts:
            fact = Fact(key, value, None)
            if key not in context.facts:
                context.add_fact(fact)
                self._store_fact(fact, "summary")
        context.apply_fold(end, summary.text)
        if session_id is None:
            return
        row: SummaryRow = {"session_id": session_id, "kind": "running", "first_seq": first,
               "last_seq": end - 1, "text": summary.text, "at": self._now()}
        self._submit(lambda s: s.add_summary(row), "running summary")

    # -- recording ----------------------------------------------------------------------------

    def _facts_in(self, extract: Callable[..., list[FactCandidate]], *text: str
                  ) -> list[FactCandidate]:
        """Facts by rules; a rule that breaks costs its facts, never the turn (said once)."""
        try:
            return extract(*text)
        except Exception as exc:
            if not self._extract_failed:
                self._extract_failed = True
                self._log.publish(Notice(f"memory: fact extraction failed ({type(exc).__name__}: "
                                         f"{exc}); the turn is kept"))
            return []

    def _add_facts(self, found: list[FactCandidate], seq: int, source: str) -> None:
        for candidate in found:
            fact = Fact(candidate.key, candidate.value, seq)
            self.context.add_fact(fact)
            self._store_fact(fact, source)

    def _store_fact(self, fact: Fact, source: str) -> None:
        row: FactRow = {"identity": self.settings.identity, "session_id": self.session_id,
               "key": fact.key, "value": fact.value, "source": source,
               "source_seq": fact.source_seq, "at": self._now(),
               "expires_at": expires_at(fact.key, self._wall())}
        self._submit(lambda s: s.add_fact(row), f"fact {fact.key}")

    def _put_turn(self, seq: int, turn: Turn) -> None:
        session_id = self.session_id
        if session_id is None:
            return
        call = turn.tool_call
        now = self._now()
        row: TurnRow = {"session_id": session_id, "seq": seq, "role": turn.role, "heard": turn.text,
               "generated": turn.generated if turn.role == "assistant" else None,
               "unit_id": turn.unit_id, "at": now,
               "tool_call_id": call.call_id if call else None,
               "tool_name": call.name if call else None,
               "tool_arguments": call.arguments if call else None}

        def put(store: MemoryStore) -> None:
            store.put_turn(row)
            store.update_session(session_id, {"last_active_at": now})

        self._submit(put, f"turn {seq}")

    def _on_event(self, entry: LoggedEvent) -> None:
        if self.session_id is None:
            self._pending_events.append(entry)
            return
        self._record_event(entry, self.session_id)

    def _flush_pending_events(self) -> None:
        pending, self._pending_events = self._pending_events, []
        for entry in pending:
            self._record_event(entry, self.session_id)

    def _record_event(self, entry: LoggedEvent, session_id: str | None) -> None:
        event = entry.event
        if isinstance(event, LlmRequest):
            request: LlmRequestRow = {"session_id": session_id, "turn": event.turn, "hop": event.hop,
                       "messages": dumps(list(event.messages)), "at": self._now()}
            self._submit(lambda s: s.add_llm_request(request), "llm request")
            return
        row: EventRow = {"session_id": session_id, "run_id": self.run_id, "at": round(entry.at, 4),
               "type": type(event).__name__, "data": dumps(entry.to_json())}
        self._submit(lambda s: s.add_event(row), "event", durable=False)

    def _submit(self, apply: Callable[[MemoryStore], object], what: str,
                durable: bool = True) -> None:
        if self.writer is not None:
            self.writer.submit(apply, durable=durable, what=what)

    def _new_context(self, preload: Preload) -> MemoryContext:
        return MemoryContext(self.settings.system_prompt, self.settings.marker,
                             self.settings.window, preload)

    def _now(self) -> str:
        return iso(self._wall())
