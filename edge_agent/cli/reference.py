"""The reference (docs/reference.md), written from the code so that they cannot drift from it: every
command and its arguments (from the parser), the exit codes (from the errors' classes), the
config keys (from the config dataclasses, with their defaults), the session record and its
events (from their TypedDicts and dataclasses, with each field's docstring) and the benchmark
JSON (from its schema).

`python -m edge_agent.cli.reference docs/reference.md` rewrites the blocks between
`<!-- BEGIN GENERATED: NAME -->` and `<!-- END GENERATED: NAME -->`; `--check` only says
whether they are current (the test suite runs it).
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import json
import re
import sys
import textwrap
import types
import typing
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from edge_agent import errors
from edge_agent.config import Config
from edge_agent.events import EVENT_TYPES
from edge_agent.memory import record as session_record
from edge_agent.replay import EXIT_DIFFERS


def commands() -> str:
    """Every command and subcommand: what it does and each argument it takes, read from the
    parser itself (not its `--help` text, whose layout changes with the Python version)."""
    from edge_agent.cli.main import _parser

    blocks = []
    for path, parser, what in _parsers(_parser(), ["edge-agent"], ""):
        lines = [f"#### `{' '.join(path)}`", ""]
        summary = " ".join((parser.description or what or "").split())
        if summary:
            lines += [summary, ""]
        lines += [f"- {_argument(action)}" for action in parser._actions
                  if not isinstance(action, argparse._HelpAction)
                  and action.help != argparse.SUPPRESS]
        blocks.append("\n".join(lines).rstrip())
    return "\n\n".join(blocks)


def _parsers(parser: argparse.ArgumentParser, path: list[str], what: str
             ) -> Iterator[tuple[list[str], argparse.ArgumentParser, str]]:
    yield path, parser, what
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
            for name, sub in action.choices.items():
                yield from _parsers(sub, [*path, name], helps.get(name, ""))


def _argument(action: argparse.Action) -> str:
    """One argument: how it is written and what it does (defaults filled in)."""
    if isinstance(action, argparse._SubParsersAction):
        names = " | ".join(action.choices)
        return f"`{{{names}}}`: a subcommand, below"
    if action.option_strings:
        takes = "" if action.nargs == 0 else f" {action.metavar or action.dest.upper()}"
        written = ", ".join(f"`{option}{takes}`" for option in action.option_strings)
    else:
        written = f"`{action.metavar or action.dest.upper()}`"
        if action.nargs == "?":
            written += " (optional)"
    text = " ".join(str(action.help or "").split())
    if "%(" in text:
        text = text % {"default": action.default, "prog": "edge-agent"}
    if action.choices and not isinstance(action, argparse._SubParsersAction):
        text = f"one of {', '.join(map(str, action.choices))}: {text}" if text else \
            f"one of {', '.join(map(str, action.choices))}"
    return f"{written}: {text}" if text else written


def exit_codes() -> str:
    """A table of exit statuses: one row per status, the error classes that end with it."""
    by_code: dict[int, list[str]] = {}
    for _, cls in inspect.getmembers(errors, inspect.isclass):
        if issubclass(cls, errors.EdgeAgentError) and cls is not errors.EdgeAgentError:
            doc = " ".join((cls.__doc__ or "").split())
            by_code.setdefault(cls.exit_code, []).append(f"{doc} (`{cls.__name__}`)")
    rows = ["| status | meaning |", "|---|---|", "| 0 | done |",
            "| 1 | an unexpected error (a bug: report it with the message) |"]
    rows += [f"| {code} | {'<br>'.join(sorted(found))} |" for code, found in sorted(by_code.items())]
    rows += [f"| {EXIT_DIFFERS} | `sessions replay`: the replay decided otherwise than the "
             "recording |",
             "| 130 | interrupted (Ctrl-C) |"]
    return "\n".join(rows)


def config_keys() -> str:
    """Every config key with its built-in default, table by table (what each means is in the
    commented template, config/edge-agent.toml)."""
    defaults = Config()
    rows = ["| key | default |", "|---|---|"]
    for name, value in _fields(defaults, ""):
        rows.append(f"| `{name}` | `{_toml(value)}` |")
    return "\n".join(rows)


def _fields(obj: Any, prefix: str) -> Iterator[tuple[str, Any]]:
    for field in dataclasses.fields(obj):
        value = getattr(obj, field.name)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            yield from _fields(value, f"{prefix}{field.name}.")
        else:
            yield f"{prefix}{field.name}", value


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int | float):
        return json.dumps(value)
    if isinstance(value, tuple | list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if value is None:
        return "(none)"
    return json.dumps(str(value))


def bench_document() -> str:
    """What a `bench --json` document holds, from its JSON schema: the top level and each
    object it refers to, field by field with its type (required fields in bold)."""
    schema = json.loads((Path(__file__).parents[1] / "bench" / "bench.schema.json")
                        .read_text(encoding="utf-8"))
    lines = [" ".join(str(schema.get("description", "")).split()), ""]
    for title, spec in [("document", schema), *schema.get("$defs", {}).items()]:
        if "properties" not in spec:
            continue
        required = set(spec.get("required", ()))
        fields = "; ".join(
            f"{f'**`{name}`**' if name in required else f'`{name}`'} {_json_type(field)}"
            for name, field in spec["properties"].items())
        lines.append(f"- `{title}`: {fields}")
    return "\n".join(lines)


def _json_type(spec: dict[str, Any]) -> str:
    if "const" in spec:
        return json.dumps(spec["const"])
    if "enum" in spec:
        return " or ".join(json.dumps(value) for value in spec["enum"])
    for key in ("anyOf", "oneOf"):
        if key in spec:
            return " or ".join(_json_type(option) for option in spec[key])
    if "$ref" in spec:
        return f"`{str(spec['$ref']).rsplit('/', 1)[-1]}`"
    kind = spec.get("type", "any")
    if kind == "array":
        return f"array of {_json_type(spec.get('items', {}))}"
    if isinstance(kind, list):
        return " or ".join(map(str, kind))
    return str(kind)


def record() -> str:
    """The session record, object by object, and every event type it may hold, field by field
    with its JSON type and what it means (the docstrings under the fields)."""
    lines = []
    for shape in (session_record.SessionRecord, session_record.TurnRecord,
                  session_record.UnitRecord, session_record.WordRecord,
                  session_record.LlmRequestRecord):
        lines += [f"- `{shape.__name__}`", *_field_lines(shape)]
    lines += ["", "Each of `events` is `{\"at\", \"type\", \"run_id\", ...its fields}`: `at` in "
              "seconds on the clock of the run `run_id` (a session resumed after a restart "
              "spans several runs), `type` one of these:", ""]
    nested: dict[str, type] = {}
    for name, kind in EVENT_TYPES.items():
        lines += [f"- **`{name}`**: {_flat(kind.__doc__ or '')}", *_field_lines(kind, nested)]
    lines += ["", "Objects inside events:", ""]
    done = 0
    while done < len(nested):  # an object may hold another (a unit's words)
        name, kind = list(nested.items())[done]
        lines += [f"- `{name}`", *_field_lines(kind, nested)]
        done += 1
    return "\n".join(lines)


def _field_lines(shape: type, nested: dict[str, type] | None = None) -> list[str]:
    docs = _attribute_docs(shape)
    return [f"  - `{name}` ({_type_word(hint, nested)})"
            + (f": {docs[name]}" if name in docs else "")
            for name, hint in typing.get_type_hints(shape, include_extras=True).items()]


def _attribute_docs(shape: type) -> dict[str, str]:
    """The docstring under each field of a class's source, by field name."""
    body = ast.parse(textwrap.dedent(inspect.getsource(shape))).body[0]
    assert isinstance(body, ast.ClassDef)
    docs = {}
    for node, following in zip(body.body, body.body[1:], strict=False):
        if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                and isinstance(following, ast.Expr) and isinstance(following.value, ast.Constant)
                and isinstance(following.value.value, str)):
            docs[node.target.id] = _flat(following.value.value)
    return docs


def _flat(text: str) -> str:
    return " ".join(text.split())


def _type_word(hint: Any, nested: dict[str, type] | None) -> str:
    if typing.get_origin(hint) is typing.Annotated:
        return _type_word(typing.get_args(hint)[0], nested)
    if typing.get_origin(hint) is typing.NotRequired:
        return _type_word(typing.get_args(hint)[0], nested) + ", optional"
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (types.UnionType, typing.Union):
        return " or ".join(_type_word(arg, nested) for arg in args)
    if origin in (tuple, list):
        if (len(args) == 2 and args[1] is Ellipsis) or origin is list:
            return f"list of {_type_word(args[0], nested)}"
        return "[" + ", ".join(_type_word(arg, nested) for arg in args) + "]"
    if hint is type(None):
        return "null"
    if typing.is_typeddict(hint):
        return f"`{hint.__name__}`"
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        if nested is not None:
            nested.setdefault(hint.__name__, hint)
        return f"`{hint.__name__}`"
    words = {str: "text", int: "whole number", float: "number", bool: "true or false",
             dict: "object"}
    return words.get(origin or hint, "object" if origin is dict else str(hint))


SECTIONS: dict[str, Callable[[], str]] = {
    "commands": commands, "exit-codes": exit_codes, "config-keys": config_keys,
    "bench-document": bench_document, "record": record,
}
"""The generated blocks, by the name their markers carry."""

_BLOCK = re.compile(r"(<!-- BEGIN GENERATED: ([a-z-]+) -->\n)(.*?)(<!-- END GENERATED: \2 -->)",
                    re.S)


def render(text: str) -> str:
    """`text` with every generated block written anew."""
    def fill(match: re.Match[str]) -> str:
        name = match.group(2)
        if name not in SECTIONS:
            raise KeyError(f"no generated section {name!r} (known: {', '.join(SECTIONS)})")
        return f"{match.group(1)}{SECTIONS[name]()}\n{match.group(4)}"

    return _BLOCK.sub(fill, text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m edge_agent.cli.reference",
                                     description="Write the generated reference blocks of a "
                                     "Markdown file (docs/reference.md).")
    parser.add_argument("readme", type=Path, metavar="FILE")
    parser.add_argument("--check", action="store_true",
                        help="change nothing; exit 1 if a block is not current")
    args = parser.parse_args(argv)
    text = args.readme.read_text(encoding="utf-8")
    current = render(text)
    if args.check:
        if current != text:
            print(f"{args.readme}: generated blocks are out of date: run "
                  f"python -m edge_agent.cli.reference {args.readme}", file=sys.stderr)
            return 1
        return 0
    args.readme.write_text(current, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
