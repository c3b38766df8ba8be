"""`[memory] keep_audio`: what callers said and what the agent played, kept in the memory
database (table `audio`) for `edge-agent inspect` (waveforms) and `sessions replay` (the real
caller audio instead of the transcript spoken again).

Off by default: a public kiosk keeps no recordings of its callers. When on, each caller speech
segment is kept from its pre-roll to the end of its turn (what the microphone heard, echo
included), and each agent unit as far as it was played (what the listener heard). A clip's `at`
is on the run's clock, like the events' `at`: a caller clip starts where its audio began, an
agent clip at its unit's `PlaybackStarted`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from edge_agent.audio.unit_audio import PlayedUnits
from edge_agent.errors import StoreError
from edge_agent.events import EventLog, LoggedEvent, PlaybackStarted, SessionStarted
from edge_agent.heard.ledger import Finalize
from edge_agent.memory.conversation_memory import ConversationMemory
from edge_agent.memory.schema import AudioRow
from edge_agent.memory.store import MemoryStore, Row
from edge_agent.printable import shown

CALLER = "caller"
AGENT = "agent"


@dataclass(frozen=True)
class AudioClip:
    """One kept stretch of audio."""

    kind: str
    """"caller" (a speech segment the microphone heard) or "agent" (a unit, as far as it
    played)."""
    ref: str
    """The agent unit's id, or "c1", "c2", ... for the caller's segments of a run."""
    run_id: str
    """The process run that recorded it: events with the same run_id share its clock."""
    at: float
    """Seconds on the run's clock (the events' `at`) of the clip's first sample."""
    sample_rate: int
    """Samples per second."""
    pcm: bytes
    """int16 mono, little-endian."""

    @property
    def seconds(self) -> float:
        return len(self.pcm) / 2 / self.sample_rate


def kept_audio(store: MemoryStore, session_ids: Sequence[str]) -> list[AudioClip]:
    """Every kept clip of those sessions, in recording order (empty if none was kept)."""
    if not session_ids:
        return []
    return [_clip(row, store.path) for row in store.audio(session_ids)]


SAMPLE_RATES = (1000, 384_000)
"""Around every rate a sound card or voice uses: a stored rate outside them was not written by
edge-agent (and a rate of 0 would divide by zero in every reader)."""


def _clip(row: Row, path: Path) -> AudioClip:
    """A stored row as a clip; StoreError naming the row if it cannot be audio edge-agent
    wrote (another program may have changed the database): every reader divides by the rate."""
    rate, pcm, at = row["sample_rate"], row["pcm"], row["at"]
    low, high = SAMPLE_RATES
    problem = (
        f"sample_rate is {shown(repr(rate), 40)}, not a rate in {low}..{high}"
        if not isinstance(rate, int) or not low <= rate <= high
        else f"pcm is {type(pcm).__name__}, not audio bytes" if not isinstance(pcm, bytes)
        else f"pcm holds {len(pcm)} bytes, not whole 16-bit samples" if len(pcm) % 2
        else f"at is {shown(repr(at), 40)}, not a time" if not isinstance(at, int | float)
        or not math.isfinite(at) else "")
    if problem:
        raise StoreError(path, f"kept audio row id {row['id']}: {problem}",
                         f"delete that row (sqlite3 {path} 'DELETE FROM audio WHERE id = "
                         f"{row['id']}'), or restore a backup")
    return AudioClip(kind=str(row["kind"]), ref=str(row["ref"]), run_id=str(row["run_id"]),
                     at=float(at), sample_rate=rate, pcm=pcm)


class AudioKeeper:
    """Collects the caller's segments and the units' played audio while the conversation runs
    and queues each clip to the memory database when it ends (the loop never waits on it).

    A clip that ends before a session is open (the speech that opens one) is kept until the
    session opens, like the events of that moment."""

    def __init__(self, memory: ConversationMemory, log: EventLog, mic_rate: int) -> None:
        self._memory = memory
        self._log = log
        self._mic_rate = mic_rate
        self._caller: bytearray | None = None
        self._caller_at = 0.0
        self._segments = 0
        self._units = PlayedUnits()
        self._unit_at: dict[str, float] = {}
        self._pending: list[AudioRow] = []
        """Kept before the session is open: its `session_id` is filled in when it is."""
        log.listen(self._on_event)

    # -- the caller (the loop's speech segments) ----------------------------------------------

    def caller_begins(self, pcm: bytes) -> None:
        """A speech segment began; `pcm` is what the microphone heard up to now (pre-roll)."""
        self._caller = bytearray(pcm)
        self._caller_at = max(0.0, self._log.elapsed() - len(pcm) / 2 / self._mic_rate)

    def caller_hears(self, pcm: bytes) -> None:
        """The next frame of the segment."""
        if self._caller is not None:
            self._caller.extend(pcm)

    def caller_ends(self, keep: bool = True) -> None:
        """The segment ended (its turn ended, or it was judged over the agent); not kept when
        `keep` is False (nothing of the caller's words in it)."""
        audio, self._caller = self._caller, None
        if audio and keep:
            self._segments += 1
            self._keep(CALLER, f"c{self._segments}", self._caller_at, self._mic_rate,
                       bytes(audio))

    # -- the agent (the unit audio sink of playback) ------------------------------------------

    def add(self, unit_id: str, pcm: bytes) -> None:
        """`pcm` was just written to the speaker for `unit_id`."""
        self._units.add(unit_id, pcm)

    def finish(self, finalize: Finalize) -> None:
        """The unit ended: keep what of it was played."""
        audio = self._units.played(finalize)
        at = self._unit_at.pop(finalize.unit_id, None)
        if audio and at is not None:
            self._keep(AGENT, finalize.unit_id, at, finalize.sample_rate, audio)

    # -- to the database -----------------------------------------------------------------------

    def _on_event(self, entry: LoggedEvent) -> None:
        event = entry.event
        if isinstance(event, PlaybackStarted):
            self._unit_at[event.unit_id] = entry.at
        elif isinstance(event, SessionStarted):
            self._segments = 0
            self._flush()

    def _keep(self, kind: str, ref: str, at: float, rate: int, pcm: bytes) -> None:
        self._pending.append({"session_id": "", "run_id": self._memory.run_id, "kind": kind,
                              "ref": ref, "at": round(at, 4), "sample_rate": rate, "pcm": pcm})
        self._flush()

    def _flush(self) -> None:
        session_id, writer = self._memory.session_id, self._memory.writer
        if session_id is None or writer is None or not self._pending:
            return
        rows, self._pending = self._pending, []
        for row in rows:
            row["session_id"] = session_id

        def add(store: MemoryStore) -> None:
            for row in rows:
                store.add_audio(row)

        writer.submit(add, durable=False, what="kept audio")
