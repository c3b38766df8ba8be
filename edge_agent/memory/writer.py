"""The loop's side of the memory database: writes are queued (the loop never waits on disk)
and committed in order on the store's owner thread, a batch per transaction.

A write that fails for a reason that may pass (disk full, database locked, an I/O error) is
kept and retried with backoff; the conversation goes on from memory and one warning is given
per failure spell. A write the database refuses outright (a bug, or a row another program
deleted under us: every later write of that session fails its foreign key) is dropped, so it
cannot block every later write, and reported once per spell of refusals too: the warning is a
Notice, which is itself recorded, and its write would be refused for the same reason: a warning
per refusal fed itself (155 000 lines in 38 s).
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from edge_agent.clock import Clock
from edge_agent.memory.store import MemoryStore
from edge_agent.owner import Owner

T = TypeVar("T")
RETRY_SECONDS = (0.25, 0.5, 1.0, 2.0, 5.0)


@dataclass(frozen=True)
class _Write:
    apply: Callable[[MemoryStore], object]
    durable: bool
    what: str


class StoreWriter:
    def __init__(self, store: MemoryStore, owner: Owner, clock: Clock,
                 warn: Callable[[str], None]) -> None:
        self.store = store
        self._owner = owner
        self._clock = clock
        self._warn = warn
        self._pending: deque[_Write] = deque()
        self._submitted = 0
        self._committed = 0
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._pump: asyncio.Task[None] | None = None
        self.failing = False
        """True while writes fail and are being retried."""
        self.refused = 0
        """Writes the database refused (dropped) since the last one it took."""

    def submit(self, apply: Callable[[MemoryStore], object], *, durable: bool, what: str) -> None:
        """Queue a write; it is committed after every write submitted before it."""
        self._pending.append(_Write(apply, durable, what))
        self._submitted += 1
        if self._pump is None or self._pump.done():
            self._pump = asyncio.get_running_loop().create_task(self._drain(), name="store")

    async def flushed(self) -> None:
        """Wait until everything submitted so far is committed. While writes are failing this
        returns at once: the conversation goes on and the writes keep being retried."""
        if self._committed >= self._submitted or self.failing:
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((self._submitted, waiter))
        await waiter

    async def read(self, query: Callable[[MemoryStore], T]) -> T:
        """Run a read on the store's thread, after the writes queued before it."""
        await self.flushed()
        return await self._owner.call(query, self.store)

    async def close(self, wait_s: float = 5.0) -> None:
        """Commit what is queued (waiting at most `wait_s` while writes fail), then close."""
        deadline = self._clock.now() + wait_s
        while self._pending and self._clock.now() < deadline:
            await self._clock.sleep(0.05)
        if self._pump is not None:
            self._pump.cancel()
        if self._pending:
            self._warn(f"memory: {len(self._pending)} write(s) could not be committed before "
                       "the agent stopped")
        await self._owner.call(self.store.close)

    async def _drain(self) -> None:
        attempt = 0
        while self._pending:
            batch = list(self._pending)
            durable = any(write.durable for write in batch)
            try:
                await self._owner.call(self._commit, batch, durable)
            except sqlite3.OperationalError as exc:
                if not self.failing:
                    self.failing = True
                    self._release_waiters()
                    self._warn(f"memory: writing to {self.store.path} failed ({exc}); the "
                               "conversation goes on, the writes are kept and retried")
                await self._clock.sleep(RETRY_SECONDS[min(attempt, len(RETRY_SECONDS) - 1)])
                attempt += 1
                continue
            except Exception:
                await self._commit_one_by_one(batch)
            else:
                self._done(len(batch))
                self._took_one()
            attempt = 0
            if self.failing:
                self.failing = False
                self._warn("memory: writes succeed again; nothing was lost")

    async def _commit_one_by_one(self, batch: list[_Write]) -> None:
        for write in batch:
            try:
                await self._owner.call(self._commit, [write], write.durable)
            except sqlite3.OperationalError:
                return  # the disk again: the drain loop retries what is left
            except Exception as exc:
                self.refused += 1
                if self.refused == 1:
                    self._warn(f"memory: dropped a write the database refused ({write.what}: "
                               f"{type(exc).__name__}: {exc}); the conversation goes on, and "
                               "further refused writes are dropped without a word until one "
                               "is taken again")
            else:
                self._took_one()
            self._done(1)

    def _took_one(self) -> None:
        """A write was committed: a spell of refusals (if any) is over."""
        if self.refused:
            refused, self.refused = self.refused, 0
            self._warn(f"memory: writes are taken again; {refused} refused write(s) were "
                       "dropped")

    def _commit(self, batch: list[_Write], durable: bool) -> None:
        with self.store.transaction(durable):
            for write in batch:
                write.apply(self.store)

    def _done(self, count: int) -> None:
        for _ in range(count):
            self._pending.popleft()
        self._committed += count
        self._release_waiters()

    def _release_waiters(self) -> None:
        still: list[tuple[int, asyncio.Future[None]]] = []
        for target, waiter in self._waiters:
            if self._committed >= target or self.failing:
                if not waiter.done():
                    waiter.set_result(None)
            else:
                still.append((target, waiter))
        self._waiters = still
