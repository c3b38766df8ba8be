"""Waiting on live audio in a test: real devices deliver in real time, so a test waits for what
it expects under a generous bound (it fails only when something is wrong), never a guessed
sleep."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sized

WAIT_S = 30.0
"""The bound on each wait."""


async def until(condition: Callable[[], bool], what: str, timeout: float = WAIT_S) -> None:
    """Return once `condition()` holds; AssertionError naming `what` after `timeout` s."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)


async def around_playing(frames: Sized, play: Callable[[], Awaitable[object]]) -> None:
    """Frames collected into `frames` on either side of `play()`: the first ten before it
    starts, ten more once it has ended (so all it played has come through)."""
    await until(lambda: len(frames) > 10, "the first frames")
    await play()
    heard = len(frames)
    await until(lambda: len(frames) > heard + 10, "the frames after it")
