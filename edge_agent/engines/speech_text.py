"""Text prepared for the voice: control characters blanked, long text cut into bounded pieces.

Piper synthesizes each espeak sentence in one ONNX run whose memory grows faster than its
length (a 150-word line without punctuation takes ~0.7 GB over the loaded voice, 2000 words
were OOM-killed at 24 GB), and espeak rejects a NUL or a lone surrogate outright. Both helpers
here keep every character offset: the sanitized text has the original's length and the
pieces are consecutive spans of it, so word timings computed on them point into the caller's
text unchanged.
"""

from __future__ import annotations

import re
import unicodedata

MAX_PIECE_CHARS = 200
"""At most this many characters go to the voice at once (~30 words of ordinary English)."""
MAX_PIECE_WORDS = 30
"""At most this many whitespace-separated words go to the voice at once (~10 s of speech,
~170 phonemes, ~+85 MB of peak memory while Piper runs it)."""

# ANSI escape sequences (CSI "ESC [ ... final", or ESC and one character) are terminal
# commands, not text: blanked whole, so "\x1b[2J" does not speak as "2 J".
_ESCAPE = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]?|[@-Z\\-_]?)")
# Tab, newline and carriage return are ordinary whitespace to espeak and to the tokenizer:
# they are left alone so that text without other control characters reaches Piper unchanged.
_KEPT_CONTROLS = frozenset("\t\n\r")

# Cut points, from most to least preferred. Each pattern's match ends where a piece may end;
# whitespace after it is then taken into the piece (see `_extend_over_space`).
_SENTENCE_END = re.compile(r"[.!?…]+[\"'”’)\]]*(?=\s)")
_CLAUSE_END = re.compile(r"[,;:](?=\s)|\s*[—–]|\s-(?=\s)")
_WORD_END = re.compile(r"\S(?=\s)")
_WORD = re.compile(r"\S+")


def sanitize_for_speech(text: str) -> str:
    """`text` with every character the voice must not get replaced by a space.

    Replaced: ANSI escape sequences, control characters (Unicode category Cc) other than tab,
    newline and carriage return, and lone surrogates (Cs; they cannot be encoded for espeak).
    The result has the same length as `text`, so offsets into one are offsets into the other;
    text with none of these characters comes back equal.
    """
    if text.isprintable():
        return text  # the common case (no newline, no ESC): nothing to replace
    blanked = _ESCAPE.sub(lambda m: " " * len(m.group()), text)
    return "".join(
        " " if (unicodedata.category(c) in ("Cc", "Cs") and c not in _KEPT_CONTROLS) else c
        for c in blanked
    )


def split_speech_text(text: str, max_chars: int = MAX_PIECE_CHARS,
                      max_words: int = MAX_PIECE_WORDS) -> list[tuple[int, int]]:
    """Consecutive (start, end) spans that cover `text` exactly, each at most `max_chars`
    characters holding at most `max_words` words (a word cut by a span counts in both).

    Text within the bounds is one span. Longer text is cut as late as the bounds allow, at the
    last sentence end (. ! ? … before whitespace) if there is one, else at the last clause
    break (, ; : before whitespace, a dash), else between words, else - a single word longer
    than `max_chars` - inside the word. Whitespace after a cut goes with the piece before it,
    as far as that piece's bound allows. Sentence ends are not told apart from abbreviations
    ("e.g. "): a cut there only changes the intonation of a text too long to speak at once.
    """
    if max_chars < 1 or max_words < 1:
        raise ValueError(f"bounds must be positive, not {max_chars} chars / {max_words} words")
    spans: list[tuple[int, int]] = []
    start = 0
    while start < len(text):
        limit = _limit(text, start, max_chars, max_words)
        if limit == len(text):
            spans.append((start, limit))
            break
        cut = _cut(text, start, limit)
        spans.append((start, cut))
        start = cut
    return spans


def _limit(text: str, start: int, max_chars: int, max_words: int) -> int:
    """The furthest end a piece starting at `start` may have."""
    limit = min(len(text), start + max_chars)
    for count, word in enumerate(_WORD.finditer(text, start, limit), 1):
        if count > max_words:
            # The piece must end before this word starts.
            return word.start()
    return limit


def _cut(text: str, start: int, limit: int) -> int:
    """Where the piece text[start:...] ending no later than `limit` is best cut."""
    # One character past the limit is searched so that the look-ahead for whitespace sees it.
    search_end = min(len(text), limit + 1)
    for pattern in (_SENTENCE_END, _CLAUSE_END, _WORD_END):
        ends = [m.end() for m in pattern.finditer(text, start, search_end) if m.end() <= limit]
        if ends:
            return _extend_over_space(text, ends[-1], limit)
    # One word longer than the bound: cut inside it, but not between a letter and the
    # combining mark that belongs to it.
    cut = limit
    while cut - 1 > start and unicodedata.combining(text[cut]):
        cut -= 1
    return cut


def _extend_over_space(text: str, cut: int, limit: int) -> int:
    while cut < limit and text[cut].isspace():
        cut += 1
    return cut
