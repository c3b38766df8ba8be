"""The venue's knowledge as a running agent holds it: read from its files into the index, read
again when a file changes (no restart), asked once per turn.

Blocking, and used by one thread (the knowledge's owner; the loop never waits on a file or the
database). At start-up a file that cannot be read stops the agent with the file and line, like
a bad config; once running, a file edited into something unreadable is reported (a `Notice`
naming the file and line) and the knowledge it held before is kept and answered from: a
typo never mutes a kiosk.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Protocol

from edge_agent.errors import ConfigError
from edge_agent.knowledge.entries import Contents, Source
from edge_agent.knowledge.ground import (
    Context,
    Grounding,
    GroundingSettings,
    Match,
    Venue,
    ground,
    matches_for,
)
from edge_agent.knowledge.index import Fingerprint, KnowledgeIndex, fingerprint, vocabulary_of
from edge_agent.knowledge.sources import combine, read_source
from edge_agent.knowledge.text import BUILT_IN_SYNONYMS, Synonyms, terms, words

Wall = Callable[[], datetime]
"""The wall clock (an aware datetime): opening hours are answered on it."""


class Grounder(Protocol):
    """The venue's knowledge as the conversation asks it (blocking: called on its own
    thread)."""

    def ground(self, text: str, context: Context | None = None) -> Grounding:
        """How to answer `text`."""
        ...

    def refresh(self) -> Refreshed:
        """Read again the files that changed."""
        ...


@dataclass(frozen=True)
class Refreshed:
    """What one look at the files found."""

    indexed: tuple[str, ...] = ()
    """Files indexed again."""
    errors: tuple[str, ...] = ()
    """Files that could not be read, with why (their earlier content is kept)."""


class VenueKnowledge:
    def __init__(self, files: Sequence[Path], index: KnowledgeIndex,
                 settings: GroundingSettings, wall: Wall) -> None:
        self.files = [str(f) for f in files]
        self.index = index
        self.settings = settings
        self._wall = wall
        self._sources: dict[str, Source] = {}
        self._fingerprints: dict[str, Fingerprint] = {}
        self._seen: dict[str, tuple[int, int]] = {}
        """Each file's (size, mtime_ns) when it was last read, good or not."""
        self._venue: Venue | None = None
        self.contents = Contents()
        """What the files hold now (as indexed)."""

    def load(self) -> Refreshed:
        """Read every file (ConfigError naming the file and line for the first that cannot be
        read) and index what changed since the database last indexed it."""
        read = {path: self._read(path) for path in self.files}
        combine([source for source, _ in read.values()])  # refused before anything is kept
        self._adopt(read)
        return self._index()

    def refresh(self) -> Refreshed:
        """Read again the files whose size or time changed; index those whose content did.
        A file that cannot be read now keeps its earlier entries (reported in `errors`)."""
        changed: dict[str, tuple[Source, Fingerprint]] = {}
        errors = []
        for path in self.files:
            try:
                info = Path(path).stat()
                stat = (info.st_size, info.st_mtime_ns)
            except OSError:
                stat = (-1, -1)
            if self._seen.get(path) == stat:
                continue
            self._seen[path] = stat  # a broken file is reported once per change
            try:
                changed[path] = self._read(path)
            except ConfigError as exc:
                errors.append(f"{exc}; answering from what it held before")
        if not changed:
            return Refreshed(errors=tuple(errors))
        sources = {**self._sources, **{p: s for p, (s, _) in changed.items()}}
        try:
            combine([sources[p] for p in self.files if p in sources])
        except ConfigError as exc:
            return Refreshed(errors=(*errors, f"{exc}; answering from what it held before"))
        before = dict(self._sources), dict(self._fingerprints)
        self._adopt(changed)
        try:
            return Refreshed(self._index().indexed, tuple(errors))
        except sqlite3.Error as exc:  # the database is busy or full: tried again next time
            self._sources, self._fingerprints = before
            for path in changed:
                self._seen.pop(path, None)
            return Refreshed(errors=(*errors, f"the knowledge index could not be updated "
                                     f"({type(exc).__name__}: {exc}); answering from what it "
                                     "held before, trying again"))

    def ground(self, text: str, context: Context | None = None) -> Grounding:
        """How to answer `text` (see `knowledge.ground`)."""
        if self._venue is None:
            raise RuntimeError("VenueKnowledge.ground before load")
        return ground(text, self._venue, self.settings, self._wall, context or Context())

    def matches(self, text: str) -> list[Match]:
        """The entries `text` finds, best first, with their scores (no decision)."""
        if self._venue is None:
            raise RuntimeError("VenueKnowledge.matches before load")
        return matches_for(text, self._venue)

    def close(self) -> None:
        self.index.close()

    def _read(self, path: str) -> tuple[Source, Fingerprint]:
        source, data = read_source(Path(path))
        try:
            return source, fingerprint(Path(path), data)
        except OSError as exc:  # gone since it was read
            raise ConfigError(path, "", f"cannot read knowledge file: {exc}") from None

    def _adopt(self, read: dict[str, tuple[Source, Fingerprint]]) -> None:
        for path, (source, found) in read.items():
            self._sources[path] = source
            self._fingerprints[path] = found
            self._seen[path] = (found.size, found.mtime_ns)

    def _index(self) -> Refreshed:
        """Index every file whose content or synonyms differ from the database's copy, drop
        files no longer named, and build what `ground` reads."""
        contents = combine([self._sources[p] for p in self.files])
        groups = (*BUILT_IN_SYNONYMS, *contents.synonyms)
        synonyms = Synonyms(groups)
        vocabulary = vocabulary_of(groups)
        indexed = self.index.indexed()
        stale = {path: (self._fingerprints[path], self._sources[path].entries)
                 for path in self.files
                 if path not in indexed or indexed[path]["sha256"] != self._fingerprints[path].sha256
                 or indexed[path]["vocabulary"] != vocabulary}
        if stale or set(indexed) - set(self.files):
            self.index.replace(stale, set(self.files), synonyms, vocabulary)
        self.contents = contents
        names = tuple(" ".join(words(n)) for n in contents.names if words(n))
        topics = frozenset(t for tool in self.settings.tools for t in terms(tool, synonyms))
        self._venue = Venue(self.index, synonyms, self.index.vocabulary(), contents.schedules,
                            names, topics)
        return Refreshed(tuple(sorted(stale)))
