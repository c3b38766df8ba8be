"""Word error rate: (substitutions + deletions + insertions) / words said.

Both texts are normalized first so that spelling conventions are not counted as errors:
lowercase, punctuation dropped (apostrophes kept inside words), hyphenated words joined
("to-night" -> "tonight", "mm-hmm" -> "mmhmm"), "p.m."/"a.m." written as letters, and numbers
written as their digits one by one, whether spelled or not ("eight thirty", "8:30" -> "8 3
0"; "seven one five", "715" -> "7 1 5"; "four" -> "4"), so that a recognizer writing digits is
not charged for it.
"""

from __future__ import annotations

import re

_NUMBERS = {word: str(value) for value, word in enumerate((
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
    "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen",
    "nineteen"))}
_NUMBERS.update({word: str(10 * tens) for tens, word in enumerate(
    ("twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"), start=2)})
_NUMBERS["oh"] = "0"
_COMPOUND = re.compile(r"\b(twenty|thirty|forty|fifty|sixty|seventy|eighty|ninety)[ -]"
                       r"(one|two|three|four|five|six|seven|eight|nine)\b")


def normalize(text: str) -> list[str]:
    """The words of `text` as they are compared."""
    text = text.lower()
    text = re.sub(r"\b([ap])\.\s?m\.?", r"\1 m", text)
    text = re.sub(r"(\d)([ap]m)\b", lambda m: f"{m.group(1)} {m.group(2)[0]} m", text)
    text = re.sub(r"\b([ap])m\b", r"\1 m", text)
    text = re.sub(r"(\d+):00\b", r"\1", text)
    text = _COMPOUND.sub(lambda m: _NUMBERS[m.group(1)][0] + _NUMBERS[m.group(2)], text)
    text = re.sub(r"(?<=[a-z])-(?=[a-z])", "", text)  # "to-night", "mm-hmm" as one word
    text = re.sub(r"[^\w'\s]|_", " ", text)
    words: list[str] = []
    for word in (w.strip("'") for w in text.split()):
        if not word:
            continue
        if word == "oh" and not (words and words[-1].isdigit()):
            words.append(word)  # "oh" is a zero only inside a number ("seven oh five")
            continue
        digits = _NUMBERS.get(word, word)
        words.extend(digits if digits.isdigit() else [digits])
    return words


def word_errors(said: str, heard: str) -> tuple[int, int]:
    """(errors, words said): the edit distance between the normalized word sequences."""
    reference, hypothesis = normalize(said), normalize(heard)
    previous = list(range(len(hypothesis) + 1))
    for i, word in enumerate(reference, start=1):
        current = [i] + [0] * len(hypothesis)
        for j, other in enumerate(hypothesis, start=1):
            current[j] = min(previous[j] + 1, current[j - 1] + 1,
                             previous[j - 1] + (word != other))
        previous = current
    return previous[-1], len(reference)


def word_error_rate(pairs: list[tuple[str, str]]) -> float:
    """Corpus WER over (said, heard) pairs: all errors over all words said."""
    errors = words = 0
    for said, heard in pairs:
        wrong, count = word_errors(said, heard)
        errors += wrong
        words += count
    return errors / words if words else 0.0
