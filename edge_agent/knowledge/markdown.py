"""Markdown knowledge files: a heading per topic, its text below it.

A heading that is a question ("## Can I bring my dog?") is an FAQ entry; a line "Keywords:
lockers, coat check" under a heading gives words to match that are not said (the headings
above it count too). List items and table rows become sentences; links, emphasis and HTML
comments are reduced to their text; fenced code is kept as text. A section longer than
`MAX_PASSAGE_CHARS` is kept as several passages, cut between sentences.
"""

from __future__ import annotations

import re

from edge_agent.errors import ConfigError
from edge_agent.knowledge.entries import (
    FAQ,
    MAX_ANSWER_CHARS,
    MAX_PASSAGE_CHARS,
    MAX_QUESTION_CHARS,
    SECTION,
    Entry,
    Source,
)

_HEADING = re.compile(r"^(#{1,6})(?:\s+(.*?))?\s*#*\s*$")
_KEYWORDS = re.compile(r"^(?:keywords|also called|also)\s*:\s*(.*)$", re.IGNORECASE)
_LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")
_EMPHASIS = re.compile(r"(\*\*|__|\*|_|`)(?=\S)(.+?)(?<=\S)\1")
_COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)


def read_markdown(text: str, path: str) -> Source:
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

