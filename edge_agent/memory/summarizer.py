"""Running summaries: a block of old turns folded into a bounded text, in the background.

A summarizer is blocking and runs on the LLM owner thread, so a reply waits for it: it must
raise SummaryPreempted within 100 ms of its stop event being set (the user started to speak).
It only ever sees what the listener heard.

`LlamaSummarizer` asks a llama.cpp model (`engines.llm.summary_model`), by default the reply
model itself, whose cached conversation is set aside while a summary runs and put back after,
so the model is in memory once and the next reply finds its prefix cached as before; with a
`summarizer_model` it runs that model in a context of its own. `ExtractiveSummarizer` needs no
model.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, cast

from edge_agent.engines.llm.prompt_budget import head, longest, tail
from edge_agent.engines.llm.summary_model import SummaryModel
from edge_agent.errors import ConfigError, EngineError
from edge_agent.plugins import load_plugin


class SummaryPreempted(Exception):
    """The stop event was set; nothing was produced."""


@dataclass(frozen=True)
class Summary:
    """A new running summary."""

    text: str
    """The running summary, at most the summarizer's `max_chars` characters."""
    facts: tuple[tuple[str, str], ...]
    """(key, value) facts the model proposed (keys lower_snake_case); may be empty."""


class Summarizer(Protocol):
    def summarize(self, previous: str, lines: Sequence[tuple[str, str]],
                  stop: threading.Event) -> Summary:
        """Fold `lines` into `previous` (the running summary so far, "" at first). `lines` are
        (role, text) of the turns being folded, role "user", "assistant" or "tool", text what
        the listener heard. Blocking; raises SummaryPreempted within 100 ms of `stop` being
        set."""
        ...


LABELS = {"user": "Customer", "assistant": "Agent", "tool": "Tool result"}
"""How each role is named in summaries and prompts."""


class ExtractiveSummarizer:
    """No model, deterministic, instant: the previous summary's lines, then one short line per
    folded turn (a user turn's first sentence, the agent's heard reply shortened, a tool result
    shortened, since a booking made is a fact whether or not it was heard), oldest lines
    dropped first to fit `max_chars`."""

    def __init__(self, max_chars: int = 600) -> None:
        self._max_chars = max_chars

    def summarize(self, previous: str, lines: Sequence[tuple[str, str]],
                  stop: threading.Event) -> Summary:
        if stop.is_set():
            raise SummaryPreempted
        pieces = [p.strip() for p in previous.splitlines() if p.strip()]
        pieces += [line for role, text in lines if (line := _extract(role, text))]
        return Summary(_bounded(pieces, self._max_chars, "\n"), ())


INSTRUCTION = ("Update the summary of a conversation at a kiosk; keep names, numbers, times, "
               "dates, booking ids and decisions; at most {words} words.")
LEAD = "The customer"
"""The summary's first words, written into the prompt: without them SmolLM2-135M mostly copied
the conversation out instead of summarizing it."""
LINE_FLOOR = 200
"""Characters of the newest line kept before the previous summary is cut to make room."""
_HEADINGS = {"summary", "updated summary", "new summary", "summary so far", "update"}
_NOT_KEYS = {"the", "a", "an", "he", "she", "they", "we", "i", "it", "you"}
_ECHOES = {label.lower() for label in LABELS.values()} | {
    "user", "assistant", "tool", "system", "new conversation", "conversation"}


class LlamaSummarizer:
    """Summaries by a llama.cpp model: its own context (`context_tokens`, default 1024) on
    `model_path`, or, with `shared`, the reply model's loaded `Llama`, whose conversation is
    set aside while a summary runs (`engines.llm.summary_model`: the model is in memory once,
    and `stop` is heeded within a chunk of the prompt or a token). Input lines that do not fit
    are dropped, oldest first (the caller should fold blocks that fit). When the model writes
    nothing usable, the summary is the extractive one.
    """

    def __init__(self, model_path: Path | None = None, *, shared: Any = None,
                 context_tokens: int = 1024, threads: int = 2, max_chars: int = 600,
                 max_tokens: int = 120) -> None:
        if shared is not None:
            self.model = SummaryModel(shared, shared=True, threads=threads)
            context_tokens = min(context_tokens, self.model.context_tokens)
        elif model_path is not None:
            self.model = SummaryModel.open(model_path, context_tokens, threads)
        else:
            raise ValueError("LlamaSummarizer needs a model_path or a shared model")
        self._max_chars = max_chars
        self._max_tokens = max_tokens
        self._context = context_tokens
        self._instruction = INSTRUCTION.format(words=max(10, max_chars // 7))
        # The prompt must leave the summary its max_tokens, and 8 to spare.
        self._budget = context_tokens - max_tokens - 8
        # Checked once here, so that fitting a prompt can always succeed (see _prompt_tokens).
        least = max(len(self._render("", [(role, "")])) for role in LABELS)
        if least > self._budget:
            raise EngineError(f"the summarizer's context ({context_tokens} tokens) cannot hold "
                              f"its {least}-token prompt and a {max_tokens}-token summary: "
                              "give it a larger context_tokens or a smaller max_tokens")

    def summarize(self, previous: str, lines: Sequence[tuple[str, str]],
                  stop: threading.Event) -> Summary:
        if stop.is_set():
            raise SummaryPreempted
        heard = [(role, " ".join(text.split())) for role, text in lines if text.strip()]
        if not heard:
            return Summary(_bounded(_sentences(previous), self._max_chars, " "), ())
        tokens = self._prompt_tokens(previous, heard)
        text = self._generate(tokens, stop)
        summary, facts = _read_output(LEAD + text)
        if not summary:
            fallback = ExtractiveSummarizer(self._max_chars).summarize(previous, heard, stop)
            return Summary(fallback.text, facts)
        return Summary(_bounded(_sentences(summary), self._max_chars, " "), facts)

    def _generate(self, tokens: list[int], stop: threading.Event) -> str:
        text = self.model.generate(tokens, stop, self._max_tokens)
        if text is None:
            raise SummaryPreempted
        return text

    def _prompt_tokens(self, previous: str, lines: list[tuple[str, str]]) -> list[int]:
        """The prompt, fitted to leave room for the summary (the policy of
        `engines.llm.prompt_budget`, on this prompt's parts): the oldest lines dropped, whole,
        keeping the newest; then the one left cut to its first `LINE_FLOOR` characters; then
        the previous summary cut keeping its end (its newest sentences); then that line cut
        further. Each cut is the longest that fits, and only measured lengths are kept, so the
        result fits whenever the prompt with no summary and an empty line does, which the
        constructor checked."""
        budget = self._budget
        previous = _bounded(_sentences(previous), self._max_chars, " ")
        tokens = self._render(previous, lines)
        if len(tokens) <= budget:
            return tokens
        found: dict[tuple[str, int], list[int]] = {}

        def fits(key: str, n: int, prev: str, kept: list[tuple[str, str]]) -> bool:
            candidate = self._render(prev, kept)
            found[key, n] = candidate
            return len(candidate) <= budget

        if len(lines) > 1 and fits("lines", 1, previous, lines[-1:]):
            keep = longest(lambda n: fits("lines", n, previous, lines[-n:]), 1, len(lines))
            return found["lines", keep]
        role, line = lines[-1] if lines else ("user", "")
        floor = min(LINE_FLOOR, len(line))
        if fits("line", floor, previous, [(role, head(line, floor))]):
            keep = longest(lambda n: fits("line", n, previous, [(role, head(line, n))]),
                           floor, len(line))
            return found["line", keep]
        short = head(line, floor)
        if fits("previous", 0, "", [(role, short)]):
            keep = longest(lambda n: fits("previous", n, tail(previous, n), [(role, short)]),
                           0, len(previous))
            return found["previous", keep]
        if not fits("short", 0, "", [(role, "")]):
            raise EngineError(f"the summary prompt does not fit the summarizer's context of "
                              f"{self._context} tokens less {self._max_tokens} for the summary")
        keep = longest(lambda n: fits("short", n, "", [(role, head(line, n))]), 0, floor)
        return found["short", keep]

    def _render(self, previous: str, lines: list[tuple[str, str]]) -> list[int]:
        conversation = "\n".join(f"{LABELS.get(role, role.capitalize())}: {_plain(text)}"
                                 for role, text in lines)
        request = (f"Summary so far:\n{_plain(previous) or '(none)'}\n\nNew conversation:\n"
                   f"{conversation}\n\nWrite the updated summary.")
        return self.model.chat_tokens(self._instruction, request, LEAD)


def load_summarizer(name: str, *, model_path: Path | None, source: str, key: str, threads: int,
                    max_chars: int, shared: Any = None) -> Summarizer:
    """The summarizer `name` names: "llm" (LlamaSummarizer on the `shared` reply model, else on
    `model_path`), "extractive", or "package.module:factory", a callable taking no arguments
    that returns an object with a `summarize` method. Errors name `source` and `key`."""
    if name == "llm":
        if shared is not None:
            return LlamaSummarizer(shared=shared, threads=threads, max_chars=max_chars)
        if model_path is None:
            raise ConfigError(source, key, '"llm" needs a GGUF model to run; name one, or use '
                              '"extractive" (no model)')
        return LlamaSummarizer(model_path, threads=threads, max_chars=max_chars)
    if name == "extractive":
        return ExtractiveSummarizer(max_chars=max_chars)
    if ":" not in name and "." not in name:
        raise ConfigError(source, key, f'unknown summarizer {name!r}: use "llm", "extractive" '
                          'or a factory as "package.module:factory"')
    factory = load_plugin(name, source, key, "a summarizer factory", call_with=())
    assert callable(factory)
    try:
        made = factory()
    except Exception as exc:  # the user's factory: reported as a config problem with its cause
        raise ConfigError(source, key, f"calling {name!r} failed: {type(exc).__name__}: {exc}"
                          ) from None
    if not callable(getattr(made, "summarize", None)):
        raise ConfigError(source, key, f"{name!r} returned a {type(made).__name__}, which has no "
                          "summarize(previous, lines, stop) method")
    return cast(Summarizer, made)


def _extract(role: str, text: str) -> str:
    text = " ".join(text.split())
    if not text:
        return ""
    label = LABELS.get(role, role.capitalize())
    if role == "user":
        return f"{label}: {_shorten(_first_sentence(text), 100)}"
    return f"{label}: {_shorten(text, 120 if role == 'assistant' else 80)}"


def _first_sentence(text: str) -> str:
    """The first sentence; a greeting-only one ("Hi.") takes the next with it."""
    taken: list[str] = []
    for sentence in _sentences(text):
        taken.append(sentence)
        if len(" ".join(taken).split()) >= 4:
            break
    return " ".join(taken)


def _sentences(text: str) -> list[str]:
    return [s for s in re.split(r"(?<=[.!?])\s+", " ".join(text.split())) if s]


def _shorten(text: str, limit: int) -> str:
    """`text` cut to at most `limit` characters at a word boundary, with an ellipsis."""
    if len(text) <= limit:
        return text
    cut = text[: max(1, limit - 1)]
    space = cut.rfind(" ")
    if space > limit // 2:
        cut = cut[:space]
    return cut.rstrip(" ,;:") + "…"


def _bounded(pieces: Sequence[str], max_chars: int, separator: str) -> str:
    """`pieces` joined, the oldest (first) dropped until they fit `max_chars`; a single piece
    still too long is shortened."""
    pieces = list(pieces)
    while len(pieces) > 1 and len(separator.join(pieces)) > max_chars:
        pieces.pop(0)
    return _shorten(separator.join(pieces), max_chars)


def _plain(text: str) -> str:
    """Heard text as prompt content: no chat-template control tokens."""
    return text.replace("<|", "<").replace("|>", ">")


_KEY_VALUE = re.compile(r"^([A-Za-z][A-Za-z ]{0,30}?)\s*:\s*(\S.*)$")


def _read_output(text: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    """The summary prose and the "Key: value" facts in what the model wrote. Lines that copy
    the transcript ("Customer: ...") are dropped, and repeated sentences (a small model loops)
    kept once."""
    prose: list[str] = []
    facts: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip().lstrip("-*• ").strip()
        match = None if line.startswith(LEAD) else _KEY_VALUE.match(line)
        if match:
            key = match.group(1).strip().lower()
            if key in _ECHOES:
                continue
            if key in _HEADINGS:
                line = match.group(2)
            elif len(key.split()) <= 3 and key.split()[0] not in _NOT_KEYS:
                facts.setdefault(key.replace(" ", "_"), _shorten(match.group(2).strip(), 80))
                continue
        prose.extend(_sentences(line))
    seen: set[str] = set()
    unique = []
    for sentence in prose:
        if sentence.lower() not in seen:
            seen.add(sentence.lower())
            unique.append(sentence)
    text = " ".join(unique).strip()
    return ("" if text == LEAD else text), tuple(facts.items())
