"""Units on the speaker: opened by a reply, played back to back, each finalized exactly once.

A unit is finalized when its playback ends, or, when playback is cut short (a barge-in, a reply
that failed), where the device's played position leaves it. Its Finalize goes to memory (the
heard history and the record), to the event log and to the unit audio writer.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from edge_agent.audio.device import Speaker
from edge_agent.audio.unit_audio import UnitAudioSink
from edge_agent.engines.base import SpeechAudio
from edge_agent.events import EventLog, Notice, PlaybackStarted, UnitFinalized
from edge_agent.heard.ledger import Finalize, Unit, UnitLedger
from edge_agent.heard.truncation import HeardPolicy
from edge_agent.memory.conversation_memory import ConversationMemory


@dataclass(frozen=True)
class NowPlaying:
    """The unit at the speaker, as far as the device has played it."""

    unit_id: str
    """The unit playing."""
    text: str
    """Its text so far (the reply may still be generating the rest)."""
    heard: str
    """The prefix of `text` heard at the device's played position, by the heard-truth
    policy: what the record would keep were the unit cut now."""


class Playback:
    """The unit ledger and the speaker it plays on."""

    def __init__(self, speaker: Speaker, memory: ConversationMemory, log: EventLog,
                 unit_audio: UnitAudioSink | None, policy: HeardPolicy) -> None:
        self._speaker = speaker
        self._memory = memory
        self._log = log
        self._unit_audio = unit_audio
        self._ledger = UnitLedger(policy)
        self._recent: deque[Unit] = deque(maxlen=4)
        self._checkpointed: tuple[str, int] | None = None

    @property
    def open_units(self) -> tuple[Unit, ...]:
        return self._ledger.open_units

    @property
    def playing_unit(self) -> str | None:
        return self._ledger.open_units[0].unit_id if self._ledger.open_units else None

    def recent_units(self) -> tuple[Unit, ...]:
        """The last few units opened (finalized or not), oldest first."""
        return tuple(self._recent)

    def number_units_after(self, count: int) -> None:
        """Units of a resumed session exist up to u`count`: new ones are numbered after it."""
        self._ledger.number_after(count)

    def open(self, sample_rate: int) -> Unit:
        unit = self._ledger.open(sample_rate)
        self._recent.append(unit)
        return unit

    def queue(self, unit: Unit, audio: SpeechAudio, text_start: int, text_end: int) -> bool:
        """Queue `audio`, synthesized for `unit.text[text_start:text_end]`, after everything
        queued; True if it is the unit's first audio."""
        unit.add_audio(audio.samples, audio.words, text_start, text_end)
        device_frame = self._speaker.write(audio.pcm)
        if self._unit_audio is not None:
            self._unit_audio.add(unit.unit_id, audio.pcm)
        if unit.device_start is not None:
            return False
        unit.device_start = device_frame
        return True

    async def started(self, unit: Unit) -> None:
        """Wait until the unit's first sample has reached the device; announce it."""
        if unit.device_start is not None:
            await self._speaker.wait_played(unit.device_start + 1)
            self._log.publish(PlaybackStarted(unit.unit_id))

    def now_playing(self) -> NowPlaying | None:
        """The unit whose audio the device is playing, and what of it was heard so far."""
        playing = self._playing()
        if playing is None:
            return None
        unit, _, heard = playing
        return NowPlaying(unit.unit_id, unit.text, heard)

    def _playing(self) -> tuple[Unit, int, str] | None:
        """The first open unit with audio queued: (it, samples played, heard prefix)."""
        open_units = self._ledger.open_units
        if not open_units or open_units[0].device_start is None:
            return None
        unit = open_units[0]
        return unit, *self._ledger.heard_at(unit, self._speaker.played_frames())

    def checkpoint(self) -> None:
        """Tell memory where the playing unit is, if it moved: a crash recovers the unit with
        the heard prefix of its last checkpoint (never more than had played)."""
        playing = self._playing()
        if playing is None:
            return
        unit, played, heard = playing
        if self._checkpointed == (unit.unit_id, played):
            return
        self._checkpointed = (unit.unit_id, played)
        self._memory.checkpoint(unit.unit_id, unit.text, heard,
                                round(played * 1000 / unit.sample_rate))

    async def finish(self, unit: Unit) -> None:
        """Wait until the unit has played out, then finalize it (and any opened before it)."""
        if unit.device_start is not None:
            end = unit.device_start + unit.audio_samples
            await self._speaker.wait_played(end)
            if self._speaker.played_frames() < end:
                # The queue was dropped (a barge-in) before the unit played out: `stop` is
                # finalizing it where playback was cut. Finalizing it here as played out would
                # record words nobody heard.
                return
        if not unit.text:
            self._log.publish(Notice(f"{unit.unit_id}: the reply was empty; nothing to say"))
        self._record(self._ledger.finalize(unit, unit.audio_samples))

    async def play_out(self, units: Sequence[Unit]) -> None:
        """Units a failure cut short: what of them was queued plays out, then each is finalized
        where playback left it (the text never synthesized is never heard). After a barge-in
        meanwhile, `stop` has finalized them already."""
        queued = [u.device_start + u.audio_samples for u in units if u.device_start is not None]
        if queued:
            await self._speaker.wait_played(max(queued))
        played = self._speaker.played_frames()
        for unit in units:
            self._record(self._ledger.finalize(unit, unit.played_at(played)))

    def interrupt(self) -> int:
        """Stop playback at once (no tail, queue dropped); the device's played position."""
        return self._speaker.interrupt()

    def finalize_all(self, played: int) -> None:
        """Finalize every open unit where the device's played position `played` leaves it."""
        self._record(self._ledger.finalize_all(played))

    def _record(self, finalizes: list[Finalize]) -> None:
        for finalize in finalizes:
            self._memory.add_finalize(finalize)
            self._log.publish(UnitFinalized(finalize))
            if self._unit_audio is not None:
                self._unit_audio.finish(finalize)
