"""Tools the config declares (`[[mqtt.tools]]`) that publish to the house's broker.

Each is a `Tool` like any other: the model calls it with arguments its JSON schema checks
(`conversation.tools`), its payload is the template with those values put in ("{state}" ->
"ON"), and it runs on the tools thread, waiting at most `[mqtt] timeout_ms` for the broker:
"I couldn't reach the house" is its answer when the broker is down, never a reply held up.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from edge_agent.config import MqttTool
from edge_agent.conversation.tools import Tool
from edge_agent.house.link import HouseLink

UNREACHABLE = "error: I couldn't reach the house"
"""How a tool's result starts when the broker did not take its message."""


def house_tools(declared: Sequence[MqttTool], link: HouseLink) -> list[Tool]:
    """The declared tools, publishing through `link`."""
    return [_tool(tool, link) for tool in declared]


def _tool(declared: MqttTool, link: HouseLink) -> Tool:
    def run(**arguments: Any) -> str:
        payload = declared.payload.format(**{name: _text(value)
                                             for name, value in arguments.items()})
        problem = link.send(declared.topic, payload, declared.retain)
        if problem is not None:
            return f"{UNREACHABLE} ({problem}); nothing was switched"
        return f"done: sent {payload!r} to {declared.topic}"

    parameters = {"type": "object", "properties": dict(declared.parameters),
                  "required": list(declared.parameters)}
    return Tool(declared.name, declared.description, parameters, run)


def _text(value: object) -> str:
    """A value as a payload holds it: JSON's spelling for booleans ("true", not "True")."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
