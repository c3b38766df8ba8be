"""Prompts fitted to the context less the reply's room: the policy of `prompt_budget` as
properties over prompt shapes (with fake token counters), and real SmolLM2 under a context far
too small for its system prompt, history or user turn."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from edge_agent.conversation.builtin_tools import load_tools
from edge_agent.engines.base import ChatMessage, ToolCall
from edge_agent.engines.llm.llama import LlamaLanguageModel
from edge_agent.engines.llm.prompt_budget import ELLIPSIS, TokenCounter, fit_prompt, head, tail
from edge_agent.engines.llm.tool_replies import ToolFormat
from edge_agent.errors import EngineError
from edge_agent.memory.summarizer import LEAD, LlamaSummarizer

# --- fake counters ---------------------------------------------------------------------------


def words(messages: list[ChatMessage]) -> int:
    """Words as tokens, with chat markup per message and for the reply header."""
    return 2 + sum(3 + len(str(m.get("content") or "").split()) for m in messages)


def lumpy(messages: list[ChatMessage]) -> int:
    """Characters, with noise that makes a shorter text count more at times, as a real
    tokenizer may: fitting must not assume the count is monotone."""
    total = 5
    for m in messages:
        n = len(str(m.get("content") or ""))
        total += 4 + n // 4 + (n * 7919) % 5
    return total


COUNTERS = {"words": words, "lumpy": lumpy}


def skeleton(messages: list[ChatMessage]) -> list[ChatMessage]:
    """The least any fitted prompt holds: the system message and the last one, both empty,
    and the call that a final tool result answers."""
    out = []
    if messages and messages[0]["role"] == "system":
        out.append({**messages[0], "content": ""})
    body = messages[1:] if out else messages
    if len(body) > 1 and body[-1]["role"] == "tool" and body[-2].get("tool_calls"):
        out.append(body[-2])
    if body:
        out.append({**body[-1], "content": ""})
    return out


# --- prompt shapes ---------------------------------------------------------------------------

text = st.lists(st.sampled_from(["table", "for", "four", "at", "seven", "Luigi's", "please",
                                 "booking", "B1,", "no.", "café", "x" * 12]),
                max_size=80).map(" ".join)


@st.composite
def call_group(draw: st.DrawFn, n: int) -> list[ChatMessage]:
    call_id = f"k{n}"
    return [{"role": "assistant", "content": "", "tool_calls": [
                {"id": call_id, "type": "function",
                 "function": {"name": "book_table", "arguments": '{"people": 4}'}}]},
            {"role": "tool", "tool_call_id": call_id, "content": draw(text)}]


@st.composite
def history(draw: st.DrawFn) -> list[ChatMessage]:
    out: list[ChatMessage] = []
    for n in range(draw(st.integers(0, 12))):
        kind = draw(st.sampled_from(["user", "assistant", "call"]))
        if kind == "call":
            out += draw(call_group(n))
        else:
            out.append({"role": kind, "content": draw(text)})
    return out


@st.composite
def prompts(draw: st.DrawFn) -> list[ChatMessage]:
    messages: list[ChatMessage] = [{"role": "system", "content": draw(text)}]
    messages += draw(history())
    if draw(st.booleans()):
        messages.append({"role": "user", "content": draw(text)})
    else:
        messages += draw(call_group(99))
    if draw(st.integers(0, 9)) == 0:
        messages = messages[1:]  # no system message
    return messages


def checked_fit(messages: list[ChatMessage], count: TokenCounter, budget: int) -> None:
    """Fit `messages` to `budget` and check every promise of the policy."""
    calls = 0

    def counting(candidate: list[ChatMessage]) -> int:
        nonlocal calls
        calls += 1
        return count(candidate)

    if count(skeleton(messages)) > budget:
        with pytest.raises(EngineError, match=r"raise llm\.context_tokens or lower llm\.max_tokens"):
            fit_prompt(messages, counting, budget)
        return
    fit = fit_prompt(messages, counting, budget)
    out = fit.messages
    assert count(out) == fit.tokens <= budget
    if count(messages) <= budget:  # fits: unchanged, one count
        assert out == messages and calls == 1 and not fit.changed
        return
    assert fit.changed
    has_system = bool(messages) and messages[0]["role"] == "system"
    if has_system:
        kept = out[0]["content"].removesuffix(ELLIPSIS).rstrip()
        assert out[0]["role"] == "system" and messages[0]["content"].startswith(kept)
    assert out[-1]["role"] == messages[-1]["role"]
    assert messages[-1]["content"].endswith(out[-1]["content"].removeprefix(ELLIPSIS))
    # The history kept is a suffix of the history, in order, never a result without its call.
    old = messages[1 if has_system else 0:-1]
    new = out[1 if has_system else 0:-1]
    assert new == old[len(old) - len(new):]
    assert fit.dropped == len(old) - len(new)
    assert not new or new[0]["role"] != "tool"
    if messages[-1]["role"] == "tool":  # a final result keeps its call
        assert new[-1:] == old[-1:]
    # Each step only when the one before did not suffice.
    if fit.system_cut or fit.last_cut:
        assert len(new) == len(skeleton(messages)) - 1 - has_system
    else:
        assert out[-1] == messages[-1] and (not has_system or out[0] == messages[0])
    if fit.system_cut and not fit.last_cut:
        assert out[-1] == messages[-1]
    if fit.last_cut:
        assert not has_system or out[0]["content"] == ""


@settings(max_examples=400, deadline=None)
@given(prompts(), st.integers(0, 700), st.sampled_from(sorted(COUNTERS)))
def test_fitted_prompts_fit_keep_their_ends_and_the_newest_history(
        messages: list[ChatMessage], budget: int, counter: str) -> None:
    checked_fit(messages, COUNTERS[counter], budget)


@settings(max_examples=200, deadline=None)
@given(prompts(), st.sampled_from(sorted(COUNTERS)))
def test_a_prompt_that_fits_is_returned_as_it_is(messages: list[ChatMessage], counter: str
                                                 ) -> None:
    count = COUNTERS[counter]
    checked_fit(messages, count, count(messages))
    checked_fit(messages, count, count(messages) + 50)


@settings(max_examples=200, deadline=None)
@given(prompts())
def test_the_fewest_groups_are_dropped(messages: list[ChatMessage]) -> None:
    # With a monotone counter, keeping one more group would not fit.
    budget = words(messages) * 2 // 3
    assume(words(skeleton(messages)) <= budget)  # else nothing fits: checked_fit's case
    fit = fit_prompt(messages, words, budget)
    if fit.dropped > 0 and not fit.system_cut:
        start = 1 if messages[0]["role"] == "system" else 0
        old = messages[start:-1]
        back = fit.dropped - 1
        while back > 0 and old[back]["role"] == "tool":
            back -= 1
        more = [*messages[:start], *old[back:], messages[-1]]
        assert words(more) > budget


def test_a_long_system_prompt_is_cut_from_its_end_and_the_turn_kept() -> None:
    system = " ".join(f"rule{i}" for i in range(500))
    messages: list[ChatMessage] = [
        {"role": "system", "content": system},
        {"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi"},
        {"role": "user", "content": "book a table for four"}]
    fit = fit_prompt(messages, words, 100)
    assert fit.dropped == 2 and fit.messages[-1] == messages[-1]
    content = fit.messages[0]["content"]
    assert content.startswith("rule0 rule1 ") and content.endswith(ELLIPSIS)
    assert words(fit.messages) in (99, 100)  # the longest cut that fits, to a word


def test_a_long_last_turn_keeps_its_most_recent_words() -> None:
    turn = " ".join(f"w{i}" for i in range(2000))
    fit = fit_prompt([{"role": "system", "content": "Be brief."},
                      {"role": "user", "content": turn}], words, 300)
    assert fit.messages[0]["content"] == "" and fit.system_cut == len("Be brief.")
    assert fit.messages[1]["content"].startswith(ELLIPSIS + "w")
    assert fit.messages[1]["content"].endswith(" w1998 w1999")
    assert words(fit.messages) == 300


def test_infeasible_budgets_say_what_to_configure() -> None:
    messages: list[ChatMessage] = [{"role": "system", "content": "x"},
                                   {"role": "user", "content": "y"}]
    assert words(skeleton(messages)) == 8
    assert fit_prompt(messages, words, 8).messages[1]["content"] == ""
    with pytest.raises(EngineError, match=r"budget of 7 tokens.*takes 8; raise llm\."):
        fit_prompt(messages, words, 7)
    with pytest.raises(EngineError):
        fit_prompt([], words, 1)
    assert fit_prompt([], words, 2).messages == []


def test_cuts_stop_at_word_boundaries_when_near() -> None:
    assert head("book a table", 12) == "book a table"
    assert head("book a table", 9) == "book a…"
    assert head("book a table", 0) == ""
    assert head("booking", 3) == "boo…"  # no boundary near: cut inside the word
    assert tail("book a table", 7) == "…a table"
    assert tail("book a table", 4) == "…able"
    assert tail("book a table", 0) == ""


# --- real SmolLM2-135M -----------------------------------------------------------------------

RULES = " ".join(f"Rule {i}: be brief and polite, and confirm times and numbers back."
                 for i in range(40))
SYSTEM = f"You are the voice of Luigi's restaurant kiosk. {RULES}"
HISTORY: list[ChatMessage] = [
    {"role": "user" if i % 2 == 0 else "assistant",
     "content": f"Turn {i}: " + ("Is there a table for two tonight?" if i % 2 == 0 else
                                "Yes, we have a table for two at eight.")}
    for i in range(30)]
CONVERSATION: list[ChatMessage] = [{"role": "system", "content": SYSTEM}, *HISTORY,
                                   {"role": "user", "content": "Book it for eight please."}]
BOOK_SPEC = load_tools(["book_table"], Path("/nonexistent/x.db"), "x").specs()

Factory = Callable[[int, int], LlamaLanguageModel]


@pytest.fixture(scope="module")
def smollm(smollm2: Callable[..., LlamaLanguageModel]) -> Factory:
    def make(context_tokens: int, max_tokens: int) -> LlamaLanguageModel:
        model: LlamaLanguageModel = smollm2(context_tokens=context_tokens, max_tokens=max_tokens)
        return model

    return make


def reply(model: LlamaLanguageModel, messages: list[ChatMessage], tools: bool = False
          ) -> tuple[str, list[ToolCall]]:
    items = list(model.stream(messages, BOOK_SPEC if tools else ()))
    return ("".join(i for i in items if isinstance(i, str)),
            [i for i in items if isinstance(i, ToolCall)])


@pytest.mark.models
def test_the_count_is_the_prompt_llama_cpp_evaluates(smollm: Factory) -> None:
    model = smollm(2048, 8)
    form = ToolFormat(BOOK_SPEC)  # what the model makes of these tools (made the same way)
    for messages in (CONVERSATION[1:6], [CONVERSATION[0], *CONVERSATION[-3:]],
                     form.prompt(CONVERSATION[-4:])):
        usage = model._llama.create_chat_completion(messages=messages, max_tokens=1)["usage"]
        assert model.count_tokens(messages) == usage["prompt_tokens"]
    # Where llama-cpp-python formats with a built-in format instead, the count is an estimate
    # that must not fall short of what it evaluates.
    model._reply_format = None
    for messages in (CONVERSATION[1:6], [CONVERSATION[0], *CONVERSATION[-3:]]):
        usage = model._llama.create_chat_completion(messages=messages, max_tokens=1)["usage"]
        assert usage["prompt_tokens"] <= model.count_tokens(messages) <= 2 * usage["prompt_tokens"]


@pytest.mark.models
def test_a_long_system_prompt_and_history_fit_a_small_context(
        smollm: Factory, caplog: pytest.LogCaptureFixture) -> None:
    model = smollm(256, 64)
    assert model.count_tokens(CONVERSATION[:1]) > 600  # the system prompt alone: over 2x
    with caplog.at_level(logging.DEBUG, logger="edge_agent"):
        text, calls = reply(model, CONVERSATION)
        warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
        assert text.strip() and not calls
        assert len(warnings) == 1 and "Raise llm.context_tokens" in warnings[0].getMessage()
        fit = model.last_fit
        assert fit is not None and fit.dropped == len(HISTORY) and fit.system_cut > 0
        assert fit.tokens <= 256 - 64 and fit.messages[-1] == CONVERSATION[-1]
        # Told once per process: the next trim is only a debug line.
        reply(model, CONVERSATION)
        assert [r for r in caplog.records if r.levelno == logging.WARNING] == warnings
    # A prompt that fits goes as it is.
    short = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi!"}]
    assert reply(model, short)[0].strip()
    assert model.last_fit is not None and model.last_fit.messages == short
    assert not model.last_fit.changed


@pytest.mark.models
def test_with_tools_the_instruction_counts_and_is_kept(smollm: Factory) -> None:
    model = smollm(256, 64)
    text, calls = reply(model, CONVERSATION, tools=True)
    assert text.strip() or calls
    form = ToolFormat(BOOK_SPEC)  # what the model makes of these tools (made the same way)
    fit = model.last_fit
    assert fit is not None and fit.changed
    assert model.count_tokens(form.prompt(fit.messages)) == fit.tokens <= 256 - 64
    assert form.prompt(fit.messages)[0]["content"].endswith(form.instruction)
    # A hop that answers a tool result: the result is the last message, kept, and spoken about.
    call = ToolCall("k1", "book_table", '{"time": "8 PM", "people": 2}')
    answering = [*CONVERSATION,
                 {"role": "assistant", "content": "", "tool_calls": [
                     {"id": "k1", "type": "function",
                      "function": {"name": call.name, "arguments": call.arguments}}]},
                 {"role": "tool", "tool_call_id": "k1", "content": "booked: B1"}]
    text, calls = reply(model, answering, tools=True)
    assert text.strip() and not calls
    assert model.last_fit is not None and model.last_fit.messages[-1] == answering[-1]
    assert model.last_fit.messages[-2] == answering[-2]  # the call stays with its result


@pytest.mark.models
def test_a_very_long_user_turn_keeps_its_end(smollm: Factory) -> None:
    model = smollm(512, 64)
    turn = " ".join(f"word{i}" for i in range(1999)) + " Book a table for two."
    text, _ = reply(model, [{"role": "system", "content": "Be brief."},
                            {"role": "user", "content": turn}])
    assert text.strip()
    fit = model.last_fit
    assert fit is not None and fit.tokens <= 512 - 64
    assert fit.messages[-1]["content"].endswith("word1998 Book a table for two.")


@pytest.mark.models
def test_a_context_with_no_room_is_refused_at_start_up(smollm: Factory) -> None:
    with pytest.raises(EngineError, match="must be at least 1 and less than"):
        smollm(256, 256)
    with pytest.raises(EngineError, match="raise the first or lower the second"):
        smollm(64, 60)


# --- the summarizer's own context ------------------------------------------------------------

@pytest.fixture(scope="module")
def small_summarizer(smollm2_path: Path) -> LlamaSummarizer:
    return LlamaSummarizer(smollm2_path, context_tokens=256, threads=2,
                           max_chars=600, max_tokens=60)


SENTENCE = "the customer wants a table for four at seven near the window, booking B12"


@pytest.mark.models
@pytest.mark.parametrize(("previous_words", "lines", "line_words"), [
    (0, 1, 5), (0, 40, 20), (100, 40, 20), (100, 1, 400), (0, 1, 400), (100, 3, 400)])
def test_summary_prompts_fit_the_summarizers_context(
        small_summarizer: LlamaSummarizer, previous_words: int, lines: int, line_words: int
        ) -> None:
    previous = " ".join(f"p{i}." for i in range(previous_words))
    heard = [("user" if i % 2 else "assistant",
              f"line{i} " + " ".join(SENTENCE.split()[j % 13] for j in range(line_words)))
             for i in range(lines)]
    tokens = small_summarizer._prompt_tokens(previous, heard)
    assert len(tokens) <= 256 - 60 - 8
    prompt = small_summarizer.model.llama.detokenize(tokens).decode("utf-8")
    assert f"line{lines - 1} " in prompt  # the newest line, from its start
    assert prompt.endswith(LEAD)  # the reply header and the lead are never cut


@pytest.mark.models
def test_a_summary_comes_out_of_a_small_context(small_summarizer: LlamaSummarizer) -> None:
    heard = [("user", f"{SENTENCE} " * 30), ("assistant", "Booked: B12 at seven for four.")]
    summary = small_summarizer.summarize("p. " * 200, heard, threading.Event())
    assert summary.text.strip()


@pytest.mark.models
def test_a_summarizer_context_with_no_room_is_refused(smollm2_path: Path
                                                      ) -> None:
    with pytest.raises(EngineError, match="cannot hold its"):
        LlamaSummarizer(smollm2_path, context_tokens=96, max_tokens=60)
