"""Where the conversation's audio may go besides the devices: each unit's audio as it reached
the device (`--audio-dir` writes one WAV per unit; `[memory] keep_audio` keeps it in the
database) and the caller's speech segments (kept in the database)."""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Protocol

from edge_agent.audio.pcm import write_wav
from edge_agent.errors import OutputError
from edge_agent.heard.ledger import Finalize


class UnitAudioSink(Protocol):
    def add(self, unit_id: str, pcm: bytes) -> None:
        """`pcm` was just written to the speaker for `unit_id`, after what came before."""
        ...

    def finish(self, finalize: Finalize) -> None:
        """The unit ended; `finalize.played_samples` of it reached the listener."""
        ...


class CallerAudioSink(Protocol):
    def caller_begins(self, pcm: bytes) -> None:
        """A speech segment began; `pcm` is what the microphone heard of it (pre-roll)."""
        ...

    def caller_hears(self, pcm: bytes) -> None:
        """The segment's next microphone frame."""
        ...

    def caller_ends(self, keep: bool = True) -> None:
        """The segment ended; `keep` False: it held none of the caller's words (the wake word
        said alone: only the silence after it was heard), forget it."""
        ...


class UnitAudioSinks:
    """Several sinks as one, each told everything in order."""

    def __init__(self, sinks: Sequence[UnitAudioSink]) -> None:
        self._sinks = list(sinks)

    def add(self, unit_id: str, pcm: bytes) -> None:
        for sink in self._sinks:
            sink.add(unit_id, pcm)

    def finish(self, finalize: Finalize) -> None:
        for sink in self._sinks:
            sink.finish(finalize)


class PlayedUnits:
    """The audio each open unit sent to the speaker; at its Finalize, what of it played."""

    def __init__(self) -> None:
        self._audio: dict[str, bytearray] = {}

    def add(self, unit_id: str, pcm: bytes) -> None:
        self._audio.setdefault(unit_id, bytearray()).extend(pcm)

    def played(self, finalize: Finalize) -> bytes:
        """The unit's first `played_samples` (it ends where playback stopped); forgets it."""
        return bytes(self._audio.pop(finalize.unit_id, b"")[: 2 * finalize.played_samples])


class UnitAudioWriter:
    """Keeps what each open unit sent to the speaker; at its Finalize, writes `<unit_id>.wav`
    holding the first `played_samples` of it, i.e. ending where playback stopped.

    Files are written on the writer's own thread, so the loop never waits on the disk.
    """

    def __init__(self, directory: Path) -> None:
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise OutputError(directory, exc) from None
        self.directory = directory
        self._units = PlayedUnits()
        self._disk = ThreadPoolExecutor(max_workers=1, thread_name_prefix="unit-audio")
        self._pending: list[Future[Path]] = []

    def add(self, unit_id: str, pcm: bytes) -> None:
        """`pcm` was just written to the speaker for `unit_id`, after what came before."""
        self._units.add(unit_id, pcm)

    def finish(self, finalize: Finalize) -> None:
        """Write the unit's played audio (an empty WAV when nothing of it was played)."""
        audio = self._units.played(finalize)
        path = self.directory / f"{finalize.unit_id}.wav"
        rate = finalize.sample_rate or 16000
        self._pending.append(self._disk.submit(_write, path, audio, rate))

    def close(self) -> list[Path]:
        """Wait for every file; returns their paths. A write that failed raises here."""
        self._disk.shutdown(wait=True)
        return [job.result() for job in self._pending]


def _write(path: Path, pcm: bytes, rate: int) -> Path:
    try:
        write_wav(path, pcm, rate)
    except OSError as exc:
        raise OutputError(path, exc) from None
    return path
