"""Fitting a chat prompt into its token budget, by construction.

llama.cpp refuses a prompt longer than its context ("Requested tokens (671) exceed context
window of 256"), and a reply needs room after the prompt: the budget of a prompt is the
context size minus the reply's `max_tokens` (with tools offered, the tool instruction that
`ToolFormat.prompt` adds is part of the counted prompt; the grammar is not prompt text). A
long system prompt, a long memory block, a long history or one very long user turn must
never make a request fail, so `fit_prompt` makes the messages fit, in this order, each step
only when the previous one did not suffice:

0. Messages that already fit are returned unchanged, after one count: the common case costs
   one tokenization and keeps the prompt llama.cpp has cached as a prefix.
1. The oldest conversation messages are dropped, whole, keeping the newest ones in order (a
   suffix of the history). A message and the `tool` results that follow it form one group:
   an assistant's tool call and its results leave together, and a result is never kept
   without its call. The system message (the first one, when its role is "system") and the
   last message (the new user turn or tool result) are never dropped; nor is, when the last
   message is a tool result, the call it answers (with that call's other results): a pair
   stays together.
2. The system message's content is cut from its end (the memory block goes before the
   persona and instructions written first), keeping the longest start that fits, marked
   with "…".
3. The system content is emptied and the last message's content is cut keeping its end (the
   most recent words), marked with "…".

When even the skeleton (the system message with empty content, if there is one, the call a
final tool result answers, and the last message with empty content) does not fit, no prompt
can: `EngineError`, saying what to configure.

The counter is injected (`count_tokens(messages)` is the token count of the rendered prompt:
the model's tokenizer on its chat template in production, a fake in tests). Shortening
searches lengths in characters by bisection and only ever keeps a length whose count it has
measured within the budget, so the guarantee holds even where the count is not monotone in
the text's length (tokenizers are nearly but not exactly so): the result's count is at most
the budget whenever the skeleton's is.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from edge_agent.engines.base import ChatMessage
from edge_agent.errors import EngineError

TokenCounter = Callable[[list[ChatMessage]], int]
"""The token count of the prompt these messages render to."""

ELLIPSIS = "…"
"""Marks where text was cut, so the model does not take a cut sentence as the whole one."""

ADVICE = "raise llm.context_tokens or lower llm.max_tokens"


@dataclass(frozen=True)
class Fit:
    """Messages fitted to a budget, and what it took."""

    messages: list[ChatMessage]
    """The messages to send."""
    tokens: int
    """Their count (at most the budget)."""
    dropped: int
    """Conversation messages dropped, oldest first."""
    system_cut: int
    """Characters cut from the end of the system message's content."""
    last_cut: int
    """Characters cut from the start of the last message's content."""

    @property
    def changed(self) -> bool:
        return bool(self.dropped or self.system_cut or self.last_cut)


def fit_prompt(messages: Sequence[ChatMessage], count_tokens: TokenCounter, budget: int, *,
               advice: str = ADVICE) -> Fit:
    """`messages` fitted to `budget` tokens (see the module's policy; the same messages when
    they fit), with what was dropped and cut. Raises EngineError, ending with `advice`, when
    no prompt can fit."""
    whole = list(messages)
    tokens = count_tokens(whole)
    if tokens <= budget:
        return Fit(whole, tokens, 0, 0, 0)

    system = whole[0] if whole and whole[0].get("role") == "system" else None
    body = whole[1:] if system is not None else whole
    last = body[-1] if body else None
    # A final tool result keeps its group: the call message and the call's other results.
    pinned_from = len(body) - 1
    while pinned_from > 0 and body[pinned_from].get("role") == "tool":
        pinned_from -= 1
    if last is None or last.get("role") != "tool" or not body[pinned_from].get("tool_calls"):
        pinned_from = max(0, len(body) - 1)
    history, pinned = body[:pinned_from], body[pinned_from:-1]
    system_text, last_text = _text(system), _text(last)

    def assemble(first: int, system_keep: int, last_keep: int) -> list[ChatMessage]:
        """The history from `first` on, the system content's first `system_keep` characters
        and the last content's final `last_keep` (a full length keeps the message as is)."""
        out: list[ChatMessage] = []
        if system is not None:
            out.append(_with(system, system_text, system_keep, head))
        out += history[first:]
        out += pinned
        if last is not None:
            out.append(_with(last, last_text, last_keep, tail))
        return out

    def counted(first: int, system_keep: int, last_keep: int) -> tuple[list[ChatMessage], int]:
        candidate = assemble(first, system_keep, last_keep)
        return candidate, count_tokens(candidate)

    # 1. Drop the oldest groups: the fewest that make it fit.
    starts = [i for i, m in enumerate(history) if i == 0 or m.get("role") != "tool"]
    starts.append(len(history))
    full_system, full_last = len(system_text), len(last_text)
    if len(starts) > 1:
        candidate, tokens = counted(len(history), full_system, full_last)
        if tokens <= budget:
            # Bisect on how many groups go: `fit` fits (measured), `over` does not.
            fit, over = len(starts) - 1, 0
            while fit - over > 1:
                mid = (fit + over) // 2
                trial, trial_tokens = counted(starts[mid], full_system, full_last)
                if trial_tokens <= budget:
                    fit, candidate, tokens = mid, trial, trial_tokens
                else:
                    over = mid
            return Fit(candidate, tokens, starts[fit], 0, 0)
    dropped = len(history)

    # 2. Cut the system content from its end.
    if system is not None and full_system:
        candidate, tokens = counted(dropped, 0, full_last)
        if tokens <= budget:
            keep, candidate, tokens = _longest(
                lambda n: counted(dropped, n, full_last), 0, full_system, candidate, tokens, budget)
            return Fit(candidate, tokens, dropped, full_system - keep, 0)

    # 3. No system content; cut the last message's content from its start.
    candidate, tokens = counted(dropped, 0, 0)
    if tokens > budget:
        raise EngineError(
            f"the prompt cannot fit its budget of {budget} tokens (the context size less the "
            f"reply's max_tokens): the chat template alone, with empty messages, takes "
            f"{tokens}; {advice}")
    keep, candidate, tokens = _longest(
        lambda n: counted(dropped, 0, n), 0, full_last, candidate, tokens, budget)
    return Fit(candidate, tokens, dropped, full_system, full_last - keep)


def longest(fits: Callable[[int], bool], fit: int, over: int) -> int:
    """An n in [fit, over) that `fits` while n + 1 does not, by bisection, given that `fit`
    fits and `over` does not: the largest one when `fits` is monotone. Only ever returns
    `fit` or a value it measured to fit."""
    while over - fit > 1:
        mid = (fit + over) // 2
        if fits(mid):
            fit = mid
        else:
            over = mid
    return fit


def _longest(trial: Callable[[int], tuple[list[ChatMessage], int]], fit: int, over: int,
             candidate: list[ChatMessage], tokens: int, budget: int
             ) -> tuple[int, list[ChatMessage], int]:
    """`longest` over `trial(n)`, returning the fitting candidate and its count too, without
    counting it again. `candidate` and `tokens` are `trial(fit)`'s."""
    best = (fit, candidate, tokens)

    def fits(n: int) -> bool:
        nonlocal best
        messages, count = trial(n)
        if count > budget:
            return False
        best = (n, messages, count)
        return True

    # Bisection only moves its fitting end up, so the last fitting trial is the one it returns.
    longest(fits, fit, over)
    return best


def head(text: str, keep: int) -> str:
    """`text`'s first `keep` characters, cut back to a word boundary when one is near, with
    an ellipsis; "" for 0, `text` itself when it is that short."""
    if keep >= len(text):
        return text
    if keep <= 0:
        return ""
    cut = text[:keep]
    if not text[keep].isspace():
        space = max((m.start() for m in re.finditer(r"\s", cut)), default=-1)
        if space > keep // 2:
            cut = cut[:space]
    return cut.rstrip() + ELLIPSIS


def tail(text: str, keep: int) -> str:
    """`text`'s last `keep` characters, cut forward to a word boundary when one is near, with
    an ellipsis before them; "" for 0, `text` itself when it is that short."""
    if keep >= len(text):
        return text
    if keep <= 0:
        return ""
    start = len(text) - keep
    cut = text[start:]
    if not text[start - 1].isspace():
        space = re.search(r"\s", cut)
        if space is not None and space.start() < keep // 2:
            cut = cut[space.start():]
    return ELLIPSIS + cut.lstrip()


def _text(message: ChatMessage | None) -> str:
    # Content that is not text (None beside tool_calls) has nothing to cut: it counts as "".
    content = None if message is None else message.get("content")
    return content if isinstance(content, str) else ""


def _with(message: ChatMessage, text: str, keep: int, cut: Callable[[str, int], str]
          ) -> ChatMessage:
    if keep >= len(text):
        return message
    return {**message, "content": cut(text, keep)}
