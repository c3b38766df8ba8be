"""The venue's side of the sync: edge-agent's tables in the venue's PostgreSQL (psycopg 3).

Everything lives in the schema `edge_agent`, created and migrated by the first kiosk that
connects (under an advisory lock, so fifty kiosks starting at once migrate it once); a schema
written by a newer edge-agent is refused, never altered. Each table is the kiosk's table with
`kiosk_id` in front of its key, so rows from many kiosks never collide and a row sent twice
is the same row (`INSERT ... ON CONFLICT DO UPDATE`): sending is at-least-once, storing is
exactly-once. A batch is one transaction, its statements in the queue's order (a row after the
rows it refers to). Timestamps are `timestamptz`, the JSON columns `jsonb`; `synced_at` is
when the venue last received the row.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg

from edge_agent.config.lan import DatabaseAddress
from edge_agent.errors import SyncError
from edge_agent.memory.conversation_memory import iso
from edge_agent.memory.schema import KEY_COLUMNS
from edge_agent.printable import shown
from edge_agent.sync.outbox import Change, VenueFact, VenueProfile, key_values

SCHEMA = "edge_agent"
_CASCADE = "ON DELETE CASCADE"
_SESSION = f"FOREIGN KEY (kiosk_id, session_id) REFERENCES {SCHEMA}.sessions (kiosk_id, id) {_CASCADE}"
MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (  # 1
        f"""CREATE TABLE {SCHEMA}.kiosks (
            kiosk_id text PRIMARY KEY,
            first_seen timestamptz NOT NULL DEFAULT now(),
            last_seen timestamptz NOT NULL DEFAULT now(),
            database_id text NOT NULL,
            edge_agent text NOT NULL
        )""",
        f"""CREATE TABLE {SCHEMA}.sessions (
            kiosk_id text NOT NULL, id text NOT NULL, identity text NOT NULL,
            run_id text NOT NULL, how text NOT NULL, state text NOT NULL,
            started_at timestamptz NOT NULL, last_active_at timestamptz NOT NULL,
            ended_at timestamptz, engines jsonb NOT NULL,
            synced_at timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (kiosk_id, id)
        )""",
        f"""CREATE TABLE {SCHEMA}.turns (
            kiosk_id text NOT NULL, id bigint NOT NULL, session_id text NOT NULL,
            seq integer NOT NULL, role text NOT NULL, heard text NOT NULL, generated text,
            unit_id text, tool_call_id text, tool_name text, tool_arguments text,
            at timestamptz NOT NULL, synced_at timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (kiosk_id, id), {_SESSION}
        )""",
        f"""CREATE TABLE {SCHEMA}.units (
            kiosk_id text NOT NULL, session_id text NOT NULL, unit_id text NOT NULL,
            state text NOT NULL, seq integer, generated text NOT NULL, heard text NOT NULL,
            played_ms integer NOT NULL, inexact_words integer NOT NULL, words jsonb NOT NULL,
            updated_at timestamptz NOT NULL, synced_at timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (kiosk_id, session_id, unit_id), {_SESSION}
        )""",
        f"""CREATE TABLE {SCHEMA}.events (
            kiosk_id text NOT NULL, id bigint NOT NULL, session_id text, run_id text NOT NULL,
            at double precision NOT NULL, type text NOT NULL, data jsonb NOT NULL,
            synced_at timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (kiosk_id, id), {_SESSION}
        )""",
        f"""CREATE TABLE {SCHEMA}.summaries (
            kiosk_id text NOT NULL, id bigint NOT NULL, session_id text NOT NULL,
            kind text NOT NULL, first_seq integer NOT NULL, last_seq integer NOT NULL,
            text text NOT NULL, at timestamptz NOT NULL,
            synced_at timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (kiosk_id, id), {_SESSION}
        )""",
        f"""CREATE TABLE {SCHEMA}.facts (
            kiosk_id text NOT NULL, id bigint NOT NULL, identity text NOT NULL, session_id text,
            key text NOT NULL, value text NOT NULL, source text NOT NULL, source_seq integer,
            at timestamptz NOT NULL, superseded_by bigint, expires_at timestamptz,
            synced_at timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (kiosk_id, id), {_SESSION}
        )""",
        f"""CREATE TABLE {SCHEMA}.profiles (
            kiosk_id text NOT NULL, identity text NOT NULL, name text, last_session_id text,
            updated_at timestamptz NOT NULL, synced_at timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (kiosk_id, identity)
        )""",
        f"CREATE INDEX turns_by_session ON {SCHEMA}.turns (kiosk_id, session_id, seq)",
        f"CREATE INDEX events_by_session ON {SCHEMA}.events (kiosk_id, session_id, id)",
        f"CREATE INDEX open_facts_by_identity ON {SCHEMA}.facts (identity, key) "
        "WHERE superseded_by IS NULL",
        f"CREATE INDEX profiles_by_identity ON {SCHEMA}.profiles (identity, updated_at)",
    ),
)
SCHEMA_VERSION = len(MIGRATIONS)
_LOCK = 0x6564676561  # pg_advisory_xact_lock's key for migrating ("edgea")

@dataclass(frozen=True)
class Credentials:
    """How to reach the venue's store."""

    address: DatabaseAddress
    password: str | None
    """From `[sync] password_file` or $EDGE_AGENT_SYNC_PASSWORD; None: libpq's ~/.pgpass."""
    kiosk_id: str
    timeout_ms: int


def connect(credentials: Credentials) -> psycopg.Connection[Any]:
    """A connection (not autocommit), or SyncError saying why not: never the password."""
    timeout_s = max(1, round(credentials.timeout_ms / 1000))
    extra: dict[str, Any] = {
        "connect_timeout": timeout_s, "application_name": f"edge-agent {credentials.kiosk_id}"[:63],
        # A dropped network fails a send within the timeout instead of TCP's minutes.
        "tcp_user_timeout": credentials.timeout_ms, "keepalives": 1,
        "keepalives_idle": timeout_s, "keepalives_interval": timeout_s, "keepalives_count": 2,
        # A commit is acknowledged only once it is on the server's disk, whatever the venue's
        # default: the kiosk deletes the rows it sent on that acknowledgement.
        "options": f"-c statement_timeout={credentials.timeout_ms} -c synchronous_commit=on",
    }
    if credentials.password is not None:
        extra["password"] = credentials.password
    try:
        return psycopg.connect(credentials.address.url, **extra)
    except psycopg.Error as exc:
        raise unreachable(credentials.address, exc) from None


ROW_REFUSALS = ("22", "23", "54")
"""SQLSTATE classes in which the store refuses a statement for the data it was given: a data
exception (a NUL in text, a number out of range), an integrity constraint, a program limit (an
index entry over its ~2 700 bytes). Sent one row at a time, such a refusal is that row's."""


def refuses_row(exc: psycopg.Error) -> bool:
    """Whether `exc` refuses the data sent, not the connection, the schema or the rights (the
    client refuses some data itself, with no SQLSTATE: a NUL in text is a DataError)."""
    return (isinstance(exc, psycopg.DataError | psycopg.IntegrityError)
            or (exc.sqlstate or "")[:2] in ROW_REFUSALS)


_CREDENTIALS = ("put the right password in the file sync.password_file names (or "
                "$EDGE_AGENT_SYNC_PASSWORD), for the user in sync.url")
_ALTERED = (f"someone changed the venue's {SCHEMA} schema by hand: restore it from a backup, "
            f"or drop the schema {SCHEMA} (the next kiosk creates it again); the changes stay "
            "queued meanwhile")
_NO_DATABASE = ("create the database on the venue's PostgreSQL (CREATE DATABASE ... OWNER the "
                "user in sync.url), or fix its name in sync.url")
_FIXES: tuple[tuple[str, str], ...] = (
    # Decided by the SQLSTATE the server sent, never by the words of its message (they are
    # translated, and a dropped column's message also says "does not exist").
    ("28P01", _CREDENTIALS),  # invalid_password
    ("28000", "allow this kiosk's user and address in the venue's pg_hba.conf, or fix the user "
              "in sync.url"),  # invalid_authorization_specification
    ("3D000", _NO_DATABASE),  # invalid_catalog_name
    ("42P01", _ALTERED),  # undefined_table
    ("42703", _ALTERED),  # undefined_column
    ("42804", _ALTERED),  # datatype_mismatch
    ("42501", f"grant the user in sync.url the rights on the database and the {SCHEMA} schema "
              "(the first kiosk creates it: CREATE on the database; then the schema's owner)"),
    ("57P", "the venue's PostgreSQL is shutting down or restarting: the changes stay queued "
            "and are sent when it answers"),  # admin_shutdown, crash_shutdown, cannot_connect_now
    ("53", "the venue's PostgreSQL is out of a resource (disk, memory, connections): its "
           "administrator must make room; the changes stay queued"),
)
_NETWORK = ("check that PostgreSQL runs there and listens on that address (listen_addresses, "
            "pg_hba.conf); the changes stay queued and are sent when it answers")
_TLS = "check sync.url's sslmode and sslrootcert options against the server's certificate"


def unreachable(address: DatabaseAddress, exc: BaseException) -> SyncError:
    """`exc` from psycopg as a SyncError with what to do about it, chosen by its SQLSTATE. A
    connection the server refused has none (libpq keeps only the server's message): then by
    what libpq says it did (asked for a password it did not have) and by the server's own
    words about what the kiosk named (its database, its user)."""
    text = shown(" ".join(str(exc).split()), 500) or type(exc).__name__
    code = getattr(exc, "sqlstate", None) or ""
    fix = next((fix for prefix, fix in _FIXES if code.startswith(prefix)), None)
    if code:
        fix = fix or (f"the venue's PostgreSQL refused edge-agent's statement (SQLSTATE {code}); "
                      "the changes stay queued: show this to its administrator")
        return SyncError(address.shown, f"{text} (SQLSTATE {code})", fix)
    connection = getattr(exc, "pgconn", None)
    if getattr(connection, "needs_password", False) or "password authentication failed" in text:
        fix = _CREDENTIALS
    elif f'database "{address.database}" does not exist' in text:
        fix = _NO_DATABASE
    elif "SSL" in text or "certificate" in text:
        fix = _TLS
    else:
        fix = _NETWORK
    return SyncError(address.shown, text, fix)


def prepare(connection: psycopg.Connection[Any], address: DatabaseAddress, kiosk_id: str,
            database_id: str, version: str) -> int:
    """Create or migrate the venue's schema and register the kiosk; the version found before.
    SyncError if a newer edge-agent wrote it, or if another database has this kiosk id (its
    local ids would overwrite that one's rows)."""
    with connection.transaction():
        connection.execute("SELECT pg_advisory_xact_lock(%s)", [_LOCK])
        connection.execute(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}")
        connection.execute(f"CREATE TABLE IF NOT EXISTS {SCHEMA}.schema_version "
                           "(version integer NOT NULL)")
        found = check_version(connection, address)
        for number in range(found + 1, SCHEMA_VERSION + 1):
            for statement in MIGRATIONS[number - 1]:
                connection.execute(statement)
        if found < SCHEMA_VERSION:
            connection.execute(f"DELETE FROM {SCHEMA}.schema_version")
            connection.execute(f"INSERT INTO {SCHEMA}.schema_version VALUES (%s)",
                               [SCHEMA_VERSION])
        connection.execute(
            f"INSERT INTO {SCHEMA}.kiosks (kiosk_id, database_id, edge_agent) VALUES (%s, %s, %s) "
            "ON CONFLICT (kiosk_id) DO NOTHING", [kiosk_id, database_id, version])
        row = connection.execute(f"SELECT database_id FROM {SCHEMA}.kiosks WHERE kiosk_id = %s",
                                 [kiosk_id]).fetchone()
        if row is None or row[0] != database_id:
            raise SyncError(address.shown, f"the kiosk id {kiosk_id!r} is taken by another "
                            f"database (id {row[0] if row else '?'}; this one is {database_id}): "
                            "its local ids would overwrite that one's rows",
                            "give this kiosk its own [sync] kiosk_id (a replaced kiosk, or a "
                            "new data dir, is a new kiosk to the venue)")
        connection.execute(f"UPDATE {SCHEMA}.kiosks SET last_seen = now(), edge_agent = %s "
                           "WHERE kiosk_id = %s", [version, kiosk_id])
    return found


def check_version(connection: psycopg.Connection[Any], address: DatabaseAddress) -> int:
    """The venue schema's version; SyncError if a newer edge-agent wrote it (checked before
    every pass: another kiosk may upgrade it while this one is connected), or if it holds what
    no edge-agent writes (a version below 0, a fraction, text: edited by hand)."""
    with connection.transaction():
        row = connection.execute(f"SELECT max(version) FROM {SCHEMA}.schema_version").fetchone()
    found = row[0] if row else None
    if found is None:
        return 0
    if isinstance(found, bool) or not isinstance(found, int) or found < 0:
        raise SyncError(address.shown, f"its {SCHEMA}.schema_version holds "
                        f"{shown(repr(found), 80)}, which no edge-agent writes (a whole "
                        f"number, 0 to {SCHEMA_VERSION} for this one)", _ALTERED)
    if found > SCHEMA_VERSION:
        raise SyncError(address.shown, f"its {SCHEMA} schema is version {found}, from a newer "
                        f"edge-agent (this one knows up to {SCHEMA_VERSION})",
                        "upgrade edge-agent on this kiosk; its changes stay queued until "
                        "then, and the venue's tables are left as they are")
    return found


def probe(credentials: Credentials) -> int:
    """Connect and read the venue schema's version, changing nothing (0: no edge-agent tables
    yet); SyncError if it cannot be used."""
    connection = connect(credentials)
    try:
        with connection.transaction():
            exists = connection.execute("SELECT to_regclass(%s)",
                                        [f"{SCHEMA}.schema_version"]).fetchone()
        if not exists or exists[0] is None:
            return 0
        return check_version(connection, credentials.address)
    except psycopg.Error as exc:
        raise unreachable(credentials.address, exc) from None
    finally:
        connection.close()


def send(connection: psycopg.Connection[Any], kiosk_id: str, changes: Sequence[Change]) -> None:
    """Store `changes` in one transaction, in order: a row as it is now, or its deletion."""
    with connection.transaction():
        for statement, rows in _runs(kiosk_id, changes):
            with connection.cursor() as cursor:
                cursor.executemany(statement, rows)
        connection.execute(f"UPDATE {SCHEMA}.kiosks SET last_seen = now() WHERE kiosk_id = %s",
                           [kiosk_id])


def _runs(kiosk_id: str, changes: Sequence[Change]) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """Consecutive changes of one table and kind as one statement with many rows (psycopg
    pipelines `executemany`: one round trip per run, not per row)."""
    statement, rows = "", list[dict[str, Any]]()
    for change in changes:
        if change.row is None:
            keys = KEY_COLUMNS[change.table]
            values: dict[str, Any] = dict(zip(keys, key_values(change.table, change.key),
                                              strict=True))
            this = (f"DELETE FROM {SCHEMA}.{change.table} WHERE kiosk_id = %(kiosk_id)s AND "
                    + " AND ".join(f"{k} = %({k})s" for k in keys))
        else:
            values = dict(change.row)
            this = _upsert(change.table, tuple(values))
        values["kiosk_id"] = kiosk_id
        if this != statement and rows:
            yield statement, rows
            rows = []
        statement = this
        rows.append(values)
    if rows:
        yield statement, rows


@functools.cache
def _upsert(table: str, columns: tuple[str, ...]) -> str:
    keys = ("kiosk_id", *KEY_COLUMNS[table])
    names = ("kiosk_id", *columns)
    updates = ", ".join(f"{c} = excluded.{c}" for c in columns if c not in keys)
    return (f"INSERT INTO {SCHEMA}.{table} ({', '.join(names)}) VALUES "
            f"({', '.join(f'%({c})s' for c in names)}) ON CONFLICT ({', '.join(keys)}) "
            f"DO UPDATE SET {updates}, synced_at = now()")


def venue_memory(connection: psycopg.Connection[Any], kiosk_id: str, identity: str
                 ) -> tuple[list[VenueFact], VenueProfile | None]:
    """The open facts of `identity` at other kiosks (the newest value of each key) and its
    newest profile there."""
    with connection.transaction():
        facts = [VenueFact(key, value, iso(at), kiosk, iso(expires) if expires else None)
                 for key, value, at, kiosk, expires in connection.execute(
                     f"SELECT DISTINCT ON (key) key, value, at, kiosk_id, expires_at "
                     f"FROM {SCHEMA}.facts WHERE identity = %s AND kiosk_id <> %s "
                     "AND superseded_by IS NULL AND (expires_at IS NULL OR expires_at > now()) "
                     "ORDER BY key, at DESC", [identity, kiosk_id])]
        row = connection.execute(
            f"SELECT name, updated_at, kiosk_id FROM {SCHEMA}.profiles WHERE identity = %s "
            "AND kiosk_id <> %s ORDER BY updated_at DESC LIMIT 1", [identity, kiosk_id]).fetchone()
    profile = VenueProfile(row[0], iso(row[1]), row[2]) if row else None
    return facts, profile


def counts(connection: psycopg.Connection[Any], kiosk_id: str | None = None) -> dict[str, int]:
    """Rows per table (of one kiosk, or all): what a fault test and the benchmark count."""
    where, args = ("WHERE kiosk_id = %s", [kiosk_id]) if kiosk_id else ("", [])
    found = {}
    with connection.transaction():
        for table in KEY_COLUMNS:
            row = connection.execute(f"SELECT count(*) FROM {SCHEMA}.{table} {where}",
                                     args).fetchone()
            found[table] = int(row[0]) if row else 0
    return found
