"""The package layout keeps the architecture: no import cycles, the runtime (heard truth, the
conversation, engines, audio, memory) never reaching into the tools built on it (commands,
doctor, benchmarks, inspect, replay, the installer), and heard truth pure.

Imports are read from the source (every `import` statement, also those inside functions and
under TYPE_CHECKING: each is a dependency a reader has to follow), not by importing anything."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from edge_agent.events import EVENT_TYPES

PACKAGE = Path(__file__).resolve().parents[1] / "edge_agent"

RUNTIME = ("heard", "conversation", "engines", "audio", "memory", "models", "service",
           "knowledge", "screen", "timers", "house")
"""Packages the running agent is made of."""
TOOLS = ("cli", "doctor", "bench", "inspect", "replay", "installer")
"""Packages built on the runtime, which it must not import."""


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _imported(module: str) -> Iterator[tuple[str, int]]:
    """The edge_agent modules `module` imports, with the line of each import."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            # "from pkg import mod" imports the module pkg.mod; "from mod import name" mod
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base
                       for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in MODULES:
                target = target.rpartition(".")[0]  # "import edge_agent.x.y" names x.y's module
            if target and target != module:
                yield target, node.lineno


GRAPH = {module: {target for target, _ in _imported(module)} for module in MODULES}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in sorted(graph[node]):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def _modules_saying(pattern: str) -> list[str]:
    """The modules whose source matches `pattern` (a regular expression), sorted."""
    found = re.compile(pattern)
    return sorted(module for module, path in MODULES.items()
                  if found.search(path.read_text(encoding="utf-8")))


def _in(module: str, packages: tuple[str, ...]) -> bool:
    return any(module == f"edge_agent.{p}" or module.startswith(f"edge_agent.{p}.")
               for p in packages)


def test_the_modules_were_found() -> None:
    assert {"edge_agent.app", "edge_agent.cli.main", "edge_agent.doctor.run",
            "edge_agent.heard.ledger", "edge_agent.conversation.agent"} <= set(MODULES)
    assert "edge_agent.heard.timings" in GRAPH["edge_agent.heard.ledger"]
    # a package imported as "from edge_agent.doctor import checks" is that module
    assert "edge_agent.doctor.checks" in GRAPH["edge_agent.doctor.run"]


def test_no_module_imports_itself_back() -> None:
    assert _cycles(GRAPH) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c"]]


@pytest.mark.parametrize("package", RUNTIME)
def test_the_runtime_does_not_import_the_tools(package: str) -> None:
    reaching = [f"{module} -> {target} (line {line})"
                for module in MODULES if _in(module, (package,))
                for target, line in _imported(module) if _in(target, TOOLS)]
    assert reaching == []


def test_heard_truth_is_pure() -> None:
    """heard/ imports nothing of edge_agent but itself (no audio, no engines, no clock)."""
    outside = [f"{module} -> {target}" for module in MODULES if _in(module, ("heard",))
               for target in GRAPH[module] if not _in(target, ("heard",))]
    assert outside == []


def test_only_the_command_line_installs() -> None:
    importers = {module for module, targets in GRAPH.items()
                 if any(_in(t, ("installer",)) for t in targets) and not _in(module, ("installer",))}
    assert importers == {"edge_agent.cli.service"}


def test_every_command_names_its_handler() -> None:
    """`edge-agent X` runs the function its subparser names (`set_defaults(handler=...)`): no
    command is dispatched by its name."""
    import argparse

    from edge_agent.cli.main import _parser

    parser = _parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert set(commands.choices) >= {"demo", "run", "models", "bench", "sessions", "memory",
                                     "doctor", "service", "inspect"}
    for name, sub in commands.choices.items():
        handler = sub.get_default("handler")
        assert callable(handler), name
        assert handler.__module__.startswith("edge_agent.cli."), (name, handler.__module__)


def test_only_the_adapter_reaches_into_llama_cpp_python() -> None:
    """`Llama._ctx` and `Llama._model` are private to llama-cpp-python: one module uses them."""
    assert _modules_saying(r"\._ctx\b|\bllama\._model\b") == ["edge_agent.engines.llm.native"]


def test_every_row_written_has_its_tables_columns() -> None:
    """The row shapes (`schema.ROWS`) and the tables the migrations create agree: every key a
    column, every column without a default a required key (`id` and `superseded_by` are
    SQLite's and the store's to fill)."""
    import sqlite3
    import typing

    from edge_agent.memory.schema import ROWS, SCHEMA_VERSION, migrate, tables_at

    connection = sqlite3.connect(":memory:")
    migrate(connection)
    assert set(ROWS) == tables_at(SCHEMA_VERSION)
    for table, shape in ROWS.items():
        columns = {row[1]: row for row in connection.execute(f"PRAGMA table_info({table})")}
        keys = set(typing.get_type_hints(shape))
        assert keys <= set(columns), (table, keys - set(columns))
        # (cid, name, type, notnull, default, pk)
        needed = {name for name, (_, _, _, notnull, default, pk) in columns.items()
                  if notnull and default is None and not (pk and name == "id")}
        assert needed <= shape.__required_keys__, (table, needed - shape.__required_keys__)
        missing = set(columns) - keys - {"id", "superseded_by"}
        assert not missing, (table, missing)


def test_only_the_store_speaks_sql() -> None:
    """`MemoryStore` owns every statement, but for the venue sync's queue (`sync.outbox`) and
    the venue's knowledge index (`knowledge.index`), each on a connection of its own beside
    the writer's: no other module reaches a connection."""
    assert _modules_saying(r"\bstore\.db\b|\.db\.(?:query|execute|table|atomic)\(") == [
        "edge_agent.knowledge.index", "edge_agent.memory.store", "edge_agent.sync.outbox"]


def test_no_package_imports_itself_back() -> None:
    """Between the top-level packages and modules too (`memory` and `engines`, not only
    `memory.store` and `engines.llm`): a package's dependencies point one way."""
    def top(module: str) -> str:
        return ".".join(module.split(".")[:2])

    graph: dict[str, set[str]] = {}
    for module, targets in GRAPH.items():
        graph.setdefault(top(module), set()).update(
            top(t) for t in targets if top(t) != top(module) and t != "edge_agent")
    assert _cycles(graph) == []


def test_no_event_is_matched_by_its_type_name() -> None:
    """Events are read typed (`LoggedEvent.from_json`, `isinstance`): a type's name written as
    a string is a reader that would not notice a renamed or reshaped event."""
    named = {
        f"{module}:{node.lineno}: {node.value!r}"
        for module, path in MODULES.items() if module != "edge_agent.events"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Constant) and node.value in EVENT_TYPES}
    assert named == set()


LOOSE_MODULES_MAX = 12


def test_the_top_of_the_package_stays_lean() -> None:
    """What belongs together lives in a package (config/, files/, machine/): a newcomer
    opening edge_agent/ meets the architecture, not a drawer of helpers."""
    loose = sorted(p.name for p in PACKAGE.glob("*.py") if not p.name.startswith("__"))
    assert len(loose) <= LOOSE_MODULES_MAX, loose
