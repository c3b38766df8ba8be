"""When has the user finished their turn? Silence, judged by the words said before it.

A fixed silence is a bad compromise: long enough for "I'd like a table for… four" is far too
long after "What time do you open tomorrow?". The words tell them apart:

- **incomplete** — the last word cannot end an utterance (an article, a preposition, a
  conjunction, a filler: "a table for", "and", "um"), the text ends in a dash or an ellipsis,
  or it ends in a run of digits after "number", "phone" or "code" (people pause between digit
  groups): wait `incomplete_ms`;
- **complete** — it ends like a finished sentence (".", "?", "!" from a recognizer that
  punctuates, Moonshine does) and has three words or more: `complete_ms` is enough. One or two
  words are not trusted to be the whole turn: people pause after "Hold on," "Wait," "Sorry,"
  "No," (Piper's comma pauses measure 240-450 ms) and the recognizer writes them as sentences;
- **unknown** — no punctuation to go by (PocketSphinx, Vosk), or a comma (Moonshine writes
  one after a finished "Four people" when it hears little silence after it), and nothing
  incomplete about it: `unknown_ms`, the plain VAD end-of-turn silence.

The loop transcribes speculatively once `speculate_ms` of silence has passed, so the words are
known before the shorter silences run out.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

CONTINUATIONS = frozenset((
    "a", "an", "the", "for", "to", "at", "of", "with", "from", "into", "and", "or", "but",
    "because", "if", "than", "my", "your", "our", "his", "her", "their", "its", "i'd", "i'm",
    "we're", "um", "uh", "er", "erm"))
"""English words an utterance does not end on: articles, prepositions and conjunctions that
always lead into more, possessives, fillers. ("on", "in", "that", "you", "can", "like" are
left out: "hold on", "come in", "I'll take that", "thank you", "yes I can", "what would you
like" end there.)"""

_DIGIT_CONTEXT = re.compile(r"\b(number|phone|code|pin|zip|postcode|reference)\b")
_NUMBER_WORDS = frozenset((
    "zero", "oh", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
    "eleven", "twelve"))


class Completeness(enum.StrEnum):
    COMPLETE = "complete"
    INCOMPLETE = "incomplete"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class EndpointRules:
    """Silences that end a turn (config: vad.end_silence_ms, [turns] end_*_ms)."""

    complete_ms: int
    """After words that finish a sentence."""
    incomplete_ms: int
    """After words that stop mid-phrase."""
    unknown_ms: int
    """When the words say neither (or are not known yet)."""
    speculate_ms: int
    """Silence after which the words are transcribed and the answer prepared."""


def completeness(text: str) -> Completeness:
    """How `text` (a transcript) ends."""
    stripped = text.strip()
    if not stripped:
        return Completeness.UNKNOWN
    if stripped[-1] in "-–—:" or stripped.endswith(("...", "…")):
        return Completeness.INCOMPLETE
    words = re.findall(r"[\w']+", stripped.lower())
    if not words:
        return Completeness.UNKNOWN
    if words[-1] in CONTINUATIONS:
        return Completeness.INCOMPLETE
    if (words[-1].isdigit() or words[-1] in _NUMBER_WORDS) and _DIGIT_CONTEXT.search(
            stripped.lower()):
        return Completeness.INCOMPLETE
    if stripped[-1] in ".?!" and len(words) >= 3:
        return Completeness.COMPLETE
    return Completeness.UNKNOWN


def silence_needed(rules: EndpointRules, text: str | None) -> int:
    """Milliseconds of silence that end a turn whose words so far are `text` (None: not
    transcribed yet)."""
    if text is None:
        return rules.unknown_ms
    return {Completeness.COMPLETE: rules.complete_ms,
            Completeness.INCOMPLETE: rules.incomplete_ms,
            Completeness.UNKNOWN: rules.unknown_ms}[completeness(text)]
