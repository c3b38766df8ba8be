"""Turn-taking decisions read off an event list, and two lists aligned.

One extractor for both sides: the recorded events (the session record's JSON) and the
replay's (`LoggedEvent.to_json()`), so both are read the same way.

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
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal, TypedDict

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


def decisions(events: Iterable[Mapping[str, Any]]) -> list[Decision]:
    """The turn-taking outcomes of `events` (dicts with "at", "type" and the event's fields),
    in order."""
    units: dict[str, int] = {}

    def unit(unit_id: object) -> int | None:
        if not isinstance(unit_id, str):
            return None
        return units.setdefault(unit_id, len(units) + 1)

    found: list[Decision] = []

    def add(kind: Kind, event: Mapping[str, Any], unit_number: int | None, text: str,
            interrupted: bool | None = None) -> None:
        found.append({"kind": kind, "at": round(float(event["at"]), 4), "unit": unit_number,
                      "text": text, "interrupted": interrupted})

    for event in events:
        kind = event["type"]
        if kind == "PlaybackStarted":
            unit(event["unit_id"])
        elif kind == "PlaybackPaused":
            add("paused", event, unit(event["unit_id"]), "")
        elif kind == "BargeIn":
            add("barge-in", event, unit(event["unit_id"]), str(event["words"]))
        elif kind == "Backchannel":
            add("backchannel", event, None, str(event["text"]))
        elif kind == "EchoIgnored":
            add("echo", event, None, str(event["text"]))
        elif kind == "TurnDropped":
            add("dropped", event, None, "")
        elif kind == "UserTurn":
            add("answered", event, None, str(event["text"]))
        elif kind == "UnitFinalized":
            finalize = event["finalize"]
            add("heard", event, unit(finalize["unit_id"]), str(finalize["heard"]),
                finalize["heard"] != finalize["generated"])
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
