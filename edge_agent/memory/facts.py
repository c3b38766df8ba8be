"""Deterministic extraction of long-term facts from one utterance (regular expressions, no model).

Facts never fade from the prompt, so the rules favour precision over recall:

* Text is cleaned first (:func:`clean_transcript`): fillers and immediate restarts go, digits stay.
* Keys: ``name``, ``phone``, ``email``, ``booking_id``, ``account_id``, ``order_id``, ``time``,
  ``date``, ``party_size`` and ``<noun>_number`` ("room_number", "ticket_number", ...).
* Numbers may be digits or spoken words: "four four seven one", "double five", "oh" as zero,
  "seventy seven eighty one".
* Rules run in a fixed priority order (identifiers, e-mail, phone, time, date, party size, name)
  and text claimed by one rule is not read again, so "account number 12345678" is not also a
  phone number and "table for 7 PM" is not a party of seven.
* Times need a time context (am/pm, o'clock, "half past", hh:mm, "at eight"); a bare "eight"
  is no time. Names need an explicit phrase ("my name is", "call me", "under the name", "the
  name is"), or a capitalized word outside a stop list ("I'm John", "this is Ana", "table for
  Garcia").
* A fact in a negated clause ("not at 7", "my name is not Bob", "Friday doesn't work") or
  offered as one of alternatives ("7 or 8 PM") is dropped.
* A user's question states no name, and a checking question ("is it 7 PM?", "is my booking on
  Friday?") states nothing; requests ("can I book for 7 PM?") keep times, dates, sizes and ids.
  The agent's proposals, read by :func:`confirmed_facts`, are not subject to these two rules,
  and there "your name is Bob" names the listener.
* The last value stated for a key wins; facts come back in order of appearance.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from edge_agent.memory import fact_words as w


@dataclass(frozen=True)
class FactCandidate:
    """One fact stated in an utterance."""

    key: str
    """snake_case key: "name", "phone", "time", "room_number", ..."""
    value: str
    """Normalized value, as it should be shown to the language model."""
    text: str
    """The span of the source text the fact came from, verbatim."""


_CODE = (
    rf"(?<![\w-])(?:(?-i:[A-Z]{{1,3}})\s+(?=\d|{w.SPOKEN_START})|[A-Za-z]{{1,4}}-?(?=\d))?"
    rf"(?:\d[A-Za-z0-9-]*(?:\s+\d{{2,}})*|{w.SPOKEN_DIGITS})(?![\w-])"
)
_CONN = r"(?:'s|\s+(?:is|was|will\s+be))?\s*\"?\s*[:#,=]?\s*\"?\s*"  # tool results may be JSON
_DIGITS = r"(?:\+\s?)?\(?\d+\)?(?:(?:\s*-\s*|\.|\s+)\(?\d+\)?)*"
_PHONE = rf"(?:(?<![\w$€£.:/+-]){_DIGITS}(?![\d:/]|\.\d)|(?:plus\s+)?{w.SPOKEN_DIGITS})"
_AP = r"\s*(?P<ap>[ap])\.?\s?m\b\.?"
_DP = r"(?:\s+(?:in\s+the\s+(?P<dp>morning|afternoon|evening)|at\s+(?P<night>night)))?"
# "at 8" is a time only where the words after it allow it: not in "at 8 euros" or "look at 10 options".
_AT_OK = (
    r"(?=\s*(?:$|[!?;]|,(?!\d)|\.(?!\d)|(?:please|thanks|thank|then|tonight|tomorrow|today|this|on|for|and"
    rf"|or|if|under|sharp|instead|is|works|would|will|should|that|{w.WEEKDAY})\b))"
)
_LETTERS = r"[^\W\d_](?:[^\W\d_]|-(?=[^\W\d_])|'(?!s\b)(?=[^\W\d_]))*"
_NW = rf"(?!(?:{w.alt([*w.NOT_NAMES, *w.NUMBER_WORDS])})\b){_LETTERS}"
_STOP_CAPS = w.alt([*w.NOT_NAMES, *w.NUMBER_WORDS, *w.WEEKDAYS, *w.MONTHS, *w.TIME_WORDS])
_CNW = rf"(?=(?-i:[A-ZÀ-ÖØ-Þ]))(?!(?:{_STOP_CAPS})\b){_LETTERS}"
_TITLE = r"(?:(?:mr|mrs|ms|miss|dr|doctor)\.?\s+)?"


def _code(m: re.Match[str]) -> str | None:
    raw = m["v"].strip()
    if re.search(r"\d", raw):
        return re.sub(r"(?<=\d)\s+(?=\d)", "", re.sub(r"\s+", " ", raw)).upper()
    head, _, rest = raw.partition(" ")
    if head.isalpha() and head.isupper() and head.lower() not in w.NUMBERS and rest:
        return f"{head} {w.spoken_digits(rest)}"
    return w.spoken_digits(raw) or None


_OWN_KEYS = {"booking", "reservation", "confirmation", "reference", "account", "customer", "member", "order"}
_OWN_KEYS |= {"membership", "client", "loyalty", "phone", "telephone", "mobile", "cell", "contact"}
_GENERIC_SKIP = (w.NOT_NAMES - {"table", "party", "group", "guest"}) | _OWN_KEYS


def _generic(m: re.Match[str]) -> str | None:
    return None if m["noun"].lower() in _GENERIC_SKIP else _code(m)


def _email(m: re.Match[str]) -> str | None:
    v = m["v"].lower()
    for spoken, char in ((r"dot", "."), (r"underscore", "_"), (r"dash|hyphen", "-"), (r"at", "@")):
        v = re.sub(rf"\s+(?:{spoken})\s+", char, v)
    return v if re.fullmatch(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)*\.[a-z]{2,24}", v) else None


# A bare run of digits after these words is a code, not a phone number.
_SECRET_BEFORE = re.compile(r"\b(?:password|passcode|pin|code|serial|card|iban|id)\W+(?:is\W+)?$", re.I)


def _phone(least: int) -> Callable[[re.Match[str]], str | None]:
    def value(m: re.Match[str]) -> str | None:
        raw = m["v"].strip()
        if least >= 7 and _SECRET_BEFORE.search(m.string, 0, m.start()):
            return None
        if raw[0].isdigit() or raw[0] in "+(":
            digits = ("+" if raw.startswith("+") else "") + re.sub(r"\D", "", raw)
        else:
            digits = w.spoken_digits(raw)
        return digits if least <= len(digits.lstrip("+")) <= 15 else None

    return value


def _time(m: re.Match[str]) -> str | None:
    g = m.groupdict()
    hour = w.number(g["h"])
    mins = int(g["mm"]) if g.get("mm") else None
    if g.get("mw"):
        mins = {"half": 30, "quarter": 15}.get(g["mw"].lower()) or w.number(g["mw"])
    if hour is None or (g.get("mw") and mins is None):
        return None
    if (g.get("rel") or "").lower() == "to":
        if mins not in (5, 10, 15, 20, 25):
            return None
        hour, mins = (hour - 2) % 12 + 1, 60 - mins
    daypart = "P" if g.get("night") else {"morning": "A", None: ""}.get(g.get("dp"), "P")
    ap = (g.get("ap") or "").upper() or daypart
    if not 1 <= hour <= (12 if ap or g.get("rel") or "clock" in m[0].lower() else 23) or (mins or 0) > 59:
        return None
    minutes = "" if mins is None else f":{mins:02d}"
    if ap:
        return f"{hour}{minutes} {ap}M"
    return f"{hour}{minutes}" if minutes else f"{hour}:00" if hour > 12 else f"{hour} o'clock"


def _date(m: re.Match[str]) -> str | None:
    g = m.groupdict()
    if g.get("rel"):
        return " ".join(g["rel"].lower().split())
    if g.get("wd"):
        mod = " ".join((g.get("mod") or "").lower().split())
        weekday = " ".join(x for x in (g["wd"].capitalize(), (g.get("part") or "").lower()) if x)
        return weekday if mod in ("", "on") else f"{mod} {weekday}"
    if g["mon"] == "may":
        return None  # lowercase "may" is the verb far more often than the month
    raw = g["d"].lower()
    spelled = " ".join(re.split(r"[\s-]+", raw))
    day = int(raw.rstrip("stndrh")) if raw[0].isdigit() else w.ORDINALS.get(spelled)
    if day is None or not 1 <= day <= 31:
        return None
    return f"{g['mon'].capitalize()} {day}" + (f", {g['y']}" if g.get("y") else "")


def _slash_date(m: re.Match[str]) -> str | None:
    a, b = int(m["a"]), int(m["b"])
    return m[0] if 1 <= a <= 31 and 1 <= b <= 31 and min(a, b) <= 12 else None


def _party(m: re.Match[str]) -> str | None:
    n = w.number(m["n"])
    if n is None or not 1 <= n <= 99 or (n < 2 and "us" in (m.groupdict().get("u") or "")):
        return None
    return str(n)


def _name(m: re.Match[str]) -> str | None:
    def cased(word: str) -> str:
        # "McDonald" and "O'Brien" are cased on purpose; "garcia", "GARCIA" and "o'brien" are not.
        if word.islower() or word.isupper():
            return re.sub(r"[^\W\d_]+", lambda p: p[0].capitalize(), word)
        return word

    return " ".join(cased(x) for x in m["v"].split())


_Value = Callable[[re.Match[str]], str | None]
_NAME = rf"(?P<v>{_CNW}(?:\s+{_CNW})?)"
# Priority order: text claimed by an earlier rule is not read by a later one. Key "*" is "<noun>_number".
_RULE_TEXT: list[tuple[str, str, _Value]] = [
    ("booking_id", r"\b(?:(?:booking|reservation|confirmation)[\s_]+"
     r"(?:(?:number|reference|ref|code|id)\b|no\.|#)|reference(?:\s+(?:number|code))?\b)"
     rf"{_CONN}(?P<v>{_CODE})", _code),
    ("account_id", r"\b(?:account|customer|member(?:ship)?|client|loyalty)[\s_]+"
     rf"(?:(?:number|id|code)\b|no\.|#){_CONN}(?P<v>{_CODE})", _code),
    ("order_id", rf"\border[\s_]+(?:(?:number|id)\b|no\.|#){_CONN}(?P<v>{_CODE})", _code),
    ("*", rf"\b(?P<noun>[a-z]+)[\s_]+number{_CONN}(?P<v>{_CODE})", _generic),
    ("email", r"(?<![\w.+-])(?P<v>[\w.+-]+@[\w-]+(?:\.[\w-]+)+)", _email),
    ("email", r"\b(?P<v>[\w+-]+(?:\s+(?:dot|underscore|dash|hyphen)\s+[\w+-]+)*\s+at\s+[\w-]+"
     r"(?:(?:\s+dot\s+|\.)[\w-]+)+)\b", _email),
    ("phone", r"\b(?:(?:phone|telephone|mobile|cell|contact)(?:\s+number)?|my\s+number"
     rf"|(?:call|reach|text)\s+me\s+(?:at|on))\b{_CONN}(?P<v>{_PHONE})", _phone(5)),
    ("phone", rf"(?P<v>{_PHONE})", _phone(7)),
    ("time", rf"\b(?P<h>{w.HOUR})(?:[:.](?P<mm>\d{{2}})|\s+(?P<mw>{w.MINUTES}))?{_AP}", _time),
    ("time", rf"\b(?P<mw>half|quarter|{w.MINUTES})(?:\s+minutes)?\s+(?P<rel>past|after|to)\s+"
     rf"(?P<h>{w.HOUR})\b(?!\s*(?:people|persons|guests|minutes|hours))(?:{_AP}|{_DP})", _time),
    ("time", rf"\b(?P<h>{w.HOUR})(?:\s+(?P<mw>{w.MINUTES}))?\s+o'?\s?clock\b(?:{_AP}|{_DP})", _time),
    ("time", r"(?<![\d:.])(?:[01]?\d|2[0-3]):[0-5]\d(?![\d:])", lambda m: m[0]),
    ("time", rf"\b(?:at|until|till|by)(?:\s+(?:about|around))?\s+(?P<h>{w.HOUR})"
     rf"(?:[:.](?P<mm>\d{{2}})|\s+(?P<mw>{w.MINUTES}))?\b{_DP}{_AT_OK}", _time),
    ("time", r"\b(?:noon|midday)\b", lambda m: "12 PM"),
    ("time", r"\bmidnight\b", lambda m: "12 AM"),
    ("date", rf"\b(?P<mon>{w.MONTH})\s+(?:the\s+)?(?P<d>{w.DAY})\b(?:,?\s+(?P<y>\d{{4}})\b)?", _date),
    ("date", rf"\b(?:the\s+)?(?P<d>{w.DAY})\s+(?:of\s+)?(?P<mon>{w.MONTH})\b(?:,?\s+(?P<y>\d{{4}})\b)?",
     _date),
    ("date", r"(?<![\d/.])(?P<a>\d{1,2})/(?P<b>\d{1,2})(?:/(?:\d{4}|\d{2}))?(?![\d/])", _slash_date),
    ("date", r"(?<!last\s)(?<!every\s)\b(?:(?P<mod>this\s+coming|next|this|coming|on)\s+)?"
     rf"(?P<wd>{w.WEEKDAY})\b(?:\s+(?P<part>morning|afternoon|evening|night))?", _date),
    ("date", r"\b(?P<rel>the\s+day\s+after\s+tomorrow|tomorrow(?:\s+(?:morning|afternoon|evening|night))?"
     r"|today|tonight|this\s+(?:morning|afternoon|evening|weekend)|next\s+week(?:end)?)\b", _date),
    ("party_size", rf"\b(?:(?:party|group|family)\s+of|party[\s_]+size{_CONN})\s*(?P<n>{w.COUNT})\b", _party),
    ("party_size", rf"\b(?P<n>{w.COUNT})\s+(?P<u>people|persons|guests|diners|of\s+us)\b", _party),
    ("party_size", r"\b(?:table|booking|reservation|book|reserve|seats?|seating)(?:\s+(?:a|an|the|it|us|me)"
     rf"(?:\s+table)?)?\s+for\s+(?P<n>{w.COUNT})\b(?!\s*(?:[:.]\d|o'?\s?clock|[ap]\.?\s?m\b|(?:{w.MINUTES})\b"
     r"|minutes|hours|nights|days|weeks|months))", _party),
    ("name", r"\b(?:my\s+name(?:'s|\s+is)|the\s+name(?:'s|\s+is)|call\s+me|under\s+the\s+name(?:\s+of)?)\s+"
     rf"{_TITLE}(?P<v>{_NW}(?:\s+{_NW}){{0,2}})", _name),
    ("name", rf"(?<![\w'])(?-i:I'm|I\s+am)\s+{_TITLE}(?![\w'-]*ing\b){_NAME}", _name),
    ("name", rf"(?:^|(?<=[.!?,])\s*|\b(?:hi|hello|hey)\b[,!]?\s+)this\s+is\s+{_NAME}", _name),
    ("name", r"\b(?:table|booking|reservation|booked|reserved|book\s+it|reserve\s+it)(?:\s+(?:is|was))?\s+"
     rf"(?:for|under)\s+{_TITLE}{_NAME}", _name),
]
_RULES = [(key, re.compile(rx, re.I), value) for key, rx, value in _RULE_TEXT]
# The agent names the listener ("your name is Bob, right?"); from the user, "your name" is the agent's.
_AGENT_RULES = [("name", re.compile(rf"\byour\s+name(?:'s|\s+is)\s+{_TITLE}(?P<v>{_NW}(?:\s+{_NW})?)", re.I),
                  _name)]

_CLAUSE = re.compile(r"(?<!\d)[.,]|[.,](?!\d)|[!?;]|\bbut\b", re.I)
_SENTENCE_END = re.compile(r"(?<!\.[mM])[.!?](?=\s|$)")
_NEGATION = re.compile(r"\b(?:not|never|cannot)\b|n't\b", re.I)
_NEGATED_AFTER = re.compile(
    r"\s*(?:\w+n't|(?:is|are|was|does|do|will|would|can)\s+not|cannot|(?:is|are|was|'s)\s+(?:too|no\s+good))\b",
    re.I,
)
_OR_BEFORE = re.compile(r"\bor\s+(?:\w+\s+)?$", re.I)
_OR_AFTER = re.compile(r"\s*,?\s*or\b", re.I)
_CHECKING = re.compile(
    r"\s*(?:(?:so|and|oh|wait),?\s+)?(?:is|was|isn't|wasn't|did|didn't)\s+(?:it|that|this|my|our)\b(?!\s+possible)",
    re.I,
)
# "What time do you close today?" asks; "what about 7 PM?" proposes.
_ASKING = re.compile(r"\s*(?:what|when|where|which|who|why|how)(?:'s)?\b(?!\s+about)", re.I)
_FILLER = re.compile(
    r"(?:,\s*)?(?<![\w'’-])(?:u+m+|u+h+m*|e+r+m*|e+h+m+|h+m+)(?![\w'’-])(?:\.\.\.|…|,)?", re.I
)
_RESTART = re.compile(
    r"(?<![\w'-])((?:[A-Za-z']+\s+){0,2}?[A-Za-z']+)(?:\s*[,-]\s*|\s*(?:\.\.\.|…)\s*|\s+)(\1)(?![\w'-])", re.I
)
_TIDY = [re.compile(p) for p in (r"(?<=\s)\s+", r"^(?:[\s,;]|\.(?!\d))+", r"\s+(?=[,?!;]|\.(?!\d)|$)")]
_TIDY += [re.compile(p) for p in (r"(?<=[,;]),+", r",+(?=[.?!])")]
_AFFIRM = re.compile(
    r"(?:(?:oh|well)\W+)?(?:yes|yeah|yep|yup|yea|correct|exactly|sure|right|perfect|sounds\s+good|ok|okay"
    r"|alright|all\s+right|absolutely|definitely|of\s+course|uh-huh|mm-hmm|great|that\s+works"
    r"|that(?:'s|\s+is)\s+(?:right|correct|it|fine|perfect|great))\b",
    re.I,
)
_DOUBT = re.compile(
    r"\b(?:but|actually|wait|instead|rather|wrong|change)\b|\bno\b(?!\s+(?:problem|worries))|\bnot\b", re.I
)


def _delete(text: str, offsets: list[int], spans: Iterable[tuple[int, int]]) -> tuple[str, list[int]]:
    gone = {i for a, b in spans for i in range(a, b)}
    keep = [i for i in range(len(text)) if i not in gone]
    return "".join(text[i] for i in keep), [offsets[i] for i in keep]


def _restartable(phrase: str) -> bool:
    # Repeated digits ("five five") and spelled letters ("B B 1") are data, not a restart.
    toks = phrase.split()
    return not any(t.lower() in w.NUMBER_WORDS or (len(t) == 1 and t.isupper() and t != "I") for t in toks)


def _clean(text: str) -> tuple[str, list[int]]:
    """Cleaned text, and for each of its characters the index it had in `text`."""
    out, offsets = _delete(text, list(range(len(text))), (m.span() for m in _FILLER.finditer(text)))
    for _ in range(8):
        spans = [(m.start(1), m.start(2)) for m in _RESTART.finditer(out) if _restartable(m[1])]
        if not spans:
            break
        out, offsets = _delete(out, offsets, spans)
    for tidy in _TIDY:
        out, offsets = _delete(out, offsets, (m.span() for m in tidy.finditer(out)))
    return out, offsets


def clean_transcript(text: str) -> str:
    """`text` without fillers (um, uh, er, erm, hmm) and immediate restarts or repetitions ("I I want",
    "the the", "I want, I want"); used before extraction. Never changes digits or repeated number words."""
    return _clean(text)[0]


def _stated(text: str, start: int, end: int, key: str, user: bool) -> bool:
    """Whether the fact at text[start:end] is asserted rather than negated, hedged or asked about."""
    clause = max((m.end() for m in _CLAUSE.finditer(text, 0, start)), default=0)
    if _NEGATION.search(text, clause, end) or _NEGATED_AFTER.match(text, end):
        return False
    if _OR_BEFORE.search(text[clause:start]) or _OR_AFTER.match(text, end):
        return False
    if not user:
        return True
    opening = max((m.end() for m in _SENTENCE_END.finditer(text, 0, start)), default=0)
    closing = _SENTENCE_END.search(text, end)
    if _CHECKING.match(text, opening) or (_ASKING.match(text, opening) and closing and closing[0] == "?"):
        return False
    # The clause, not the sentence: "I'm John, do you have my booking?" still states the name.
    close = _CLAUSE.search(text, end)
    return not (key == "name" and close is not None and close[0] == "?")


def _extract(text: str, user: bool) -> list[FactCandidate]:
    cleaned, offsets = _clean(text)
    cleaned = cleaned.replace("’", "'")
    claimed: list[tuple[int, int]] = []
    found: list[tuple[int, str, str, int, int]] = []
    for key, rule, value_of in _RULES if user else [*_RULES, *_AGENT_RULES]:
        for m in rule.finditer(cleaned):
            start, end = m.span()
            start += len(m[0]) - len(m[0].lstrip())
            if start >= end or any(start < b and a < end for a, b in claimed):
                continue
            value = value_of(m)
            if value is None:
                continue
            claimed.append((start, end))
            name = f"{m['noun'].lower()}_number" if key == "*" else key
            if _stated(cleaned, start, end, name, user):
                found.append((start, name, value, offsets[start], offsets[end - 1] + 1))
    last = {fact[1]: fact for fact in sorted(found)}
    return [FactCandidate(key, value, text[a:b]) for _, key, value, a, b in sorted(last.values())]


def extract_facts(text: str) -> list[FactCandidate]:
    """Facts stated in one utterance (a user's transcript, or a tool result), in order of appearance,
    at most one per key (the last one stated wins within an utterance)."""
    return _extract(text, user=True)


def is_affirmation(text: str) -> bool:
    """Whether a reply confirms what was said: "yes", "yeah", "correct", "that's right", "sure", "ok", ...
    alone or at the start. False for "no", "that's wrong", "not quite", a question, and for an affirmation
    carrying a correction ("yes but ...", "yes, actually ...")."""
    reply = clean_transcript(text).replace("’", "'").strip()
    return bool(_AFFIRM.match(reply)) and not _DOUBT.search(reply) and not reply.endswith("?")


def _agree(key: str, heard: str, replied: str) -> bool:
    if heard == replied:
        return True
    # "yes, at eight" agrees with "8 PM": an o'clock time leaves the half of the day open.
    a, b = re.match(r"\d+", heard), re.match(r"\d+", replied)
    return key == "time" and a is not None and b is not None and a[0] == b[0] and "o'clock" in heard + replied


def confirmed_facts(agent_heard: str, user_reply: str) -> list[FactCandidate]:
    """Facts in what the agent said and the listener HEARD (`agent_heard` is the heard prefix of the agent's
    turn), confirmed by the user's next turn: the agent's facts if `user_reply` is an affirmation and states
    no conflicting value, else []."""
    if not is_affirmation(user_reply):
        return []
    facts = _extract(agent_heard, user=False)
    replied = {f.key: f.value for f in extract_facts(user_reply)}
    if any(not _agree(f.key, f.value, replied[f.key]) for f in facts if f.key in replied):
        return []
    return facts
