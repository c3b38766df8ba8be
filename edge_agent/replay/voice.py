"""The agent's voice in a replay: each unit spoken with the word timings it was recorded with.

Piper's voice is random: the same text synthesized twice comes out tens of milliseconds longer
or shorter, its words moved (its noise is drawn anew on each run). A replay that synthesized the
agent's units again would put other words under the caller's cut and shift everything after,
by chance. So a replayed clause gets the samples its words had in the recorded unit: the
clause's audio runs from the end of the word before it to the end of its last word (the unit's
recorded length for its last clause), and its words sit where they were. The sound itself is
the unit's kept audio where `[memory] keep_audio` kept it (as far as it played), else the
configured voice's audio of the clause fitted to that length (it only matters where the
agent's sound is compared with the microphone's, for echo). A clause the recording has no
timings for (never synthesized before a cut; a text that is not the recorded one) is
synthesized by the voice as usual.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from edge_agent.audio.pcm import first_loud_sample, resample
from edge_agent.engines.base import SpeechAudio, TextToSpeech
from edge_agent.heard.timings import WordTiming, tokenize
from edge_agent.memory.record import UnitRecord

TAIL_MS = 200
"""Audio after the last word of a unit that was cut before it played out (its real length
was never recorded; Piper ends a sentence with about this much near-silence)."""
LEAD_LEVEL = 100
LEAD_KEEP_MS = 5.0
"""The reply's first piece is trimmed to this much before its first sample of `LEAD_LEVEL`
(`SpeechAudio.without_leading_silence`); the recorded timings are already trimmed."""


@dataclass(frozen=True)
class RecordedWord:
    text: str
    start_ms: int
    end_ms: int
    exact: bool


@dataclass(frozen=True)
class RecordedUnit:
    """What the recording knows of one unit's audio."""

    unit_id: str
    generated: str
    words: tuple[RecordedWord, ...]
    """Timings of the words synthesized before the unit ended (all, unless cut early)."""
    length_ms: int | None
    """Its whole audio, when it played out; None when it was cut."""
    played: bytes = b""
    """Its kept audio as far as it played (int16 at the voice's rate), if kept."""


def recorded_units(units: Sequence[UnitRecord], played: Mapping[str, bytes]
                   ) -> list[RecordedUnit]:
    """The session record's `units`, with the kept audio of each (by unit id) if any."""
    return [RecordedUnit(
        u["unit_id"], u["generated"],
        # A record from a file may hold whole numbers as floats (12.0): its checker allows them.
        tuple(RecordedWord(w["text"], int(w["start_ms"]), int(w["end_ms"]),
                           w.get("exact", True)) for w in u["words"]),
        None if u["interrupted"] else int(u["played_ms"]),
        played.get(u["unit_id"], b"")) for u in units]


class RecordedSpeech:
    """A `TextToSpeech` that says the recorded units' clauses with their recorded timings
    (see the module's doc); anything else goes to `voice`."""

    def __init__(self, units: Sequence[RecordedUnit], voice: TextToSpeech) -> None:
        self.sample_rate = voice.sample_rate
        self._units = list(units)
        self._voice = voice
        self._unit = -1
        self._offset = 0
        self.untimed: list[str] = []
        """Clauses said without recorded timings, in order."""

    def synthesize(self, text: str) -> SpeechAudio:
        found = self._find(text)
        if found is not None:
            unit, start = found
            audio = self._recorded(self._units[unit], start, text)
            if audio is not None:
                return audio
        self.untimed.append(text)
        return self._voice.synthesize(text)

    def _find(self, text: str) -> tuple[int, int] | None:
        """Which unit and offset `text` is: the next clause of the unit being said, the first
        clause of it again (a speculation thrown away and said anew), or the first clause of
        a later unit."""
        if self._unit >= 0:
            generated = self._units[self._unit].generated
            for start in (self._offset, 0):
                if generated.startswith(text, start):
                    self._offset = start + len(text)
                    return self._unit, start
        for index in range(self._unit + 1, len(self._units)):
            if self._units[index].generated.startswith(text):
                self._unit, self._offset = index, len(text)
                return index, 0
        return None

    def _recorded(self, unit: RecordedUnit, start: int, text: str) -> SpeechAudio | None:
        rate = self.sample_rate
        tokens = tokenize(unit.generated)
        if any(unit.generated[s:e] != w.text for (s, e), w in zip(tokens, unit.words,
                                                                 strict=False)):
            return None  # not the text these timings were made for
        inside = [i for i, (s, e) in enumerate(tokens) if s >= start and e <= start + len(text)]
        if not inside or inside[-1] >= len(unit.words):
            return None

        def sample(ms: int) -> int:
            return round(ms * rate / 1000)

        first, last = inside[0], inside[-1]
        begin = sample(unit.words[first - 1].end_ms) if first > 0 and start > 0 else 0
        if unit.generated[start + len(text):].strip():
            end = sample(unit.words[last].end_ms)
        elif unit.length_ms is not None:
            end = sample(unit.length_ms)
        else:
            end = max(sample(unit.words[last].end_ms + TAIL_MS), len(unit.played) // 2)
        end = max(end, begin + 1)
        words = tuple(WordTiming(unit.words[i].text, tokens[i][0] - start, tokens[i][1] - start,
                                 max(0, sample(unit.words[i].start_ms) - begin),
                                 max(0, sample(unit.words[i].end_ms) - begin),
                                 unit.words[i].exact) for i in inside)
        return SpeechAudio(self._sound(unit, text, begin, end), rate, words)

    def _sound(self, unit: RecordedUnit, text: str, begin: int, end: int) -> bytes:
        """`end - begin` samples: the kept audio there, the voice's audio fitted after it."""
        size = 2 * (end - begin)
        kept = unit.played[2 * begin:2 * end]
        if len(kept) == size:
            return kept  # as it was played (a reply's first piece already trimmed)
        spoken = self._voice.synthesize(text).pcm
        fitted = resample(spoken, max(1, len(spoken) // 2), end - begin)[:size].ljust(size, b"\0")
        if begin == 0 and not kept:
            # The recorded timings are those of a trimmed first piece: the fitted sound starts
            # loud at once, so that the trim of a reply's first piece leaves it as it is.
            keep = int(LEAD_KEEP_MS * self.sample_rate / 1000)
            loud = first_loud_sample(fitted, LEAD_LEVEL)
            if loud is not None and loud > keep:
                fitted = fitted[2 * (loud - keep):].ljust(size, b"\0")
        return kept + fitted[len(kept):]
