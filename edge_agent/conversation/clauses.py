"""Streaming clause splitter: LLM pieces in, speakable clauses out, characters untouched."""

from __future__ import annotations

import re

_ABBREVIATIONS = frozenset(
    {"mr.", "mrs.", "ms.", "dr.", "st.", "vs.", "e.g.", "i.e.", "etc.", "no.", "approx.", "jr.",
     "sr.", "prof."}
)
_SENTENCE_END = re.compile(r"[.!?…]+[\"')\]]*\s+")
_SOFT_END = re.compile(r"[,;:]\s+")
_FIRST_BREAK = re.compile(r"(?:[,;:]|\s[-–—])\s+")
_PHRASE_STARTS = frozenset((
    "and", "but", "or", "so", "because", "in", "at", "on", "for", "to", "with", "from", "by",
    "which", "that", "when", "where", "while", "if", "until", "after", "before"))


class ClauseSplitter:
    """Cuts a growing text into clauses at sentence ends (and at commas in long clauses).

    The first clause may also end at the first comma, colon, semicolon or dash after
    `first_words` words: the voice starts after a few words instead of a whole sentence
    ("Great, | a table for four at 7 PM tonight."); the rest is synthesized while it plays. A
    long first sentence with no such break is cut between words once `first_max_words` have
    come, before a word that starts a phrase ("We open at nine | in the morning and...").

    Every character pushed comes out exactly once, in order, whitespace included, so the
    clauses concatenate back to the generated text.
    """

    def __init__(self, soft_break_chars: int = 60, first_words: int = 1,
                 first_max_words: int = 8, max_words: int = 16) -> None:
        if max_words < 2 or first_max_words > max_words:
            raise ValueError(f"need 2 <= first_max_words <= max_words, got {first_max_words} "
                             f"and {max_words}")
        self._max_words = max_words
        self._buffer = ""
        self._soft_break_chars = soft_break_chars
        self._first_words = first_words
        self._first_max_words = first_max_words
        self._first = True

    def push(self, piece: str) -> list[str]:
        self._buffer += piece
        clauses: list[str] = []
        while (cut := self._next_cut()) is not None:
            clauses.append(self._buffer[:cut])
            self._buffer = self._buffer[cut:]
            self._first = False
        return clauses

    def _between_words(self) -> int | None:
        """Where to cut a long first sentence that has no break: once `first_max_words` whole
        words have come, before the first phrase-starting word among words 4 to max; None if
        there is none (a cut inside a phrase would sound wrong)."""
        words = list(re.finditer(r"\S+\s+", self._buffer))
        if len(words) < self._first_max_words:
            return None
        for index in range(3, self._first_max_words):
            if words[index].group().strip().lower() in _PHRASE_STARTS:
                return words[index].start()
        return None

    def _sentence_end(self) -> int | None:
        for match in _SENTENCE_END.finditer(self._buffer):
            before = self._buffer[: match.start() + 1].split()
            if before and before[-1].lower() in _ABBREVIATIONS:
                continue
            return match.end()
        return None

    def flush(self) -> str:
        rest, self._buffer = self._buffer, ""
        return rest

    def _next_cut(self) -> int | None:
        sentence = self._sentence_end()
        if self._first:
            for match in _FIRST_BREAK.finditer(self._buffer):
                if sentence is not None and match.end() >= sentence:
                    break
                if len(self._buffer[: match.start()].split()) >= self._first_words:
                    return match.end()
            if sentence is None or len(self._buffer[:sentence].split()) > self._first_max_words:
                cut = self._between_words()
                if cut is not None:
                    return cut
        if sentence is not None:
            return sentence
        if len(self._buffer) >= self._soft_break_chars:
            soft = [m for m in _SOFT_END.finditer(self._buffer) if m.start() >= 20]
            if soft:
                return soft[0].end()
        return self._word_bound()

    def _word_bound(self) -> int | None:
        """Where to cut a run of `max_words` whole words that no rule above has cut: before a
        phrase-starting word in its second half, else after its last word."""
        words = list(re.finditer(r"\S+\s+", self._buffer))
        if len(words) < self._max_words:
            return None
        for index in range(self._max_words - 1, self._max_words // 2 - 1, -1):
            if words[index].group().strip().lower() in _PHRASE_STARTS:
                return words[index].start()
        return words[self._max_words - 1].end()


class MarkerFilter:
    """Removes the prompt's interruption marker from streamed model text.

    Small models imitate their history: given turns that end in " [interrupted]", they end their
    own replies with it, and the voice would say it. The marker is ours, never the model's, so it
    is cut out of the stream with the whitespace before it, also when it arrives in pieces.
    """

    def __init__(self, marker: str) -> None:
        self._marker = marker.strip()
        self._whole = re.compile(r"\s*" + re.escape(self._marker)) if self._marker else None
        self._pending = ""

    def push(self, piece: str) -> str:
        if self._whole is None:
            return piece
        text = self._whole.sub("", self._pending + piece)
        hold = len(text.rstrip())  # trailing whitespace may precede a marker
        for size in range(min(len(self._marker) - 1, len(text)), 0, -1):
            if self._marker.startswith(text[-size:]):
                hold = len(text[:-size].rstrip())
                break
        self._pending = text[hold:]
        return text[:hold]

    def flush(self) -> str:
        rest, self._pending = self._pending, ""
        return rest


class SpokenText:
    """A model hop's streamed text as the voice takes it: the interruption marker cut out,
    whitespace before the first word held back (a hop that only calls tools says nothing), and
    the rest cut into clauses. The reply and its speculative preparation both read the model's
    text through this, so their first clause is the same."""

    def __init__(self, marker: str) -> None:
        self._marker = MarkerFilter(marker)
        self._splitter = ClauseSplitter()
        self._leading = ""
        self.started = False
        """A word has come: what was taken belongs to a speech unit."""

    def push(self, piece: str) -> tuple[str, list[str]]:
        """(the text taken now, in order; the clauses it completes)."""
        return self._take(self._marker.push(piece))

    def flush(self) -> tuple[str, list[str]]:
        """At the end of the hop: the text still held and the last clauses (the final one may
        be empty or only whitespace)."""
        text, clauses = self._take(self._marker.flush())
        return text, [*clauses, self._splitter.flush()]

    def _take(self, text: str) -> tuple[str, list[str]]:
        if not self.started:
            self._leading += text
            if not self._leading.strip():
                return "", []
            text, self._leading, self.started = self._leading, "", True
        return text, self._splitter.push(text)
