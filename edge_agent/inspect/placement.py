"""Where an agent unit's words and audio sat on the clock, and which words were heard.

A unit's audio starts at its PlaybackStarted; a word is `start_ms` into that audio. Playback
can be held while the caller's speech over the agent is judged (pause_on_speech): everything
after a pause plays that much later. A pause that never resumed ended the unit (the speech was
an interruption); the words after it were never played, and are placed where they would have
played had playback gone on.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from edge_agent.inspect.model import Pause, PlacedWord, UnitView
from edge_agent.memory.record import UnitRecord


@dataclass(frozen=True)
class Playback:
    """How a unit's audio met the clock."""

    start: float
    """Its first sample at the device."""
    pauses: tuple[Pause, ...] = ()
    """Every hold, in order (clock times)."""

    def at(self, offset: float) -> float:
        """The clock time of `offset` seconds into the unit's audio. Only resumed pauses
        shift it: past an unresumed one, the time it would have played."""
        moment = self.start + offset
        for pause in self.pauses:
            if pause.resumed and moment >= pause.start:
                moment += pause.end - pause.start
        return moment

    def playing(self, played_ms: int) -> tuple[tuple[float, float], ...]:
        """The stretches of the clock during which `played_ms` of audio played."""
        stretches: list[tuple[float, float]] = []
        left, moment = played_ms / 1000, self.start
        for pause in self.pauses:
            part = min(pause.start - moment, left)
            stretches.append((moment, moment + part))
            left -= part
            moment = pause.end
        if left > 0.01 or not stretches:  # less: the rounding of played_ms
            stretches.append((moment, moment + max(left, 0.0)))
        return tuple((a, b) for a, b in stretches if b > a) or ((self.start, self.start),)


def heard_words(texts: Sequence[str], generated: str, heard: str,
                ends_ms: Sequence[int], played_ms: int) -> int:
    """How many of the unit's words (in order) are inside its heard prefix.

    The words are the generated text's tokens, so the heard prefix is matched word by word.
    If they do not spell the generated text (a record from elsewhere), the words that ended
    within the played audio count as heard."""
    if _matched(texts, generated) == len(texts):
        return _matched(texts, heard)
    return sum(1 for end in ends_ms if end <= played_ms)


def _matched(texts: Sequence[str], text: str) -> int:
    """How many of `texts`, in order, `text` spells from its start (spaces between)."""
    position = 0
    for count, word in enumerate(texts):
        rest = text[position:]
        stripped = rest.lstrip()
        if not word or not stripped.startswith(word):
            return count
        position += len(rest) - len(stripped) + len(word)
    return len(texts)


def place_unit(unit: UnitRecord, start: float | None, pauses: Sequence[Pause],
               finalized_at: float) -> UnitView:
    """The unit on the clock: `start` is its PlaybackStarted (None if it never played),
    `finalized_at` its UnitFinalized."""
    words = unit["words"]
    count = heard_words([w["text"] for w in words], unit["generated"], unit["heard"],
                        [w["end_ms"] for w in words], unit["played_ms"])
    origin = finalized_at if start is None else start
    # A hold that ended before the first sample reached the device held nothing audible.
    pauses = [Pause(max(p.start, origin), p.end, p.resumed) for p in pauses if p.end > origin]
    playback = Playback(origin, tuple(pauses))
    placed = tuple(
        PlacedWord(index=i, text=w["text"], start=playback.at(w["start_ms"] / 1000),
                   end=playback.at(w["end_ms"] / 1000), heard=i < count,
                   exact=w.get("exact", True))
        for i, w in enumerate(words))
    playing = playback.playing(unit["played_ms"]) if start is not None else ()
    end = max([b for _, b in playing] + [p.end for p in pauses]) if playing else finalized_at
    return UnitView(unit_id=unit["unit_id"], generated=unit["generated"], heard=unit["heard"],
                    played_ms=unit["played_ms"], start=start, end=end, playing=playing,
                    pauses=tuple(pauses), words=placed)
