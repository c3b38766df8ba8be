"""`edge-agent knowledge check`: what a venue's files hold, and what in them would confuse a
caller's question.

Flagged: a question written for two entries, a heading used twice, two entries that give the
same answer, and an entry whose own question finds another entry as well as (or better than)
itself, so that neither is said directly when a caller asks it that way.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from edge_agent.knowledge.entries import FAQ, Entry
from edge_agent.knowledge.ground import agree
from edge_agent.knowledge.live import VenueKnowledge
from edge_agent.knowledge.text import words


@dataclass(frozen=True)
class Finding:
    """Something in the files a venue should look at."""

    kind: str
    """"same question", "same heading", "same answer" or "ambiguous"."""
    entries: tuple[str, ...]
    """The entries concerned, as "file:line"."""
    text: str
    """What is wrong, in words."""


def findings(knowledge: VenueKnowledge) -> list[Finding]:
    """Every finding, in file order."""
    entries = knowledge.contents.entries
    found: list[Finding] = []
    for kind, key in (("same question", _questions), ("same heading", _heading),
                      ("same answer", _answer)):
        groups: dict[str, list[Entry]] = defaultdict(list)
        for entry in entries:
            for value in key(entry):
                if value and entry not in groups[value]:
                    groups[value].append(entry)
        for value, holders in groups.items():
            if len(holders) > 1:
                refs = tuple(e.ref for e in holders)
                found.append(Finding(kind, refs, f"{kind}: {value!r} in {', '.join(refs)}"))
    found.extend(_ambiguous(knowledge, entries, knowledge.settings.margin))
    return found


def _questions(entry: Entry) -> list[str]:
    return [" ".join(words(q)) for q in entry.questions] if entry.kind == FAQ else []


def _heading(entry: Entry) -> list[str]:
    return [" ".join(words(entry.topic))] if entry.kind != FAQ and not entry.group else []


def _answer(entry: Entry) -> list[str]:
    return [" ".join(words(entry.answer))]


def _ambiguous(knowledge: VenueKnowledge, entries: tuple[Entry, ...], margin: float
               ) -> list[Finding]:
    found = []
    seen: set[tuple[str, ...]] = set()
    for entry in entries:
        for question in entry.questions:
            matches = knowledge.matches(question)
            own = next((m for m in matches if _same(m.entry, entry)), None)
            if own is None:
                continue
            rivals = [m for m in matches if not _same(m.entry, entry) and not agree(m, own)
                      and not (m.entry.group and m.entry.group == entry.group)
                      and m.score >= own.score - margin]
            if not rivals:
                continue
            refs = tuple(sorted({entry.ref, rivals[0].entry.ref}))
            if refs in seen:
                continue
            seen.add(refs)
            found.append(Finding(
                "ambiguous", refs,
                f"ambiguous: {question!r} ({entry.ref}) finds {rivals[0].entry.ref} as well "
                f"({rivals[0].score:.2f} against {own.score:.2f}); neither is said directly to "
                "it: give one of them a clearer heading, question or keywords"))
    return found


def _same(one: Entry, other: Entry) -> bool:
    return (one.file, one.line, one.answer) == (other.file, other.line, other.answer)
