"""The memory database's schema, as numbered migrations.

`PRAGMA user_version` holds the number of migrations applied. Opening a database runs the
missing ones in order, each in its own transaction; a database whose version is higher than the
last migration here was written by a newer edge-agent and is refused (never rewritten).

Tables (documented for Datasette users in docs/memory.md, "The memory database"):

- `sessions`: one row per conversation session; `state` is "open" until it ends.
- `turns`: the heard-truth history, in order (`seq`) per session. `heard` is what the listener
  heard (for the user: the transcript; for a tool: its result), `generated` what the model
  wrote for an assistant turn.
- `units`: every unit of agent speech: its generated text, the heard prefix, `played_ms` and
  word timings. While a unit plays its row is a checkpoint (`state` "playing"); a unit still
  "playing" after a crash is recovered from its last checkpoint.
- `events`: the per-session event log (JSON per event), expired by the retention setting.
- `llm_requests`: the messages each request sent to the language model.
- `summaries`: running summaries (turns folded out of the verbatim window) and end-of-session
  summaries, with the turn range (`first_seq`..`last_seq`) each covers.
- `facts`: names, numbers, times, ids... per identity; a newer value for the same key
  supersedes the older row (`superseded_by`), which is kept.
- `profiles`: one row per identity (the kiosk's, or a stated name).
- `audio` (only with `[memory] keep_audio`): each caller speech segment and each agent unit's
  played audio, int16 mono PCM, placed on the run's clock like the events (`at`).
- `outbox` (with `[sync] url`): the rows changed since they were last sent to the venue's
  PostgreSQL, one per row, in the order of their first change; triggers fill it while
  `sync_control.queue` says so (see `edge_agent.sync`).
- `sync_control`: one row: whether changes are queued, and how the last sends went.
- `knowledge` (with `[knowledge] files`): the venue's FAQ entries, sections and facts, each
  with the terms it is found by; `knowledge_fts` is its full-text index (FTS5).
- `knowledge_files`: each indexed file with its hash, size and time: a changed file is indexed
  again.
"""

from __future__ import annotations

import sqlite3
from typing import NotRequired, TypedDict

MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (  # 1: the heard-truth record
        """CREATE TABLE sessions (
            id TEXT PRIMARY KEY,
            identity TEXT NOT NULL,
            run_id TEXT NOT NULL,
            how TEXT NOT NULL,
            state TEXT NOT NULL DEFAULT 'open',
            started_at TEXT NOT NULL,
            last_active_at TEXT NOT NULL,
            ended_at TEXT,
            engines TEXT NOT NULL DEFAULT '{}'
        )""",
        """CREATE TABLE turns (
            id INTEGER PRIMARY KEY,
            session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
            seq INTEGER NOT NULL,
            role TEXT NOT NULL,
            heard TEXT NOT NULL,
            generated TEXT,
            unit_id TEXT,
            tool_call_id TEXT,
            tool_name TEXT,
            tool_arguments TEXT,
            at TEXT NOT NULL,
            UNIQUE (session_id, seq)
        )""",
        """CREATE TABLE units (
            session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
            unit_id TEXT NOT NULL,
            state TEXT NOT NULL,
            seq INTEGER,
            generated TEXT NOT NULL,
            heard TEXT NOT NULL,
            played_ms INTEGER NOT NULL,
            inexact_words INTEGER NOT NULL DEFAULT 0,
            words TEXT NOT NULL DEFAULT '[]',
            updated_at TEXT NOT NULL,
            PRIMARY KEY (session_id, unit_id)
        )""",
        """CREATE TABLE events (
            id INTEGER PRIMARY KEY,
            session_id TEXT REFERENCES sessions(id) ON DELETE CASCADE,
            run_id TEXT NOT NULL,
            at REAL NOT NULL,
            type TEXT NOT NULL,
            data TEXT NOT NULL
        )""",
        """CREATE TABLE llm_requests (
            id INTEGER PRIMARY KEY,
            session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
            turn INTEGER NOT NULL,
            hop INTEGER NOT NULL,
            messages TEXT NOT NULL,
            at TEXT NOT NULL
        )""",
        "CREATE INDEX events_by_session ON events (session_id, id)",
        "CREATE INDEX llm_requests_by_session ON llm_requests (session_id, id)",
        "CREATE INDEX sessions_by_identity ON sessions (identity, state, last_active_at)",
    ),
    (  # 2: what outlives the verbatim window and the session
        """CREATE TABLE summaries (
            id INTEGER PRIMARY KEY,
            session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
            kind TEXT NOT NULL,
            first_seq INTEGER NOT NULL,
            last_seq INTEGER NOT NULL,
            text TEXT NOT NULL,
            at TEXT NOT NULL
        )""",
        """CREATE TABLE facts (
            id INTEGER PRIMARY KEY,
            identity TEXT NOT NULL,
            session_id TEXT REFERENCES sessions(id) ON DELETE CASCADE,
            key TEXT NOT NULL,
            value TEXT NOT NULL,
            source TEXT NOT NULL,
            source_seq INTEGER,
            at TEXT NOT NULL,
            superseded_by INTEGER REFERENCES facts(id) ON DELETE SET NULL,
            expires_at TEXT
        )""",
        """CREATE TABLE profiles (
            identity TEXT PRIMARY KEY,
            name TEXT,
            last_session_id TEXT,
            updated_at TEXT NOT NULL
        )""",
        "CREATE INDEX summaries_by_session ON summaries (session_id, kind, last_seq)",
        "CREATE INDEX open_facts ON facts (identity, superseded_by, key)",
    ),
    (  # 3: what was said and played, when the config keeps audio
        """CREATE TABLE audio (
            id INTEGER PRIMARY KEY,
            session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
            run_id TEXT NOT NULL,
            kind TEXT NOT NULL,
            ref TEXT NOT NULL,
            at REAL NOT NULL,
            sample_rate INTEGER NOT NULL,
            pcm BLOB NOT NULL
        )""",
        "CREATE INDEX audio_by_session ON audio (session_id, id)",
    ),
)

KEY_COLUMNS: dict[str, tuple[str, ...]] = {
    "sessions": ("id",), "turns": ("id",), "units": ("session_id", "unit_id"),
    "events": ("id",), "summaries": ("id",), "facts": ("id",), "profiles": ("identity",),
}
"""The tables copied to the venue's store, in the order a backfill queues them (a row after
the row it refers to), each with its key's columns. `llm_requests` and `audio` stay on the
kiosk (the messages each request sent, and recordings)."""
SYNCED_KEYS: dict[str, str] = {
    table: (f"{{row}}.{columns[0]}" if len(columns) == 1
            else f"json_array({', '.join(f'{{row}}.{c}' for c in columns)})")
    for table, columns in KEY_COLUMNS.items()}
"""The SQL of a row's key in the outbox: its one key column, or a JSON array of them."""
QUEUE_OFF, QUEUE_ON, QUEUE_DELETIONS = 0, 1, 2
"""`sync_control.queue`: nothing is queued (no [sync] url); every change is; only deletions
are (the backlog is over its bound: the rows are all sent again once it drains)."""


def _queue_triggers() -> tuple[str, ...]:
    statements = []
    for table, key in SYNCED_KEYS.items():
        for action, row, least in (("INSERT", "NEW", QUEUE_ON), ("UPDATE", "NEW", QUEUE_ON),
                                   ("DELETE", "OLD", QUEUE_ON)):
            condition = ("= " if action != "DELETE" else ">= ") + str(least)
            statements.append(
                f"CREATE TRIGGER outbox_{table}_{action.lower()} AFTER {action} ON {table} "
                f"WHEN (SELECT queue FROM sync_control WHERE id = 1) {condition} BEGIN "
                f"INSERT INTO outbox (tbl, key, changed_at) VALUES ('{table}', "
                f"{key.format(row=row)}, (julianday('now') - 2440587.5) * 86400.0) "
                "ON CONFLICT (tbl, key) DO UPDATE SET changes = changes + 1, "
                "changed_at = excluded.changed_at; END")
    return tuple(statements)


MIGRATIONS += (
    (  # 4: the queue of changes for the venue's PostgreSQL
        """CREATE TABLE outbox (
            id INTEGER PRIMARY KEY,
            tbl TEXT NOT NULL,
            key TEXT NOT NULL,
            changes INTEGER NOT NULL DEFAULT 1,
            changed_at REAL NOT NULL,
            refused TEXT,
            UNIQUE (tbl, key)
        )""",
        """CREATE TABLE sync_control (
            id INTEGER PRIMARY KEY CHECK (id = 1),
            queue INTEGER NOT NULL DEFAULT 0,
            url TEXT,
            kiosk_id TEXT,
            database_id TEXT,
            last_attempt_at TEXT,
            last_success_at TEXT,
            last_error TEXT,
            last_error_at TEXT,
            failures INTEGER NOT NULL DEFAULT 0,
            sent_rows INTEGER NOT NULL DEFAULT 0,
            pulled_at TEXT
        )""",
        "INSERT INTO sync_control (id) VALUES (1)",
        *_queue_triggers(),
    ),
)
MIGRATIONS += (
    (  # 5: the venue's knowledge, indexed from its files (searched with FTS5, see knowledge/)
        """CREATE TABLE knowledge_files (
            path TEXT PRIMARY KEY,
            sha256 TEXT NOT NULL,
            size INTEGER NOT NULL,
            mtime_ns INTEGER NOT NULL,
            vocabulary TEXT NOT NULL,
            entries INTEGER NOT NULL,
            indexed_at TEXT NOT NULL
        )""",
        """CREATE TABLE knowledge (
            id INTEGER PRIMARY KEY,
            file TEXT NOT NULL,
            line INTEGER NOT NULL,
            kind TEXT NOT NULL,
            topic TEXT NOT NULL,
            grp TEXT NOT NULL DEFAULT '',
            questions TEXT NOT NULL,
            answer TEXT NOT NULL,
            keywords TEXT NOT NULL DEFAULT '[]',
            question_terms TEXT NOT NULL,
            asked_by TEXT NOT NULL,
            mentions TEXT NOT NULL
        )""",
        "CREATE INDEX knowledge_by_file ON knowledge (file)",
    ),
)
SCHEMA_VERSION = len(MIGRATIONS)


# The rows edge-agent writes, one shape per table (an INTEGER PRIMARY KEY `id` is SQLite's to
# give; `superseded_by` is the store's to set). A test checks them against the tables above.

class SessionRow(TypedDict):
    id: str
    identity: str
    run_id: str
    how: str
    state: str
    started_at: str
    last_active_at: str
    ended_at: str | None
    engines: str
    """JSON: {kind: engine name}."""


class TurnRow(TypedDict):
    session_id: str
    seq: int
    role: str
    heard: str
    at: str
    generated: NotRequired[str | None]
    """An assistant turn's text as the model wrote it."""
    unit_id: NotRequired[str | None]
    tool_call_id: NotRequired[str | None]
    tool_name: NotRequired[str | None]
    tool_arguments: NotRequired[str | None]


class UnitRow(TypedDict):
    session_id: str
    unit_id: str
    state: str
    """"playing" (a checkpoint) or "final"."""
    generated: str
    heard: str
    played_ms: int
    updated_at: str
    seq: NotRequired[int]
    """A final unit's place among the session's units (a checkpoint has none yet)."""
    inexact_words: NotRequired[int]
    words: NotRequired[str]
    """JSON: the word timings."""


class EventRow(TypedDict):
    session_id: str | None
    run_id: str
    at: float
    type: str
    data: str
    """JSON: the event as its record holds it."""


class LlmRequestRow(TypedDict):
    session_id: str | None
    turn: int
    hop: int
    messages: str
    """JSON: the messages sent."""
    at: str


class SummaryRow(TypedDict):
    session_id: str
    kind: str
    """"running" or "session"."""
    first_seq: int
    last_seq: int
    text: str
    at: str


class FactRow(TypedDict):
    identity: str
    session_id: str | None
    key: str
    value: str
    source: str
    source_seq: int | None
    at: str
    expires_at: str | None


class ProfileRow(TypedDict):
    identity: str
    name: str | None
    last_session_id: str | None
    updated_at: str


class AudioRow(TypedDict):
    session_id: str
    run_id: str
    kind: str
    """"caller" or "agent"."""
    ref: str
    at: float
    sample_rate: int
    pcm: bytes


class OutboxRow(TypedDict):
    tbl: str
    """The table of the changed row (one of `SYNCED_KEYS`)."""
    key: str
    """Its key: the id, or for a unit the JSON array [session_id, unit_id]."""
    changed_at: float
    """Unix time of its last change (how old the sent state is: the sync lag)."""
    changes: NotRequired[int]
    """Changes since it was last sent (a send takes it off only if none came in between)."""
    refused: NotRequired[str | None]
    """Why the venue's store refused this row; it is kept and not sent again until resent."""


class SyncControlRow(TypedDict, total=False):
    id: int
    queue: int
    """`QUEUE_OFF`, `QUEUE_ON` or `QUEUE_DELETIONS`."""
    url: str | None
    """The store's address as shown (no password)."""
    kiosk_id: str | None
    database_id: str | None
    """Random, made when the queue is first switched on: the venue tells this database from
    another one (a replaced SD card, a second kiosk) that claims the same kiosk id."""
    last_attempt_at: str | None
    last_success_at: str | None
    last_error: str | None
    last_error_at: str | None
    failures: int
    """Sends that failed in a row since the last success."""
    sent_rows: int
    """Rows sent since the queue was switched on."""
    pulled_at: str | None
    """When facts and profiles were last read back from the venue."""


class KnowledgeFileRow(TypedDict):
    path: str
    """The knowledge file, as the config names it (resolved)."""
    sha256: str
    """Of its bytes when it was indexed."""
    size: int
    mtime_ns: int
    """Its size and modification time then: a file whose stat is unchanged is not read again."""
    vocabulary: str
    """A fingerprint of the synonyms its terms were made with: other synonyms, another index."""
    entries: int
    indexed_at: str


class KnowledgeRow(TypedDict):
    file: str
    line: int
    kind: str
    """"faq", "section" or "fact"."""
    topic: str
    grp: str
    """A fact's group ("prices"), else ""."""
    questions: str
    """JSON: the phrasings it answers."""
    answer: str
    """What is said (or, for a section, its text)."""
    keywords: str
    """JSON: more words it is found by."""
    question_terms: str
    """JSON: each phrasing's terms (for scoring a match)."""
    asked_by: str
    """Every phrasing's and keyword's terms, space-separated (full-text indexed)."""
    mentions: str
    """The answer's terms, space-separated (full-text indexed)."""


ROWS: dict[str, type] = {
    "sessions": SessionRow, "turns": TurnRow, "units": UnitRow, "events": EventRow,
    "llm_requests": LlmRequestRow, "summaries": SummaryRow, "facts": FactRow,
    "profiles": ProfileRow, "audio": AudioRow, "outbox": OutboxRow,
    "sync_control": SyncControlRow, "knowledge_files": KnowledgeFileRow,
    "knowledge": KnowledgeRow,
}
"""Each table and the shape of the rows edge-agent writes to it."""


def tables_at(version: int) -> frozenset[str]:
    """The tables a database of schema `version` has."""
    return frozenset(statement.split()[2] for migration in MIGRATIONS[:version]
                     for statement in migration if statement.startswith("CREATE TABLE"))


class NewerSchemaError(Exception):
    """The database was written by a newer edge-agent."""

    def __init__(self, found: int) -> None:
        self.found = found
        super().__init__(f"its schema is version {found}; this edge-agent knows up to "
                         f"{SCHEMA_VERSION}")


def schema_version(connection: sqlite3.Connection) -> int:
    version: int = connection.execute("PRAGMA user_version").fetchone()[0]
    return version


def migrate(connection: sqlite3.Connection, upto: int = SCHEMA_VERSION) -> int:
    """Apply the migrations the database lacks (up to `upto`); returns the version before."""
    found = schema_version(connection)
    if found > SCHEMA_VERSION:
        raise NewerSchemaError(found)
    for number in range(found + 1, upto + 1):
        with connection:  # one transaction per migration: a crash leaves a whole version
            connection.execute("BEGIN")
            for statement in MIGRATIONS[number - 1]:
                connection.execute(statement)
            connection.execute(f"PRAGMA user_version = {number}")
    return found
