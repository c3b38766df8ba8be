"""Tools the model may call: declared with a JSON schema, run on their own owner thread.

A failing call does not fail the conversation: the model gets `error: ...` as the result (and
can say so), and the call with its result is recorded like any other. A call is checked before
its tool runs: arguments of at most `MAX_TOOL_ARGUMENTS` characters, a JSON object, each value
of its declared type and within what the schema says of it (`enum`, `maxLength`, `minimum`,
`maximum`; a string without `maxLength` at most `MAX_STRING`). A result is made storable.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from edge_agent.engines.base import MAX_TOOL_ARGUMENTS, ToolCall, ToolSpec
from edge_agent.printable import shown, storable

_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,), "integer": (int,), "number": (int, float), "boolean": (bool,),
    "object": (dict,), "array": (list,),
}


@dataclass(frozen=True)
class Tool:
    """One action the agent can take."""

    name: str
    """What the model calls it."""
    description: str
    """When to use it, for the model."""
    parameters: dict[str, Any]
    """JSON schema of the arguments object (`properties`, `required`)."""
    run: Callable[..., str]
    """Does the action (blocking is fine: it runs on the tools thread); returns the result
    as text for the model."""

    def spec(self) -> ToolSpec:
        return {"type": "function", "function": {
            "name": self.name, "description": self.description, "parameters": self.parameters}}


class Toolbox:
    def __init__(self, tools: Sequence[Tool] = ()) -> None:
        self._tools = {tool.name: tool for tool in tools}

    def __bool__(self) -> bool:
        return bool(self._tools)

    @property
    def names(self) -> set[str]:
        return set(self._tools)

    def specs(self) -> list[ToolSpec]:
        return [tool.spec() for tool in self._tools.values()]

    def run(self, call: ToolCall) -> str:
        """The call's result, or `error: <what is wrong>` when it cannot run."""
        return storable(self._run(call))

    def _run(self, call: ToolCall) -> str:
        tool = self._tools.get(call.name)
        if tool is None:
            return (f"error: there is no tool named {shown(call.name, 60)!r} (tools: "
                    f"{', '.join(self._tools)})")
        if len(call.arguments) > MAX_TOOL_ARGUMENTS:
            return (f"error: the arguments are longer than {MAX_TOOL_ARGUMENTS} characters; "
                    "give only the values the tool's parameters ask for")
        try:
            arguments = json.loads(call.arguments or "{}")
        except (ValueError, RecursionError) as exc:
            where = f" ({exc.msg} at {exc.pos})" if isinstance(exc, json.JSONDecodeError) else ""
            return f"error: the arguments are not valid JSON{where}"
        problem = _check(arguments, tool.parameters)
        if problem:
            return f"error: {problem}"
        try:
            return tool.run(**arguments)
        except Exception as exc:  # the model is told; the loop goes on
            return f"error: {call.name} failed: {exc}"


MAX_STRING = 1000
"""A string argument whose schema sets no `maxLength`, at most."""


def _check(arguments: object, schema: dict[str, Any]) -> str | None:
    if not isinstance(arguments, dict):
        return "the arguments must be a JSON object"
    properties: dict[str, Any] = schema.get("properties", {})
    missing = [key for key in schema.get("required", []) if key not in arguments]
    if missing:
        return f"missing argument(s): {', '.join(missing)}"
    for key, value in arguments.items():
        if key not in properties:
            return f"unknown argument {shown(key, 60)!r} (expected: {', '.join(properties)})"
        problem = _value_problem(value, properties[key])
        if problem:
            return f"argument {key!r} {problem}"
    return None


def _value_problem(value: object, schema: dict[str, Any]) -> str | None:
    """What is wrong with `value` for its property's `schema` (None: nothing)."""
    wanted = _JSON_TYPES.get(schema.get("type", ""), (object,))
    if not isinstance(value, wanted) or (isinstance(value, bool) and bool not in wanted):
        return f"must be of JSON type {schema['type']}, got {shown(repr(value), 60)}"
    if "enum" in schema and value not in schema["enum"]:
        return f"must be one of {', '.join(map(repr, schema['enum']))}"
    if isinstance(value, str) and len(value) > schema.get("maxLength", MAX_STRING):
        return f"must be at most {schema.get('maxLength', MAX_STRING)} characters long"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            return f"must be at least {schema['minimum']}"
        if "maximum" in schema and value > schema["maximum"]:
            return f"must be at most {schema['maximum']}"
    return None
