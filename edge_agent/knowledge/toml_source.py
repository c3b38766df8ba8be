"""TOML knowledge files: `[venue] names`, `[hours]` (see `knowledge.hours`), `[facts]`
(`"adult ticket" = "14 euros"`, or a table of them: `[facts.prices]`), `[[faq]]` (`questions`,
`answer`, optional `keywords`) and `[synonyms]` (`toilet = ["restroom", "loo"]`).

tomllib gives values, not lines: `_TomlLines` finds where a key is written, so that an error
names the line.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from edge_agent.config.tomlfile import parse_toml
from edge_agent.errors import ConfigError
from edge_agent.knowledge.entries import (
    FACT,
    FAQ,
    MAX_PHRASINGS,
    MAX_SYNONYM_GROUPS,
    Entry,
    Source,
    bounded,
    check_answer,
)
from edge_agent.knowledge.hours import HoursError, Schedule, parse_schedule

_TOML_TABLES = ("venue", "hours", "facts", "faq", "synonyms")


def read_toml(text: str, path: str) -> Source:
    data = parse_toml(text, path)
    where = _TomlLines(text)
    for key in data:
        if key not in _TOML_TABLES:
            raise ConfigError(path, where.of(key), f"unknown table {key!r} (a knowledge file "
                              f"has {', '.join(_TOML_TABLES)})")
    names = _strings(data.get("venue", {}), "names", path, where, "venue")
    venue = data.get("venue", {})
    if not isinstance(venue, dict) or set(venue) - {"names"}:
        raise ConfigError(path, where.of("venue"), "[venue] holds names = [\"...\"]: what "
                          "callers call the venue")
    entries = _toml_facts(data.get("facts", {}), path, where)
    entries += _toml_faq(data.get("faq", []), path, where)
    return Source(path, tuple(entries), _toml_synonyms(data.get("synonyms", {}), path, where),
                  _toml_hours(data.get("hours"), names, path, where), names)


class _TomlLines:
    """Where a key is written in a TOML text (tomllib gives values, not lines): the first line
    that defines it under its table, else its table's header."""

    def __init__(self, text: str) -> None:
        self.lines = text.split("\n")

    def of(self, *path: str | int) -> str:
        keys = [str(p) for p in path if not isinstance(p, int)]
        header = ".".join(keys[:-1])
        table = ""
        header_line = 0
        for number, raw in enumerate(self.lines, 1):
            line = raw.strip()
            found = re.match(r"^\[\[?\s*([^\]]+?)\s*\]\]?", line)
            if found:
                table = ".".join(p.strip().strip('"').strip("'")
                                 for p in found.group(1).split("."))
                if table in (".".join(keys), header):
                    header_line = header_line or number
                continue
            key = re.match(r'^["\']?([^"\'=]+?)["\']?\s*=', line)
            if key and table == header and key.group(1).strip() == keys[-1]:
                return f"line {number}"
        return f"line {header_line}" if header_line else keys[-1] if keys else ""


def _strings(table: object, key: str, path: str, where: _TomlLines, *at: str) -> tuple[str, ...]:
    if not isinstance(table, dict):
        return ()
    value = table.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise ConfigError(path, where.of(*at, key), f"{key} must be a list of words: "
                          '["...", "..."]')
    return tuple(v.strip() for v in value)


def _toml_facts(table: object, path: str, where: _TomlLines) -> list[Entry]:
    if not isinstance(table, dict):
        raise ConfigError(path, where.of("facts"), "[facts] is a table: \"adult ticket\" = "
                          "\"14 euros\"")
    entries = []
    for key, value in table.items():
        if isinstance(value, dict):
            for name, fact in value.items():
                entries.append(_fact(name, fact, key, path, where.of("facts", key, name)))
        else:
            entries.append(_fact(key, value, "", path, where.of("facts", key)))
    return entries


def _fact(name: str, value: object, group: str, path: str, line: str) -> Entry:
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(path, line, f"the fact {name!r} must be text (\"14 euros\", or a "
                          "sentence); a table of facts is [facts.NAME]")
    value = value.strip()
    number = int(line.split()[-1]) if line.startswith("line ") else 0
    check_answer(value, path, number)
    said = value if value[-1] in ".!?" else f"{_upper(name)}: {value}."
    topic = f"{group} {name}".strip()
    return Entry(FACT, name, (name, topic) if group else (name,), said, path, number,
                 (group,) if group else (), group)


def _upper(text: str) -> str:
    return text[:1].upper() + text[1:]


def _toml_faq(items: object, path: str, where: _TomlLines) -> list[Entry]:
    if not isinstance(items, list):
        raise ConfigError(path, where.of("faq"), "FAQ entries are [[faq]] tables")
    entries = []
    for index, item in enumerate(items):
        line = _nth_header(where, "faq", index)
        if not isinstance(item, dict):
            raise ConfigError(path, f"line {line}", "an [[faq]] entry is a table")
        unknown = set(item) - {"questions", "question", "answer", "keywords", "topic"}
        if unknown:
            raise ConfigError(path, f"line {line}", f"unknown key {sorted(unknown)[0]!r} in "
                              "[[faq]] (questions, answer, keywords, topic)")
        asked = item.get("questions", item.get("question"))
        if isinstance(asked, str):
            asked = [asked]
        if not isinstance(asked, list) or not asked or not all(
                isinstance(q, str) and q.strip() for q in asked):
            raise ConfigError(path, f"line {line}", "an [[faq]] entry needs questions = "
                              "[\"...\"]: how callers ask it")
        answer = item.get("answer")
        if not isinstance(answer, str) or not answer.strip():
            raise ConfigError(path, f"line {line}", "an [[faq]] entry needs answer = \"...\"")
        check_answer(answer.strip(), path, line)
        keywords = item.get("keywords", [])
        if not isinstance(keywords, list) or not all(isinstance(k, str) for k in keywords):
            raise ConfigError(path, f"line {line}", "keywords = [\"...\"] is a list of words")
        questions = bounded(tuple(q.strip() for q in asked), path, line)
        topic = item.get("topic", questions[0])
        entries.append(Entry(FAQ, str(topic), questions, answer.strip(), path, line,
                             tuple(keywords)))
    return entries


def _nth_header(where: _TomlLines, name: str, index: int) -> int:
    seen = -1
    for number, raw in enumerate(where.lines, 1):
        if re.match(rf"^\[\[\s*{name}\s*\]\]", raw.strip()):
            seen += 1
            if seen == index:
                return number
    return 0


def _toml_synonyms(table: object, path: str, where: _TomlLines) -> tuple[tuple[str, ...], ...]:
    if not isinstance(table, dict):
        raise ConfigError(path, where.of("synonyms"), "[synonyms] is a table: toilet = "
                          "[\"restroom\", \"loo\"]")
    if len(table) > MAX_SYNONYM_GROUPS:
        raise ConfigError(path, where.of("synonyms"), f"{len(table)} synonym groups; at most "
                          f"{MAX_SYNONYM_GROUPS}")
    groups = []
    for head, others in table.items():
        if not isinstance(others, list) or not all(isinstance(o, str) and o.strip()
                                                    for o in others):
            raise ConfigError(path, where.of("synonyms", head), f"{head} = [...] lists the words "
                              "that mean the same: [\"restroom\", \"loo\"]")
        if len(others) > MAX_PHRASINGS:
            raise ConfigError(path, where.of("synonyms", head), f"{len(others)} synonyms of "
                              f"{head!r}; at most {MAX_PHRASINGS}")
        groups.append((head, *others))
    return tuple(groups)


def _toml_hours(table: object, names: tuple[str, ...], path: str, where: _TomlLines
                ) -> tuple[Schedule, ...]:
    if table is None:
        return ()
    if not isinstance(table, dict):
        raise ConfigError(path, where.of("hours"), "[hours] is a table: monday = "
                          "\"10:00-17:00\"")
    own = {k: v for k, v in table.items() if not isinstance(v, dict)}
    places = {k: v for k, v in table.items() if isinstance(v, dict) and k != "dates"}
    schedules = [_schedule("", names, own, table.get("dates", {}), path, where, ())]
    for place, spec in places.items():
        place_names = (place, *_strings(spec, "names", path, where, "hours", place))
        days = {k: v for k, v in spec.items() if k not in ("names", "dates")}
        schedules.append(_schedule(f"the {place}", place_names, days, spec.get("dates", {}), path,
                                   where, (place,)))
    return tuple(schedules)


def _schedule(place: str, names: Sequence[str], days: Mapping[str, Any], dates: object, path: str,
              where: _TomlLines, at: tuple[str, ...]) -> Schedule:
    if not isinstance(dates, dict):
        raise ConfigError(path, where.of("hours", *at, "dates"), "dates is a table: "
                          "\"2026-12-25\" = \"closed\"")
    for key, value in [*days.items(), *dates.items()]:
        if not isinstance(value, str):
            table = (*at, "dates") if key in dates else at
            raise ConfigError(path, where.of("hours", *table, key), f"{key} = \"10:00-17:00\" "
                              "(or \"closed\"): hours are text")
    try:
        return parse_schedule(place, names, days, dates)
    except HoursError as exc:
        key = next((k for k in [*days, *dates] if repr(k) in str(exc) or
                    repr(days.get(k, dates.get(k))).strip("'") in str(exc)), "")
        table = (*at, "dates") if key in dates else at
        line = where.of("hours", *table, key) if key else where.of("hours", *at)
        raise ConfigError(path, line, str(exc)) from None
