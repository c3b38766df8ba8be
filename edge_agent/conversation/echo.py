"""Echo rejection: speech recognized from the mic that is the agent's own voice coming back.

On a kiosk without an acoustic echo canceller the microphone hears the speaker. While a unit
plays, the loop asks `EchoFilter.is_echo(recognized, playing)` with the STT text of the user's
speech window and the words that were playing during that window (`words_played`). Both are
turned into comparable word lists (`normalize_words`) and aligned in order with a
longest-common-subsequence over a fuzzy word equality.

Trade-offs, and why the rule is shaped the way it is:
- Coverage is measured over the *recognized* words, not the played ones: the mic may catch only
  the middle of a clause (the window's edge words are cut), so most played words can be absent
  from an echo; but an echo adds few words of its own. A user sentence that shares function
  words with the agent ("I want the table at eight" while it says "the table at seven is free")
  covers 3 of 6 words and is not echo; `min_match` (0.6) sits between the two.
- In order: the same words in another order are a different utterance, hence LCS and not a
  bag of words.
- A real user who talks *over* the agent produces a transcript that mixes their words with echo
  words; its coverage falls below `min_match`, so it stays a possible barge-in. The filter errs
  toward "not echo": a missed echo costs one needless pause (the backchannel and barge-in rules
  still apply after it), a false echo loses a real interruption.
- `min_words`: one matched word is never enough evidence on its own when the user said more.
  A recognized text shorter than `min_words` is echo only when every word of it matches, and for
  such short words matching is exact: a one-word "yes"/"no" is suppressed only when the agent
  was saying exactly that word in that window. That costs a genuine one-word reply at that very
  moment, which the barge-in rules would not treat as an interruption anyway (too short, and
  "yes" is a backchannel). Raise `min_words` to protect short replies more, at the price of
  letting short echo fragments through to the barge-in rules.
- Fuzzy equality: PocketSphinx mishears about one word in a short echo ("costs" -> "cost",
  "for" for "four"). Words of 4+ letters are equal when difflib's ratio is >= 0.75 (one letter
  changed, added or dropped in a 4-6 letter word; "seven"/"eleven" is 0.73 and stays different).
  Shorter words, number words ("eight"/"eighteen" is 0.77) and a negation ("does"/"doesnt")
  must match exactly, because those differences change what the user said. A few homophones
  the recognizer swaps freely ("to"/"two"/"too", "for"/"four") compare equal.
- Piper (espeak-ng) reads some written forms differently from the way a person would say them:
  "2024" as "two thousand twenty four", "$25" as "dollar twenty five", "7:05" as "seven zero
  five". `normalize_words` gives the conventional reading; `is_echo` also tries the espeak-ng
  reading of `playing` and keeps the better match.
"""

from __future__ import annotations

import difflib
import functools
import re
from collections.abc import Sequence

from edge_agent.heard.timings import WordTiming

_ONES = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
         "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"]
_TENS = ["_", "_", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]
_SCALES = ((1_000_000_000, "billion"), (1_000_000, "million"), (1_000, "thousand"))
_ORDINAL_ENDS = {"one": "first", "two": "second", "three": "third", "five": "fifth", "eight": "eighth",
                 "nine": "ninth", "twelve": "twelfth"}
_ABBREVIATIONS = {"dr": "doctor", "mr": "mister", "mrs": "missus", "ms": "miz", "st": "saint",
                  "jr": "junior", "sr": "senior", "etc": "etcetera", "vs": "versus", "approx":
                  "approximately", "min": "minutes", "hr": "hour", "hrs": "hours"}
# Spelled as letters although they hold a vowel; vowel-less capitals ("PM", "TV") always are.
_SPELLED = frozenset({"AM", "USA", "UK", "EU", "ID", "ATM", "AI", "FAQ", "URL", "API", "UI", "IOU"})
_SYMBOLS = {"&": " and ", "%": " percent ", "+": " plus ", "@": " at ", "=": " equals "}
# Canonical spelling for homophones the recognizer picks between freely.
_HOMOPHONES = {"two": "to", "too": "to", "four": "for", "fore": "for", "won": "one", "ate": "eight",
               "their": "there", "theyre": "there", "youre": "your", "hear": "here", "buy": "by",
               "bye": "by", "our": "hour", "okay": "ok"}

_TIME = re.compile(r"^(\d{1,2}):(\d{2})([ap]m)?$")
_MONEY = re.compile(r"^\$(\d[\d,]*)(?:\.(\d{1,2}))?$")
_ORDINAL = re.compile(r"^(\d+)(st|nd|rd|th)$")
_DECIMAL = re.compile(r"^(\d+)\.(\d+)$")
_INTEGER = re.compile(r"^\d{1,3}(,\d{3})+$|^\d+$")
_NUMBER_SUFFIX = re.compile(r"^(\d+)([ap]m)$")
_LETTER_DOTS = re.compile(r"[a-z](?:\.[a-z])+")
_FUZZY_RATIO = 0.75
_FUZZY_MIN_LETTERS = 4


def _cardinal(n: int) -> list[str]:
    """US English cardinal, no "and" ("125" -> one hundred twenty five), as espeak-ng en-us says it."""
    if n < 20:
        return [_ONES[n]]
    if n < 100:
        return [_TENS[n // 10]] + ([_ONES[n % 10]] if n % 10 else [])
    if n < 1000:
        return [_ONES[n // 100], "hundred"] + (_cardinal(n % 100) if n % 100 else [])
    for scale, name in _SCALES:
        if n >= scale:
            return _cardinal(n // scale) + [name] + (_cardinal(n % scale) if n % scale else [])
    raise AssertionError(n)  # pragma: no cover - scales cover every n >= 1000


def _ordinal(n: int) -> list[str]:
    words = _cardinal(n)
    last = words[-1]
    if last in _ORDINAL_ENDS:
        last = _ORDINAL_ENDS[last]
    elif last.endswith("y"):
        last = last[:-1] + "ieth"
    else:
        last += "th"
    return [*words[:-1], last]


# Ordinals are number words too ("fifth"/"fifty" must not pass as a mishearing).
_NUMBER_WORDS = frozenset([*_ONES, *_TENS[2:], "hundred", "thousand", "million", "billion", "oh",
                           *(_ordinal(n)[-1] for n in range(1, 100))])


def _year(n: int, espeak: bool) -> list[str]:
    """A plain four-digit number, read as a year where people (or espeak-ng) do."""
    if espeak:
        # espeak-ng en-us: "1995" -> nineteen hundred ninety five, "2024" -> two thousand twenty four.
        if 1100 <= n < 2000 and n % 100:
            return [*_cardinal(n // 100), "hundred", *_cardinal(n % 100)]
        return _cardinal(n)
    if not 1100 <= n < 2100 or 2000 <= n < 2010:
        return _cardinal(n)
    high, low = divmod(n, 100)
    if low == 0:
        return [*_cardinal(high), "hundred"]
    return _cardinal(high) + (["oh", *_ONES[low:low + 1]] if low < 10 else _cardinal(low))


def _integer(digits: str, espeak: bool) -> list[str]:
    if "," not in digits and len(digits) == 4:
        return _year(int(digits), espeak)
    return _cardinal(int(digits.replace(",", "")))


def _decimal(whole: str, fraction: str) -> list[str]:
    return _cardinal(int(whole)) + ["point"] + [_ONES[int(d)] for d in fraction]


def _token_words(token: str, previous_is_number: bool, espeak: bool) -> list[str]:
    """The spoken words of one whitespace-free token (punctuation still attached)."""
    bare = token.strip(".,;:!?\"'()[]{}…“”‘’")
    lower = bare.lower()
    if lower in _ABBREVIATIONS and token.rstrip(",;:!?\"')").endswith("."):
        return [_ABBREVIATIONS[lower]]
    if _LETTER_DOTS.fullmatch(lower):
        return lower.split(".")  # "p.m." / "e.g." -> letters
    if bare.isalpha() and bare.isupper() and 2 <= len(bare) <= 5:
        if bare == "OK":
            return ["okay"]
        if bare == "AM" and espeak:
            return ["am"]
        if bare in _SPELLED or not re.search(r"[AEIOUY]", bare):
            return list(lower)
    if lower in ("pm", "am") and (lower == "pm" or previous_is_number):
        return list(lower)
    match = _TIME.match(lower)
    if match:
        hour, minute, suffix = int(match[1]), match[2], match[3]
        words = _cardinal(hour)
        if espeak:
            words += _cardinal(int(minute)) if minute[0] != "0" else ["zero", _ONES[int(minute[1])]]
        elif minute == "00":
            words += ["oclock"]
        else:
            words += _cardinal(int(minute)) if minute[0] != "0" else ["oh", _ONES[int(minute[1])]]
        return words + (list(suffix) if suffix else [])
    match = _MONEY.match(bare)
    if match:
        dollars = int(match[1].replace(",", ""))
        cents = int(match[2].ljust(2, "0")) if match[2] else 0
        if espeak:
            spoken = ["dollar", *_cardinal(dollars)]
            return spoken + (["point"] + [_ONES[int(d)] for d in match[2]] if match[2] else [])
        words = []
        if dollars or not cents:
            words += [*_cardinal(dollars), "dollar" if dollars == 1 else "dollars"]
        if cents:
            words += [*_cardinal(cents), "cent" if cents == 1 else "cents"]
        return words
    match = _NUMBER_SUFFIX.match(lower)
    if match:
        return _integer(match[1], espeak) + list(match[2])
    match = _ORDINAL.match(lower)
    if match:
        return _ordinal(int(match[1]))
    match = _DECIMAL.match(lower)
    if match:
        return _decimal(match[1], match[2])
    if _INTEGER.match(lower):
        return _integer(lower, espeak)
    return [lower] if lower else []


def _normalize(text: str, espeak: bool) -> list[str]:
    for symbol, spoken in _SYMBOLS.items():
        text = text.replace(symbol, spoken)
    # Hyphens and slashes join words ("twenty-five", "3/4"); a minus sign starts a number.
    text = re.sub(r"(?<!\S)-(?=\d)", "minus ", text)
    text = re.sub(r"[-–—/]", " ", text)
    words: list[str] = []
    for token in text.split():
        previous_is_number = bool(words) and words[-1] in _NUMBER_WORDS
        for word in _token_words(token, previous_is_number, espeak):
            # Apostrophes and leftover punctuation go: "it's" -> "its" on both sides.
            cleaned = re.sub(r"[^a-z0-9]", "", word.lower())
            if cleaned:
                words.extend(_token_words(cleaned, False, espeak) if cleaned.isdigit() else [cleaned])
    return words


def normalize_words(text: str) -> list[str]:
    """Lowercase, punctuation stripped, numbers/times/currency spelled out in English words the
    way a recognizer writes them ("7" -> "seven", "7:30" -> "seven thirty", "2024" -> "twenty
    twenty four", "$25" -> "twenty five dollars", "PM" -> "p m", "500" -> "five hundred",
    "Dr." -> "doctor"), so that Piper's text and PocketSphinx's transcript compare."""
    return _normalize(text, espeak=False)


def _canonical(word: str) -> str:
    return _HOMOPHONES.get(word, word)


def _negation_of(word: str, other: str) -> bool:
    """`word` is the contracted negation of `other` ("doesnt"/"does", "cant"/"can")."""
    return word.endswith("nt") and other in (word[:-2], word[:-1])


@functools.lru_cache(maxsize=8192)  # the in-order alignment compares the same pairs again
def words_equal(a: str, b: str) -> bool:
    """Fuzzy equality of two normalized words (see the module docstring for the rule)."""
    a, b = _canonical(a), _canonical(b)
    if a == b:
        return True
    if min(len(a), len(b)) < _FUZZY_MIN_LETTERS or a in _NUMBER_WORDS or b in _NUMBER_WORDS:
        return False
    if _negation_of(a, b) or _negation_of(b, a):
        return False
    return difflib.SequenceMatcher(None, a, b, autojunk=False).ratio() >= _FUZZY_RATIO


def matched_in_order(recognized: Sequence[str], playing: Sequence[str]) -> int:
    """How many of `recognized` align, in order, with words of `playing` (LCS length)."""
    previous = [0] * (len(playing) + 1)
    for word in recognized:
        current = [0] * (len(playing) + 1)
        for j, other in enumerate(playing, start=1):
            if words_equal(word, other):
                current[j] = previous[j - 1] + 1
            else:
                current[j] = max(previous[j], current[j - 1])
        previous = current
    return previous[-1]


class EchoFilter:
    """Decides whether recognized speech is the agent's own playing words coming back."""

    def __init__(self, min_match: float = 0.6, min_words: int = 2) -> None:
        if not 0.0 < min_match <= 1.0:
            raise ValueError(f"EchoFilter min_match must be in (0, 1], got {min_match}")
        if min_words < 1:
            raise ValueError(f"EchoFilter min_words must be at least 1, got {min_words}")
        self.min_match = min_match
        self.min_words = min_words

    def is_echo(self, recognized: str, playing: str) -> bool:
        """True when `recognized` (STT text) is the agent's own `playing` words coming back:
        at least `min_match` of the recognized words (and at least `min_words` of them, unless
        the recognized text has fewer words than that and all match) match words of `playing`
        in order (a longest-common-subsequence alignment with fuzzy word equality).

        Empty recognized text is not echo (there is nothing to reject)."""
        heard = normalize_words(recognized)
        if not heard:
            return False
        readings = {tuple(normalize_words(playing)), tuple(_normalize(playing, espeak=True))}
        matched = max(matched_in_order(heard, reading) for reading in readings)
        if len(heard) < self.min_words:
            return matched == len(heard)
        return matched >= self.min_words and matched >= self.min_match * len(heard)


def words_played(text: str, words: Sequence[WordTiming], start_sample: int, end_sample: int) -> str:
    """The verbatim slice of `text` covering every word whose audio overlaps
    [start_sample, end_sample) (WordTiming from edge_agent.heard.timings: char_start/char_end,
    start_sample/end_sample). Empty when none."""
    if end_sample <= start_sample:
        return ""
    hit = [
        w for w in words
        # A token that speaks as nothing has a zero-length span: it counts where it stands.
        if (w.start_sample < end_sample and w.end_sample > start_sample)
        or (w.start_sample == w.end_sample and start_sample <= w.start_sample < end_sample)
    ]
    if not hit:
        return ""
    return text[min(w.char_start for w in hit) : max(w.char_end for w in hit)]
