"""Time, injected. Everything that reads or waits on time takes a Clock."""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import Callable
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float:
        """Monotonic seconds."""
        ...

    async def sleep(self, seconds: float) -> None: ...

    async def sleep_until(self, deadline: float) -> None: ...


async def wait_while(condition: Callable[[], bool], clock: Clock, every_s: float = 0.1) -> None:
    """Return once `condition()` is false, looking every `every_s` on `clock`."""
    while condition():
        await clock.sleep(every_s)


class MonotonicClock:
    """The real clock."""

    def now(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))

    async def sleep_until(self, deadline: float) -> None:
        await asyncio.sleep(max(0.0, deadline - time.monotonic()))


class VirtualClock:
    """A clock that moves only when a test calls `advance`.

    Sleepers wake in deadline order; between wake-ups the loop gets a few turns so that the
    work each wake-up triggers runs before time moves on. Deterministic when every task that
    matters waits on this clock (no threads).
    """

    def __init__(self, start: float = 0.0) -> None:
        self._now = start
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()

    def now(self) -> float:
        return self._now

    async def sleep(self, seconds: float) -> None:
        await self.sleep_until(self._now + max(0.0, seconds))

    async def sleep_until(self, deadline: float) -> None:
        if deadline <= self._now:
            await asyncio.sleep(0)
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (deadline, next(self._seq), future))
        await future

    async def advance(self, seconds: float, settle_turns: int = 20) -> None:
        """Move time forward by `seconds`, waking sleepers in order."""
        target = self._now + seconds
        await _settle(settle_turns)
        while self._sleepers and self._sleepers[0][0] <= target:
            deadline, _, future = heapq.heappop(self._sleepers)
            self._now = max(self._now, deadline)
            if not future.done():
                future.set_result(None)
            await _settle(settle_turns)
        self._now = target
        await _settle(settle_turns)


async def _settle(turns: int) -> None:
    for _ in range(turns):
        await asyncio.sleep(0)
