"""Running summaries: the extractive summarizer, the loader, and SmolLM2 in its own context
(bounded output, preempted within 100 ms, the reply model's cache untouched)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from edge_agent.engines.llm import native
from edge_agent.engines.llm.llama import LlamaLanguageModel
from edge_agent.engines.llm.state import MAX_CHUNK_TOKENS
from edge_agent.errors import ConfigError, ModelFileError
from edge_agent.memory.summarizer import (
    ExtractiveSummarizer,
    LlamaSummarizer,
    Summary,
    SummaryPreempted,
    _read_output,
    load_summarizer,
)

LINES = [
    ("user", "Hi. I'd like to book a table for tonight, somewhere quiet please."),
    ("assistant", "Sure, for how many people?"),
    ("user", "Four people, at seven pm. My name is Maria Lopez."),
    ("tool", "booked: table for 4 at 7 PM, reference B17"),
    ("assistant", "Done, Maria: a table for four at 7 PM, your booking reference is B17."),
    ("user", "Great. Do you have vegetarian dishes?"),
    ("assistant", "Yes, we have a vegetarian lasagna and a mushroom risotto."),
    ("user", "Perfect, thanks."),
]


def never() -> threading.Event:
    return threading.Event()


# --- extractive --------------------------------------------------------------------------------


def test_extractive_keeps_one_short_line_per_turn() -> None:
    summary = ExtractiveSummarizer(max_chars=600).summarize("", LINES, never())
    assert summary.facts == ()
    lines = summary.text.splitlines()
    assert lines[0] == "Customer: Hi. I'd like to book a table for tonight, somewhere quiet please."
    assert lines[2] == "Customer: Four people, at seven pm."  # the first sentence only
    assert "Tool result: booked: table for 4 at 7 PM, reference B17" in lines
    assert lines[-1] == "Customer: Perfect, thanks."


def test_extractive_is_bounded_and_drops_the_oldest_first() -> None:
    summarizer = ExtractiveSummarizer(max_chars=160)
    previous = "Customer: asked about opening hours.\nAgent: open until 10 PM."
    summary = summarizer.summarize(previous, LINES, never())
    assert len(summary.text) <= 160
    assert "opening hours" not in summary.text and summary.text.endswith("Perfect, thanks.")
    # Folding again and again stays bounded.
    text = ""
    for _ in range(20):
        text = summarizer.summarize(text, LINES, never()).text
        assert len(text) <= 160
    long = summarizer.summarize("", [("assistant", "word " * 200)], never())
    assert len(long.text) <= 160 and long.text.endswith("…")


def test_extractive_uses_only_the_heard_text_and_is_deterministic() -> None:
    # An interrupted reply arrives as its heard prefix; nothing heard adds nothing.
    lines = [("user", "What time do you close?"), ("assistant", "We close at"),
             ("assistant", "   "), ("user", "Thanks.")]
    first = ExtractiveSummarizer().summarize("", lines, never())
    assert first.text == "Customer: What time do you close?\nAgent: We close at\nCustomer: Thanks."
    assert ExtractiveSummarizer().summarize("", lines, never()) == first
    words = {w for _, text in lines for w in text.split()} | {"Customer:", "Agent:"}
    assert set(first.text.split()) <= words


def test_extractive_is_preempted_when_stop_is_set() -> None:
    stop = threading.Event()
    stop.set()
    with pytest.raises(SummaryPreempted):
        ExtractiveSummarizer().summarize("", LINES, stop)


def test_model_output_is_read_into_prose_and_facts() -> None:
    text = ("The customer booked a table for four at 7 PM. The customer booked a table for "
            "four at 7 PM.\nName: Maria Lopez\n- Booking id: B17\nCustomer: hi there\n"
            "Summary: She wants vegetarian food.")
    prose, facts = _read_output(text)
    assert prose == "The customer booked a table for four at 7 PM. She wants vegetarian food."
    assert facts == (("name", "Maria Lopez"), ("booking_id", "B17"))
    assert _read_output("The customer\nCustomer: copied line") == ("", ())


# --- loader ------------------------------------------------------------------------------------


class EchoSummarizer:
    def summarize(self, previous: str, lines: Any, stop: threading.Event) -> Summary:
        return Summary(previous + "".join(text for _, text in lines), ())


def make_echo() -> EchoSummarizer:
    return EchoSummarizer()


def make_nothing() -> object:
    return object()


def load(name: str, model_path: Path | None = None) -> Any:
    return load_summarizer(name, model_path=model_path, source="agent.toml",
                           key="memory.summarizer", threads=2, max_chars=300)


def test_load_summarizer_by_name_and_by_factory() -> None:
    assert isinstance(load("extractive"), ExtractiveSummarizer)
    plugin = load("tests.test_summarizer:make_echo")
    assert plugin.summarize("a", [("user", "b")], never()).text == "ab"


@pytest.mark.parametrize(("name", "says"), [
    ("no_such_package.summaries:make", "not found"),
    ("tests.test_summarizer:missing_factory", "has no 'missing_factory'"),
    ("tests.test_summarizer:LINES", "is a list, not a summarizer factory"),
    ("tests.test_summarizer:make_nothing", "no summarize"),
    ("fancy", "unknown summarizer"),
    ("llm", "needs a GGUF model"),
])
def test_load_summarizer_errors_name_the_key(name: str, says: str) -> None:
    with pytest.raises(ConfigError) as error:
        load(name)
    assert error.value.key == "memory.summarizer" and error.value.path == "agent.toml"
    assert says in error.value.reason


def test_an_unusable_model_file_is_a_model_file_error(tmp_path: Path) -> None:
    with pytest.raises(ModelFileError):
        load("llm", tmp_path / "missing.gguf")
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"not a gguf file" * 100)
    with pytest.raises(ModelFileError) as error:
        load("llm", junk)
    assert error.value.path == junk


# --- SmolLM2 -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def summarizer(smollm2_path: Path) -> LlamaSummarizer:
    return LlamaSummarizer(smollm2_path, context_tokens=1024, threads=2, max_chars=300)


@pytest.mark.models
def test_llama_summary_is_non_empty_and_bounded(summarizer: LlamaSummarizer) -> None:
    previous = "The customer asked about opening hours; the kiosk is open until 10 PM."
    summary = summarizer.summarize(previous, LINES, never())
    assert summary.text.strip() and len(summary.text) <= 300
    # Greedy: the same input gives the same summary (the prompt is cached the second time).
    assert summarizer.summarize(previous, LINES, never()) == summary
    long = summarizer.summarize("", LINES * 12, never())  # ~1900 tokens: oldest lines dropped
    assert long.text.strip() and len(long.text) <= 300


def preempt(summarizer: LlamaSummarizer, previous: str, arm: Callable[[Callable[[], None]], None]
            ) -> tuple[int, int]:
    """(tokens in the context when the stop event was set, when SummaryPreempted was raised);
    `arm` is handed the function that sets the event. The latency itself is a benchmark
    figure (`edge-agent bench memory`); here the mechanism: the work after the event is set is
    bounded by one chunk."""
    stop = threading.Event()
    at_set: list[int] = []

    def fire() -> None:
        at_set.append(summarizer.model.llama.n_tokens)
        stop.set()

    arm(fire)
    with pytest.raises(SummaryPreempted):
        summarizer.summarize(previous, LINES, stop)
    assert at_set, "the stop event was never set"
    return at_set[0], summarizer.model.llama.n_tokens


@pytest.mark.models
def test_preempted_at_the_next_chunk_mid_prefill(summarizer: LlamaSummarizer) -> None:
    for delay in (0.05, 0.2, 0.45):
        previous = f"Visit {delay}: the customer asked about opening hours."  # not cached

        def arm(fire: Callable[[], None], delay: float = delay) -> None:
            threading.Timer(delay, fire).start()

        at_set, at_raise = preempt(summarizer, previous, arm)
        prompt = summarizer._prompt_tokens(previous, list(LINES))
        assert at_raise < len(prompt) - 1  # stopped before the prompt's end
        assert at_raise - at_set <= MAX_CHUNK_TOKENS  # at most the chunk in progress


@pytest.mark.models
def test_preempted_at_the_next_token_mid_generation(summarizer: LlamaSummarizer,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    llama = summarizer.model.llama
    generate = llama.generate
    for delay in (0.0, 0.05, 0.15):
        after_stop: list[int] = []

        def arm(fire: Callable[[], None], delay: float = delay,
                after_stop: list[int] = after_stop) -> None:
            stopped = threading.Event()

            def fire_and_mark() -> None:
                fire()
                stopped.set()

            def generating(*args: Any, **kwargs: Any) -> Iterator[int]:
                threading.Timer(delay, fire_and_mark).start()
                for token in generate(*args, **kwargs):
                    if stopped.is_set():
                        after_stop.append(token)
                    yield token

            monkeypatch.setattr(llama, "generate", generating)

        preempt(summarizer, f"Generation {delay}: the customer was polite.", arm)
        assert len(after_stop) <= 1  # the token being decoded when it was set, no more


@pytest.mark.models
def test_a_summary_leaves_the_reply_models_cache_untouched(summarizer: LlamaSummarizer,
                                                           smollm2: Callable[..., Any]) -> None:
    reply = smollm2(max_tokens=80)
    reply.prewarm([{"role": "system", "content": "You are the voice of Luigi's restaurant."}])
    held = reply._llama.n_tokens
    tokens = reply._llama.input_ids[:held].copy()
    cache = kv_bytes(reply)
    assert held > 0
    summarizer.summarize("Visit 7: the customer asked for a quiet table.", LINES, never())
    assert reply._llama.n_tokens == held
    assert (reply._llama.input_ids[:held] == tokens).all()
    assert kv_bytes(reply) == cache  # the KV cells themselves, byte for byte


def kv_bytes(model: LlamaLanguageModel) -> bytes:
    """The reply model's KV cache for its sequence, as llama.cpp serializes it."""
    state = native.sequence_state(model._llama)
    assert state is not None
    return state


@pytest.mark.models
def test_a_summary_in_the_reply_context_puts_the_conversation_back(
        smollm2: Callable[..., Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """The default: the summarizer runs in the reply model's own context (the model in memory
    once). Whether it finishes or is cut short, the conversation's cache is back byte for byte,
    and the next reply is the one it would have been without the summary in between."""
    reply = smollm2(max_tokens=40)
    shared = LlamaSummarizer(shared=reply.llama, threads=1, max_chars=300)
    messages: list[Any] = [
        {"role": "system", "content": "You are the voice of Luigi's restaurant."},
        {"role": "user", "content": "Hello, are you open tonight?"}]
    reply.prewarm(messages[:1])
    held = reply.llama.n_tokens
    tokens = reply.llama.input_ids[:held].copy()
    cache = kv_bytes(reply)
    summary = shared.summarize("Visit 8: the customer asked for a quiet table.", LINES, never())
    assert summary.text.strip() and len(summary.text) <= 300
    assert reply.llama.n_tokens == held and (reply.llama.input_ids[:held] == tokens).all()
    assert kv_bytes(reply) == cache

    stop = threading.Event()
    evaluate = reply.llama.eval

    def evaluate_then_stop(chunk: list[int]) -> None:  # cut short after its first chunk
        evaluate(chunk)
        stop.set()

    monkeypatch.setattr(reply.llama, "eval", evaluate_then_stop)
    with pytest.raises(SummaryPreempted):
        shared.summarize("Visit 9: the customer asked about parking.", LINES, stop)
    monkeypatch.undo()
    assert reply.llama.n_tokens == held and kv_bytes(reply) == cache

    after = "".join(p for p in reply.stream(messages) if isinstance(p, str))
    fresh = smollm2(max_tokens=40)
    assert after == "".join(p for p in fresh.stream(messages) if isinstance(p, str))
