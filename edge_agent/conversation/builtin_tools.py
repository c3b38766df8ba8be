"""Tools that ship with edge-agent, and loading the tools a config enables.

`book_table` writes bookings to SQLite (sqlite-utils, WAL). A config names tools by built-in
name or by a dotted path "package.module:factory" to a callable `(db_path) -> Tool` (or a
sequence of tools), so a deployment adds its own actions without touching the package.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path

from sqlite_utils import Database

from edge_agent.conversation.tools import Tool, Toolbox
from edge_agent.errors import ConfigError
from edge_agent.memory.thread_db import ThreadDatabases
from edge_agent.plugins import load_plugin

MAX_PEOPLE = 20
"""Largest party `book_table` accepts; bigger groups need a person, not a voice agent."""
_MAX_TIME_CHARS = 40

BOOK_TABLE_PARAMETERS = {
    "type": "object",
    "properties": {
        "time": {"type": "string", "description": "when, as the caller said it"},
        "people": {"type": "integer", "description": f"how many people, 1 to {MAX_PEOPLE}"},
    },
    "required": ["time", "people"],
}


class TableBookings:
    """The `bookings` table of one SQLite file, written from the conversation's "tools"
    thread (a connection per thread: `ThreadDatabases`)."""

    def __init__(self, db_path: Path) -> None:
        self.db_path = db_path
        self._databases = ThreadDatabases(db_path, _bookings_table)

    def _db(self) -> Database:
        return self._databases.get()

    def book(self, time: str, people: int) -> str:
        """Book a table; the result (or `error: ...`) is phrased for the model to say."""
        if not isinstance(time, str) or not time.strip():
            return 'error: the time is missing; ask the caller when they want to come (e.g. "7 PM")'
        if len(time) > _MAX_TIME_CHARS:
            return f'error: "{time[:_MAX_TIME_CHARS]}..." is not a time; ask for one like "7 PM"'
        if isinstance(people, bool) or not isinstance(people, int) or not 1 <= people <= MAX_PEOPLE:
            return (f"error: a table is for 1 to {MAX_PEOPLE} people, not {people!r}; ask how many "
                    "people are coming")
        db = self._db()
        row = {"time": time.strip(), "people": people,
               "booked_at": datetime.now(UTC).isoformat(timespec="seconds")}
        # One transaction per booking, committed before the result is returned: the caller is
        # told "booked" only once the row is on disk.
        with db.atomic():
            booking_id = db["bookings"].insert(row).last_pk  # type: ignore[union-attr]
        guests = "person" if people == 1 else "people"
        return (f"booked: a table for {people} {guests} at {row['time']}, "
                f"booking reference B{booking_id}")

    def close(self) -> None:
        """Close this thread's connection (others close when their thread ends)."""
        self._databases.close()


def _bookings_table(db: Database) -> None:
    db["bookings"].create(  # type: ignore[union-attr]
        {"id": int, "time": str, "people": int, "booked_at": str}, pk="id", if_not_exists=True)


def book_table_tool(db_path: Path) -> Tool:
    """`book_table(time, people)`: a row in the `bookings` table of `db_path`."""
    bookings = TableBookings(db_path)
    return Tool(
        "book_table",
        "Book a table at the restaurant.",
        BOOK_TABLE_PARAMETERS,
        bookings.book,
    )


BUILTIN: dict[str, Callable[[Path], Tool]] = {"book_table": book_table_tool}
"""Built-in tools by the name a config uses; each factory takes the database path."""


def load_tools(names: Sequence[str], db_path: Path, source: str,
               more: Sequence[Tool] = ()) -> Toolbox:
    """Built-in names, or dotted paths "package.module:factory" to a callable (db_path) -> Tool
    or -> Sequence[Tool]; and `more` (the house's, `[[mqtt.tools]]`). Unknown name / import
    failure / a name twice -> ConfigError(source, "tools.enabled", reason)."""
    tools: list[Tool] = []
    made = [(name, tool) for name in names for tool in _make(name, db_path, source)]
    for name, tool in [*made, *(("[[mqtt.tools]]", tool) for tool in more)]:
        if any(t.name == tool.name for t in tools):
            raise ConfigError(source, "tools.enabled",
                              f"two enabled tools are named {tool.name!r} ({name!r} adds the "
                              "second); enable each tool once")
        tools.append(tool)
    return Toolbox(tools)


def _make(name: str, db_path: Path, source: str) -> list[Tool]:
    def fail(reason: str) -> ConfigError:
        return ConfigError(source, "tools.enabled", reason)

    if name in BUILTIN:
        return [BUILTIN[name](db_path)]
    if ":" not in name:
        raise fail(f"unknown tool {name!r}: use a built-in tool ({', '.join(BUILTIN)}) or a "
                   "dotted path 'package.module:factory'")
    factory = load_plugin(name, source, "tools.enabled", "a tool factory",
                          call_with=(db_path,))
    assert callable(factory)
    try:
        made = factory(db_path)
    except Exception as exc:
        raise fail(f"tool factory {name!r} failed: {type(exc).__name__}: {exc}") from exc
    result = [made] if isinstance(made, Tool) else made
    if not isinstance(result, Sequence) or not all(isinstance(t, Tool) for t in result):
        raise fail(f"tool factory {name!r} returned {type(made).__name__}; it must return a "
                   "Tool or a list of Tools (edge_agent.conversation.tools.Tool)")
    return list(result)
