"""Backchannel or interruption: what the listener said over the agent, by words and by sound.

"mm-hm", "yeah", "sí claro", "haan ji" while the agent talks mean "go on": the unit keeps
playing and nothing is truncated. "wait", "no, eight people" mean "stop": a barge-in. The
conversation loop asks a `BackchannelClassifier` with the text recognized so far, how long the
speech has lasted, the configured language and the sound of the speech (`VoiceShape`); the
default is a multilingual lexicon that listens to the sound when the words fail.

Missing a real interruption is the expensive mistake (the agent talks over the listener), so the
lexicon only says "backchannel" when every word is a known acknowledgement, or when the words
are a recognizer's garble of a hum: a short voiced burst whose transcript holds nothing but m's
and h's between vowels, or single letters ("Mm, m, uh.", "M. H. N.", "A memo." for "mm-hmm",
"mhm"); anything else it does not know interrupts.
"""

from __future__ import annotations

import enum
import inspect
import itertools
import re
import unicodedata
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Protocol, cast, runtime_checkable

from edge_agent.conversation.voice_shape import VoiceShape
from edge_agent.errors import ConfigError
from edge_agent.plugins import check_callable, load_plugin


class Verdict(enum.StrEnum):
    """A `str` enum: compares equal to "backchannel" / "interruption"."""

    BACKCHANNEL = "backchannel"
    INTERRUPTION = "interruption"


@runtime_checkable
class BackchannelClassifier(Protocol):
    def classify(self, text: str, speech_ms: float, language: str,
                 sound: VoiceShape | None = None) -> Verdict:
        """`text`: the user's words recognized so far (may be empty); `speech_ms`: how long the
        user has been speaking; `language`: a code from `LANGUAGES` or "any"; `sound`: the shape
        of the speech so far, when the loop measured it. (A classifier whose `classify` takes
        only the first three is given words only.)"""
        ...


ANY = "any"

ACKNOWLEDGEMENTS: Mapping[str, tuple[str, ...]] = {
    # PocketSphinx's dictionary spells hums "hmm", "hm", "mm", "mhm", "uh-huh", "aha", "ah";
    # a hum it takes for letters comes out as "m", "m h m". "And then?" asks the speaker to go
    # on (Moonshine also writes it for a hum); "make sense", "sound good": recognizers drop the s.
    "en": (
        "mm", "m", "mhm", "mm-hm", "mm-hmm", "m h m", "hm", "hmm", "um-hum", "uh-huh", "uh-hum",
        "ah", "aha", "oh", "ooh", "yeah", "yea", "ya", "yep", "yup", "yes", "right", "that's right",
        "okay", "ok", "okey", "k", "kay", "sure", "sure thing", "i see", "got it", "gotcha",
        "alright", "all right", "cool", "great", "good", "nice", "fine", "perfect", "exactly",
        "of course", "absolutely", "definitely", "totally", "true", "indeed", "sounds good",
        "makes sense", "fair enough", "i know", "wow", "thanks", "thank you", "go on",
        "go ahead", "carry on", "uh huh", "and then", "make sense", "sound good",
    ),
    "es": (
        "sí", "claro", "claro que sí", "vale", "ajá", "ya", "ya veo", "bueno", "entiendo",
        "entendido", "de acuerdo", "okey", "ok", "exacto", "perfecto", "correcto", "cierto",
        "eso", "eso es", "muy bien", "bien", "está bien", "dale", "listo", "órale",
        "por supuesto", "mhm", "mm", "hm", "ah", "oh", "ah vale", "ah ya", "gracias",
    ),
    # Romanized Hindi/Hinglish as people type it and as romanizing recognizers spell it, plus
    # Devanagari for recognizers that write it.
    "hi": (
        "haan", "han", "haa", "haanji", "haan ji", "ji", "ji haan", "achha", "accha",
        "acha", "achchha", "theek hai", "thik hai", "theek", "thik", "thik he", "sahi",
        "sahi hai", "bilkul", "bilkul sahi", "samajh gaya", "samajh gayi", "samjha", "samjhi",
        "hmm", "hm", "mm", "ok", "okay", "haan haan", "oh", "achha ji",
        "हाँ", "हां", "हाँ जी", "हां जी", "जी", "जी हाँ", "जी हां", "अच्छा", "ठीक है", "ठीक",
        "सही", "सही है", "बिल्कुल", "हम्म", "हम", "ओके",
    ),
    "fr": (
        "oui", "ouais", "ouaip", "d'accord", "dac", "ok", "okay", "bien sûr", "je vois",
        "voilà", "exactement", "c'est ça", "tout à fait", "bien", "très bien", "parfait",
        "entendu", "super", "ça marche", "en effet", "effectivement", "c'est vrai",
        "absolument", "bon", "ah", "ah oui", "oh", "mhm", "hm", "mm", "merci", "oui oui",
    ),
    "de": (
        "ja", "jaja", "genau", "stimmt", "okay", "ok", "alles klar", "ach so", "jawohl",
        "richtig", "gut", "sehr gut", "klar", "na klar", "natürlich", "natuerlich", "verstehe",
        "ich verstehe", "aha", "ah", "oh", "mhm", "hm", "mm", "in ordnung", "einverstanden",
        "super", "prima", "sicher", "na gut", "danke", "schön", "ja genau",
    ),
}
"""Per language, what a listener says to mean "go on". Matching is on normalized text (see
`normalize`), spaces ignored ("uh-huh", "uh huh" and "uhhuh" are one entry), letters may be drawn
out ("mhmmm")."""

INTERRUPTING: Mapping[str, tuple[str, ...]] = {
    "en": (
        "no", "nope", "nah", "not", "never", "wait", "stop", "hold", "hang", "what", "sorry",
        "pardon", "excuse", "actually", "but", "cancel", "hey", "hello", "don't", "wrong",
        "why", "how", "who", "where", "when", "which", "repeat", "again",
    ),
    "es": (
        "no", "nop", "espera", "espere", "para", "pare", "alto", "momento", "perdón", "perdona",
        "disculpa", "disculpe", "oye", "oiga", "pero", "nada", "nunca", "tampoco", "cancela",
    ),
    "hi": (
        "nahi", "nahin", "nai", "na", "mat", "ruko", "ruk", "rukiye", "suno", "suniye", "kya",
        "kyun", "kaise", "lekin", "magar", "galat", "sorry",
        "नहीं", "ना", "मत", "रुको", "रुकिए", "सुनो", "सुनिए", "क्या", "क्यों", "लेकिन", "गलत",
    ),
    "fr": (
        "non", "nan", "pas", "jamais", "attends", "attendez", "arrête", "arrêtez", "stop",
        "pardon", "quoi", "comment", "mais", "excusez", "désolé", "hein",
    ),
    "de": (
        "nein", "nee", "nö", "nicht", "kein", "keine", "doch", "warte", "warten", "moment",
        "halt", "stopp", "stop", "was", "wie", "bitte", "entschuldigung", "sorry", "aber",
    ),
}
"""Words that make speech an interruption however short it is: negations, requests to stop or
repeat. None is an acknowledgement of its own language; under "any" they win over the others'."""

LANGUAGES: tuple[str, ...] = tuple(ACKNOWLEDGEMENTS)
"""Languages with a lexicon; "any" (`ANY`) uses all of them at once."""

_JOINERS = str.maketrans("", "", "-\u2010\u2011'\u2019\u02bc`\u00b4")


def normalize(text: str) -> list[str]:
    """Words of `text` as the lexicon compares them: casefolded, Latin accents dropped ("sí" and
    "si" match), hyphens and apostrophes removed ("mm-hm" -> "mmhm", "d'accord" -> "daccord"),
    other punctuation and symbols turned into spaces."""
    kept = []
    for char in text.casefold().translate(_JOINERS):
        category = unicodedata.category(char)
        if category[0] in "PSCZ" and not char.isspace():
            kept.append(" ")
        elif category[0] == "M" and kept and _is_latin(kept[-1]):
            continue  # a combining accent on a Latin letter
        elif _is_latin(char):
            kept.append(_strip_accent(char))
        else:
            kept.append(char)
    return "".join(kept).split()


def _is_latin(char: str) -> bool:
    return (char.isascii() and char.isalpha()) or unicodedata.name(char, "").startswith("LATIN")


def _strip_accent(char: str) -> str:
    return "".join(c for c in unicodedata.normalize("NFKD", char) if not unicodedata.combining(c))


def _runs(words: Iterable[str]) -> tuple[str, tuple[int, ...]]:
    """Letters with repeats collapsed, and how often each repeats. Spaces are ignored, so
    "uh huh" = "uhhuh" and "all right" = "alright"."""
    grouped = [(letter, len(list(run))) for letter, run in itertools.groupby("".join(words))]
    return "".join(g[0] for g in grouped), tuple(g[1] for g in grouped)


class _Lexicon:
    """Phrases matched with letters drawn out: "mmmm", "mhmmm", "yeahhh", "okaaay" match "mm",
    "mhm", "yeah", "okay". A letter may repeat more than in the entry, never less, or "god"
    (a recognizer's "stop") would match "good"."""

    def __init__(self, phrases: Iterable[str]) -> None:
        self._entries: dict[str, list[tuple[int, ...]]] = {}
        for phrase in phrases:
            letters, counts = _runs(normalize(phrase))
            self._entries.setdefault(letters, []).append(counts)

    def matches(self, words: Sequence[str]) -> bool:
        letters, counts = _runs(words)
        return any(all(have >= need for have, need in zip(counts, entry, strict=True))
                   for entry in self._entries.get(letters, ()))


_ACKS = {lang: _Lexicon(phrases) for lang, phrases in ACKNOWLEDGEMENTS.items()}
_STOPS = {lang: _Lexicon(words) for lang, words in INTERRUPTING.items()}
_STOPS[ANY] = _Lexicon(w for words in INTERRUPTING.values() for w in words)
_ACKS[ANY] = _Lexicon(p for phrases in ACKNOWLEDGEMENTS.values() for p in phrases)
_LONGEST_PHRASE = max(len(normalize(p)) for phrases in ACKNOWLEDGEMENTS.values() for p in phrases)


def lexicon_language(language: str) -> str:
    """The lexicon used for `language`: its primary subtag ("en-US" -> "en"), or "any" (all of
    them) for a language without a lexicon of its own."""
    primary = re.split(r"[-_]", language.strip().casefold(), maxsplit=1)[0]
    return primary if primary in _ACKS else ANY


class LexiconClassifier:
    """Backchannel when every word belongs to an acknowledgement of the language ("yeah",
    "sí claro", "ach so"), there are at most `max_words` words and the speech lasted less than
    `max_speech_ms`; an interruption otherwise. No words at all (noise, a cough, nothing
    recognized yet) is not an interruption."""

    def __init__(self, max_words: int = 4, max_speech_ms: float = 2000.0) -> None:
        if max_words < 1:
            raise ValueError(f"max_words must be at least 1, got {max_words}")
        if max_speech_ms <= 0:
            raise ValueError(f"max_speech_ms must be positive, got {max_speech_ms}")
        self.max_words = max_words
        self.max_speech_ms = max_speech_ms

    def classify(self, text: str, speech_ms: float, language: str,
                 sound: VoiceShape | None = None) -> Verdict:
        words = normalize(text)
        if not words:
            return Verdict.BACKCHANNEL
        if len(words) > self.max_words or speech_ms >= self.max_speech_ms:
            return Verdict.INTERRUPTION
        lang = lexicon_language(language)
        if any(_STOPS[lang].matches([w]) for w in words):
            return Verdict.INTERRUPTION
        if _covered(words, _ACKS[lang]):
            return Verdict.BACKCHANNEL
        return Verdict.BACKCHANNEL if _garbled_hum(words, sound) else Verdict.INTERRUPTION


_HUM_CONSONANTS = frozenset("mh")
_HUM_VOWELS = frozenset("aeou")
"""A recognizer spells a hum with m's and h's between vowels ("mm", "hmm", "uh", "A memo",
"Emma", "mamma" for "mm-hmm"), or as letters ("M. H. N."). Other consonants mean words:
Moonshine wrote "Hang on." as "Aemon" and "And on." — the n tells them from hums."""
_NOT_HUMS = frozenset(("home", "mom", "ham", "hem", "ma", "moo"))
"""Words spelled like that which a listener says to mean something, not "go on"."""
_LEAD_INS = frozenset(("and", "a", "uh", "um", "oh", "ah"))
"""What a whole-segment recognizer puts before a hum it cannot spell ("And Emma," "A memo")."""


def _garbled_hum(words: list[str], sound: VoiceShape | None) -> bool:
    """A recognizer's spelling of a hum: a short voiced burst (by its sound) whose at most three
    words (a lead-in like "and" aside) hold only the letters of hums and are not words that mean
    something on their own ("nine", "no", "home"). Without the sound, words alone never say so."""
    if sound is None or not sound.is_short_voiced_burst():
        return False
    words = _without_lead_ins(words)
    return len(words) <= 3 and all(_hum_spelling(word) for word in words)


def _without_lead_ins(words: list[str]) -> list[str]:
    while len(words) > 1 and words[0] in _LEAD_INS:
        words = words[1:]
    return words


def _hum_spelling(word: str) -> bool:
    """A single letter, or m's and h's (at least one) among a, e, o, u: "mm", "uh", "memo",
    "emma"; not "aemon", "on", "no", "nine", "emmela"."""
    if len(word) == 1:
        return word.isalpha()
    letters = set(word)
    return (letters <= _HUM_CONSONANTS | _HUM_VOWELS and bool(letters & _HUM_CONSONANTS)
            and word not in _NOT_HUMS)


def opens_with_interruption(text: str, language: str) -> bool:
    """`text` begins (a lead-in like "and" or "uh" aside) with a word that interrupts however
    little else was said: "wait", "no", "sorry", "hold", "espera". Only the first word counts:
    a recognizer's partial guess at a hum may hold one further on ("I'm not. I'" for
    "mm-hmm")."""
    words = _without_lead_ins(normalize(text))
    return bool(words) and _STOPS[lexicon_language(language)].matches(words[:1])


def _covered(words: list[str], lexicon: _Lexicon) -> bool:
    """Whether `words` split into consecutive acknowledgements ("oh" + "i see")."""
    reachable = [True] + [False] * len(words)
    for end in range(1, len(words) + 1):
        reachable[end] = any(
            reachable[start] and lexicon.matches(words[start:end])
            for start in range(max(0, end - _LONGEST_PHRASE), end))
    return reachable[-1]


_KEY = "turns.backchannel_classifier"
_HOW = 'use "lexicon" or a dotted path to a class, e.g. "mypackage.module:MyClassifier"'


def load_classifier(spec: str, source: str) -> BackchannelClassifier:
    """spec "lexicon" -> `LexiconClassifier()`; otherwise a dotted path "package.module:Name" or
    "package.module.Name" to a class (instantiated with no arguments) or an object with
    `classify`. A bad spec raises ConfigError(source, "turns.backchannel_classifier", reason)."""
    spec = spec.strip()
    if spec == "lexicon":
        return LexiconClassifier()
    if not spec:
        raise ConfigError(source, _KEY, f"is empty: {_HOW}")
    if "." not in spec and ":" not in spec:
        raise ConfigError(source, _KEY, f"unknown classifier {spec!r}: {_HOW}")
    found = load_plugin(spec, source, _KEY, "a classifier class")
    if inspect.isclass(found):
        check_callable(found, (), spec, source, _KEY, "a classifier class")
        try:
            found = found()
        except Exception as exc:
            raise ConfigError(source, _KEY, f"cannot create {spec}() with no arguments: "
                              f"{type(exc).__name__}: {exc}. Give its __init__ defaults for "
                              "every parameter") from None
    classify = getattr(found, "classify", None)
    if not callable(classify):
        raise ConfigError(source, _KEY, f"{spec} has no classify(text, speech_ms, language) "
                          "method: point at a class or object that has one")
    if not _takes_sound(classify):
        return _WordsOnly(found)
    return cast(BackchannelClassifier, found)


def _takes_sound(classify: Callable[..., object]) -> bool:
    try:
        parameters = inspect.signature(classify).parameters
    except (TypeError, ValueError):
        return False
    return "sound" in parameters or any(
        p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())


class _WordsOnly:
    """A classifier written for words alone (classify(text, speech_ms, language)): the sound
    of the speech is not passed to it."""

    def __init__(self, inner: object) -> None:
        self._inner = inner

    def classify(self, text: str, speech_ms: float, language: str,
                 sound: VoiceShape | None = None) -> Verdict:
        return Verdict(self._inner.classify(text, speech_ms, language))  # type: ignore[attr-defined]
