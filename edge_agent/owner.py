"""One owner thread per blocking resource (a model, a database); the loop never blocks on it.

`InlineOwner` is the other way: every call runs on the loop itself, for runs on a virtual clock
(a replay, the tests), where engine work must take no virtual time and happen in a fixed order.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import AsyncGenerator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol, TypeVar

from edge_agent.clock import Clock

T = TypeVar("T")
_END = object()


class Owner(Protocol):
    """Where blocking calls on one resource run."""

    async def call(self, fn: Callable[..., T], *args: Any) -> T: ...

    def stream(self, make_items: Callable[[], Iterator[T]]) -> AsyncGenerator[T, None]: ...

    def close(self) -> None: ...


class OwnerThread:
    """Runs calls on one dedicated thread, in submission order."""

    def __init__(self, name: str) -> None:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, functools.partial(fn, *args))

    async def stream(self, make_items: Callable[[], Iterator[T]]) -> AsyncGenerator[T, None]:
        """Iterate a blocking iterator on the owner thread, item by item.

        Leaving the `async for` early (break, cancellation) stops the iterator at its next item
        and closes it on the owner thread, so the resource is free for the next call.
        """
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[object, BaseException | None]] = asyncio.Queue()
        stop = threading.Event()

        def pump() -> None:
            items: Iterator[T] | None = None
            error: BaseException | None = None
            try:
                # Abandoned before its turn on the thread came: never started at all.
                items = None if stop.is_set() else make_items()
                for item in items or ():
                    if stop.is_set():
                        break
                    loop.call_soon_threadsafe(queue.put_nowait, (item, None))
            except BaseException as exc:  # handed to the consumer, not swallowed
                error = exc
            finally:
                close = getattr(items, "close", None) if items is not None else None
                if close is not None:
                    close()
            if not loop.is_closed():
                loop.call_soon_threadsafe(queue.put_nowait, (_END, error))

        loop.run_in_executor(self._executor, pump)
        try:
            while True:
                item, error = await queue.get()
                if item is _END:
                    if error is not None:
                        raise error
                    return
                yield item  # type: ignore[misc]
        finally:
            stop.set()

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)


class InlineOwner:
    """Runs each call right on the loop's thread, between two loop turns, so that on a virtual
    clock engine work takes no virtual time and a run is deterministic (no thread decides the
    order). Blocks the loop while a call runs: for virtual-clock runs only, never a live agent.

    `delay` (virtual seconds, with a `clock`) makes every call take that long, like a slow
    engine.
    """

    def __init__(self, name: str, clock: Clock | None = None, delay: float = 0.0) -> None:
        self.name = name
        self._clock = clock
        self._delay = delay

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        if self._clock is not None and self._delay:
            await self._clock.sleep(self._delay)
        await asyncio.sleep(0)
        return fn(*args)

    async def stream(self, make_items: Callable[[], Iterator[T]]) -> AsyncGenerator[T, None]:
        items = make_items()
        try:
            for item in items:
                await asyncio.sleep(0)
                yield item
        finally:
            close = getattr(items, "close", None)
            if close is not None:
                close()

    def close(self) -> None:
        pass
