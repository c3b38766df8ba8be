"""What a caller asks of the timers, read from their words by rules, not by the model.

A small local model sets a timer wrongly often enough to burn the pasta: "set a timer for ten
minutes" must set ten minutes every time, and "what timers are running" must read the real
list. So these commands are read here, and said back from what was done:

- set: "set a timer for ten minutes", "set a pasta timer for 8 minutes", "a 10 minute timer for
  the eggs", "set an alarm for 7 AM", "wake me up at half past six tomorrow", "remind me to call
  Anna in 20 minutes", "remind me at 5 PM to take the bread out";
- list: "what timers are running", "do I have any alarms", "list my reminders";
- left: "how long is left on the pasta timer", "how much time is left";
- cancel: "cancel the pasta timer", "delete all alarms", "turn off my alarm";
- stop / snooze: "stop", "stop it", "enough", "snooze" (only while something rings, or just
  after: otherwise "stop" is the caller's to say to the model).

Anything else is not a timer command (None): the model answers it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from edge_agent.timers.spoken import (
    UNIT_SECONDS,
    ClockTime,
    clock_at,
    duration_at,
    find_duration,
    words_of,
)

Kind = Literal["timer", "alarm", "reminder"]
Action = Literal["set", "list", "left", "cancel", "stop", "snooze", "ask"]

MAX_LABEL_CHARS = 60
"""A label longer than this is cut (it is said back at every ring)."""

_KINDS: dict[str, Kind] = {
    "timer": "timer", "timers": "timer", "alarm": "alarm", "alarms": "alarm",
    "reminder": "reminder", "reminders": "reminder",
}
_CANCEL = frozenset({"cancel", "delete", "remove", "clear", "stop", "kill", "end"})
_STOP = frozenset({"stop", "enough", "quiet", "silence", "dismiss", "shush"})
_STOP_FILLER = frozenset({
    "it", "that", "the", "this", "timer", "alarm", "reminder", "please", "ok", "okay", "now",
    "ringing", "thanks", "thank", "you", "alright", "all", "right", "yes", "yeah",
    "i", "heard", "got", "noise", "sound", "be", "turn", "off", "shut", "up",
})
_ASKING = frozenset({"what", "which", "any", "list", "show", "running", "have", "many",
                     "tell", "are", "is", "whats", "read", "check"})
_NOT_LABEL = frozenset({
    "set", "start", "make", "create", "put", "add", "new", "give", "me", "us", "a", "an", "the",
    "my", "our", "for", "please", "can", "could", "would", "will", "you", "i", "want", "need",
    "like", "to", "called", "named", "labelled", "labeled", "and", "okay", "ok", "hey", "hi",
    "nabu", "jarvis", "alexa", "mycroft", "timer", "timers", "alarm", "alarms", "up", "on",
    "at", "in", "from", "now", "one", "another", "go", "off", "of", "that", "with", "it",
    "cancel", "delete", "remove", "clear", "stop", "kill", "end", "all", "every", "both",
    "turn", "switch", "is", "left", "how", "long", "much", "time", "remaining", "until",
    "till", "there", "be", "its", "this", "tomorrow", "today", "tonight", "morning",
    "evening", "afternoon", "night", "am", "pm", "oclock", "some", "just", "quick", "wake",
    "do", "have", "any", "what", "which", "are", "running", "get",
})
_REMINDER_LEAD = frozenset({"to", "that", "about", "of"})


@dataclass(frozen=True)
class TimerCommand:
    """One thing asked of the timers."""

    action: Action
    """"set", "list", "left" (time left), "cancel", "stop" (the ringing), "snooze" or "ask"
    (a timer without its duration: the agent asks for how long)."""
    kind: Kind | None = None
    """Which kind it is about (None: any)."""
    label: str = ""
    """The caller's name for it ("pasta"), or what a reminder is about ("call Anna"); "" if
    none was said."""
    seconds: float | None = None
    """Set: due this long from now."""
    at: ClockTime | None = None
    """Set: due at this time of day."""
    tomorrow: bool = False
    """Set: `at` is tomorrow's."""
    every: bool = False
    """Cancel: all of them ("cancel all timers")."""


def parse(text: str) -> TimerCommand | None:
    """The timer command `text` says, or None (not one: the model answers it)."""
    words = words_of(text)
    if not words:
        return None
    present = set(words)
    kinds = [_KINDS[w] for w in words if w in _KINDS]
    kind = kinds[0] if kinds else None
    if present & _STOP and present <= _STOP | _STOP_FILLER and len(words) <= 6:
        return TimerCommand("stop", kind)
    if "snooze" in present:
        return TimerCommand("snooze", kind)
    reminder = _remind(words)
    if reminder is not None:
        return reminder
    asks_left = _says(words, ("how", "long")) or _says(words, ("how", "much", "time"))
    if asks_left and present & {"left", "remaining"}:
        return TimerCommand("left", kind, _label(words, set()))
    if kind is None and not ("wake" in present and "me" in present):
        return None
    if present & _CANCEL or _says(words, ("turn", "off")) or _says(words, ("switch", "off")):
        return TimerCommand("cancel", kind, _label(words, set()),
                            every=bool(present & {"all", "every", "both"}))
    if asks_left or present & {"left", "remaining"}:
        return TimerCommand("left", kind, _label(words, set()))
    duration = find_duration(words)
    if kind == "timer":
        if duration is None:
            if present & _ASKING and not present & {"set", "start", "make", "create"}:
                return TimerCommand("list", kind)
            return TimerCommand("ask", kind, _label(words, set()))
        seconds, start, end = duration
        return TimerCommand("set", "timer", _label(words, set(range(start, end))),
                            seconds=seconds)
    if kind == "alarm" or "wake" in present:
        said = _clock(words)
        if said is not None:
            at, span = said
            return TimerCommand("set", "alarm", _label(words, span), at=at,
                                tomorrow="tomorrow" in present)
        if duration is not None:  # "an alarm in 10 minutes", "an alarm for 10 minutes"
            seconds, start, end = duration
            return TimerCommand("set", "alarm", _label(words, set(range(start, end))),
                                seconds=seconds)
        if present & {"set", "wake", "make", "create", "new", "add"}:
            return TimerCommand("ask", "alarm", _label(words, set()))
    if present & _ASKING or (kind is not None and len(words) <= 3):
        return TimerCommand("list", kind)
    return None


def _remind(words: list[str]) -> TimerCommand | None:
    """ "remind me to X in 10 minutes", "remind me at 5 pm to X", "remind me in an hour that
    X"."""
    if not _says(words, ("remind", "me")):
        return None
    start = words.index("remind") + 2
    rest = words[start:]
    timing: set[int] = set()
    seconds: float | None = None
    at: ClockTime | None = None
    for i, word in enumerate(rest):
        if word == "in" and (found := duration_at(rest, i + 1)) is not None:
            seconds, timing = found[0], set(range(i, found[1]))
            break
        if word in ("at", "by") and (said := clock_at(rest, i + 1)) is not None:
            at, timing = said[0], set(range(i, said[1]))
            break
    if seconds is None and at is None:
        return TimerCommand("ask", "reminder", _what(rest, timing))
    tomorrow = "tomorrow" in rest
    if tomorrow:
        timing.add(rest.index("tomorrow"))
    return TimerCommand("set", "reminder", _what(rest, timing), seconds=seconds, at=at,
                        tomorrow=tomorrow)


def _what(words: list[str], timing: set[int]) -> str:
    """What a reminder is about: its words outside the timing, without the leading "to"."""
    kept = [w for i, w in enumerate(words) if i not in timing]
    while kept and kept[0] in _REMINDER_LEAD:
        kept = kept[1:]
    while kept and kept[-1] in ("please", "and", "then"):
        kept = kept[:-1]
    return _clip(" ".join(kept))


def _clock(words: list[str]) -> tuple[ClockTime, set[int]] | None:
    """A time of day said after "at"/"for" (or after "alarm"): it and the words it spans."""
    for i, word in enumerate(words):
        if word not in ("at", "for", "alarm") or duration_at(words, i + 1) is not None:
            continue  # "for 10 minutes" is a duration, not 10 o'clock
        said = clock_at(words, i + 1)
        if said is not None:
            return said[0], set(range(i + 1, said[1]))
    return None


def _label(words: list[str], skip: set[int]) -> str:
    """The caller's name for a timer: its words that are not the command's own."""
    kept = [w for i, w in enumerate(words) if i not in skip and w not in _NOT_LABEL
            and w not in UNIT_SECONDS and not w.replace(":", "").replace(".", "").isdigit()]
    return _clip(" ".join(kept))


def _says(words: list[str], phrase: tuple[str, ...]) -> bool:
    return any(tuple(words[i:i + len(phrase)]) == phrase for i in range(len(words)))


def _clip(text: str) -> str:
    return text[:MAX_LABEL_CHARS].rstrip()


def duration_only(text: str) -> float | None:
    """The seconds `text` says when it is only a duration ("ten minutes", "for 5 minutes
    please"): the answer to "for how long?"."""
    words = [w for w in words_of(text) if w not in ("for", "please", "just", "uh", "um",
                                                     "make", "it", "about", "ok", "okay")]
    found = duration_at(words, 0) if words else None
    return found[0] if found is not None and found[1] == len(words) else None
