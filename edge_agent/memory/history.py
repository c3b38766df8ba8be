"""Heard history: what the listener heard and what the model generated, side by side.

The marker that tells the model its turn was cut is added only when a prompt is assembled
(`memory.context`), never stored.
"""

from __future__ import annotations

from dataclasses import dataclass

from edge_agent.engines.base import ToolCall
from edge_agent.heard.ledger import Finalize


@dataclass
class Turn:
    """One turn of the conversation."""

    role: str
    """"user", "assistant" or "tool"."""
    text: str
    """For the user: the transcript. For the assistant: the heard prefix, verbatim. For a
    tool: the result the model was given."""
    generated: str = ""
    """Assistant only: everything the model generated for the unit."""
    unit_id: str | None = None
    """Assistant only: the speech unit this turn came from."""
    tool_call: ToolCall | None = None
    """Tool only: the call the model made (the action happened, heard or not)."""

    @property
    def interrupted(self) -> bool:
        return self.role == "assistant" and self.text != self.generated


class History:
    def __init__(self) -> None:
        self.turns: list[Turn] = []

    def add_user(self, text: str) -> None:
        """Add a user turn; one that follows another user turn directly joins it."""
        self.turns = History.with_user(self.turns, text)

    @staticmethod
    def with_user(turns: list[Turn], text: str) -> list[Turn]:
        """`turns` with a user turn added (joined to a user turn at the end), as a new list."""
        if turns and turns[-1].role == "user":
            joined = Turn("user", f"{turns[-1].text} {text}".strip())
            return [*turns[:-1], joined]
        return [*turns, Turn("user", text)]

    def add_tool(self, call: ToolCall, result: str) -> Turn:
        turn = Turn("tool", result, tool_call=call)
        self.turns.append(turn)
        return turn

    def add_finalize(self, finalize: Finalize) -> Turn | None:
        """Record a unit's Finalize; a unit nobody heard leaves no assistant turn."""
        if not finalize.heard.strip():
            return None
        turn = Turn("assistant", finalize.heard, finalize.generated, finalize.unit_id)
        self.turns.append(turn)
        return turn

