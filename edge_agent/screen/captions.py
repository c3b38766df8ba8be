"""What the kiosk's screen shows, folded from the conversation's events and the speaker's
played position: the state, the caller's turns, and each of the agent's units split into what
the listener heard and the rest.

A unit's heard part grows as the device plays it (`NowPlaying`, the heard-truth policy over the
played-frame cursor and Piper's word timings): a word lights up when the record would count it
heard, never when it was generated. When the unit is finalized, its heard part becomes exactly
the record's `heard`, and the rest of a cut unit is marked as never said. The screen forgets:
everything clears when a session ends or after `clear_after` seconds with nothing new.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, TypedDict

from edge_agent.clock import Clock
from edge_agent.conversation.playback import NowPlaying
from edge_agent.events import (
    Backchannel,
    LoggedEvent,
    PlaybackStarted,
    SessionEnded,
    SessionStarted,
    TurnDropped,
    UnitFinalized,
    UserSpeechStarted,
    UserTurn,
)

MAX_LINES = 12
"""Lines kept on the screen (the oldest go first): a few exchanges, readable at 1.5 m."""
MAX_LINE_CHARS = 2000
"""Characters kept of a caller's line, and of each part of a unit (of what was heard, its end;
of the rest, its start)."""

ScreenState = Literal["waiting", "listening", "thinking", "speaking"]
Said = Literal["speaking", "done", "cut"]


class CallerLine(TypedDict):
    """A caller's committed turn, or a backchannel ("mm-hm": shown as one, not as a turn)."""

    who: Literal["caller", "backchannel"]
    id: str
    text: str


class AgentLine(TypedDict):
    """One unit of the agent's speech."""

    who: Literal["agent"]
    id: str
    """The unit's id (u1, u2...)."""
    heard: str
    """What the listener heard of it so far: the record's `heard` once it is finalized."""
    rest: str
    """The rest of its text: still to be played, or, once `said` is "cut", never said."""
    said: Said


class Snapshot(TypedDict):
    """The whole screen, as each page receives it (a page that connects late, or again after a
    restart, needs nothing else)."""

    state: ScreenState
    caller_speaking: bool
    caller_words: str | None
    """The caller's words so far while they speak (not final; "" before the recognizer's first
    reading); None when nobody speaks to the agent."""
    push_to_talk: bool
    """The page shows a Talk button (`[screen] push_to_talk`)."""
    lines: list[CallerLine | AgentLine]


@dataclass
class Captions:
    """The screen's state. `idle_state`: what it shows with no session open ("waiting" for a
    wake phrase or a voice, else "listening")."""

    clock: Clock
    clear_after: float
    idle_state: ScreenState = "listening"
    push_to_talk: bool = False
    state: ScreenState = field(init=False)
    caller_speaking: bool = False
    caller_words: str | None = None
    lines: list[CallerLine | AgentLine] = field(default_factory=list)
    _last_change: float = field(init=False)
    _turns: int = 0

    def __post_init__(self) -> None:
        self.state = self.idle_state
        self._last_change = self.clock.now()

    def snapshot(self) -> Snapshot:
        return Snapshot(state=self.state, caller_speaking=self.caller_speaking,
                        caller_words=self.caller_words, push_to_talk=self.push_to_talk,
                        lines=[dict(line) for line in self.lines])  # type: ignore[misc]

    def apply(self, entry: LoggedEvent) -> bool:
        """Fold one event in; True if the screen changed."""
        before = self.snapshot()
        event = entry.event
        if isinstance(event, SessionStarted):
            self.lines.clear()
            self.state = "listening"
        elif isinstance(event, SessionEnded):
            self.lines.clear()
            self.state, self.caller_speaking, self.caller_words = self.idle_state, False, None
        elif isinstance(event, UserSpeechStarted):
            self.caller_speaking = True
        elif isinstance(event, TurnDropped):
            self.caller_speaking, self.caller_words = False, None
        elif isinstance(event, UserTurn):
            self._turns += 1
            self._add(CallerLine(who="caller", id=f"t{self._turns}", text=_tail(event.text)))
            self.state, self.caller_speaking, self.caller_words = "thinking", False, None
        elif isinstance(event, Backchannel):
            self._turns += 1
            self._add(CallerLine(who="backchannel", id=f"t{self._turns}",
                                 text=_tail(event.text)))
            self.caller_speaking, self.caller_words = False, None
        elif isinstance(event, PlaybackStarted):
            self._unit(event.unit_id)
            self.state = "speaking"
        elif isinstance(event, UnitFinalized):
            final = event.finalize
            line = self._unit(final.unit_id)
            line["heard"] = _tail(final.heard)
            line["rest"] = _head(final.generated[len(final.heard):])
            line["said"] = "cut" if final.interrupted else "done"
            if self.state == "speaking":
                self.state = "listening"
        return self._changed(before)

    def playing(self, now: NowPlaying | None) -> bool:
        """Fold in the speaker's position; True if the screen changed."""
        if now is None:
            return False
        before = self.snapshot()
        line = self._unit(now.unit_id)
        if line["said"] == "speaking":
            line["heard"] = _tail(now.heard)
            line["rest"] = _head(now.text[len(now.heard):])
            self.state = "speaking"
        return self._changed(before)

    @property
    def moving(self) -> bool:
        """Whether the speaker's position or the caller's words may change the screen with no
        event to say so: a unit is being played, or the caller speaks."""
        return self.caller_speaking or self.state == "speaking" or any(
            line["who"] == "agent" and line["said"] == "speaking" for line in self.lines)

    def clears_in(self) -> float | None:
        """Seconds until `expire` would clear the screen if nothing new came (None: nothing
        to clear)."""
        if not self.lines:
            return None
        return max(0.0, self.clear_after - (self.clock.now() - self._last_change))

    def hearing(self, words: str | None) -> bool:
        """Fold in the caller's words so far (`Conversation.caller_words`); True if the screen
        changed. Only while the caller speaks: the turn's final words replace them."""
        before = self.snapshot()
        self.caller_words = _tail(words) if words is not None and self.caller_speaking else None
        return self._changed(before)

    def expire(self) -> bool:
        """Clear what was said once nothing new came for `clear_after` seconds; True if it
        cleared."""
        if not self.lines or self.clock.now() - self._last_change < self.clear_after:
            return False
        if any(line["who"] == "agent" and line["said"] == "speaking" for line in self.lines):
            return False  # still playing: not quiet
        self.lines.clear()
        self._last_change = self.clock.now()
        return True

    def _unit(self, unit_id: str) -> AgentLine:
        for line in self.lines:
            if line["who"] == "agent" and line["id"] == unit_id:
                return line
        line = AgentLine(who="agent", id=unit_id, heard="", rest="", said="speaking")
        self._add(line)
        return line

    def _add(self, line: CallerLine | AgentLine) -> None:
        self.lines.append(line)
        del self.lines[:-MAX_LINES]

    def _changed(self, before: Snapshot) -> bool:
        if self.snapshot() == before:
            return False
        self._last_change = self.clock.now()
        return True


def _tail(text: str) -> str:
    """`text`, or its end when it is longer than a line keeps."""
    return text if len(text) <= MAX_LINE_CHARS else "…" + text[-(MAX_LINE_CHARS - 1):]


def _head(text: str) -> str:
    """`text`, or its start when it is longer than a line keeps."""
    return text if len(text) <= MAX_LINE_CHARS else text[:MAX_LINE_CHARS - 1] + "…"
