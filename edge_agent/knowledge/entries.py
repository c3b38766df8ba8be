"""What the venue's knowledge files hold, whatever their format: entries (FAQ entries, sections,
facts), the synonyms, opening hours and names of one file, and the bounds every format keeps."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from edge_agent.errors import ConfigError
from edge_agent.knowledge.hours import Schedule

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


def bounded(questions: tuple[str, ...], path: str, line: int) -> tuple[str, ...]:
    """`questions`, or ConfigError when there are too many or one is too long."""
    if len(questions) > MAX_PHRASINGS:
        raise ConfigError(path, f"line {line}", f"{len(questions)} phrasings of one question; "
                          f"at most {MAX_PHRASINGS}")
    for question in questions:
        if len(question) > MAX_QUESTION_CHARS:
            raise ConfigError(path, f"line {line}", f"a question of {len(question)} "
                              f"characters; at most {MAX_QUESTION_CHARS}")
    return questions


def check_answer(answer: str, path: str, line: int) -> None:
    """ConfigError when an answer said whole is too long."""
    if len(answer) > MAX_ANSWER_CHARS:
        raise ConfigError(path, f"line {line}", f"an answer of {len(answer)} characters; it is "
                          f"said whole: at most {MAX_ANSWER_CHARS}")
