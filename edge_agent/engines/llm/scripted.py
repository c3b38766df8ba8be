"""The scripted language model: replies from a list (a call file's, a test's), word by word,
whatever it is asked, tool calls included. Deterministic and instant: the demo, replays and the
benchmarks that measure the pipeline and not a model use it."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from edge_agent.config.tomlfile import parse_toml, read_text
from edge_agent.config.validate import TextRule, check_text
from edge_agent.engines.base import ChatMessage, ToolCall, ToolSpec
from edge_agent.errors import ConfigError


@dataclass(frozen=True)
class ScriptedToolReply:
    """A scripted reply that calls a tool, after saying something or not."""

    tool: str
    """The tool's name."""
    arguments: str
    """The arguments as JSON text (an object)."""
    say: str = ""
    """Spoken before the call; "" says nothing (the hop opens no speech unit)."""


ScriptedReply = str | ScriptedToolReply
"""One entry of a script: text to speak, or a tool call (with optional text before it)."""


class ScriptedLanguageModel:
    """Replies with the next entry of a script, word by word, whatever it is asked.

    Makes demos and regression calls reproducible without a model download. An entry that
    calls a tool is one hop: the model asked again with the result takes the next entry. When
    the script runs out it says nothing (an empty reply) and the loop reports it.
    """

    def __init__(self, replies: Sequence[ScriptedReply]) -> None:
        self._replies = list(replies)
        self._next = 0
        self._last_took = False
        """Whether the latest request took an entry (one that found the script run out took
        none, and withdrawing it must give nothing back)."""

    @property
    def exhausted(self) -> bool:
        return self._next >= len(self._replies)

    @property
    def tool_names(self) -> set[str]:
        """Tools the script calls (to check against the enabled tools before a run)."""
        return {r.tool for r in self._replies if isinstance(r, ScriptedToolReply)}

    @classmethod
    def from_file(cls, path: Path) -> ScriptedLanguageModel:
        """Read `replies = [...]` at the top level or under `[agent]` of a TOML file."""
        data = parse_toml(read_text(path, "script file"), str(path))
        if "replies" in data:
            return cls(parse_replies(data["replies"], str(path), "replies"))
        agent = data.get("agent", {})
        if not isinstance(agent, dict):
            raise ConfigError(str(path), "agent", "must be a table ([agent]) holding `replies`")
        return cls(parse_replies(agent.get("replies"), str(path), "agent.replies"))

    def prewarm(self, messages: list[ChatMessage], tools: Sequence[ToolSpec] = (),
                stop: threading.Event | None = None) -> None:
        """A script has no prompt to evaluate."""

    def withdraw(self) -> None:
        """The latest reply was not used (a speculative request thrown away): the next request
        gets it again."""
        if self._last_took:
            self._next -= 1
            self._last_took = False

    def stream(self, messages: list[ChatMessage], tools: Sequence[ToolSpec] = ()
               ) -> Iterator[str | ToolCall]:
        self._last_took = not self.exhausted
        if not self._last_took:
            return
        reply = self._replies[self._next]
        self._next += 1
        if isinstance(reply, str):
            yield from re.findall(r"\S+\s*|\s+", reply)
            return
        yield from re.findall(r"\S+\s*|\s+", reply.say)
        yield ToolCall(f"scripted-{self._next}", reply.tool, reply.arguments)


_REPLY_KEYS = ("say", "tool", "arguments")


def parse_replies(value: object, source: str, key: str) -> tuple[ScriptedReply, ...]:
    """A script's replies from TOML: strings, or tables `{ say = "...", tool = "name",
    arguments = { ... } }` (say and arguments optional). Errors name `key[n].field`."""
    if not isinstance(value, list):
        raise ConfigError(source, key, 'must be a list of strings or tool-call tables like '
                          '{ say = "Let me book that.", tool = "book_table", '
                          'arguments = { time = "7 PM", people = 4 } }')
    return tuple(_reply(entry, source, f"{key}[{i + 1}]") for i, entry in enumerate(value))


def _reply(entry: object, source: str, key: str) -> ScriptedReply:
    if isinstance(entry, str):
        return check_text(entry, source, key, TextRule())
    if not isinstance(entry, dict):
        raise ConfigError(source, key, f"must be a string or a tool-call table, got {entry!r}")
    extra = sorted(set(entry) - set(_REPLY_KEYS))
    if extra:
        raise ConfigError(source, f"{key}.{extra[0]}",
                          f"unknown key (a reply table has {', '.join(_REPLY_KEYS)})")
    tool = entry.get("tool")
    if not isinstance(tool, str) or not tool.strip():
        raise ConfigError(source, f"{key}.tool", "must name the tool to call (a non-empty "
                          "string); a reply that only speaks is a plain string")
    say = entry.get("say", "")
    if not isinstance(say, str):
        raise ConfigError(source, f"{key}.say", "must be a string (what is said before the call)")
    check_text(say, source, f"{key}.say", TextRule())
    arguments = entry.get("arguments", {})
    if not isinstance(arguments, dict):
        raise ConfigError(source, f"{key}.arguments",
                          'must be a table of the tool\'s arguments, e.g. { time = "7 PM", '
                          "people = 4 }")
    try:
        text = json.dumps(arguments, ensure_ascii=False)
    except (TypeError, ValueError):
        raise ConfigError(source, f"{key}.arguments", "holds a TOML date or time, which JSON "
                          'cannot carry: quote it (time = "19:00")') from None
    return ScriptedToolReply(tool, text, say)
