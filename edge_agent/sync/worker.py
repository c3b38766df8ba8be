"""The sync's own thread: it sends the queue to the venue's PostgreSQL in batches, reads this
identity's facts and profile back, and waits; the conversation's loop never waits on it.

A pass connects if it must (creating or migrating the venue's schema), sends batches until the
queue is empty, then, at most every `PULL_S`, takes the venue's newer facts and profile. Any
failure (unreachable, dropped mid-batch, restarted, credentials, a newer schema) ends the pass:
the batch's transaction never committed, so its rows are still queued, and the next pass sends
them again (upserts: nothing is stored twice). Passes that fail wait longer each time, up to
`MAX_WAIT_S`. A row the store refuses (`central.refuses_row`: bad data, a broken constraint,
a value over one of the store's limits, such as an index entry's size) is set aside in the
queue with the SQLSTATE and the reason, so it cannot hold up the rows after it; `sync status`
lists it.

One line (`notify`) says when the store stops answering, when it answers again, and when the
backlog passes `[sync] max_backlog`: once per change, never per attempt.
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psycopg

from edge_agent import __version__
from edge_agent.config import ANONYMOUS
from edge_agent.errors import SyncError
from edge_agent.memory.conversation_memory import iso, utc_now
from edge_agent.printable import shown
from edge_agent.sync import central
from edge_agent.sync.central import Credentials
from edge_agent.sync.outbox import Change, Outbox

log = logging.getLogger("edge_agent")

PULL_S = 30.0
"""The venue's facts and profile of this identity are read at most this often."""
MAX_WAIT_S = 60.0
"""The longest wait between passes while the store keeps failing."""


@dataclass(frozen=True)
class SyncSettings:
    credentials: Credentials
    identity: str
    """Whose facts and profile come back (`[memory] identity`; none for "anonymous": a shared
    kiosk's callers are nobody in particular, and one caller's phone number must not reach the
    next caller at another kiosk)."""
    interval_s: float
    batch_rows: int
    max_backlog: int


@dataclass
class SyncPass:
    """What one pass did."""

    sent: int = 0
    """Rows stored in the venue."""
    batches: int = 0
    taken: int = 0
    """Facts taken from other kiosks."""
    refused: int = 0
    """Rows the venue refused this pass (set aside in the queue)."""
    lags_s: list[float] = field(default_factory=list)
    """For each row sent: seconds from its last change here to its commit there."""
    error: SyncError | None = None
    waiting: int = 0
    """Rows still queued after the pass."""


class VenueSync:
    def __init__(self, settings: SyncSettings, outbox: Outbox,
                 notify: Callable[[str], None] = lambda text: None,
                 on_taken: Callable[[], None] = lambda: None,
                 wall: Callable[[], float] = time.time,
                 on_pass: Callable[[SyncPass], None] = lambda done: None) -> None:
        self.settings = settings
        self.outbox = outbox
        self._notify = notify
        self._on_taken = on_taken
        self._on_pass = on_pass
        """Told of every pass the thread makes (the scale benchmark's lags)."""
        self._wall = wall
        self._connection: psycopg.Connection[Any] | None = None
        self._failing: SyncError | None = None
        self._pulled_at = float("-inf")
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> str:
        return self.settings.credentials.address.shown

    def prepare_queue(self) -> bool:
        """Queue every change from now on; the first time (or for another store or kiosk id)
        every row: True then."""
        return self.outbox.switch_on(self.address, self.settings.credentials.kiosk_id)

    def start(self) -> None:
        """`prepare_queue`, then sync in a thread."""
        self.prepare_queue()
        self._thread = threading.Thread(target=self._run, name="venue-sync", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop after the batch on its way (what is left stays queued for the next run)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(2 * self.settings.credentials.timeout_ms / 1000 + 1)
        self._disconnect()
        self.outbox.close()

    def _run(self) -> None:
        wait = self.settings.interval_s
        while not self._stop.is_set():
            try:
                result = self.run_once(pull=self._wall() - self._pulled_at >= PULL_S)
            except Exception as exc:  # the kiosk's own database (locked, full): next pass
                log.warning("sync: the pass failed on this kiosk's database: %s", exc)
                result = SyncPass(error=SyncError(str(self.outbox.store.path), str(exc),
                                                  "check the data dir's disk"))
            self._on_pass(result)
            wait = (min(MAX_WAIT_S, max(wait * 2, self.settings.interval_s))
                    if result.error else self.settings.interval_s)
            self._stop.wait(wait)

    def run_once(self, *, pull: bool = True) -> SyncPass:
        """Send the whole queue (stopping early only when asked to stop), then read the venue's
        memory of this identity if `pull`."""
        done = SyncPass()
        try:
            connection = self._connected()
            central.check_version(connection, self.settings.credentials.address)
            while not self._stop.is_set():
                batch = self.outbox.batch(self.settings.batch_rows)
                if not batch:
                    break
                self._send(connection, batch, done)
            if pull and self.settings.identity != ANONYMOUS:
                self._pull(connection, done)
        except SyncError as exc:
            done.error = exc
        except psycopg.Error as exc:
            done.error = central.unreachable(self.settings.credentials.address, exc)
        except sqlite3.Error as exc:  # the kiosk's side: the rows stay queued all the same
            done.error = SyncError(str(self.outbox.store.path), f"its queue cannot be read or "
                                   f"trimmed ({exc})", "check the data dir's disk; the next "
                                   "pass tries again")
        if done.error is not None:
            self._disconnect()
            with contextlib.suppress(sqlite3.Error):
                self.outbox.failed(str(done.error.reason), _now())
        elif done.batches == 0:
            self.outbox.attempted(_now())
        self._report(done)
        return done

    def _connected(self) -> psycopg.Connection[Any]:
        if self._connection is None or self._connection.closed:
            connection = central.connect(self.settings.credentials)
            try:
                central.prepare(connection, self.settings.credentials.address,
                                self.settings.credentials.kiosk_id, self.outbox.database_id,
                                __version__)
            except BaseException:
                connection.close()
                raise
            self._connection = connection
        return self._connection

    def _disconnect(self) -> None:
        if self._connection is not None:
            with contextlib.suppress(psycopg.Error):
                self._connection.close()
            self._connection = None

    def _send(self, connection: psycopg.Connection[Any], batch: list[Change],
              done: SyncPass) -> None:
        kiosk = self.settings.credentials.kiosk_id
        try:
            central.send(connection, kiosk, batch)
            accepted = batch
        except psycopg.Error as exc:
            if not central.refuses_row(exc):
                raise
            accepted = []  # one row is bad: find which, row by row, and set it aside
            for change in batch:
                try:
                    central.send(connection, kiosk, [change])
                    accepted.append(change)
                except psycopg.Error as refusal:
                    if not central.refuses_row(refusal):
                        raise
                    said = shown(" ".join(str(refusal).split()), 300)
                    reason = f"{refusal.sqlstate}: {said}" if refusal.sqlstate else said
                    self.outbox.refuse(change, reason)
                    done.refused += 1
                    log.warning("sync: the venue's store refused %s %s: %s", change.table,
                                change.key, reason)
        committed = self._wall()
        if accepted:
            self.outbox.sent(accepted, _now())
        done.sent += len(accepted)
        done.batches += 1
        done.lags_s += [max(0.0, committed - change.changed_at) for change in accepted]

    def _pull(self, connection: psycopg.Connection[Any], done: SyncPass) -> None:
        facts, profile = central.venue_memory(connection, self.settings.credentials.kiosk_id,
                                              self.settings.identity)
        done.taken = self.outbox.take_venue_memory(self.settings.identity, facts, profile, _now())
        self._pulled_at = self._wall()
        if done.taken:
            self._on_taken()

    def _report(self, done: SyncPass) -> None:
        backlog = self.outbox.backlog()
        done.waiting = backlog.waiting
        if done.error is not None and self._failing is None:
            self._notify(f"sync: the venue's store cannot be used ({done.error}); "
                         f"{done.waiting} change(s) wait here and are sent when it answers")
        elif done.error is None and self._failing is not None:
            self._notify(f"sync: the venue's store {self.address} answers again; "
                         f"{done.sent} waiting change(s) sent, nothing was lost")
        self._failing = done.error
        if self.outbox.bound(self.settings.max_backlog):
            self._notify(f"sync: {done.waiting} changes wait for {self.address}, the bound "
                         "(sync.max_backlog); new changes are no longer queued one by one: "
                         "every row is sent again once the store answers, so nothing is lost")


def _now() -> str:
    return iso(utc_now())
