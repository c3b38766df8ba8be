"""`edge-agent bench knowledge`: the venue's knowledge, asked as callers ask.

A question set (default: the Harbour Museum's, `bench/venue/questions.toml`, with its venue
files) is asked three ways: as written, and spoken by callers' voices (the agent's Piper voice,
an espeak-ng voice) through the configured recognizer, so that every question reaches the
knowledge as the recognizer wrote it. Each is answered as the agent would: the knowledge's own
answer (an entry, the opening hours on the question's clock, the fallback line), or the
configured LLM (the LAN server first when `[llm] server` is set) with the matching entries in
its prompt.

Figures, per way of asking: in-scope questions answered with the venue's own value (every
`expect` value in the answer), out-of-scope questions given the fallback line (anything else
counts as invented), direct answers right and wrong (precision); the curve of direct answers
right and wrong against `direct_above` (what the threshold is chosen on); and the lookup's
time with 10 000 passages indexed (synthetic sections beside the venue's), with the time to
index them.
"""

from __future__ import annotations

import random
import re
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any, TypedDict
from zoneinfo import ZoneInfo

from edge_agent.app import conversation_settings, grounding_settings
from edge_agent.bench.stats import summarize
from edge_agent.bench.stt import transcribe
from edge_agent.bench.wer import word_error_rate
from edge_agent.config import Config
from edge_agent.config.tomlfile import parse_toml, read_text
from edge_agent.demo.voices import VOICES, speak
from edge_agent.engines.base import LanguageModel, SpeechRecognizer, ToolCall
from edge_agent.engines.tts import PiperSpeech
from edge_agent.errors import ConfigError
from edge_agent.knowledge.ground import SAID, Grounding, GroundingSettings
from edge_agent.knowledge.index import KnowledgeIndex
from edge_agent.knowledge.live import VenueKnowledge
from edge_agent.memory.context import MemoryContext
from edge_agent.memory.store import MemoryStore

QUESTIONS = Path(__file__).with_name("venue") / "questions.toml"
"""The built-in question set (its `files` are the venue's)."""
KINDS = ("paraphrase", "misheard", "time", "out_of_scope", "chat")
IN_SCOPE = ("paraphrase", "misheard", "time")
CURVE = tuple(round(0.30 + 0.05 * i, 2) for i in range(14))
"""The `direct_above` values the curve is drawn at (0.30 .. 0.95)."""
RETRIEVAL_PASSAGES = 10_000
UNHEARD = "unheard"


@dataclass(frozen=True)
class Question:
    say: str
    kind: str
    """One of `KINDS`."""
    expect: tuple[str, ...]
    """For an in-scope question: the venue's values its answer must hold."""
    at: datetime
    """When it is asked, on the venue's clock."""


@dataclass(frozen=True)
class QuestionSet:
    files: tuple[Path, ...]
    timezone: str
    questions: tuple[Question, ...]


def load_questions(path: Path) -> QuestionSet:
    """A question file: `files` (the venue's, relative to it), `timezone`, `now`, and
    `[[question]]` tables (say, kind, expect, at)."""
    source = str(path)
    data = parse_toml(read_text(path, "question file"), source)
    try:
        zone = ZoneInfo(str(data.get("timezone", "UTC")))
        now = datetime.fromisoformat(str(data["now"]))
        files = tuple(path.parent / str(f) for f in data["files"])
        questions = []
        for index, item in enumerate(data["question"]):
            kind = str(item.get("kind", "paraphrase"))
            if kind not in KINDS:
                raise ConfigError(source, f"question[{index}].kind", f"one of {', '.join(KINDS)}")
            expect = tuple(str(e) for e in item.get("expect", ()))
            if kind in IN_SCOPE and not expect:
                raise ConfigError(source, f"question[{index}].expect", "an in-scope question "
                                  "names the values its answer must hold")
            at = datetime.fromisoformat(str(item["at"])) if "at" in item else now
            questions.append(Question(str(item["say"]), kind, expect, at.replace(tzinfo=zone)))
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(source, "", f"not a question file ({type(exc).__name__}: {exc}): it "
                          "needs files, now and [[question]] tables with say") from None
    return QuestionSet(files, str(zone), tuple(questions))


class Asked(TypedDict):
    """One question asked one way."""

    say: str
    kind: str
    heard: str
    """The words as the knowledge got them (the recognizer's, or as written)."""
    how: str
    """What the knowledge decided (`knowledge.ground.HOW`), or "unheard" (the recognizer
    heard no words: the agent says nothing)."""
    answer: str
    right: bool
    lookup_ms: float


class WayFigures(TypedDict):
    """The figures of one way of asking."""

    in_scope: int
    correct: int
    """In-scope questions answered with every expected value."""
    correct_pct: float
    out_of_scope: int
    fallback: int
    """Out-of-scope questions given the fallback line."""
    invented: int
    """Out-of-scope questions answered with anything else."""
    chat: int
    chat_to_model: int
    """Small talk that went to the model (as it should)."""
    direct: int
    """Answers the knowledge said itself (entries and opening hours; not the fallback)."""
    direct_right: int
    direct_precision_pct: float
    wer_pct: float
    """The recognizer's word error rate on the questions (0 as written)."""
    asked: list[Asked]


class CurvePoint(TypedDict):
    direct_above: float
    direct_right: int
    direct_wrong: int
    in_scope_correct: int
    invented: int


class KnowledgeResult(TypedDict):
    benchmark: str
    questions: str
    """The question file."""
    files: list[str]
    """The venue's files."""
    llm: str
    """What answered when the knowledge did not: the configured model."""
    direct_above: float
    margin: float
    ways: dict[str, WayFigures]
    """"written", and each voice through the recognizer."""
    curve: list[CurvePoint]
    """Direct answers against `direct_above`, every way of asking together."""
    retrieval_passages: int
    index_s: float
    """Seconds to index them into a memory database on disk."""
    lookup_ms: dict[str, Any]
    """Each question's lookup with them indexed (stats)."""


def run_knowledge(config: Config, questions_path: Path, voices: Sequence[str],
                  piper: PiperSpeech, stt: SpeechRecognizer, llm: LanguageModel | None,
                  llm_name: str, say: Callable[[str], None]) -> KnowledgeResult:
    """The whole part (see the module)."""
    asked = load_questions(questions_path)
    settings = _settings(config, asked.timezone)
    moment = [asked.questions[0].at]
    knowledge = VenueKnowledge(asked.files, KnowledgeIndex.in_memory(), settings,
                               lambda: moment[0])
    knowledge.load()
    texts: dict[str, list[str]] = {"written": [q.say for q in asked.questions]}
    for name in voices:
        voice = next((v for v in VOICES if v.name == name), None)
        if voice is None:
            raise ConfigError("bench knowledge", "--voices", f"unknown voice {name!r} (known: "
                              f"{', '.join(v.name for v in VOICES)})")
        say(f"{len(asked.questions)} questions spoken by {name}, through the recognizer")
        texts[name] = [transcribe(stt, speak(piper, voice, q.say))[0] for q in asked.questions]
    ways: dict[str, WayFigures] = {}
    for way, heard in texts.items():
        say(f"answering the questions {'as written' if way == 'written' else 'heard from ' + way}")
        rows = []
        for question, words in zip(asked.questions, heard, strict=True):
            moment[0] = question.at
            if not words.strip():  # the agent drops a turn with no words: nothing is said
                rows.append(Asked(say=question.say, kind=question.kind, heard=words,
                                  how=UNHEARD, answer="", right=False, lookup_ms=0.0))
                continue
            grounding = knowledge.ground(words)
            answer = grounding.say if grounding.how in SAID else _model_answer(
                config, llm, words, grounding)
            rows.append(Asked(say=question.say, kind=question.kind, heard=words,
                              how=grounding.how, answer=answer,
                              right=_right(question, grounding.how, answer),
                              lookup_ms=grounding.ms))
        pairs = [(q.say, words) for q, words in zip(asked.questions, heard, strict=True)]
        ways[way] = _figures(rows, round(100 * word_error_rate(pairs), 1))
    curve = [_curve_point(knowledge, asked, texts, threshold, moment) for threshold in CURVE]
    knowledge.close()
    say(f"the lookup with {RETRIEVAL_PASSAGES} passages indexed")
    index_s, lookups = _retrieval(asked, settings)
    return KnowledgeResult(
        benchmark="knowledge", questions=str(questions_path),
        files=[str(f) for f in asked.files], llm=llm_name,
        direct_above=settings.direct_above, margin=settings.margin, ways=ways, curve=curve,
        retrieval_passages=RETRIEVAL_PASSAGES, index_s=round(index_s, 2),
        lookup_ms=summarize(lookups, 3))


def _settings(config: Config, timezone: str) -> GroundingSettings:
    return replace(grounding_settings(config), timezone=timezone)


def _model_answer(config: Config, llm: LanguageModel | None, words: str,
                  grounding: Grounding) -> str:
    """What the model says to `words`, with the venue's information when there is some."""
    if llm is None:
        return ""
    memory = conversation_settings(config).memory  # the prompt as the agent assembles it
    context = MemoryContext(memory.system_prompt, memory.marker, memory.window)
    pieces = [p for p in llm.stream(context.messages(words, grounding.note))
              if not isinstance(p, ToolCall)]
    return "".join(pieces).strip()


def _normal(text: str) -> str:
    return re.sub(r"\s+", " ", text.lower()).strip()


def _right(question: Question, how: str, answer: str) -> bool:
    if question.kind == "out_of_scope":
        return how == "fallback"
    if question.kind == "chat":
        return how == "chat"
    return all(_normal(e) in _normal(answer) for e in question.expect)


def _figures(rows: list[Asked], wer_pct: float) -> WayFigures:
    in_scope = [r for r in rows if r["kind"] in IN_SCOPE]
    outside = [r for r in rows if r["kind"] == "out_of_scope"]
    chat = [r for r in rows if r["kind"] == "chat"]
    direct = [r for r in rows if r["how"] in ("direct", "hours")]
    right_direct = [r for r in direct if r["right"] and r["kind"] in IN_SCOPE]
    correct = sum(r["right"] for r in in_scope)
    return WayFigures(
        in_scope=len(in_scope), correct=correct,
        correct_pct=round(100 * correct / max(1, len(in_scope)), 1),
        out_of_scope=len(outside), fallback=sum(r["how"] == "fallback" for r in outside),
        invented=sum(r["how"] not in ("fallback", UNHEARD) for r in outside), chat=len(chat),
        chat_to_model=sum(r["how"] == "chat" for r in chat), direct=len(direct),
        direct_right=len(right_direct),
        direct_precision_pct=round(100 * len(right_direct) / max(1, len(direct)), 1),
        wer_pct=wer_pct, asked=rows)


def _curve_point(knowledge: VenueKnowledge, asked: QuestionSet, texts: dict[str, list[str]],
                 threshold: float, moment: list[datetime]) -> CurvePoint:
    """Direct answers right and wrong at `direct_above` = `threshold`, every way of asking
    together (what the model would say is left out: only what is said without it counts)."""
    saved = knowledge.settings
    knowledge.settings = replace(saved, direct_above=threshold)
    right = wrong = correct = invented = 0
    asks = [(q, words) for heard in texts.values()
            for q, words in zip(asked.questions, heard, strict=True) if words.strip()]
    try:
        for question, words in asks:
            moment[0] = question.at
            grounding = knowledge.ground(words)
            ok = _right(question, grounding.how, grounding.say)
            if grounding.how in ("direct", "hours"):
                right += ok and question.kind in IN_SCOPE
                wrong += not (ok and question.kind in IN_SCOPE)
            correct += ok and question.kind in IN_SCOPE and grounding.how in SAID
            invented += question.kind == "out_of_scope" and grounding.how != "fallback"
    finally:
        knowledge.settings = saved
    return CurvePoint(direct_above=threshold, direct_right=right, direct_wrong=wrong,
                      in_scope_correct=correct, invented=invented)


def _retrieval(asked: QuestionSet, settings: GroundingSettings) -> tuple[float, list[float]]:
    """Seconds to index the venue with synthetic sections up to `RETRIEVAL_PASSAGES` in a
    memory database on disk, and each question's lookup time (ms) against it."""
    with tempfile.TemporaryDirectory(prefix="edge-agent-bench-knowledge-") as scratch:
        extra = Path(scratch) / "more.md"
        extra.write_text(_synthetic_sections(RETRIEVAL_PASSAGES), encoding="utf-8")
        database = Path(scratch) / "edge-agent.db"
        MemoryStore.open(database).close()
        moment = asked.questions[0].at
        knowledge = VenueKnowledge([*asked.files, extra], KnowledgeIndex.open(database),
                                   settings, lambda: moment)
        started = time.perf_counter()
        knowledge.load()
        index_s = time.perf_counter() - started
        lookups = []
        for _ in range(3):
            for question in asked.questions:
                lookups.append(knowledge.ground(question.say).ms)
        knowledge.close()
    return index_s, lookups


_SYLLABLES = ("ka", "lo", "mi", "ren", "to", "sa", "vel", "dor", "pi", "nu", "tor", "bel")


def _synthetic_sections(count: int) -> str:
    """`count` Markdown sections of made-up words (a big venue's catalogue: exhibits, rooms,
    events), deterministic."""
    rng = random.Random(7)
    words = sorted({"".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(2, 4)))
                    for _ in range(6000)})
    common = ["room", "floor", "exhibit", "ticket", "tour", "open", "children", "gallery",
              "wing", "display", "history", "guide", "ship", "map", "harbour"]
    parts = []
    for index in range(count):
        title = " ".join(rng.choice(words) for _ in range(2)).capitalize()
        body = " ".join(rng.choice(words if rng.random() < 0.8 else common)
                        for _ in range(rng.randint(25, 60)))
        parts.append(f"## {title} {index}\n{body.capitalize()}.\n")
    return "\n".join(parts)


def table(result: KnowledgeResult) -> str:
    lines = [f"venue knowledge: {len(result['files'])} file(s), answered otherwise by "
             f"{result['llm']}; direct from {result['direct_above']} (margin {result['margin']})",
             f"{'asked':<14}{'WER':>7}{'correct':>16}{'invented':>12}{'direct right':>16}"
             f"{'precision':>11}{'small talk':>12}"]
    for way, f in result["ways"].items():
        lines.append(f"{way:<14}{f['wer_pct']:>5.1f} %{f['correct']:>5}/{f['in_scope']:<3}"
                     f"{f['correct_pct']:>6.1f} %"
                     f"{f['invented']:>6}/{f['out_of_scope']:<5}{f['direct_right']:>9}/"
                     f"{f['direct']:<6}{f['direct_precision_pct']:>8.1f} %"
                     f"{f['chat_to_model']:>7}/{f['chat']}")
    lines.append("direct answers against direct_above (every way together): "
                 + "  ".join(f"{p['direct_above']:.2f}: {p['direct_right']}/{p['direct_wrong']}"
                             for p in result["curve"]) + "  (right/wrong)")
    lookup = result["lookup_ms"]
    lines.append(f"lookup with {result['retrieval_passages']} passages: p50 "
                 f"{lookup.get('p50', 0):.2f} ms, p95 {lookup.get('p95', 0):.2f} ms, max "
                 f"{lookup.get('max', 0):.2f} ms; indexed in {result['index_s']:.1f} s")
    wrong = [(way, a) for way, f in result["ways"].items() for a in f["asked"] if not a["right"]]
    for way, a in wrong[:40]:
        lines.append(f"  wrong ({way}, {a['kind']}): {a['say']!r} heard {a['heard']!r} -> "
                     f"{a['how']}: {a['answer'][:90]!r}")
    return "\n".join(lines)

