"""Grounding a turn in the venue's knowledge: what is said, and what the model is shown.

For each user turn (and for the speculative transcript while the caller's silence runs, so
the lookup costs nothing when the turn ends):

1. **Opening hours**: a question about opening or closing ("are you open now?", "when does the
   café close?") with nothing else in it is answered from the hours and the device's clock.
2. **Retrieval**: the turn's terms (stems, synonyms; see `knowledge.text`) find candidate
   entries in the full-text index; each is scored by how much of the question it explains
   (each term weighted by how rare it is among the entries; a term matched in an entry's
   questions or heading counts fully, in its text `ANSWER_SHARE`) and, less, by how much of
   the entry's question the turn says. An entry that does not hold `COVERAGE_MIN` of the
   question's weight anywhere does not answer it: a word the venue never uses weighs the most
   ("can I pay with bitcoin?" is not answered by "we take cards").
3. **Direct answer**: when the best entry scores at least `direct_above` and beats every entry
   with another answer by `margin`, its answer is said as written — an FAQ's answer, a fact
   (or every fact of its group the question matches equally: "how much are tickets?"), the
   sentences of a section that match — with no model call.
4. **The model, with passages**: a lesser match (at least `relevant_above`) goes to the model
   with the best entries placed before the caller's words, within a token budget.
5. **Out of scope**: a turn that names something nothing answers gets the venue's fallback
   line, never an invention; small talk, answers to the agent's own questions and what a tool
   does ("book a table") go to the model.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from zoneinfo import ZoneInfo

from edge_agent.knowledge import hours
from edge_agent.knowledge.asking import turn_kind
from edge_agent.knowledge.entries import FACT, FAQ, SECTION, Entry
from edge_agent.knowledge.index import KnowledgeIndex, Stored
from edge_agent.knowledge.text import Synonyms, Vocabulary, term_sequence, terms, words

ANSWER_SHARE = 0.75
"""A question's term found only in an entry's text (not its questions or heading) counts this
much of its weight."""
COVERAGE_MIN = 0.6
"""An entry must hold this share of a question's weight to answer it, directly or through
the model."""
MODIFIER_SHARE = 0.5
"""An unknown word describing a known one weighs this much of the known one."""
ONE_WORD_SHARE = 0.8
"""An entry found by a single word of its text alone ("on top of your ticket" for "which has
topped...") is a weak match: its score is taken this much."""
AGREE_SHARE = 0.6
"""Two answers sharing this much of the shorter one's terms say the same thing."""
FOLLOW_UP_SHARE = 0.5
"""The previous question's terms, for a turn that leans on it ("and for children?")."""
CANDIDATES = 30
"""Entries the full-text index hands to scoring."""
SHORT_SECTION_CHARS = 320
"""A section this short is said whole; a longer one by its matching sentences."""
GROUP_LIMIT = 8
"""Facts of one group said together at most."""
CHARS_PER_TOKEN = 4
"""English text in a model's tokenizer: about four characters a token (the passages' budget
is an estimate; the model's own prompt fitting is exact)."""
HOW = ("direct", "hours", "fallback", "model", "chat")
"""What a lookup decides: say an entry's answer, say the opening hours, say the fallback line,
ask the model with passages, or ask the model as without knowledge."""
SAID = frozenset({"direct", "hours", "fallback"})
"""Decisions whose words the knowledge says itself, with no model call."""


@dataclass(frozen=True)
class GroundingSettings:
    fallback: str
    """Said to a question the knowledge does not cover."""
    direct: str
    """Which entries are said directly: "all", "faq" (FAQ entries and facts) or "off"."""
    direct_above: float
    """The score from which the best entry's answer is said without the model."""
    margin: float
    """...if no entry with another answer scores within this of it."""
    relevant_above: float
    """The score from which entries are shown to the model."""
    passages: int
    """Entries shown to the model at most."""
    prompt_tokens: int
    """The passages' budget in the prompt (estimated at four characters a token)."""
    clock: str
    """How answers say times: "12h" or "24h"."""
    timezone: str
    """The venue's time zone (IANA name); "" for the device's."""
    tools: tuple[str, ...] = ()
    """What the model does itself, in words (its tools' names: "book table"): a question about
    them goes to the model, not to the fallback line."""


@dataclass(frozen=True)
class Match:
    """An entry and how well it answers the turn (0..1)."""

    entry: Entry
    score: float
    answer_terms: frozenset[str] = frozenset()
    """The terms of its answer: two entries that say much the same agree (neither is the
    other's rival for a direct answer)."""
    coverage: float = 1.0
    """The share of the question's weight it holds anywhere (questions, heading, text): an
    entry missing the question's telling words does not answer it ("can I pay with
    bitcoin?" is not answered by "we take cards")."""

    @property
    def covers(self) -> bool:
        return self.coverage >= COVERAGE_MIN


@dataclass(frozen=True)
class Grounding:
    """What the knowledge makes of one turn."""

    how: str
    """One of `HOW`."""
    say: str = ""
    """For "direct", "hours" and "fallback": the words to say."""
    note: str = ""
    """For "model": the venue information put before the caller's words in the prompt."""
    matches: tuple[Match, ...] = ()
    """The best entries, best first (those in `note`, or the one said)."""
    ms: float = 0.0
    """How long the lookup took."""
    said: tuple[Entry, ...] = ()
    """The entries whose words `say` holds (a direct answer)."""


@dataclass(frozen=True)
class Context:
    """The turns around this one."""

    previous_question: str = ""
    """The caller's previous turn."""
    agent_asked: bool = False
    """The agent's last heard words ended in a question."""


@dataclass
class Venue:
    """What the lookup reads: the index, the synonyms it was built with, the hours."""

    index: KnowledgeIndex
    synonyms: Synonyms
    vocabulary: Vocabulary
    schedules: tuple[hours.Schedule, ...]
    names: tuple[str, ...]
    """What callers call the venue (folded words): "is the museum wheelchair accessible?"
    asks about wheelchairs."""
    model_topics: frozenset[str] = frozenset()
    """The terms of `GroundingSettings.tools`, with these synonyms."""


def ground(text: str, venue: Venue, settings: GroundingSettings, now: Callable[[], datetime],
           context: Context) -> Grounding:
    """Decide how to answer `text` (see the module's steps)."""
    started = time.perf_counter()
    result = _decide(text, venue, settings, now, context)
    return replace(result, ms=round((time.perf_counter() - started) * 1000, 3))


def _decide(text: str, venue: Venue, settings: GroundingSettings, now: Callable[[], datetime],
            context: Context) -> Grounding:
    kind = turn_kind(text, context.agent_asked)
    if kind.small_talk or (context.agent_asked and not kind.question):
        return Grounding("chat")  # an answer to the agent's question is the model's
    local = _local(now(), settings.timezone)
    said = _hours_answer(kind.rest, venue, settings, local, context, kind.follow_up)
    if said is not None:
        return Grounding("hours", said)
    sequence = term_sequence(_without(kind.rest, venue.names), venue.synonyms)
    asked = [t for t in sequence if t is not None]
    if asked and set(asked) <= venue.model_topics:
        return Grounding("chat")
    weights = _weights(sequence, venue.vocabulary)
    if kind.follow_up and context.previous_question:
        for term in terms(context.previous_question, venue.synonyms):
            weights.setdefault(term, venue.vocabulary.weight(term) * FOLLOW_UP_SHARE)
    matches = retrieve(weights, venue)
    if matches and settings.direct != "off":
        direct = _direct(matches, weights, settings, venue.synonyms)
        if direct is not None:
            return direct
    relevant = [m for m in matches if m.score >= settings.relevant_above and m.covers]
    if relevant:
        chosen, note = _note(relevant[:settings.passages], settings.prompt_tokens)
        return Grounding("model", note=note, matches=chosen)
    # What names something (not an answer to the agent: see above) is about the venue: "I can
    # rent a bike here" is answered from the knowledge or not at all, never by the model's
    # guess; what names nothing ("what is it?") is the model's to answer.
    if asked and not (set(asked) & venue.model_topics):
        return Grounding("fallback", settings.fallback, matches=tuple(matches[:3]))
    return Grounding("chat", matches=tuple(matches[:3]))


def _local(moment: datetime, timezone: str) -> datetime:
    return moment.astimezone(ZoneInfo(timezone)) if timezone else moment.astimezone()


def _weights(sequence: Sequence[str | None], vocabulary: Vocabulary) -> dict[str, float]:
    """Each term's weight (a term no entry uses weighs most: see `Vocabulary.weight`); a term
    no entry uses right before one the venue knows describes it ("credit cards", "electric
    wheelchair"): it weighs `MODIFIER_SHARE` of the word it describes."""
    known = vocabulary.document_count
    weights: dict[str, float] = {}
    for place, term in enumerate(sequence):
        if term is None or term in weights:
            continue
        following = sequence[place + 1] if place + 1 < len(sequence) else None
        if term not in known and following is not None and following in known:
            weights[term] = vocabulary.weight(following) * MODIFIER_SHARE
        else:
            weights[term] = vocabulary.weight(term)
    return weights


def matches_for(text: str, venue: Venue) -> list[Match]:
    """The entries `text` finds, best first (retrieval and scoring alone, no decision)."""
    sequence = term_sequence(_without(" ".join(words(text)), venue.names), venue.synonyms)
    return retrieve(_weights(sequence, venue.vocabulary), venue)


def retrieve(weights: dict[str, float], venue: Venue) -> list[Match]:
    return score(weights, venue.index.search(list(weights), venue.vocabulary, CANDIDATES),
                 venue.vocabulary)


def score(weights: dict[str, float], candidates: Sequence[Stored], vocabulary: Vocabulary
          ) -> list[Match]:
    """How well each candidate answers a question of these weighted terms, best first: the
    share of the question's weight it explains (`ANSWER_SHARE` for what only its text holds),
    times 0.7 + 0.3 x the share of its best phrasing's weight the question says."""
    total = sum(weights.values())
    if not total:
        return []
    matches = []
    for stored in candidates:
        best = 0.0
        for phrasing in stored.question_terms or (frozenset(),):
            in_question = sum(w for t, w in weights.items() if t in phrasing)
            in_text = sum(w for t, w in weights.items()
                          if t not in phrasing and t in stored.answer_terms)
            recall = (in_question + ANSWER_SHARE * in_text) / total
            precision = in_question / sum(vocabulary.weight(t) for t in phrasing) if phrasing \
                else 0.0
            if not in_question and sum(t in stored.answer_terms for t in weights) < 2:
                recall *= ONE_WORD_SHARE  # one word of its text, and nothing else
            best = max(best, recall * (0.7 + 0.3 * precision))
        held = stored.answer_terms.union(*stored.question_terms)
        coverage = sum(w for t, w in weights.items() if t in held) / total
        matches.append(Match(stored.entry, round(best, 4), stored.answer_terms,
                             round(coverage, 4)))
    # On a tie: an FAQ entry (written as the answer to a question), then the shorter answer.
    matches.sort(key=lambda m: (-m.score, m.entry.kind != FAQ, len(m.entry.answer),
                                m.entry.file, m.entry.line))
    return matches


def agree(one: Match, other: Match) -> bool:
    """The two answers say much the same: most of the shorter one's terms are in the other
    ("the cloakroom is free" and a section about the cloakroom and the lockers)."""
    if one.entry.answer == other.entry.answer:
        return True
    shorter = min(len(one.answer_terms), len(other.answer_terms))
    return shorter > 0 and len(one.answer_terms & other.answer_terms) >= AGREE_SHARE * shorter


def _direct(matches: list[Match], weights: dict[str, float], settings: GroundingSettings,
            synonyms: Synonyms) -> Grounding | None:
    best = matches[0]
    allowed = (FAQ, FACT) if settings.direct == "faq" else (FAQ, FACT, SECTION)
    if best.score < settings.direct_above or best.entry.kind not in allowed or not best.covers:
        return None
    group = [m for m in matches if m.entry.kind == FACT and best.entry.kind == FACT
             and m.entry.group and m.entry.group == best.entry.group
             and best.score - m.score < settings.margin][:GROUP_LIMIT]
    together = [best, *group]
    rivals = [m for m in matches[1:]
              if not any(m.entry is t.entry or agree(m, t) for t in together)]
    if rivals and best.score - rivals[0].score < settings.margin:
        return None
    said = (tuple(sorted((m.entry for m in group), key=lambda e: (e.file, e.line)))
            if len(group) > 1 else (best.entry,))
    text = " ".join(_spoken(entry, weights, synonyms) for entry in said)
    return Grounding("direct", text, matches=tuple(matches[:3]), said=said)


def _spoken(entry: Entry, weights: dict[str, float], synonyms: Synonyms) -> str:
    """What is said of an entry: an FAQ's answer or a fact whole; a section whole when short,
    else its sentences that hold the question's terms (the first two, else its start)."""
    if entry.kind != SECTION or len(entry.answer) <= SHORT_SECTION_CHARS:
        return entry.answer
    sentences = re.split(r"(?<=[.!?])\s+", entry.answer)
    ranked = sorted(range(len(sentences)), key=lambda i: (
        -sum(weights.get(t, 0.0) for t in set(terms(sentences[i], synonyms))), i))
    chosen = sorted(ranked[:2])
    return " ".join(sentences[i] for i in chosen)


NOTE_HEADER = ("The venue's information for this question (answer from it alone; if it does "
               "not say, say you are not sure):")
"""Put before the passages in the model's prompt."""


def _note(matches: Sequence[Match], budget_tokens: int) -> tuple[tuple[Match, ...], str]:
    """The passages that fit the budget, as the lines put before the caller's words."""
    lines: list[str] = [NOTE_HEADER]
    chosen: list[Match] = []
    used = 0
    for match in matches:
        line = f"- {match.entry.topic}: {match.entry.answer}"
        cost = len(line) // CHARS_PER_TOKEN + 1
        if chosen and used + cost > budget_tokens:
            break
        if not chosen and cost > budget_tokens:  # the best one alone, cut to the budget
            line = line[:budget_tokens * CHARS_PER_TOKEN].rsplit(" ", 1)[0] + " …"
        lines.append(line)
        chosen.append(match)
        used += cost
    return tuple(chosen), "\n".join(lines)


def _hours_answer(text: str, venue: Venue, settings: GroundingSettings, local: datetime,
                  context: Context, follow_up: bool) -> str | None:
    """The answer when `text` asks about opening hours and nothing else."""
    if not venue.schedules:
        return None
    question = hours.hours_question(text, local.date())
    if question is None and follow_up and context.previous_question:
        # "And on Sunday?" after an hours question: the same question about another day.
        earlier = hours.hours_question(context.previous_question, local.date())
        days, now, at = hours.when_asked(text, local.date())
        if earlier is not None and (days or now or at is not None):
            question = hours.HoursQuestion(earlier.aspect, days, now, at)
            text = f"{context.previous_question} {text}"
    if question is None:
        return None
    schedule, rest = _place(text, venue.schedules)
    left = [t for t in terms(rest, venue.synonyms) if t not in _HOURS_TERMS]
    if left:
        return None
    return hours.answer(question, schedule, local, hours.Phrasing(settings.clock))


_HOURS_TERMS = frozenset({"open", "close", "shut", "hour", "schedul", "visit", "late", "earli",
                          "until", "till"})


def _without(text: str, names: Sequence[str]) -> str:
    """`text` (folded words) without any of `names`, the longest first."""
    for name in sorted(names, key=len, reverse=True):
        text = re.sub(rf"\b{re.escape(name)}\b", " ", text)
    return text


def _place(text: str, schedules: Sequence[hours.Schedule]) -> tuple[hours.Schedule, str]:
    """The schedule `text` names (the venue's when it names none, or the venue itself), and
    the text without the names."""
    said = " ".join(words(text))
    found = schedules[0]
    named = sorted(((n, s) for s in schedules for n in s.names if n), key=lambda p: -len(p[0]))
    for name, schedule in named:
        pattern = rf"\b{re.escape(name)}\b"
        if re.search(pattern, said):
            said = re.sub(pattern, " ", said)
            if schedule.place and found is schedules[0]:
                found = schedule
    return found, said
