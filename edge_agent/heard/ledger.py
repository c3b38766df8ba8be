"""The unit ledger: every speech unit opened gets exactly one Finalize, in opening order."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from edge_agent.heard.timings import WordTiming
from edge_agent.heard.truncation import HeardPolicy, heard_prefix


@dataclass(frozen=True)
class Finalize:
    """What one unit of assistant speech delivered, decided once, when its playback ended."""

    unit_id: str
    """The unit this closes."""
    generated: str
    """The full text emitted for the unit."""
    heard: str
    """The verbatim prefix of `generated` that reached the listener."""
    played_samples: int
    """Samples of the unit's audio that reached the device's output."""
    sample_rate: int
    """Rate of the unit's audio."""
    words: tuple[WordTiming, ...]
    """Word timings of everything synthesized for the unit."""
    inexact_words: int
    """How many tokens had only safe bounds instead of exact phoneme timings."""

    @property
    def interrupted(self) -> bool:
        return self.heard != self.generated

    @property
    def played_ms(self) -> int:
        return round(self.played_samples * 1000 / self.sample_rate) if self.sample_rate else 0


@dataclass
class Unit:
    """A unit of assistant speech while it is open: text and audio accumulate clause by clause."""

    unit_id: str
    sample_rate: int
    text: str = ""
    words: list[WordTiming] = field(default_factory=list)
    audio_samples: int = 0
    audio_text_end: int = 0
    device_start: int | None = None
    """Device frame at which the unit's first sample was queued for playback."""

    def played_at(self, device_played: int) -> int:
        """Samples of this unit played when the device has played `device_played` frames."""
        if self.device_start is None:
            return 0
        return max(0, min(device_played - self.device_start, self.audio_samples))

    def add_text(self, piece: str) -> None:
        self.text += piece

    def add_audio(self, samples: int, words: Sequence[WordTiming], text_start: int,
                  text_end: int) -> None:
        """Append audio synthesized for `text[text_start:text_end]`.

        `words` are timed relative to that piece (chars and samples); they are moved onto the
        unit's text and audio here, so pieces synthesized separately share one timeline.
        """
        offset = self.audio_samples
        self.words.extend(
            WordTiming(w.text, w.char_start + text_start, w.char_end + text_start,
                       w.start_sample + offset, w.end_sample + offset, w.exact)
            for w in words
        )
        self.audio_samples += samples
        self.audio_text_end = text_end


class UnitLedger:
    """Opens units and finalizes each exactly once, first opened first finalized."""

    def __init__(self, policy: HeardPolicy = HeardPolicy.COMPLETED) -> None:
        self._policy = policy
        self._open: list[Unit] = []
        self._count = 0

    @property
    def open_units(self) -> tuple[Unit, ...]:
        return tuple(self._open)

    def open(self, sample_rate: int) -> Unit:
        self._count += 1
        unit = Unit(f"u{self._count}", sample_rate)
        self._open.append(unit)
        return unit

    def number_after(self, count: int) -> None:
        """Number the next unit `count + 1` (a resumed session already used the ids before)."""
        self._count = max(self._count, count)

    def heard_at(self, unit: Unit, device_played: int) -> tuple[int, str]:
        """(samples played, heard prefix) of an open unit when the device has played
        `device_played` frames: what its Finalize would say if playback stopped now."""
        played = unit.played_at(device_played)
        return played, heard_prefix(unit.text, unit.words, played, unit.audio_samples,
                                    self._policy, audio_text_end=unit.audio_text_end)

    def finalize(self, unit: Unit, played_samples: int) -> list[Finalize]:
        """Finalize `unit` and, first, every unit opened before it that is still open."""
        if unit not in self._open:
            return []
        done: list[Finalize] = []
        while self._open:
            head = self._open[0]
            played = played_samples if head is unit else head.audio_samples
            done.append(self._close(head, played))
            if head is unit:
                break
        return done

    def finalize_all(self, device_played: int) -> list[Finalize]:
        """Finalize every open unit, in order, where the device's played position leaves it."""
        done: list[Finalize] = []
        while self._open:
            head = self._open[0]
            done.append(self._close(head, head.played_at(device_played)))
        return done

    def _close(self, unit: Unit, played: int) -> Finalize:
        self._open.remove(unit)
        played = max(0, min(played, unit.audio_samples))
        heard = heard_prefix(
            unit.text, unit.words, played, unit.audio_samples, self._policy,
            audio_text_end=unit.audio_text_end,
        )
        return Finalize(
            unit_id=unit.unit_id,
            generated=unit.text,
            heard=heard,
            played_samples=played,
            sample_rate=unit.sample_rate,
            words=tuple(unit.words),
            inexact_words=sum(1 for w in unit.words if not w.exact),
        )
