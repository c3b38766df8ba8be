"""Timers that ring, and the caller's timer commands answered without the model.

The Timekeeper watches the `timers` table (`edge_agent.timers`) on the wall clock (a timer
must mean the same after a reboot) and rings what comes due: a chime and the label ("Your pasta
timer is done."), said like any reply, so each ring is a unit of its own, finalized where the
device's played position leaves it: heard truth holds for rings as for answers. A ring waits for
the caller's words and the agent's reply in progress to end; it repeats every
`ring_pause_s` until someone stops it or `ring_for_s` has passed ("unanswered"). It stops on
anything that cuts the agent: "stop" (or any real interruption) over it, the screen's Stop
button, the wake word. "stop" or "snooze" said in a pause, or just after a ring, stops it or
puts it off by `snooze_s`. While nobody is in a session (the agent waits for its wake word), a
ring opens one, so "stop" is heard without the wake word.

At start, timers that came due while the agent was off ring once, with "While I was off, ...".

Timer commands (`edge_agent.timers.commands`) are read from each user turn before the model
sees it; one that is a command is done and answered here ("Pasta timer set for 8 minutes."),
so the model never sets a timer by guessing.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

import numpy as np

from edge_agent.clock import Clock, wait_while
from edge_agent.events import BargeIn, EventLog, TimerChanged
from edge_agent.owner import Owner
from edge_agent.timers.commands import TimerCommand, duration_only, parse
from edge_agent.timers.desk import Answer, Change, TimerDesk
from edge_agent.timers.spoken import local, say_duration
from edge_agent.timers.store import Timer

POLL_S = 0.5
"""How often the table is read for timers that came due (a ring is at most this late)."""
STOP_GRACE_S = 15.0
"""After a ring ends, "stop" and "snooze" are still about it for this long."""


@dataclass(frozen=True)
class RingSettings:
    ring_for_s: float
    """A ring repeats for this long at most, then it ends "unanswered"."""
    ring_pause_s: float
    """Silence between two rings of the same timers."""
    snooze_s: float
    """"snooze" puts the ringing timers off by this much."""


class Timekeeper:
    """Rings the timers that come due, and answers the timer commands of user turns."""

    def __init__(self, desk: TimerDesk, thread: Owner, clock: Clock, log: EventLog,
                 settings: RingSettings, wall: Callable[[], datetime],
                 say: Callable[[str, bytes], asyncio.Task[None]], wake: Callable[[], None],
                 voice_rate: int) -> None:
        """`say(words, lead)`: a reply of its own, `lead` (the chime, PCM at `voice_rate`)
        before the words; its task ends when played out, or is cancelled when cut.
        `wake`: opens a session if none is open."""
        self._desk = desk
        self._thread = thread
        self._clock = clock
        self._log = log
        self._settings = settings
        self._wall = wall
        self._say = say
        self._wake = wake
        self._chime = chime(voice_rate)
        self._ringing: list[Timer] = []
        self._told: str | None = None
        """How the ringing was told to end ("stop", "snooze"), while it rings."""
        self._last_rung: tuple[list[Timer], float] = ([], -STOP_GRACE_S)
        """The timers the last ring ended for, and when it ended (clock time)."""
        self._asked: TimerCommand | None = None
        """A command whose time the agent asked for ("For how long?") in the last turn."""

    @property
    def ringing(self) -> bool:
        """Timers ring now (in a ring or the pause between two)."""
        return bool(self._ringing)

    # -- commands ------------------------------------------------------------------------

    def claims(self, text: str) -> bool:
        """`text` is a timer command: answered here, not by the model (nothing to prepare)."""
        return self._read(text) is not None

    async def answer(self, text: str) -> str | None:
        """Do the timer command `text` says and return what to say ("": nothing, e.g. "stop"
        of a ring); None if it is not one (the model answers it)."""
        command = self._read(text)
        self._asked = None
        if command is None:
            return None
        if command.action in ("stop", "snooze"):
            return await self._stop(command)
        answer: Answer = await self._thread.call(self._desk.answer, command, self._wall())
        self._publish(answer.changes)
        if command.action == "ask":
            self._asked = command
        return answer.words

    def _read(self, text: str) -> TimerCommand | None:
        command = parse(text)
        if self._asked is not None and (command is None or command.action == "ask"):
            follow_up = _follow_up(self._asked, text)
            if follow_up is not None:
                return follow_up
        if command is None or command.action not in ("stop", "snooze"):
            return command
        if self._ringing or self._clock.now() - self._last_rung[1] < STOP_GRACE_S:
            return command
        if command.action == "stop" and command.kind is not None:
            return TimerCommand("cancel", command.kind)  # "stop the timer": nothing rings
        return None  # "stop" when nothing rings is the caller's to say to the model

    async def _stop(self, command: TimerCommand) -> str:
        if self._ringing:
            self._told = command.action
        else:
            timers, _ = self._last_rung
            self._last_rung = ([], -STOP_GRACE_S)
            if command.action == "snooze" and timers:
                await self._put_off(timers)
        if command.action == "snooze":
            return f"OK, I'll ring again in {say_duration(self._settings.snooze_s)}."
        return ""

    # -- ringing -------------------------------------------------------------------------

    async def run(self, busy: Callable[[], bool]) -> None:
        """Ring what comes due, until cancelled; `busy`: the caller speaks or the agent
        answers (a ring waits for both)."""
        store = self._desk.store
        await self._thread.call(store.forget_ended, self._wall())
        late = await self._thread.call(store.unfinished, self._wall())
        if late:
            await self._ring(late, busy, late=True)
        while True:
            due = await self._thread.call(store.due, self._wall())
            if due:
                await self._ring(due, busy, late=False)
            else:
                await self._clock.sleep(POLL_S)

    async def _ring(self, timers: list[Timer], busy: Callable[[], bool], late: bool) -> None:
        await wait_while(busy, self._clock)
        store = self._desk.store
        await self._thread.call(store.move, [t.timer_id for t in timers], "ringing",
                                self._wall())
        self._publish(tuple(Change(t, "ringing") for t in timers), late)
        self._ringing, self._told = timers, None
        self._wake()
        words = self._desk.ring_words(timers, self._wall(), late)
        began = self._clock.now()
        ended_by = ""
        # Cancelled (the agent stops): the timers stay "ringing" and ring at the next start.
        while True:
            # An announcement may have begun while the table was written.
            await wait_while(busy, self._clock)
            seen = len(self._log.entries)
            ring = self._say(words, self._chime)
            await asyncio.wait({ring})
            if ring.cancelled():  # cut: a word over it, the Stop button, the wake word
                ended_by = self._cut_by(seen)
                break
            if self._told is not None or self._clock.now() - began >= self._settings.ring_for_s:
                break
            pause_until = self._clock.now() + self._settings.ring_pause_s
            while (self._told is None
                   and (self._clock.now() < pause_until or busy())):
                await self._clock.sleep(0.1)
            if self._told is not None:
                break
        told, self._ringing, self._told = self._told, [], None
        if told == "snooze":
            await self._put_off(timers)
        elif told == "stop" or ended_by:
            await self._end(timers, "done", ended_by or "voice")
        else:
            await self._end(timers, "unanswered", "")
        self._last_rung = (timers, self._clock.now())

    async def _end(self, timers: list[Timer], state: str, by: str) -> None:
        await self._thread.call(self._desk.store.move, [t.timer_id for t in timers], state,
                                self._wall(), by)
        self._publish(tuple(Change(t, state) for t in timers))

    async def _put_off(self, timers: list[Timer]) -> None:
        due = self._wall() + timedelta(seconds=self._settings.snooze_s)
        await self._thread.call(self._desk.store.put_off, [t.timer_id for t in timers], due)
        self._publish(tuple(Change(dataclasses.replace(t, due=due), "snoozed") for t in timers))

    def _cut_by(self, seen: int) -> str:
        """What cut the ring: the BargeIn logged since entry `seen` ("voice", "touch",
        "wake")."""
        for entry in reversed(self._log.entries[seen:]):
            if isinstance(entry.event, BargeIn):
                return entry.event.by
        return "voice"

    def _publish(self, changes: tuple[Change, ...], late: bool = False) -> None:
        for change in changes:
            timer = change.timer
            self._log.publish(TimerChanged(
                timer.timer_id, timer.kind, change.change,
                local(timer.due, self._desk.zone).isoformat(timespec="seconds"), late))


def _follow_up(asked: TimerCommand, text: str) -> TimerCommand | None:
    """The answer to "For how long?" / "For what time?" / "When should I remind you?"."""
    if asked.kind == "timer":
        seconds = duration_only(text)
        return (TimerCommand("set", "timer", asked.label, seconds=seconds)
                if seconds is not None else None)
    lead = "set an alarm for" if asked.kind == "alarm" else f"remind me to {asked.label}"
    command = parse(f"{lead} {text}")
    if command is None or command.action != "set":
        return None
    return dataclasses.replace(command, label=asked.label or command.label)


def chime(rate: int) -> bytes:
    """A ring's chime: two soft bell tones (E6, then C6) and a short silence, at `rate`."""
    parts = []
    for frequency, seconds in ((1318.5, 0.28), (1046.5, 0.42)):
        t = np.arange(int(rate * seconds)) / rate
        tone = np.sin(2 * np.pi * frequency * t) + 0.3 * np.sin(4 * np.pi * frequency * t)
        attack = np.minimum(1.0, t / 0.005)
        parts.append(0.25 * tone * attack * np.exp(-t * 6.0))
    parts.append(np.zeros(int(rate * 0.25)))
    return (np.concatenate(parts) * 32767 / 1.3).astype("<i2").tobytes()
