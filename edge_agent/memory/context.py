"""The hot cache: everything the next prompt is assembled from, held in memory.

A prompt is the system prompt with the memory block (profile, last session's summary, the
running summary, facts), then the verbatim window of heard turns. Assembling it reads no disk
and calls no model.

The window moves in steps. While it holds at most `window_turns` turns it only grows, so every
prompt starts with the previous one (llama.cpp reuses the evaluated prefix). When it grows
past that, a block of at least `fold_turns` of its oldest turns is folded into the running
summary in the background; the window start, the summary and the facts move together, in one
step, when the summary is ready. So the prompt's start changes once per step, not once per
turn. Facts from turns still in the window are not repeated in the block (the turn is there,
verbatim); they enter the block when their turn is folded, so the block too changes only at a
step.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from edge_agent.engines.base import ChatMessage, ToolCall
from edge_agent.memory.history import History, Turn

KEY_NAMES = {"booking_id": "booking id", "account_id": "account id", "order_id": "order id",
             "party_size": "party size"}


@dataclass(frozen=True)
class Fact:
    """A fact the prompt carries until a newer value replaces it."""

    key: str
    """What it is ("name", "phone", "booking_id", ...)."""
    value: str
    """Its value as stated."""
    source_seq: int | None
    """The turn of this session it came from; None for facts known before the session."""


@dataclass
class Preload:
    """What a session starts knowing: the newest writeback of earlier sessions."""

    name: str = ""
    """The identity's stated name, if any."""
    last_session: str = ""
    """The previous session's end-of-session summary."""
    facts: list[Fact] = field(default_factory=list)
    """Open facts of the identity."""


@dataclass(frozen=True)
class WindowSettings:
    window_turns: int
    """Verbatim turns the window holds before a block is folded."""
    fold_turns: int
    """Turns folded in one step (at least)."""
    max_facts: int
    """Facts carried in the prompt (the newest per key, then the newest keys)."""


class MemoryContext:
    """One session's hot cache."""

    def __init__(self, system_prompt: str, marker: str, settings: WindowSettings,
                 preload: Preload | None = None) -> None:
        self.system_prompt = system_prompt
        self.marker = marker
        self.settings = settings
        self.history = History()
        self.preload = preload or Preload()
        self.window_start = 0
        """Index of the first turn still verbatim in the prompt."""
        self.summary = ""
        """The running summary of the turns before `window_start`."""
        self.facts: dict[str, Fact] = {}
        """This session's facts, newest value per key."""
        self._system: str | None = None

    @property
    def window(self) -> list[Turn]:
        return self.history.turns[self.window_start:]

    def add_fact(self, fact: Fact) -> None:
        self.facts.pop(fact.key, None)
        self.facts[fact.key] = fact  # re-inserted: the newest key comes last
        if fact.source_seq is None or fact.source_seq < self.window_start:
            self._system = None

    def messages(self, pending_user: str | None = None, note: str = "") -> list[ChatMessage]:
        """The next request's messages; `pending_user`: a user turn not in history yet;
        `note`: put before the last user turn's words (the venue's information for it: only
        in this request, never in history, so the prompt's prefix stays as it was)."""
        turns = self.window
        if pending_user is not None:
            turns = History.with_user(turns, pending_user)
        messages: list[ChatMessage] = []
        system = self.system_text()
        if system:
            messages.append({"role": "system", "content": system})
        for turn in turns:
            if turn.tool_call is not None:
                messages.extend(_tool_messages(turn.tool_call, turn.text))
                continue
            content = turn.text + self.marker if turn.interrupted and self.marker else turn.text
            messages.append({"role": turn.role, "content": content})
        if note:
            last = max((i for i, m in enumerate(messages) if m["role"] == "user"), default=None)
            if last is not None:
                messages[last] = {**messages[last],
                                  "content": f"{note}\n\n{messages[last]['content']}"}
        return messages

    def stable_messages(self) -> list[ChatMessage]:
        """The part of every prompt that only changes at a step (for a saved prefix state)."""
        system = self.system_text()
        return [{"role": "system", "content": system}] if system else []

    def system_text(self) -> str:
        if self._system is None:
            self._system = self._render_system()
        return self._system

    def _render_system(self) -> str:
        lines: list[str] = []
        if self.preload.name:
            lines.append(f"The visitor's name: {self.preload.name}.")
        if self.preload.last_session:
            lines.append(f"Their previous visit: {self.preload.last_session}")
        if self.summary:
            lines.append(f"Earlier in this conversation: {self.summary}")
        facts = self.visible_facts()
        if facts:
            lines.append("Facts: " + "; ".join(
                f"{KEY_NAMES.get(f.key, f.key.replace('_', ' '))}: {f.value}" for f in facts) + ".")
        if not lines:
            return self.system_prompt
        block = "\n".join(["Memory (what you know; do not recite it unless asked):", *lines])
        return f"{self.system_prompt}\n\n{block}" if self.system_prompt else block

    def visible_facts(self) -> list[Fact]:
        """Facts in the memory block: known before this session, or from folded turns; a
        session fact replaces an older value of its key."""
        shown: dict[str, Fact] = {f.key: f for f in self.preload.facts}
        for fact in self.facts.values():
            if fact.source_seq is None or fact.source_seq < self.window_start:
                shown.pop(fact.key, None)
                shown[fact.key] = fact
        return list(shown.values())[-self.settings.max_facts:]

    def fold_due(self) -> tuple[int, int] | None:
        """(start, end) of the turns to fold next, when the window has grown past its size."""
        turns = self.history.turns
        excess = len(turns) - self.window_start - self.settings.window_turns
        if excess <= 0:
            return None
        end = self.window_start + max(self.settings.fold_turns, excess)
        # The window should start at a user turn: a template may refuse anything else first.
        while end < len(turns) - 1 and turns[end].role != "user":
            end += 1
        return self.window_start, min(end, len(turns) - 1)

    def overdue(self) -> bool:
        """The window is a whole block past its size: fold now, without waiting for a model."""
        limit = self.settings.window_turns + self.settings.fold_turns
        return len(self.history.turns) - self.window_start > limit

    def apply_fold(self, end: int, summary: str) -> None:
        """One step: turns before `end` leave the window; `summary` covers them."""
        self.window_start = max(self.window_start, end)
        self.summary = summary
        self._system = None


def heard_lines(turns: Sequence[Turn]) -> list[tuple[str, str]]:
    """(role, text) of turns as the listener heard them: the input of every summary."""
    lines: list[tuple[str, str]] = []
    for turn in turns:
        if turn.tool_call is not None:
            lines.append(("tool", f"{turn.tool_call.name}({turn.tool_call.arguments}) -> "
                                  f"{turn.text}"))
        elif turn.text.strip():
            lines.append((turn.role, turn.text))
    return lines


def _tool_messages(call: ToolCall, result: str) -> list[ChatMessage]:
    """A call and its result, as the model's chat template expects them."""
    return [
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": call.call_id, "type": "function",
             "function": {"name": call.name, "arguments": call.arguments}}]},
        {"role": "tool", "tool_call_id": call.call_id, "content": result},
    ]
