"""The knowledge files a venue writes, read into entries: Markdown, CSV and TOML.

- **Markdown** (`.md`): a heading per topic, its text below it. A heading that is a question
  ("## Can I bring my dog?") is an FAQ entry; a line "Keywords: lockers, coat check" under a
  heading gives words to match that are not said. List items and table rows become sentences.
- **CSV** (`.csv`): a header with `question` and `answer` (and optionally `topic`,
  `keywords`); several phrasings of one question in one cell separated by "|", or on rows
  below it with an empty answer.
- **TOML** (`.toml`): `[venue] names` (what callers call the venue), `[hours]` (see
  `knowledge.hours`), `[facts]` (`"adult ticket" = "14 euros"`, or a table of them:
  `[facts.prices]`), `[[faq]]` (`questions`, `answer`, optional `keywords`) and `[synonyms]`
  (`toilet = ["restroom", "loo"]`: each phrase means the first).

Anything that cannot be read is a `ConfigError` naming the file and the line. Sizes are
bounded: a file, an entry's text, the entries and synonyms a file may hold.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edge_agent.errors import ConfigError
from edge_agent.files import TooLargeError, read_capped
from edge_agent.knowledge.hours import HoursError, Schedule, parse_schedule
from edge_agent.tomlfile import parse_toml

MAX_FILE_BYTES = 8 * 1024 * 1024
"""Largest knowledge file: 8 MB holds tens of thousands of entries."""
MAX_ENTRIES = 50_000
"""Entries across all files."""
MAX_ANSWER_CHARS = 2_000
"""An FAQ answer or a fact, said as it is: about two minutes of speech."""
MAX_PASSAGE_CHARS = 1_200
"""A Markdown section longer than this is kept as several passages, split between paragraphs
or sentences."""
MAX_QUESTION_CHARS = 500
MAX_PHRASINGS = 50
MAX_SYNONYM_GROUPS = 5_000
SUFFIXES = (".md", ".markdown", ".csv", ".toml")

FAQ, SECTION, FACT = "faq", "section", "fact"


@dataclass(frozen=True)
class Entry:
    """One thing the venue knows: an FAQ entry, a section of a text, or a fact."""

    kind: str
    """"faq", "section" or "fact"."""
    topic: str
    """The heading, the fact's name, or the FAQ's first question."""
    questions: tuple[str, ...]
    """What it answers, as callers may say it: an FAQ's phrasings, a section's heading, a
    fact's name."""
    answer: str
    """What is said: the FAQ's answer, the section's text, the fact as a sentence."""
    file: str
    """The file it came from."""
    line: int
    """Where it starts in that file (1-based)."""
    keywords: tuple[str, ...] = ()
    """More words to match it by, never said."""
    group: str = ""
    """A fact's table ("prices"): facts of one group asked together are answered together."""

    @property
    def ref(self) -> str:
        return f"{Path(self.file).name}:{self.line}"


@dataclass(frozen=True)
class Source:
    """What one file holds."""

    path: str
    entries: tuple[Entry, ...] = ()
    synonyms: tuple[tuple[str, ...], ...] = ()
    schedules: tuple[Schedule, ...] = ()
    """Opening hours: the venue's first (place ""), then other places'."""
    names: tuple[str, ...] = ()
    """What callers call the venue."""


@dataclass(frozen=True)
class Contents:
    """Every file's content together."""

    entries: tuple[Entry, ...] = ()
    synonyms: tuple[tuple[str, ...], ...] = ()
    schedules: tuple[Schedule, ...] = ()
    names: tuple[str, ...] = ()
    files: tuple[str, ...] = field(default=())


def read_source(path: Path) -> Source:
    """One knowledge file, parsed by its suffix; ConfigError naming the file and line."""
    if path.suffix.lower() not in SUFFIXES:
        raise ConfigError(str(path), "", f"not a knowledge file: the name must end in "
                          f"{', '.join(SUFFIXES)} (Markdown, an FAQ table, or TOML)")
    try:
        data = read_capped(path, MAX_FILE_BYTES)
    except FileNotFoundError:
        raise ConfigError(str(path), "", "knowledge file not found: check [knowledge] files "
                          "(a relative path is relative to the config file)") from None
    except TooLargeError as exc:
        raise ConfigError(str(path), "", f"knowledge file {exc}; split it into files") from None
    except OSError as exc:
        raise ConfigError(str(path), "", f"cannot read knowledge file: "
                          f"{exc.strerror or exc}") from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise ConfigError(str(path), f"line {line}", "not UTF-8 text: save the file as "
                          "UTF-8") from None
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    suffix = path.suffix.lower()
    if suffix == ".csv":
        return _read_csv(text, str(path))
    if suffix == ".toml":
        return _read_toml(text, str(path))
    return _read_markdown(text, str(path))


def combine(sources: Sequence[Source]) -> Contents:
    """Every file's entries; one venue's hours (given in one file), places' names unique."""
    schedules: list[Schedule] = []
    for source in sources:
        for schedule in source.schedules:
            clash = [s for s in schedules if s.place == schedule.place]
            if clash:
                what = f"the hours of {schedule.place}" if schedule.place else "the venue's hours"
                raise ConfigError(source.path, "hours", f"{what} are given in two files; keep "
                                  "them in one")
            schedules.append(schedule)
    schedules.sort(key=lambda s: s.place != "")
    entries = tuple(e for s in sources for e in s.entries)
    if len(entries) > MAX_ENTRIES:
        raise ConfigError(sources[-1].path, "", f"{len(entries)} entries in the knowledge files "
                          f"together; at most {MAX_ENTRIES} are kept")
    return Contents(entries, tuple(g for s in sources for g in s.synonyms), tuple(schedules),
                     tuple(n for s in sources for n in s.names), tuple(s.path for s in sources))


# -- Markdown ---------------------------------------------------------------------------------

_HEADING = re.compile(r"^(#{1,6})(?:\s+(.*?))?\s*#*\s*$")
_KEYWORDS = re.compile(r"^(?:keywords|also called|also)\s*:\s*(.*)$", re.IGNORECASE)
_LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")
_EMPHASIS = re.compile(r"(\*\*|__|\*|_|`)(?=\S)(.+?)(?<=\S)\1")
_COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)


def _read_markdown(text: str, path: str) -> Source:
    text = _COMMENT.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    entries: list[Entry] = []
    parents: list[tuple[int, str]] = []
    heading: tuple[int, str, int] | None = None  # level, text, line
    body: list[str] = []
    keywords: list[str] = []
    fence = False

    def close_section() -> None:
        if heading is None:
            return
        level, title, line = heading
        sentences = [s for s in body if s]
        if not sentences:
            return
        context = tuple(t for lvl, t in parents if lvl < level)
        _section_entries(entries, title, sentences, tuple(keywords) + context, path, line)

    for number, raw in enumerate(text.split("\n"), 1):
        stripped = raw.strip()
        if stripped.startswith(("```", "~~~")):
            fence = not fence
            continue
        match = None if fence else _HEADING.match(stripped)
        if match is not None:
            close_section()
            level, title = len(match.group(1)), _plain(match.group(2) or "")
            if not title:
                raise ConfigError(path, f"line {number}", "a heading with no text")
            if len(title) > MAX_QUESTION_CHARS:
                raise ConfigError(path, f"line {number}", f"a heading of {len(title)} "
                                  f"characters; at most {MAX_QUESTION_CHARS}")
            parents = [(lvl, t) for lvl, t in parents if lvl < level] + [(level, title)]
            heading, body, keywords = (level, title, number), [], []
            continue
        found = _KEYWORDS.match(stripped)
        if found is not None and heading is not None:
            keywords.extend(k.strip() for k in found.group(1).split(",") if k.strip())
            continue
        sentence = _markdown_line(stripped)
        if sentence is None:
            body.append("")
        elif body and body[-1] and not stripped.startswith(("-", "*", "+", "|")) and \
                not re.match(r"^\d+[.)]\s", stripped) and not body[-1].endswith("\n"):
            body[-1] = f"{body[-1]} {sentence}"  # a paragraph's next line
        else:
            body.append(sentence)
    close_section()
    return Source(path, tuple(entries))


def _markdown_line(line: str) -> str | None:
    """A line's text (a list item or table row as a sentence); None for a blank or rule."""
    if not line or re.fullmatch(r"[-*_=\s]{3,}", line) or re.fullmatch(r"\|?[\s:|-]+\|?", line):
        return None
    if line.startswith("|"):
        cells = [_plain(c) for c in line.strip("|").split("|")]
        cells = [c for c in cells if c]
        if not cells:
            return None
        text = cells[0] + (": " + ", ".join(cells[1:]) if len(cells) > 1 else "")
        return _ended(text) + "\n"
    item = re.sub(r"^(?:[-*+]|\d+[.)])\s+", "", line)
    if item != line:
        return _ended(_plain(item)) + "\n"
    return _plain(line.lstrip(">").strip())


def _plain(text: str) -> str:
    text = _LINK.sub(r"\1", text)
    text = _EMPHASIS.sub(r"\2", text)
    return re.sub(r"\s+", " ", text).strip()


def _ended(text: str) -> str:
    return text if not text or text[-1] in ".!?:;" else f"{text}."


def _section_entries(entries: list[Entry], title: str, sentences: list[str],
                     keywords: tuple[str, ...], path: str, line: int) -> None:
    """A section as one entry, or as several when its text is long (each keeps the heading)."""
    text = " ".join(s.strip() for s in sentences if s.strip())
    kind = FAQ if title.endswith("?") else SECTION
    if kind == FAQ and len(text) > MAX_ANSWER_CHARS:
        raise ConfigError(path, f"line {line}", f"the answer to {title!r} has {len(text)} "
                          f"characters; an answer is said whole, at most {MAX_ANSWER_CHARS}: "
                          "shorten it, or make it a section (a heading that is not a question)")
    for chunk in _chunks(text) if kind == SECTION else [text]:
        entries.append(Entry(kind, title, (title,), chunk, path, line, keywords))


def _chunks(text: str) -> list[str]:
    """`text` in pieces of at most MAX_PASSAGE_CHARS, cut between sentences."""
    if len(text) <= MAX_PASSAGE_CHARS:
        return [text]
    pieces: list[str] = []
    current = ""
    for sentence in re.split(r"(?<=[.!?])\s+", text):
        while len(sentence) > MAX_PASSAGE_CHARS:  # one huge sentence: cut between words
            cut = sentence.rfind(" ", 0, MAX_PASSAGE_CHARS)
            cut = cut if cut > 0 else MAX_PASSAGE_CHARS
            if current:
                pieces.append(current)
                current = ""
            pieces.append(sentence[:cut])
            sentence = sentence[cut:].strip()
        if current and len(current) + 1 + len(sentence) > MAX_PASSAGE_CHARS:
            pieces.append(current)
            current = ""
        current = f"{current} {sentence}".strip()
    if current:
        pieces.append(current)
    return pieces


# -- CSV --------------------------------------------------------------------------------------

def _read_csv(text: str, path: str) -> Source:
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = next(reader, None)
        if header is None:
            raise ConfigError(path, "line 1", "empty: the first line names the columns, "
                              "question,answer")
        names = [h.strip().lower() for h in header]
        if "question" not in names or "answer" not in names:
            raise ConfigError(path, "line 1", f"the first line names the columns "
                              f"({', '.join(names) or 'none'}); it needs question and answer "
                              "(topic and keywords are optional)")
        unknown = [n for n in names if n not in ("question", "answer", "topic", "keywords")]
        if unknown:
            raise ConfigError(path, "line 1", f"unknown column {unknown[0]!r}: the columns are "
                              "question, answer, topic, keywords")
        entries: list[Entry] = []
        for row in reader:
            line = reader.line_num
            if not any(cell.strip() for cell in row):
                continue
            if len(row) != len(names):
                raise ConfigError(path, f"line {line}", f"{len(row)} cells where the header has "
                                  f"{len(names)}; a cell holding a comma is quoted: \"a, b\"")
            cells = dict(zip(names, (c.strip() for c in row), strict=True))
            questions = _phrasings(cells["question"], path, line)
            answer = cells["answer"]
            keywords = tuple(k.strip() for k in cells.get("keywords", "").split(",") if k.strip())
            if not answer:
                if not entries:
                    raise ConfigError(path, f"line {line}", "no answer: a row with an empty "
                                      "answer adds phrasings to the question above it")
                last = entries[-1]
                entries[-1] = Entry(FAQ, last.topic, _bounded(last.questions + questions, path,
                                                              line),
                                    last.answer, path, last.line, last.keywords + keywords)
                continue
            _check_answer(answer, path, line)
            entries.append(Entry(FAQ, cells.get("topic") or questions[0], questions, answer,
                                 path, line, keywords))
    except csv.Error as exc:
        raise ConfigError(path, f"line {reader.line_num}", f"not valid CSV: {exc}") from None
    return Source(path, tuple(entries))


def _phrasings(cell: str, path: str, line: int) -> tuple[str, ...]:
    questions = tuple(q.strip() for q in cell.split("|") if q.strip())
    if not questions:
        raise ConfigError(path, f"line {line}", "no question: write how callers ask it "
                          "(several ways separated by |)")
    return _bounded(questions, path, line)


def _bounded(questions: tuple[str, ...], path: str, line: int) -> tuple[str, ...]:
    if len(questions) > MAX_PHRASINGS:
        raise ConfigError(path, f"line {line}", f"{len(questions)} phrasings of one question; "
                          f"at most {MAX_PHRASINGS}")
    for question in questions:
        if len(question) > MAX_QUESTION_CHARS:
            raise ConfigError(path, f"line {line}", f"a question of {len(question)} "
                              f"characters; at most {MAX_QUESTION_CHARS}")
    return questions


def _check_answer(answer: str, path: str, line: int) -> None:
    if len(answer) > MAX_ANSWER_CHARS:
        raise ConfigError(path, f"line {line}", f"an answer of {len(answer)} characters; it is "
                          f"said whole: at most {MAX_ANSWER_CHARS}")


# -- TOML -------------------------------------------------------------------------------------

_TOML_TABLES = ("venue", "hours", "facts", "faq", "synonyms")


def _read_toml(text: str, path: str) -> Source:
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
    _check_answer(value, path, number)
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
        _check_answer(answer.strip(), path, line)
        keywords = item.get("keywords", [])
        if not isinstance(keywords, list) or not all(isinstance(k, str) for k in keywords):
            raise ConfigError(path, f"line {line}", "keywords = [\"...\"] is a list of words")
        questions = _bounded(tuple(q.strip() for q in asked), path, line)
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
