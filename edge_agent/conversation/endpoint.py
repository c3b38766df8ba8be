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
known before the shorter silences run out. At the same moment it asks an end-of-turn model
(`edge_agent.engines.turn_end`: Smart Turn) whether the turn *sounds* finished: the falling
pitch and fading last syllable of a finished "Six people," against the held, rising "It's
for my daughter's birthday," that the recognizer writes with a full stop. Words and sound
decide together (`silence_needed`):

| words / sound               | finished        | unfinished       | on its way      | not known       |
| --------------------------- | --------------- | ---------------- | --------------- | --------------- |
| complete                    | `complete_ms`†  | `incomplete_ms`* | `unknown_ms`    | `complete_ms`   |
| unknown                     | `sound_done_ms`†| `incomplete_ms`  | `unknown_ms`    | `unknown_ms`    |
| unknown: "Wait," "Hold on," | `unknown_ms`    | `incomplete_ms`  | `unknown_ms`    | `unknown_ms`    |
| unknown: one word ("Hi,")   | `unknown_ms`    | `incomplete_ms`  | `unknown_ms`    | `unknown_ms`    |
| unknown: over the agent     | `unknown_ms`    | `incomplete_ms`  | `unknown_ms`    | `unknown_ms`    |
| incomplete                  | `incomplete_ms` | `incomplete_ms`  | `incomplete_ms` | `incomplete_ms` |

"Sounds finished": the model's probability at or above `sound_threshold` (0.5); *for words
that finish a sentence, "unfinished" means clearly so, under `sound_hold_below` (0.2).
†`sure_ms` (96) when the sound is sure, at or above `sound_sure_above` (0.9; Piper's written
questions score 0.86-0.99), and the turn did not begin over the agent: the turn then ends
as soon as the words are known, while the answer's first piece is still being synthesized,
so the answer waits for that piece and no longer for the turn's silence. "On
its way": asked, not answered yet; the loop reads the table again every frame, so a verdict
that comes back decides at once, and the plain silence ends the wait (a finished sentence waits for it
that long at most). "Not known": no model, or it failed: the words decide as they do without
a model.

Words that lead on win over any sound ("a table for" is never the whole turn). A sound that
says unfinished holds any turn: a phrase the recognizer wrote as a sentence, then a pause,
then more. A sound that says finished shortens only a turn of two words or more whose words
say nothing (`sound_may_shorten`); never a lone lead-in ("Wait," sounds finished to the model
and is followed, after Piper's 240-450 ms comma pause, by the rest), a single word ("Hi,"
sounded finished and was split from "I'd like to book a table" in a replay), or an
interruption of the agent (its clipped first word, "Wait," heard as "He,", ended the turn
160 ms into the comma pause and split it, 1 run in 5).
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

from edge_agent.conversation.backchannel import ANY, opens_with_interruption

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
    sound_done_ms: int
    """After words that tell nothing, when the end-of-turn model hears the turn as finished."""
    sound_threshold: float
    """The model's probability at or above which a turn whose words say nothing sounds
    finished (below it, unfinished)."""
    sound_hold_below: float
    """Below this probability even a turn whose words finish a sentence sounds unfinished: the
    words are evidence too, so only a clear verdict overrules them (Piper's "Is the terrace
    open in the evening?" scored 0.32 and 0.37, a held "Can we sit outside," 0.01)."""
    sound_sure_above: float
    """At or above this probability the sound is sure the turn is finished."""
    sure_ms: int
    """After a sure finished sound, where the words let the sound decide (a finished
    sentence; words that say nothing, where `sound_may_shorten`), not over the agent (an
    interruption's clipped "Wait," is read "What do you?", a finished sentence, and the rest
    follows its comma pause); never more than the turn would wait otherwise."""


def _words(text: str) -> list[str]:
    return re.findall(r"[\w']+", text.lower())


def completeness(text: str) -> Completeness:
    """How `text` (a transcript) ends."""
    stripped = text.strip()
    if not stripped:
        return Completeness.UNKNOWN
    if stripped[-1] in "-–—:" or stripped.endswith(("...", "…")):
        return Completeness.INCOMPLETE
    words = _words(stripped)
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


def silence_needed(rules: EndpointRules, text: str | None, sound: float | None = None, *,
                   sound_pending: bool = False, interrupting: bool = False) -> int:
    """Milliseconds of silence that end a turn whose words so far are `text` (None: not
    transcribed yet) and whose sound the end-of-turn model calls finished with probability
    `sound` (None: not known), or whose verdict is on its way (`sound_pending`).
    `interrupting`: the turn began over the agent (see `sound_may_shorten`)."""
    if text is None:
        return rules.unknown_ms
    words = completeness(text)
    if words is Completeness.INCOMPLETE:
        return rules.incomplete_ms
    by_words = rules.complete_ms if words is Completeness.COMPLETE else rules.unknown_ms
    if sound_pending:
        return max(by_words, rules.unknown_ms)
    if sound is None:
        return by_words
    unfinished_below = (rules.sound_hold_below if words is Completeness.COMPLETE
                        else rules.sound_threshold)
    if sound < unfinished_below:
        return rules.incomplete_ms
    if words is Completeness.COMPLETE:
        by_sound = by_words
    elif sound_may_shorten(text, interrupting):
        by_sound = rules.sound_done_ms
    else:
        return by_words
    if sound < rules.sound_sure_above or interrupting:
        return by_sound
    return min(rules.sure_ms, by_sound)


def sound_may_shorten(text: str, interrupting: bool) -> bool:
    """Whether a finished sound may end a turn whose words say nothing sooner than the plain
    silence: not one word ("Hi," "So," then more), not a lone lead-in to an interruption or a
    correction ("Wait," "Hold on," "No,"), and not a turn that began over the agent, whose
    first words are lead-ins more often than not and clipped by the echo canceller's
    double-talk suppression ("Wait," heard as "He,")."""
    count = len(_words(text))
    lead_in = count <= 2 and opens_with_interruption(text, ANY)
    return count >= 2 and not lead_in and not interrupting
