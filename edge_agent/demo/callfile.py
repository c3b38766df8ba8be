"""Call files (TOML): scripted caller lines and, optionally, the agent's scripted replies.

```toml
[agent]                      # optional: makes the run reproducible with the scripted LLM
greeting = "Hi, Luigi's. How can I help?"
replies = ["Sure. For how many people?", "..."]

[[caller]]
say = "Hi, I want to book a table for tonight."
at = 0.5                     # seconds from the start of the call
[[caller]]
say = "Four people."
after_agent_done = true      # when the agent has finished speaking
pause = 0.5                  # optional, seconds after that
[[caller]]
say = "7 PM is perfect."
barge_in_after = 3.2         # seconds after the agent's current reply started playing
```
"""

from __future__ import annotations

import importlib.resources
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edge_agent.errors import ConfigError
from edge_agent.tomlfile import parse_toml, read_text

DEFAULT_CALL = "luigis.toml"
_TRIGGERS = ("at", "after_agent_done", "barge_in_after")


@dataclass(frozen=True)
class CallerLine:
    say: str
    """What the caller says."""
    at: float | None = None
    """Seconds from the start of the call."""
    after_agent_done: bool = False
    """Wait until the agent has finished its next reply."""
    pause: float = 0.4
    """Seconds to wait after the agent finished (with after_agent_done)."""
    barge_in_after: float | None = None
    """Seconds after the agent's next reply started playing: cut in."""


@dataclass(frozen=True)
class CallScript:
    source: str
    lines: tuple[CallerLine, ...]
    greeting: str | None
    """None: use the configured greeting."""
    replies: tuple[str, ...] | None
    """None: the configured language model answers."""


def load_call(path: Path | None) -> CallScript:
    if path is None:
        text = importlib.resources.files("edge_agent.demo").joinpath(DEFAULT_CALL).read_text(
            encoding="utf-8")
        return parse_call(text, f"(built-in) {DEFAULT_CALL}")
    return parse_call(read_text(path, "call file"), str(path))


def parse_call(text: str, source: str) -> CallScript:
    data = parse_toml(text, source)
    unknown = set(data) - {"agent", "caller"}
    if unknown:
        raise ConfigError(source, sorted(unknown)[0], "unknown key (expected [agent] and [[caller]])")
    agent = data.get("agent", {})
    if not isinstance(agent, dict):
        raise ConfigError(source, "agent", "must be a table ([agent])")
    extra = set(agent) - {"greeting", "replies"}
    if extra:
        raise ConfigError(source, f"agent.{sorted(extra)[0]}", "unknown key (greeting, replies)")
    greeting = agent.get("greeting")
    if greeting is not None and not isinstance(greeting, str):
        raise ConfigError(source, "agent.greeting", "must be a string")
    replies = agent.get("replies")
    if replies is not None and (
        not isinstance(replies, list) or not all(isinstance(r, str) for r in replies)
    ):
        raise ConfigError(source, "agent.replies", "must be a list of strings")
    callers = data.get("caller", [])
    if not isinstance(callers, list) or not callers:
        raise ConfigError(source, "caller", "needs at least one [[caller]] line with `say`")
    lines = tuple(_line(entry, source, f"caller[{i + 1}]") for i, entry in enumerate(callers))
    return CallScript(source, lines, greeting, tuple(replies) if replies is not None else None)


def _line(entry: Any, source: str, key: str) -> CallerLine:
    if not isinstance(entry, dict):
        raise ConfigError(source, key, "must be a table ([[caller]])")
    allowed = {"say", "pause", *_TRIGGERS}
    extra = set(entry) - allowed
    if extra:
        raise ConfigError(source, f"{key}.{sorted(extra)[0]}",
                          f"unknown key (allowed: {', '.join(sorted(allowed))})")
    say = entry.get("say")
    if not isinstance(say, str) or not say.strip():
        raise ConfigError(source, f"{key}.say", "must be a non-empty string")
    triggers = [t for t in _TRIGGERS if t in entry]
    if len(triggers) != 1:
        raise ConfigError(source, key,
                          "needs exactly one of at, after_agent_done, barge_in_after "
                          f"(got {', '.join(triggers) or 'none'})")
    for number in ("at", "barge_in_after", "pause"):
        value = entry.get(number)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)
                                  or value < 0):
            raise ConfigError(source, f"{key}.{number}", f"must be seconds >= 0, got {value!r}")
    if "after_agent_done" in entry and entry["after_agent_done"] is not True:
        raise ConfigError(source, f"{key}.after_agent_done", "must be true (or left out)")
    if "pause" in entry and "after_agent_done" not in entry:
        raise ConfigError(source, f"{key}.pause", "only goes with after_agent_done = true")
    return CallerLine(
        say=say,
        at=float(entry["at"]) if "at" in entry else None,
        after_agent_done="after_agent_done" in entry,
        pause=float(entry.get("pause", 0.4)),
        barge_in_after=float(entry["barge_in_after"]) if "barge_in_after" in entry else None,
    )
