"""Doing what a timer command asks, and the words the agent says for it and when one rings.

Everything said is built from what the store holds after the change, never guessed: "Pasta
timer set for 8 minutes." is said once the row is on disk, and "what timers are running" reads
them. Times of day are on the local clock (`zone`; None: the device's).

Blocking (SQLite): call from the timers' owner thread.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo

from edge_agent.timers.commands import Kind, TimerCommand
from edge_agent.timers.spoken import next_at, say_clock, say_duration, say_left
from edge_agent.timers.store import Timer, TimerStore

MAX_SECONDS = 24 * 3600
"""The longest timer or reminder that is set by its length (beyond, say a time of day)."""
MAX_ACTIVE = 30
"""Timers, alarms and reminders waiting at once, at most."""
_PLURAL = {"timer": "timers", "alarm": "alarms", "reminder": "reminders"}


@dataclass(frozen=True)
class Change:
    """A timer that a command or a ring changed."""

    timer: Timer
    """The timer, as it was before the change."""
    change: str
    """"set", "cancelled", "ringing", "done", "unanswered" or "snoozed"."""


@dataclass(frozen=True)
class Answer:
    """What a command did and what the agent says about it."""

    words: str
    """Said to the caller."""
    changes: tuple[Change, ...] = ()
    """The timers it changed."""


class TimerDesk:
    def __init__(self, store: TimerStore, zone: tzinfo | None) -> None:
        self.store = store
        self.zone = zone
        """The local clock's zone (None: the device's)."""

    def answer(self, command: TimerCommand, now: datetime) -> Answer:
        """Carry out `command` (not "stop" or "snooze": those are the ringing's) at `now`."""
        if command.action == "set":
            return self._set(command, now)
        if command.action == "ask":
            return Answer({"timer": "For how long?", "alarm": "For what time?"}.get(
                command.kind or "", "When should I remind you?"))
        matching = self._matching(command)
        if command.action == "cancel":
            return self._cancel(command, matching, now)
        if command.action == "left":
            return self._left(command, matching, now)
        return Answer(self._list(command.kind, matching, now))

    def _set(self, command: TimerCommand, now: datetime) -> Answer:
        kind = command.kind or "timer"
        if command.seconds is not None:
            if not 1 <= command.seconds <= MAX_SECONDS:
                return Answer(f"I can set {_PLURAL[kind]} from 1 second to 24 hours ahead; for "
                              "later, give me a time of day.")
            due = now + timedelta(seconds=command.seconds)
        elif command.at is not None:
            due = next_at(command.at, now, self.zone, command.tomorrow)
        else:
            return Answer("For what time?")
        if len(self.store.active()) >= MAX_ACTIVE:
            return Answer(f"You already have {MAX_ACTIVE} timers, alarms and reminders; cancel "
                          "one first.")
        seconds = command.seconds if kind == "timer" else None
        timer = self.store.add(kind, command.label, due, now, seconds)
        when = (f"for {say_duration(command.seconds)}" if command.seconds is not None
                else f"for {self._clock(due, now)}")
        if kind == "timer":
            words = f"{_capital(command.label + ' timer') if command.label else 'Timer'} set {when}."
        elif kind == "alarm":
            words = f"{_capital(command.label + ' alarm') if command.label else 'Alarm'} set {when}."
            if command.seconds is None:
                ahead = (due.astimezone(UTC) - now.astimezone(UTC)).total_seconds()
                words = words[:-1] + f", {say_duration(_rounded(ahead))} from now."
        else:
            timing = (f"in {say_duration(command.seconds)}" if command.seconds is not None
                      else f"at {self._clock(due, now)}")
            words = (f"OK, I'll remind you to {command.label} {timing}." if command.label
                     else f"OK, I'll remind you {timing}.")
        return Answer(words, (Change(timer, "set"),))

    def _matching(self, command: TimerCommand) -> list[Timer]:
        found = [t for t in self.store.active()
                 if command.kind is None or t.kind == command.kind]
        if command.label:
            return [t for t in found if _same_label(t.label, command.label)]
        return found

    def _cancel(self, command: TimerCommand, matching: list[Timer], now: datetime) -> Answer:
        if not matching:
            return Answer(f"There's no {_asked_for(command)} to cancel.")
        if len(matching) > 1 and not command.every:
            return Answer(f"You have {len(matching)} {_PLURAL[command.kind or 'timer']}: "
                          f"{_and(self._describe(t, now) for t in matching)}. Which one?"
                          if command.kind else
                          f"You have {_and(self._describe(t, now) for t in matching)}. "
                          "Which one?")
        self.store.move([t.timer_id for t in matching], "cancelled", now, "voice")
        changes = tuple(Change(t, "cancelled") for t in matching)
        if len(matching) == 1:
            return Answer(f"Cancelled {self._name(matching[0])}.", changes)
        return Answer(f"Cancelled {len(matching)} {_PLURAL[command.kind or 'timer']}."
                      if command.kind else f"Cancelled all {len(matching)}.", changes)

    def _left(self, command: TimerCommand, matching: list[Timer], now: datetime) -> Answer:
        if not matching:
            what = _asked_for(command)
            return Answer(f"There's no {what} running." if what.endswith("timer")
                          else f"There's no {what} set.")
        timers = [t for t in matching if t.kind == "timer"]
        if command.kind is None and timers:
            matching = timers  # "how much time is left" asks about the timers
        if len(matching) > 1:
            return Answer(self._list(command.kind, matching, now))
        timer = matching[0]
        left = say_left(max(0.0, (timer.due - now).total_seconds()))
        if timer.kind == "timer":
            return Answer(f"{_capital(self._name(timer))} has {left} left.")
        return Answer(f"{_capital(self._name(timer))} is at {self._clock(timer.due, now)}, "
                      f"in {left}.")

    def _list(self, kind: Kind | None, timers: list[Timer], now: datetime) -> str:
        if not timers:
            return (f"You have no {_PLURAL[kind]}." if kind
                    else "You have no timers, alarms or reminders.")
        count = (f"{len(timers)} {kind if len(timers) == 1 else _PLURAL[kind]}" if kind
                 else str(len(timers)))
        return f"You have {count}: {_and(self._describe(t, now) for t in timers)}."

    def _describe(self, timer: Timer, now: datetime) -> str:
        left = say_left(max(0.0, (timer.due - now).total_seconds()))
        if timer.kind == "timer":
            return f"{self._name(timer, article=True)} with {left} left"
        if timer.kind == "alarm":
            return f"{self._name(timer, article=True)} for {self._clock(timer.due, now)}"
        return f"{self._name(timer, article=True)} at {self._clock(timer.due, now)}"

    def _name(self, timer: Timer, article: bool = False) -> str:
        """ "the pasta timer", "the 10 minute timer", "your alarm", "the reminder to call
        Anna"; with `article`, "a 10 minute timer", "an alarm"."""
        if timer.kind == "reminder":
            about = f" to {timer.label}" if timer.label else ""
            return f"{'a' if article else 'the'} reminder{about}"
        if timer.label:
            return f"the {timer.label} {timer.kind}"
        if timer.kind == "timer" and timer.seconds is not None:
            length = say_duration(timer.seconds).replace("minutes", "minute").replace(
                "hours", "hour").replace("seconds", "second")
            return f"{_a(length) if article else 'the'} {length} timer"
        return f"{'an' if article else 'your'} {timer.kind}"

    def _clock(self, moment: datetime, now: datetime) -> str:
        return say_clock(moment, now, self.zone)

    def ring_words(self, timers: list[Timer], now: datetime, late: bool) -> str:
        """What a ring says: "Your pasta timer is done." / "It's 7 AM: your alarm." /
        "Reminder: call Anna."; for timers that came due while the agent was off, "While I was
        off, ..." with when each went off."""
        said = []
        for timer in timers:
            name = self._name(timer)
            if late:
                went = self._clock(timer.due, now)
                if timer.kind == "reminder":
                    about = f": {timer.label}" if timer.label else ""
                    said.append(f"a reminder came due at {went}{about}")
                else:
                    said.append(f"{_your(name)} went off at {went}")
            elif timer.kind == "timer":
                said.append(f"{_capital(_your(name))} is done.")
            elif timer.kind == "alarm":
                label = f": {timer.label}" if timer.label else ""
                said.append(f"It's {self._clock(timer.due, now)}{label}. This is your alarm.")
            else:
                said.append(f"Reminder: {timer.label}." if timer.label else "This is your reminder.")
        if late:
            return f"While I was off, {_and(said)}."
        return " ".join(said)


def _asked_for(command: TimerCommand) -> str:
    """What the caller named: "pasta timer", "alarm"."""
    kind = command.kind or "timer"
    return f"{command.label} {kind}" if command.label else kind


def _your(name: str) -> str:
    return name.replace("the ", "your ", 1) if name.startswith("the ") else name


def _same_label(stored: str, said: str) -> bool:
    """A label said names the stored one when one's words hold the other's ("pasta" names
    "spaghetti pasta"; "the big pasta" names "pasta")."""
    stored_words, said_words = set(stored.lower().split()), set(said.lower().split())
    if not stored_words or not said_words:
        return False
    return said_words <= stored_words or stored_words <= said_words


def _rounded(seconds: float) -> float:
    """A time of day's distance, to the minute (the clock says the minute)."""
    return round(seconds / 60) * 60


def _a(spoken: str) -> str:
    """ "a" or "an" before `spoken` ("an 8 minute", "an 11 second", "a 10 minute")."""
    first = spoken.split()[0] if spoken.split() else "x"
    return "an" if first[0] in "aeiou8" or first in ("11", "18") else "a"


def _capital(text: str) -> str:
    return text[:1].upper() + text[1:]


def _and(items: Iterable[str]) -> str:
    parts = list(items)
    if len(parts) <= 1:
        return "".join(parts)
    return f"{', '.join(parts[:-1])} and {parts[-1]}"
