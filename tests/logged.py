"""Typed events for hand-made records and event lists: built from the event dataclasses, so a
test's event is always one the agent could have published (a record's JSON is `to_json`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

from edge_agent.events import Event, LoggedEvent, UnitFinalized
from edge_agent.heard.ledger import Finalize


def finalized(unit_id: str, generated: str, heard: str | None = None, *,
              played_samples: int = 0, sample_rate: int = 22050) -> UnitFinalized:
    """The end of a unit that generated `generated` and was heard up to `heard` (all of it by
    default), with no word timings."""
    return UnitFinalized(Finalize(unit_id, generated, generated if heard is None else heard,
                                  played_samples, sample_rate, (), 0))


def shifted(event: Event, seconds: float) -> Event:
    """`event` with its microphone time (if it has one) `seconds` later."""
    if hasattr(event, "audio_time"):
        return dataclasses.replace(event, audio_time=event.audio_time + seconds)
    return event


def read_events(events: Iterable[Mapping[str, Any]]) -> list[LoggedEvent]:
    """Events as a record or a bench document holds them (`to_json`), read back typed: every
    one must be of a type this version knows."""
    given = list(events)
    typed = [LoggedEvent.from_json(event) for event in given]
    assert None not in typed, [e for e, t in zip(given, typed, strict=True) if t is None]
    return [entry for entry in typed if entry is not None]


E = TypeVar("E")


def events_of(events: Iterable[Mapping[str, Any]], kind: type[E]) -> list[E]:
    """The events of type `kind`, typed, in order."""
    return [entry.event for entry in read_events(events) if isinstance(entry.event, kind)]


def kinds(events: Iterable[Mapping[str, Any]]) -> list[type[Event]]:
    """The types of the events, in order."""
    return [type(entry.event) for entry in read_events(events)]
