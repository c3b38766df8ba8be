"""The session record: what was said, what each unit generated and what was heard."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from edge_agent.events import EventLog, LlmRequest, UnitFinalized
from edge_agent.heard.ledger import Finalize
from edge_agent.memory.history import History, Turn


def unit_record(finalize: Finalize) -> dict[str, Any]:
    rate = finalize.sample_rate

    def ms(sample: int) -> int:
        return round(sample * 1000 / rate)

    return {
        "unit_id": finalize.unit_id,
        "generated": finalize.generated,
        "heard": finalize.heard,
        "interrupted": finalize.interrupted,
        "played_ms": finalize.played_ms,
        "inexact_words": finalize.inexact_words,
        "words": [
            {"text": w.text, "start_ms": ms(w.start_sample), "end_ms": ms(w.end_sample),
             **({} if w.exact else {"exact": False})}
            for w in finalize.words
        ],
    }


def _turn_record(turn: Turn) -> dict[str, Any]:
    if turn.tool_call is not None:
        return {"role": "tool", "name": turn.tool_call.name,
                "arguments": turn.tool_call.arguments, "result": turn.text}
    if turn.role == "assistant":
        return {"role": "assistant", "text": turn.text, "generated": turn.generated,
                "unit_id": turn.unit_id, "interrupted": turn.interrupted}
    return {"role": turn.role, "text": turn.text}


def session_record(session_id: str, histories: Sequence[History], log: EventLog,
                   engines: dict[str, str]) -> dict[str, Any]:
    """The run's record; `histories` holds one history per conversation session, in order."""
    return {
        "session_id": session_id,
        "engines": engines,
        "turns": [{**_turn_record(t), "session": number}
                  for number, history in enumerate(histories, 1) for t in history.turns],
        "units": [unit_record(e.event.finalize)
                  for e in log.entries if isinstance(e.event, UnitFinalized)],
        "llm_requests": [
            {"turn": e.event.turn, "hop": e.event.hop, "messages": list(e.event.messages)}
            for e in log.entries if isinstance(e.event, LlmRequest)
        ],
        "events": [e.to_json() for e in log.entries if not isinstance(e.event, LlmRequest)],
    }
