"""Turn-taking decisions read off an event list, and two lists aligned.

One extractor for both sides: the recorded events (the session record's, read typed) and the
replay's (its event log), so both are read the same way.

Compared, in order:

- `paused`: playback held at the onset of speech over the agent (the onset was not echo);
- `barge-in`: the speech over the agent interrupted it (which unit, the words that decided);
- `backchannel`, `echo`, `dropped`: speech not answered (an acknowledgement, the agent's own
  voice, nothing recognized);
- `answered`: a user turn the agent answers, with its transcript;
- `heard`: per agent unit, what the listener heard of it and whether it was cut.

Not compared: `SpeculationCancelled`. A speculation is the agent preparing an answer during the
caller's silence; nothing of it is played or kept, so the caller never experiences it. Whether
one is thrown away ("history changed", "reply stopped") depends on how fast the model and the
voice ran on the recording's machine, which a replay on the virtual clock does not reproduce;
comparing them would report differences no caller could notice. Units are named by position
(the 3rd unit of the session), which is what their ids count.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence
from typing import Literal, TypedDict

from edge_agent.events import (
    Backchannel,
    BargeIn,
    EchoIgnored,
    LoggedEvent,
    PlaybackPaused,
    PlaybackStarted,
    TurnDropped,
    UnitFinalized,
    UserTurn,
)

Kind = Literal["paused", "barge-in", "backchannel", "echo", "dropped", "answered", "heard"]


class Decision(TypedDict):
    """One turn-taking outcome."""

    kind: Kind
    at: float
    """When it happened (seconds on that run's clock); shown, never compared."""
    unit: int | None
    """The agent unit concerned, by position in the session (1 = the first), if any."""
    text: str
    """The transcript (answered, backchannel, echo), the words that decided a barge-in, or
    what the listener heard of a unit."""
    interrupted: bool | None
    """For `heard`: whether the unit was cut."""


Status = Literal["same", "changed", "recorded only", "replay only"]


class Row(TypedDict):
    """One line of the comparison."""

    status: Status
    recorded: Decision | None
    replay: Decision | None


def decisions(events: Iterable[LoggedEvent]) -> list[Decision]:
    """The turn-taking outcomes of `events`, in order."""
    units: dict[str, int] = {}

    def unit(unit_id: str | None) -> int | None:
        if unit_id is None:
            return None
        return units.setdefault(unit_id, len(units) + 1)

    found: list[Decision] = []
    for entry in events:
        kind: Kind
        number, text, interrupted = None, "", None
        match entry.event:
            case PlaybackStarted(unit_id=unit_id):
                unit(unit_id)
                continue
            case PlaybackPaused(unit_id=unit_id):
                kind, number = "paused", unit(unit_id)
            case BargeIn(unit_id=unit_id, words=words):
                kind, number, text = "barge-in", unit(unit_id), words
            case Backchannel(text=text):
                kind = "backchannel"
            case EchoIgnored(text=text):
                kind = "echo"
            case TurnDropped():
                kind = "dropped"
            case UserTurn(text=text):
                kind = "answered"
            case UnitFinalized(finalize=finalize):
                kind, number, text = "heard", unit(finalize.unit_id), finalize.heard
                interrupted = finalize.interrupted
            case _:
                continue
        found.append({"kind": kind, "at": round(entry.at, 4), "unit": number, "text": text,
                      "interrupted": interrupted})
    return found


def _key(decision: Decision) -> tuple[object, ...]:
    return (decision["kind"], decision["unit"], decision["text"], decision["interrupted"])


def compare(recorded: Sequence[Decision], replay: Sequence[Decision]) -> list[Row]:
    """Both lists aligned: equal decisions side by side; where they part, a recorded decision
    and a replayed one of the same kind (and unit) pair up as "changed", the rest stand alone."""
    rows: list[Row] = []
    matcher = difflib.SequenceMatcher(a=[_key(d) for d in recorded],
                                      b=[_key(d) for d in replay], autojunk=False)
    for tag, a0, a1, b0, b1 in matcher.get_opcodes():
        if tag == "equal":
            rows.extend({"status": "same", "recorded": recorded[a0 + i], "replay": replay[b0 + i]}
                        for i in range(a1 - a0))
        else:
            rows.extend(_pair(recorded[a0:a1], replay[b0:b1]))
    return rows


def _pair(recorded: Sequence[Decision], replay: Sequence[Decision]) -> list[Row]:
    """A differing stretch: each recorded decision paired, in order, with the next replayed
    one of the same kind and unit; whatever is left over stands alone where it happened."""
    rows: list[Row] = []
    next_replay = 0
    for old in recorded:
        match = next((j for j in range(next_replay, len(replay))
                      if (replay[j]["kind"], replay[j]["unit"]) == (old["kind"], old["unit"])),
                     None)
        if match is None:
            rows.append({"status": "recorded only", "recorded": old, "replay": None})
            continue
        rows.extend({"status": "replay only", "recorded": None, "replay": extra}
                    for extra in replay[next_replay:match])
        rows.append({"status": "changed", "recorded": old, "replay": replay[match]})
        next_replay = match + 1
    rows.extend({"status": "replay only", "recorded": None, "replay": extra}
                for extra in replay[next_replay:])
    return rows


def differences(rows: Sequence[Row]) -> int:
    return sum(1 for row in rows if row["status"] != "same")
