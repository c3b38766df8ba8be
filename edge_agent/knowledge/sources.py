"""The knowledge files a venue writes, read into entries: Markdown (`knowledge.markdown`), CSV
(below) and TOML (`knowledge.toml_source`), by their suffix.

- **CSV** (`.csv`): a header with `question` and `answer` (and optionally `topic`,
  `keywords`); several phrasings of one question in one cell separated by "|", or on rows
  below it with an empty answer.

Anything that cannot be read is a `ConfigError` naming the file and the line. Sizes are
bounded (`knowledge.entries`): a file, an entry's text, the entries and synonyms a file may
hold.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from pathlib import Path

from edge_agent.config.validate import TextRule, check_text
from edge_agent.errors import ConfigError
from edge_agent.files import TooLargeError, read_capped
from edge_agent.knowledge.entries import (
    FAQ,
    MAX_ENTRIES,
    MAX_FILE_BYTES,
    SUFFIXES,
    Contents,
    Entry,
    Source,
    bounded,
    check_answer,
)
from edge_agent.knowledge.hours import Schedule
from edge_agent.knowledge.markdown import read_markdown
from edge_agent.knowledge.toml_source import read_toml


def read_source(path: Path) -> tuple[Source, bytes]:
    """One knowledge file, parsed by its suffix, and the bytes it was parsed from (read once:
    what is indexed is what was hashed); ConfigError naming the file and line."""
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
    read = (_read_csv if suffix == ".csv" else read_toml if suffix == ".toml"
            else read_markdown)
    return _checked(read(text, str(path))), data


def _checked(source: Source) -> Source:
    """`source` once every text it holds passed the one text check of files users write (no
    control characters, bounded): whatever the format, a stray escape sequence is an error
    naming its line, never something said or printed."""
    for entry in source.entries:
        for text in (entry.topic, entry.answer, *entry.questions, *entry.keywords):
            check_text(text, source.path, f"line {entry.line}", TextRule())
    for text in (*source.names, *(word for group in source.synonyms for word in group)):
        check_text(text, source.path, "", TextRule())
    return source


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
                entries[-1] = Entry(FAQ, last.topic, bounded(last.questions + questions, path,
                                                              line),
                                    last.answer, path, last.line, last.keywords + keywords)
                continue
            check_answer(answer, path, line)
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
    return bounded(questions, path, line)


