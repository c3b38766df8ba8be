"""One owner thread per blocking resource (a model, a database); the loop never blocks on it."""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import AsyncGenerator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol, TypeVar

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
                items = make_items()
                for item in items:
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
