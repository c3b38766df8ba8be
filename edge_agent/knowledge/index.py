"""The venue's entries in the memory database, searched with SQLite's full-text search.

Each entry is one row of `knowledge` with the stems it is found by, after synonyms (see
`knowledge.text`): those of its questions, heading and keywords (`asked_by`) and those of its
text (`mentions`). sqlite-utils' FTS5 index over the two (`knowledge_fts`, unicode61
tokenizer: the stems are already made) finds a turn's candidates: entries asked by any of its
terms, and entries whose text mentions one of its rarer terms (`Vocabulary.rare_in_text`),
best first by BM25. The row carries what scoring them needs (each phrasing's terms, the
text's).

A file is indexed again only when it changed (its size, time, then hash differ) or when the
synonyms changed (every term depends on them): a restart with the same files indexes nothing.
The index is written on a connection of its own, beside the agent's writer, in one
transaction per refresh (WAL: readers never see half of it).
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from sqlite_utils import Database

from edge_agent.knowledge.entries import Entry
from edge_agent.knowledge.text import Synonyms, Vocabulary, terms
from edge_agent.memory.conversation_memory import iso, utc_now
from edge_agent.memory.schema import KnowledgeFileRow, KnowledgeRow, migrate
from edge_agent.memory.store import MemoryStore

FTS_TABLE = "knowledge_fts"
_VOCABULARY_TABLE = "knowledge_vocabulary"


@dataclass(frozen=True)
class Stored:
    """An indexed entry as scoring reads it."""

    entry_id: int
    entry: Entry
    question_terms: tuple[frozenset[str], ...]
    """Each phrasing's terms (a section's heading and keywords are one phrasing each)."""
    answer_terms: frozenset[str]


@dataclass(frozen=True)
class Fingerprint:
    """What a file was when it was indexed."""

    sha256: str
    size: int
    mtime_ns: int


def fingerprint(path: Path, data: bytes) -> Fingerprint:
    info = path.stat()
    return Fingerprint(hashlib.sha256(data).hexdigest(), info.st_size, info.st_mtime_ns)


def vocabulary_of(groups: Sequence[Sequence[str]]) -> str:
    """The synonyms' fingerprint: entries indexed under other synonyms are indexed again."""
    return hashlib.sha256(json.dumps([list(g) for g in groups]).encode()).hexdigest()[:16]


class KnowledgeIndex:
    """The `knowledge` tables of one database (used by one thread: the knowledge's owner)."""

    def __init__(self, db: Database) -> None:
        self.db = db
        table = db.table("knowledge")
        if not table.detect_fts():
            table.enable_fts(["asked_by", "mentions"], fts_version="FTS5", tokenize="unicode61",
                             create_triggers=True)
        db.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS {_VOCABULARY_TABLE} USING "
                   f"fts5vocab({FTS_TABLE}, 'col')")

    @classmethod
    def open(cls, path: Path) -> KnowledgeIndex:
        """The index in the memory database at `path` (migrated), on a connection of its own
        beside its writer (StoreError if it cannot be used)."""
        return cls(MemoryStore.open_reader(path, query_only=False).db)

    @classmethod
    def in_memory(cls) -> KnowledgeIndex:
        """An index that lives in this process only (`knowledge check` and `ask`)."""
        connection = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
        migrate(connection)
        return cls(Database(connection))

    def indexed(self) -> dict[str, KnowledgeFileRow]:
        """Every indexed file by path."""
        rows = self.db.execute("SELECT path, sha256, size, mtime_ns, vocabulary, entries, "
                               "indexed_at FROM knowledge_files").fetchall()
        return {row[0]: KnowledgeFileRow(path=row[0], sha256=row[1], size=row[2],
                                         mtime_ns=row[3], vocabulary=row[4], entries=row[5],
                                         indexed_at=row[6]) for row in rows}

    def replace(self, files: Mapping[str, tuple[Fingerprint, Sequence[Entry]]], keep: set[str],
                synonyms: Synonyms, vocabulary: str) -> None:
        """In one transaction: index `files` (path -> what it is now and its entries) anew,
        drop every other file not in `keep`."""
        now = iso(utc_now())
        with self.db.atomic():
            gone = set(self.indexed()) - keep - set(files)
            for path in [*gone, *files]:
                self.db.execute("DELETE FROM knowledge WHERE file = ?", [path])
                self.db.execute("DELETE FROM knowledge_files WHERE path = ?", [path])
            for path, (found, entries) in files.items():
                rows = [dict(_row(entry, synonyms)) for entry in entries]
                self.db.table("knowledge").insert_all(rows, batch_size=500)
                record: KnowledgeFileRow = {
                    "path": path, "sha256": found.sha256, "size": found.size,
                    "mtime_ns": found.mtime_ns, "vocabulary": vocabulary,
                    "entries": len(rows), "indexed_at": now}
                self.db.table("knowledge_files").insert(dict(record))

    def vocabulary(self) -> Vocabulary:
        """The indexed terms with the number of entries each occurs in (read again: call it
        after `replace`)."""
        counts: dict[str, int] = {}
        in_text: dict[str, int] = {}
        for term, column, docs in self.db.execute(
                f"SELECT term, col, doc FROM {_VOCABULARY_TABLE}").fetchall():
            counts[term] = max(counts.get(term, 0), docs)
            if column == "mentions":
                in_text[term] = docs
        entries = self.db.execute("SELECT count(*) FROM knowledge").fetchone()[0]
        return Vocabulary(counts, entries, in_text)

    def search(self, query_terms: Sequence[str], vocabulary: Vocabulary, limit: int
               ) -> list[Stored]:
        """Entries asked by any of `query_terms`, then entries whose text mentions one of the
        rarer ones (`Vocabulary.rare_in_text`): at most `limit` of each, each best first by
        BM25."""
        wanted = [t for t in dict.fromkeys(query_terms) if t]
        rare = [t for t in wanted if vocabulary.rare_in_text(t)]
        found: dict[int, Stored] = {}
        for column, among in (("asked_by", wanted), ("mentions", rare)):
            if not among:
                continue
            query = f"{column} : (" + " OR ".join(f'"{t}"' for t in among) + ")"
            for row in self.db.table("knowledge").search(query, columns=_COLUMNS, limit=limit):
                stored = _stored(row)
                found.setdefault(stored.entry_id, stored)
        return list(found.values())

    def close(self) -> None:
        self.db.close()


_COLUMNS = ("id", "file", "line", "kind", "topic", "grp", "questions", "answer", "keywords",
            "question_terms", "mentions")


def _row(entry: Entry, synonyms: Synonyms) -> KnowledgeRow:
    phrasings = [terms(q, synonyms) for q in entry.questions]
    phrasings += [terms(k, synonyms) for k in entry.keywords]
    return {"file": entry.file, "line": entry.line, "kind": entry.kind, "topic": entry.topic,
            "grp": entry.group, "questions": json.dumps(list(entry.questions)),
            "answer": entry.answer, "keywords": json.dumps(list(entry.keywords)),
            "question_terms": json.dumps([sorted(set(p)) for p in phrasings if p]),
            "asked_by": " ".join(t for p in phrasings for t in p),
            "mentions": " ".join(terms(entry.answer, synonyms))}


def _stored(row: dict[str, object]) -> Stored:
    def loads(key: str) -> list[object]:
        value = json.loads(str(row[key]))
        return value if isinstance(value, list) else []

    entry = Entry(str(row["kind"]), str(row["topic"]), tuple(str(q) for q in loads("questions")),
                  str(row["answer"]), str(row["file"]), int(str(row["line"])),
                  tuple(str(k) for k in loads("keywords")), str(row["grp"]))
    phrasings = tuple(frozenset(str(t) for t in p) for p in loads("question_terms")
                      if isinstance(p, list))
    return Stored(int(str(row["id"])), entry, phrasings,
                  frozenset(str(row["mentions"]).split()))

