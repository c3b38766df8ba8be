"""book_table on a real SQLite file, and loading tools by name or dotted path."""

from __future__ import annotations

import json
import sqlite3
import threading
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from sqlite_utils import Database

from edge_agent.conversation.builtin_tools import BUILTIN, TableBookings, book_table_tool, load_tools
from edge_agent.conversation.tools import Tool
from edge_agent.engines.base import ToolCall
from edge_agent.errors import ConfigError


def call(people: object, time: object = "7 PM") -> ToolCall:
    return ToolCall("c1", "book_table", json.dumps({"time": time, "people": people}))


def rows(path: Path) -> list[dict[str, object]]:
    return list(Database(path)["bookings"].rows) if path.exists() else []


def test_bookings_are_rows_readable_by_another_connection(tmp_path: Path) -> None:
    path = tmp_path / "data" / "agent.db"  # the directory does not exist yet
    box = load_tools(["book_table"], path, "cfg.toml")
    first = box.run(call(4))
    second = box.run(call(2, " 8:30 PM "))
    assert first == "booked: a table for 4 people at 7 PM, booking reference B1"
    assert second == "booked: a table for 2 people at 8:30 PM, booking reference B2"
    # A second connection sees both while the tool's own connection is still open: committed.
    found = rows(path)
    assert [(r["id"], r["time"], r["people"]) for r in found] == [(1, "7 PM", 4), (2, "8:30 PM", 2)]
    booked_at = datetime.fromisoformat(str(found[0]["booked_at"]))
    assert booked_at.utcoffset() == timedelta(0)
    assert abs((datetime.now(booked_at.tzinfo) - booked_at).total_seconds()) < 60
    assert sqlite3.connect(path).execute("PRAGMA journal_mode").fetchone()[0] == "wal"


@pytest.mark.parametrize(("people", "time", "says"), [
    (0, "7 PM", "1 to 20 people, not 0"),
    (21, "7 PM", "1 to 20 people, not 21"),
    (4, "", "the time is missing"),
    (4, "   ", "the time is missing"),
    (4, "x" * 41, "is not a time"),
])
def test_bad_arguments_leave_no_row_and_tell_the_model(
        tmp_path: Path, people: int, time: str, says: str) -> None:
    path = tmp_path / "agent.db"
    box = load_tools(["book_table"], path, "cfg.toml")
    result = box.run(call(people, time))
    assert result.startswith("error: ") and says in result
    assert rows(path) == []
    assert box.run(call(3)).startswith("booked:")
    assert len(rows(path)) == 1


def test_wrong_types_are_refused_before_the_database(tmp_path: Path) -> None:
    path = tmp_path / "agent.db"
    box = load_tools(["book_table"], path, "cfg.toml")
    assert box.run(call(True)).startswith("error: argument 'people'")
    assert box.run(call("four")).startswith("error: argument 'people'")
    # Called directly (not through the Toolbox's schema check), the tool checks too.
    assert TableBookings(path).book("7 PM", True).startswith("error: a table is for")  # type: ignore[arg-type]
    assert rows(path) == []


def test_each_thread_gets_its_own_connection_and_the_table_survives_restart(tmp_path: Path) -> None:
    path = tmp_path / "agent.db"
    bookings = TableBookings(path)
    results: list[str] = []
    worker = threading.Thread(target=lambda: results.append(bookings.book("6 PM", 5)))
    worker.start()
    worker.join()
    results.append(bookings.book("9 PM", 1))  # the main thread: another connection
    bookings.close()
    # A new process (here: a new object) appends to the same table.
    results.append(TableBookings(path).book("10 PM", 20))
    assert results == [
        "booked: a table for 5 people at 6 PM, booking reference B1",
        "booked: a table for 1 person at 9 PM, booking reference B2",
        "booked: a table for 20 people at 10 PM, booking reference B3",
    ]
    assert [r["people"] for r in rows(path)] == [5, 1, 20]


def test_an_unwritable_database_is_an_error_result(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    result = load_tools(["book_table"], blocker / "agent.db", "cfg.toml").run(call(2))
    assert result.startswith("error: book_table failed:")


def extra_tools(db_path: Path) -> list[Tool]:
    """A dotted-path factory returning several tools."""
    return [Tool("opening_hours", "When we are open.", {"type": "object", "properties": {}},
                 lambda: f"12 to 23 (db {db_path.name})")]


def single_tool(db_path: Path) -> Tool:
    return book_table_tool(db_path)


def not_a_tool(db_path: Path) -> str:
    return "nope"


def failing_factory(db_path: Path) -> Tool:
    raise RuntimeError("no licence key")


def test_tools_load_by_builtin_name_and_dotted_path(tmp_path: Path) -> None:
    assert set(BUILTIN) == {"book_table"}
    box = load_tools(["book_table", "tests.test_builtin_tools:extra_tools"], tmp_path / "a.db",
                     "cfg.toml")
    assert [s["function"]["name"] for s in box.specs()] == ["book_table", "opening_hours"]
    assert box.run(ToolCall("c", "opening_hours", "{}")) == "12 to 23 (db a.db)"
    single = load_tools(["tests.test_builtin_tools:single_tool"], tmp_path / "a.db", "cfg.toml")
    assert [s["function"]["name"] for s in single.specs()] == ["book_table"]
    assert not load_tools([], tmp_path / "a.db", "cfg.toml")


@pytest.mark.parametrize(("name", "says"), [
    ("order_pizza", "unknown tool 'order_pizza': use a built-in tool (book_table)"),
    ("no_such_module_xyz:make", "module 'no_such_module_xyz' (from 'no_such_module_xyz:make') "
                                "not found"),
    ("tests.test_builtin_tools:missing", "has no 'missing'"),
    ("tests.test_builtin_tools:not_a_tool", "returned str; it must return a Tool"),
    ("tests.test_builtin_tools:failing_factory", "failed: RuntimeError: no licence key"),
])
def test_bad_tool_names_are_config_errors(tmp_path: Path, name: str, says: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_tools(["book_table", name], tmp_path / "a.db", "cfg.toml")
    assert caught.value.path == "cfg.toml" and caught.value.key == "tools.enabled"
    assert says in caught.value.reason


def test_a_tool_enabled_twice_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="two enabled tools are named 'book_table'"):
        load_tools(["book_table", "tests.test_builtin_tools:single_tool"], tmp_path / "a.db", "c")
