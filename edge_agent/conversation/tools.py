"""Tools the model may call: declared with a JSON schema, run on their own owner thread.

A failing call does not fail the conversation: the model gets `error: ...` as the result (and
can say so), and the call with its result is recorded like any other.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from edge_agent.engines.base import ToolCall, ToolSpec

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
        tool = self._tools.get(call.name)
        if tool is None:
            return f"error: there is no tool named {call.name!r} (tools: {', '.join(self._tools)})"
        try:
            arguments = json.loads(call.arguments or "{}")
        except json.JSONDecodeError as exc:
            return f"error: the arguments are not valid JSON ({exc.msg} at {exc.pos})"
        problem = _check(arguments, tool.parameters)
        if problem:
            return f"error: {problem}"
        try:
            return tool.run(**arguments)
        except Exception as exc:  # the model is told; the loop goes on
            return f"error: {call.name} failed: {exc}"


def _check(arguments: object, schema: dict[str, Any]) -> str | None:
    if not isinstance(arguments, dict):
        return "the arguments must be a JSON object"
    properties: dict[str, Any] = schema.get("properties", {})
    missing = [key for key in schema.get("required", []) if key not in arguments]
    if missing:
        return f"missing argument(s): {', '.join(missing)}"
    for key, value in arguments.items():
        if key not in properties:
            return f"unknown argument {key!r} (expected: {', '.join(properties)})"
        wanted = _JSON_TYPES.get(properties[key].get("type", ""), (object,))
        if not isinstance(value, wanted) or (isinstance(value, bool) and bool not in wanted):
            return f"argument {key!r} must be of JSON type {properties[key]['type']}, got {value!r}"
    return None
