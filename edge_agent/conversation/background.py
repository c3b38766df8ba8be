"""What the conversation does beside listening, each a task of its own that waits while
someone talks: the memory's upkeep (checkpoints, knowledge files, summaries), the timers'
rings and the house's announcements."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime

from edge_agent.conversation.announcer import Announcer
from edge_agent.conversation.replies import Responder
from edge_agent.conversation.settings import ConversationSettings
from edge_agent.conversation.timekeeper import Timekeeper, chime
from edge_agent.conversation.upkeep import Upkeep
from edge_agent.events import EventLog
from edge_agent.memory.conversation_memory import ConversationMemory
from edge_agent.owner import Owner
from edge_agent.timers.desk import TimerDesk


class Background:
    """The background tasks of one conversation: started with the loop, stopped with it."""

    def __init__(self, *, settings: ConversationSettings, log: EventLog, responder: Responder,
                 memory: ConversationMemory, knowledge: bool, timers: TimerDesk | None,
                 owner: Callable[[str], Owner], wall: Callable[[], datetime],
                 open_if_none: Callable[[str], None], voice_rate: int) -> None:
        """`open_if_none(how)`: open a session if none is (a ring or an announcement needs
        no wake word to be answered)."""
        clock = log.clock
        self.upkeep = Upkeep(settings, clock, responder, memory, knowledge)
        self.timekeeper = (Timekeeper(
            timers, owner("timers"), clock, log, settings.rings, wall, say=responder.announce,
            wake=lambda: open_if_none("timer"), voice_rate=voice_rate)
            if timers is not None else None)
        self.announcer = Announcer(clock, responder.announce,
                                   lambda: open_if_none("announcement"), chime(voice_rate))
        self._tasks: list[asyncio.Task[None]] = []

    def start(self, busy: Callable[[], bool], failed: Callable[[BaseException], None]) -> None:
        """Start the tasks; each waits while `busy()`. A timer or announcement task that fails
        is handed to `failed` (the loop raises it); the upkeep's own errors are its own."""
        self._tasks.append(asyncio.create_task(self.upkeep.run(busy), name="memory-upkeep"))
        watched = []
        timekeeper = self.timekeeper
        if timekeeper is not None:
            watched.append(asyncio.create_task(timekeeper.run(busy), name="timers"))
        watched.append(asyncio.create_task(self.announcer.run(
            lambda: busy() or (timekeeper is not None and timekeeper.ringing)),
            name="announcements"))

        def check(task: asyncio.Task[None]) -> None:
            if not task.cancelled() and (error := task.exception()) is not None:
                failed(error)

        for task in watched:
            task.add_done_callback(check)
        self._tasks += watched

    async def stop(self) -> None:
        """Cancel the tasks, and wait for a summary being written."""
        for task in self._tasks:
            task.cancel()
        await self.upkeep.stop_folding()
