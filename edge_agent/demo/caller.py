"""A scripted caller: speaks call-file lines into the virtual microphone at their cues."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

from edge_agent.audio.pcm import first_loud_sample
from edge_agent.clock import Clock
from edge_agent.demo.callfile import CallerLine
from edge_agent.events import (
    CallerSpoke,
    EventLog,
    LoggedEvent,
    Notice,
    PlaybackStarted,
    UnitFinalized,
)

CUE_TIMEOUT = 45.0
"""Seconds to wait for the agent before a cue is given up and the line is said anyway."""


class CallerVoice(Protocol):
    """Where the caller's lines are said: the virtual microphone, or a real audio device."""

    sample_rate: int

    def say(self, pcm: bytes) -> None:
        """Start saying `pcm` (int16 at `sample_rate`) after anything said before."""
        ...

    async def wait_said(self) -> None:
        """Return once everything said has been heard by the microphone."""
        ...


class ScriptedCaller:
    def __init__(self, clock: Clock, mic: CallerVoice, log: EventLog,
                 lines: Sequence[tuple[CallerLine, bytes]],
                 agent_speaks_first: Callable[[], Awaitable[bool]] | None = None) -> None:
        """`agent_speaks_first`: once the agent has started, whether it is saying something
        (its greeting) that a first `after_agent_done` line must wait for; without it, the
        line always waits for a finished reply."""
        self._clock = clock
        self._mic = mic
        self._log = log
        self._lines = list(lines)
        self._agent_speaks_first = agent_speaks_first
        self._events = log.subscribe()  # subscribed now, so no early event is missed
        self._said = 0
        self._saying = False

    @property
    def unsaid(self) -> list[CallerLine]:
        """The lines never begun: what a call cut short by its time limit never said."""
        return [line for line, _ in self._lines[self._said + self._saying:]]

    @property
    def cut_short(self) -> CallerLine | None:
        """The line that was being said when the call was stopped, if any."""
        return self._lines[self._said][0] if self._saying else None

    async def run(self) -> None:
        start = self._clock.now()
        try:
            for line, pcm in self._lines:
                if line.at is not None:
                    await self._clock.sleep_until(start + line.at)
                elif line.after_agent_done:
                    if await self._nothing_to_wait_for():
                        pass
                    elif await self._cue(UnitFinalized, "finish its reply"):
                        await self._clock.sleep(line.pause)
                elif line.barge_in_after is not None and await self._cue(
                        PlaybackStarted, "start a reply"):
                    await self._clock.sleep(line.barge_in_after)
                onset = first_loud_sample(pcm)
                offset = (onset or 0) / self._mic.sample_rate
                self._log.publish(CallerSpoke(line.say, round(offset, 4)))
                self._saying = True
                self._mic.say(pcm)
                await self._mic.wait_said()
                self._said += 1
                self._saying = False
                while not self._events.empty():  # cues count only after the line was said
                    self._events.get_nowait()
        finally:
            self._log.unsubscribe(self._events)

    async def _nothing_to_wait_for(self) -> bool:
        """The first line, and the agent is not speaking first (no greeting, or a resumed
        session): there is no reply to finish."""
        if self._said or self._agent_speaks_first is None:
            return False
        return not await self._agent_speaks_first()

    async def _cue(self, kind: type, what: str) -> bool:
        deadline = self._clock.now() + CUE_TIMEOUT
        while True:
            entry = await next_event(self._events, self._clock, deadline)
            if entry is None:
                self._log.publish(Notice(f"caller: the agent did not {what} within "
                                         f"{CUE_TIMEOUT:.0f} s; saying the next line anyway"))
                return False
            if isinstance(entry.event, kind) and said_something(entry):
                return True


async def next_event(events: asyncio.Queue[LoggedEvent], clock: Clock, deadline: float
                     ) -> LoggedEvent | None:
    """The next event of a subscription, or None once `deadline` (clock time) has passed."""
    getter = asyncio.ensure_future(events.get())
    timer = asyncio.ensure_future(clock.sleep_until(deadline))
    done, _ = await asyncio.wait({getter, timer}, return_when=asyncio.FIRST_COMPLETED)
    timer.cancel()
    if getter in done:
        return getter.result()
    getter.cancel()
    return None


def said_something(entry: LoggedEvent) -> bool:
    """False for the end of a unit that said nothing (an empty reply): no cue to answer."""
    return not isinstance(entry.event, UnitFinalized) or bool(entry.event.finalize.generated)
