"""Words as retrieval sees them: one normalisation for the venue's files and the caller's turn.

A recognizer writes what it heard, not what a venue wrote: "d'you", "Wi-Fi", "restrooms",
"how much's". Both sides go through the same steps, so they meet on the same terms:

1. lower case, accents folded ("café" -> "cafe"), contractions spelled out ("what's" -> "what
   is", "d'you" -> "do you", "n't" -> "not"), hyphens as spaces ("step-free" -> "step free");
2. words, each reduced to its stem (Snowball's English stemmer: "parking" and "parked" ->
   "park", "toilets" -> "toilet");
3. synonyms: a phrase of a synonym group (built in: toilet/restroom/bathroom..., how
   much/price/cost..., how long/how much time, wifi/wi fi/internet, child/children/kids,
   email/e mail; and the groups a knowledge
   file declares) becomes the group's first member, the longest phrase first;
4. function words, fillers and time words ("the", "please", "today") dropped: what is left are
   the terms the index is searched with.
"""

from __future__ import annotations

import functools
import math
import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import snowballstemmer

_STEMMER = snowballstemmer.stemmer("english")

RARE_SHARE = 0.02
"""A term in the text of more than this share of the entries (and more than `RARE_FLOOR`)
does not find entries by their text: "tour" in a catalogue of 10 000 exhibits would rank
thousands of rows for milliseconds, and none of them would be the answer."""
RARE_FLOOR = 50


def word_set(text: str) -> frozenset[str]:
    """The words of a list written as text, one or more a line."""
    return frozenset(text.split())


BUILT_IN_SYNONYMS: tuple[tuple[str, ...], ...] = (
    ("toilet", "restroom", "bathroom", "loo", "wc", "lavatory", "washroom", "rest room",
     "ladies room", "men's room", "mens room", "gents"),
    ("price", "cost", "how much", "fee", "pay for"),
    ("duration", "how long", "how much time", "how many hours", "how many minutes"),
    ("wifi", "wi fi", "wireless", "internet"),
    ("child", "children", "kid", "kids", "kiddie"),
    ("atm", "cash machine", "cashpoint"),
    ("email", "e mail", "mail address"),
)
"""Synonym groups every venue gets; a file's own groups are added (see `sources`)."""

STOPWORDS = word_set("""
a an the and or but if then so of to in on at by for with from into onto about over under
up down out off near than as is are was were be been being am do does did done doing have has
had having can could may might must shall should will would i me my mine we us our ours you
your yours he him his she her hers it its they them their theirs this that these those there
here what which who whom whose when where why how not no yes any some all each every much
many more most other such same too very just also only please thanks thank hi hello hey
okay ok um uh er erm hmm well oh like really actually maybe perhaps sorry excuse
get gets getting got go goes going gone went find found know tell told need want wanted
leave put
wonder wondering
let see look looking help say said give take make use still again ever even anything
something everything nothing anyone someone one ones way thing things bit lot
nearby nearest closest around somewhere far inside outside indoors outdoors
""")
"""Words that carry no topic: function words, fillers, light verbs."""
TIME_WORDS = word_set("""
now today tonight tomorrow yesterday currently right moment morning afternoon evening night
noon midnight week weekend weekday weekdays day days date time o'clock oclock am pm a.m p.m
monday tuesday wednesday thursday friday saturday sunday mondays tuesdays wednesdays
thursdays fridays saturdays sundays
january february march april june july august september october november december
christmas eve easter boxing holiday holidays new year years later soon early late
one two three four five six seven eight nine ten eleven twelve fifteen twenty thirty forty
fifty half quarter
""")
"""Words that say when, not what: the opening hours read them (`hours`), retrieval does not."""

_CONTRACTIONS = (
    (r"\bd'you\b", "do you"), (r"\bwon't\b", "will not"), (r"\bcan't\b", "can not"),
    (r"\bshan't\b", "shall not"), (r"\blet's\b", "let us"), (r"n't\b", " not"),
    (r"'re\b", " are"), (r"'ll\b", " will"), (r"'ve\b", " have"), (r"'m\b", " am"),
    (r"'d\b", " would"), (r"\b(what|where|when|how|who|there|that|it|here)'s\b", r"\1 is"),
)
_APOSTROPHES = str.maketrans({"’": "'", "‘": "'", "`": "'", "´": "'"})
_WORD = re.compile(r"[a-z0-9]+(?:[:.][0-9]+)?(?:'[a-z]+)?")
_MAX_PHRASE = 4
"""Longest synonym phrase, in words."""


def fold(text: str) -> str:
    """Lower case, accents folded, apostrophes straightened, contractions spelled out."""
    text = unicodedata.normalize("NFKD", text.translate(_APOSTROPHES))
    text = "".join(c for c in text if not unicodedata.combining(c)).lower()
    for pattern, replacement in _CONTRACTIONS:
        text = re.sub(pattern, replacement, text)
    return re.sub(r"(?<=[a-z])-(?=[a-z])", " ", text)  # "step-free" is "step free"


def words(text: str) -> list[str]:
    """The folded words of `text`, possessives dropped ("museum's" -> "museum")."""
    return [w.split("'")[0] for w in _WORD.findall(fold(text))]


@functools.lru_cache(maxsize=65536)
def stem(word: str) -> str:
    if any(c.isdigit() for c in word):
        return word
    result: str = _STEMMER.stemWord(word)
    return result


class Synonyms:
    """Synonym groups: each phrase of a group stands for the group's first member."""

    def __init__(self, groups: Iterable[Sequence[str]]) -> None:
        self._phrases: dict[tuple[str, ...], str] = {}
        for group in groups:
            head = " ".join(stem(w) for w in words(group[0])) if group else ""
            if not head:
                continue
            canonical = head.replace(" ", "_")
            for phrase in group:
                key = tuple(stem(w) for w in words(phrase))
                if key:
                    self._phrases.setdefault(key, canonical)

    @property
    def size(self) -> int:
        return len(self._phrases)

    def apply(self, stems: list[str]) -> list[str]:
        """`stems` with every synonym phrase replaced by its group's term, longest first."""
        out: list[str] = []
        i = 0
        while i < len(stems):
            for n in range(min(_MAX_PHRASE, len(stems) - i), 0, -1):
                found = self._phrases.get(tuple(stems[i:i + n]))
                if found is not None:
                    out.append(found)
                    i += n
                    break
            else:
                out.append(stems[i])
                i += 1
        return out


_STOP_STEMS = frozenset(stem(w) for w in STOPWORDS | TIME_WORDS)


def terms(text: str, synonyms: Synonyms) -> list[str]:
    """The topic terms of `text`, in order (repeats kept): stems after synonyms, without
    function words, fillers, time words and numbers ("8:00", "22": a question's number is
    a time or a count, never what it is about)."""
    return [t for t in term_sequence(text, synonyms) if t is not None]


def term_sequence(text: str, synonyms: Synonyms) -> list[str | None]:
    """`terms` in their places: None where a word is not a term (what stands next to what)."""
    stems = synonyms.apply([stem(w) for w in words(text)])
    return [s if s not in _STOP_STEMS and len(s) > 1 and not any(c.isdigit() for c in s)
            else None for s in stems]


@dataclass(frozen=True)
class Vocabulary:
    """The terms the venue's files use, with how many entries use each (for their weight)."""

    document_count: Mapping[str, int]
    """Term -> entries it occurs in (questions, headings, keywords or text)."""
    entries: int
    """How many entries there are."""
    in_text: Mapping[str, int] = field(default_factory=dict)
    """Term -> entries whose text holds it."""

    def weight(self, term: str) -> float:
        """How telling `term` is (inverse document frequency); a term no entry uses weighs
        more than any other: a question about something the venue never mentions is not
        answered by an entry that shares its other words."""
        count = self.document_count.get(term, 0)
        return math.log((self.entries + 1) / (count + 0.5)) + 1.0

    def rare_in_text(self, term: str) -> bool:
        """Few enough entries' texts hold `term` that its mentions are worth ranking: not
        more than `RARE_SHARE` of the entries (and more than `RARE_FLOOR`)."""
        return self.in_text.get(term, 0) <= max(RARE_FLOOR, RARE_SHARE * self.entries)


