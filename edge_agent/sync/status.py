"""What `edge-agent sync status` reports, read from the kiosk's own database alone (the queue
and how the last sends went): it answers at once even while the venue is down, and needs no
PostgreSQL client."""

from __future__ import annotations

import time
from typing import TypedDict

from edge_agent.config import Config
from edge_agent.memory.schema import QUEUE_DELETIONS, QUEUE_OFF
from edge_agent.sync.outbox import Outbox


class Refusal(TypedDict):
    table: str
    key: str
    reason: str
    """What the venue's store said."""


class SyncStatusRecord(TypedDict):
    """`edge-agent sync status --json`."""

    url: str | None
    """The venue's store the queue is for (no password); None: never switched on."""
    kiosk_id: str | None
    queue: str
    """"off" (no [sync] url), "on", or "deletions only" (over sync.max_backlog)."""
    waiting: int
    """Rows waiting to be sent."""
    oldest_waiting_s: float | None
    """Age of the oldest waiting change, seconds."""
    refused: int
    """Rows the venue refused, set aside (`sync --once --resend-refused` tries them again)."""
    refusals: list[Refusal]
    """The first few of them."""
    sent_rows: int
    """Rows sent since the queue was switched on."""
    last_attempt_at: str | None
    last_success_at: str | None
    last_error: str | None
    last_error_at: str | None
    failures: int
    """Sends that failed in a row since the last success."""
    pulled_at: str | None
    """When the venue's facts and profile of this identity were last read."""


def status_record(config: Config) -> SyncStatusRecord:
    """The queue of the database `config` names, and how its last sends went."""
    outbox = Outbox.open(config.db_path)
    try:
        backlog = outbox.backlog()
        refusals = outbox.refusals()
    finally:
        outbox.close()
    control = backlog.control
    queue = {QUEUE_OFF: "off", QUEUE_DELETIONS: "deletions only"}.get(backlog.queue, "on")
    return {
        "url": control["url"], "kiosk_id": control["kiosk_id"], "queue": queue,
        "waiting": backlog.waiting,
        "oldest_waiting_s": (round(max(0.0, time.time() - backlog.oldest_at), 1)
                             if backlog.oldest_at is not None else None),
        "refused": backlog.refused,
        "refusals": [{"table": r["tbl"], "key": r["key"], "reason": r["refused"]}
                     for r in refusals],
        "sent_rows": int(control["sent_rows"]), "last_attempt_at": control["last_attempt_at"],
        "last_success_at": control["last_success_at"], "last_error": control["last_error"],
        "last_error_at": control["last_error_at"], "failures": int(control["failures"]),
        "pulled_at": control["pulled_at"],
    }
