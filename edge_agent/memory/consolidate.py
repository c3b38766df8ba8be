"""Sleep-time consolidation of the fact ledger: merge duplicates, newest wins on a
contradiction (the older row is kept, superseded), expired facts are dropped.

Run by the agent when a session starts, on its writer, and by `edge-agent memory consolidate`,
which takes the database's writer lock (so it is refused while an agent writes the database).
It is one write transaction: WAL readers are never blocked by it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from edge_agent.memory.store import MemoryStore, Row

TRANSIENT_DAYS: dict[str, float] = {"time": 7.0, "date": 7.0, "party_size": 7.0}
"""Facts about one visit (when, how many) expire after this many days; names, phone numbers,
emails and ids never do."""


def expires_at(key: str, now: datetime) -> str | None:
    """When a fact with `key` stated at `now` expires (ISO), or None."""
    days = TRANSIENT_DAYS.get(key)
    return None if days is None else (now + timedelta(days=days)).isoformat(timespec="milliseconds")


@dataclass(frozen=True)
class Consolidation:
    merged: int
    """Open facts that repeated another open fact's value (now superseded by it)."""
    resolved: int
    """Open facts an open newer value of the same key contradicted (kept, superseded)."""
    expired: int
    """Facts past their expiry, deleted."""


def consolidate(store: MemoryStore, now: str) -> Consolidation:
    """Run inside a write transaction (the caller's)."""
    merged = resolved = 0
    by_key: dict[tuple[str, str], list[Row]] = {}
    for fact in store.open_facts():
        by_key.setdefault((str(fact["identity"]), str(fact["key"])), []).append(fact)
    for facts in by_key.values():
        newest = facts[-1]
        for older in facts[:-1]:
            if _same(older["value"], newest["value"]):
                merged += 1
            else:
                resolved += 1
            store.supersede_fact(older["id"], newest["id"])
    # The values an expired fact replaced are older, so they expired too: none comes back.
    return Consolidation(merged, resolved, store.delete_expired_facts(now))


def _same(a: object, b: object) -> bool:
    return " ".join(str(a).lower().split()) == " ".join(str(b).lower().split())
