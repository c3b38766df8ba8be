"""Word timings: which samples of a unit's audio speak which characters of its text.

Piper reports, per synthesized sentence, how many samples each phoneme took. Spoken words are
separated by the " " phoneme. A written token ("7:30", "$25", "e.g.") may speak as several
phoneme words or none, so tokens are matched to phoneme words by how many phoneme words each
token makes on its own (the TTS engine supplies that count).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

# Phonemes that carry no word content: sentence start/end markers and pauses for punctuation.
_SILENT_PHONEMES = frozenset("^$_.,;:!?\"'()-… ")
_TOKEN = re.compile(r"\S+")


@dataclass(frozen=True)
class WordTiming:
    """One written token of a unit's text and where the audio speaks it."""

    text: str
    """The token exactly as written (punctuation attached)."""
    char_start: int
    """Offset of the token's first character in the unit's generated text."""
    char_end: int
    """Offset just past the token's last character."""
    start_sample: int
    """First sample of the token's speech in the unit's audio."""
    end_sample: int
    """Sample just past the token's last spoken phoneme (pauses after it excluded)."""
    exact: bool = True
    """False when the token could not be matched to phoneme words one to one; its bounds are
    then the safe ones (the end is never earlier than the truth)."""


@dataclass(frozen=True)
class PhonemeWord:
    """One spoken word in the phoneme stream of synthesized audio."""

    phonemes: str
    """The word's phonemes, without pauses or sentence markers."""
    start_sample: int
    """First sample of the word (relative to the audio the alignments describe)."""
    end_sample: int
    """Sample just past its last phoneme."""


def split_phoneme_words(alignments: Sequence[tuple[str, int]], offset: int = 0) -> list[PhonemeWord]:
    """Group (phoneme, num_samples) pairs into spoken words with sample bounds.

    `offset` is added to every bound, so sentences synthesized one after another can be laid
    on one timeline.
    """
    words: list[PhonemeWord] = []
    position = offset
    current: list[str] = []
    start = position
    end = position
    for phoneme, num_samples in alignments:
        if phoneme == " ":
            if current:
                words.append(PhonemeWord("".join(current), start, end))
            current = []
        elif phoneme not in _SILENT_PHONEMES:
            if not current:
                start = position
            current.append(phoneme)
            end = position + int(num_samples)
        position += int(num_samples)
    if current:
        words.append(PhonemeWord("".join(current), start, end))
    return words


def tokenize(text: str) -> list[tuple[int, int]]:
    """Character spans of the whitespace-separated tokens of `text`."""
    return [(m.start(), m.end()) for m in _TOKEN.finditer(text)]


def align_words(
    text: str,
    phoneme_words: Sequence[PhonemeWord],
    count_phoneme_words: Callable[[str], int],
    audio_end: int,
) -> list[WordTiming]:
    """Give every token of `text` the samples that speak it.

    When the per-token counts add up to the phoneme words actually synthesized, each token gets
    exactly its phoneme words (tokens that speak as nothing get a zero-length span where they
    stand). When they do not, the tokens are matched exactly from both ends as far as counts
    agree with what was spoken, and the tokens in between get the tightest safe bounds: they
    start where the unmatched audio starts and end where it ends.
    """
    spans = tokenize(text)
    counts = [count_phoneme_words(text[s:e]) for s, e in spans]
    first_start = phoneme_words[0].start_sample if phoneme_words else 0

    def timing(index: int, start: int, end: int, exact: bool) -> WordTiming:
        s, e = spans[index]
        return WordTiming(text[s:e], s, e, start, end, exact)

    if sum(counts) == len(phoneme_words):
        return _assign_in_order(counts, phoneme_words, first_start, timing)

    # Match from the front while the remaining audio can still hold the remaining counts.
    front: list[WordTiming] = []
    used = 0
    cursor = first_start
    index = 0
    while index < len(spans) and used + counts[index] <= len(phoneme_words) and counts[index] == 1:
        word = phoneme_words[used]
        front.append(timing(index, word.start_sample, word.end_sample, True))
        cursor = word.end_sample
        used += 1
        index += 1
    # Match from the back the same way, never crossing the front.
    back: list[WordTiming] = []
    back_used = len(phoneme_words)
    back_index = len(spans) - 1
    while back_index >= index and back_used - 1 >= used and counts[back_index] == 1:
        back_used -= 1
        word = phoneme_words[back_used]
        back.append(timing(back_index, word.start_sample, word.end_sample, True))
        back_index -= 1
    middle_start = cursor
    middle_end = phoneme_words[back_used - 1].end_sample if back_used > used else cursor
    if back_used == len(phoneme_words):
        middle_end = max(middle_end, audio_end)
    middle = [timing(i, middle_start, middle_end, False) for i in range(index, back_index + 1)]
    return front + middle + list(reversed(back))


def _assign_in_order(
    counts: Sequence[int],
    phoneme_words: Sequence[PhonemeWord],
    cursor: int,
    timing: Callable[[int, int, int, bool], WordTiming],
) -> list[WordTiming]:
    """Token i gets the next counts[i] phoneme words; a token that speaks as nothing gets a
    zero-length span where it stands."""
    result: list[WordTiming] = []
    used = 0
    for index, count in enumerate(counts):
        if count == 0:
            result.append(timing(index, cursor, cursor, True))
            continue
        spoken = phoneme_words[used : used + count]
        result.append(timing(index, spoken[0].start_sample, spoken[-1].end_sample, True))
        cursor = spoken[-1].end_sample
        used += count
    return result
