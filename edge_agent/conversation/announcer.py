"""What the house asks the agent to say ("The washing machine is done."), said when nobody is
talking.

Announcements come from outside the conversation (`[mqtt] announcements`: a message to
`<topic>/say`) at any moment. Each waits for the caller's words, the reply in progress and a
ringing timer to end, then is said like a timer's ring: the chime, then the words, as a unit of
its own, finalized where the device's played position leaves it and cut by any interruption,
so heard truth holds for it as for a reply. While no session is open (the agent waits for its
wake word), one opens (`SessionStarted.how = "announcement"`): an answer to it needs no wake
word. At most `MAX_WAITING` wait at once; more are refused, and the sender is told why.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable

from edge_agent.clock import Clock, wait_while

MAX_WAITING = 5
"""Announcements waiting to be said, at most (a flood from the house is refused, not queued
for the next hour)."""
POLL_S = 0.1
"""How often a waiting announcement looks whether the agent is free."""


class Announcer:
    """Says the announcements it is given, one after the other, each when the agent is free."""

    def __init__(self, clock: Clock, say: Callable[[str, bytes], asyncio.Task[None]],
                 wake: Callable[[], None], chime: bytes) -> None:
        """`say(words, lead)`: a reply of its own, `lead` (the chime) before the words; its task
        ends when played out or cut. `wake`: opens a session if none is open."""
        self._clock = clock
        self._say = say
        self._wake = wake
        self._chime = chime
        self._waiting: deque[str] = deque()
        self._arrived = asyncio.Event()

    def announce(self, words: str) -> str | None:
        """Say `words` when the agent is free: None, or why they will not be said."""
        if len(self._waiting) >= MAX_WAITING:
            return f"{MAX_WAITING} announcements are waiting to be said already"
        self._waiting.append(words)
        self._arrived.set()
        return None

    async def run(self, busy: Callable[[], bool]) -> None:
        """Say what arrives, until cancelled; `busy`: the caller speaks, the agent answers or
        a timer rings (an announcement waits for all of them)."""
        while True:
            await self._arrived.wait()
            while self._waiting:
                await wait_while(busy, self._clock, POLL_S)
                # Nothing awaited from the check to `say`: no ring can start in between.
                self._wake()
                said = self._say(self._waiting.popleft(), self._chime)
                await asyncio.wait({said})
            self._arrived.clear()
