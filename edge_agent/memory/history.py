"""Heard history and prompt assembly.

History keeps what the listener heard and what the model generated side by side. The marker
that tells the model its turn was cut is added only when a prompt is assembled.
"""

from __future__ import annotations

from dataclasses import dataclass

from edge_agent.engines.base import ChatMessage
from edge_agent.heard.ledger import Finalize


@dataclass
class Turn:
    """One turn of the conversation."""

    role: str
    """"user" or "assistant"."""
    text: str
    """For the user: the transcript. For the assistant: the heard prefix, verbatim."""
    generated: str = ""
    """Assistant only: everything the model generated for the unit."""
    unit_id: str | None = None
    """Assistant only: the speech unit this turn came from."""

    @property
    def interrupted(self) -> bool:
        return self.role == "assistant" and self.text != self.generated


class History:
    def __init__(self) -> None:
        self.turns: list[Turn] = []

    def add_user(self, text: str) -> None:
        """Add a user turn; one that follows another user turn directly joins it."""
        if self.turns and self.turns[-1].role == "user":
            self.turns[-1].text = f"{self.turns[-1].text} {text}".strip()
        else:
            self.turns.append(Turn("user", text))

    def add_finalize(self, finalize: Finalize) -> Turn | None:
        """Record a unit's Finalize; a unit nobody heard leaves no assistant turn."""
        if not finalize.heard.strip():
            return None
        turn = Turn("assistant", finalize.heard, finalize.generated, finalize.unit_id)
        self.turns.append(turn)
        return turn


def assemble_prompt(
    system_prompt: str, turns: list[Turn], window: int, marker: str
) -> list[ChatMessage]:
    """System prompt, then the last `window` turns, stable text first."""
    messages: list[ChatMessage] = []
    if system_prompt:
        messages.append({"role": "system", "content": system_prompt})
    for turn in turns[-window:] if window > 0 else []:
        content = turn.text + marker if turn.interrupted and marker else turn.text
        messages.append({"role": turn.role, "content": content})
    return messages
