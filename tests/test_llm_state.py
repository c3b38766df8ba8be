"""Warm restart of the stable prompt prefix (llama.cpp state saved to a file and verified on
load), and a prewarm that a stop event interrupts. Real SmolLM2-135M."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from edge_agent.engines.base import ChatMessage, PrefixStateStore
from edge_agent.engines.llm.llama import LlamaLanguageModel
from edge_agent.engines.llm.scripted import ScriptedLanguageModel
from edge_agent.engines.llm.state import (
    KEEP_FILES,
    MAX_CHUNK_TOKENS,
    SUFFIX,
    ChunkPacer,
    cached_prefix,
    evaluate,
)

pytestmark = pytest.mark.models

RULES = " ".join(f"Rule {i}: be brief and polite, and confirm times and numbers back."
                 for i in range(20))
SYSTEM: list[ChatMessage] = [
    {"role": "system", "content": f"You are the voice of Luigi's restaurant kiosk. {RULES}"}]
USER: ChatMessage = {"role": "user", "content": "Do you have a table for two at eight?"}

Factory = Callable[..., LlamaLanguageModel]


@pytest.fixture(scope="module")
def fresh(smollm2: Callable[..., LlamaLanguageModel]) -> Factory:
    """A new LlamaLanguageModel on SmolLM2 (an empty cache, like a restarted agent)."""
    def make(context_tokens: int = 2048) -> LlamaLanguageModel:
        model: LlamaLanguageModel = smollm2(context_tokens=context_tokens)
        return model

    return make


@pytest.fixture(scope="module")
def saved(fresh: Factory, tmp_path_factory: pytest.TempPathFactory
          ) -> tuple[LlamaLanguageModel, Path]:
    """A model that saved the SYSTEM prefix, and the file."""
    model = fresh()
    path = model.save_prefix_state(SYSTEM, tmp_path_factory.mktemp("state"))
    assert path is not None
    return model, path


def prefix_tokens(model: LlamaLanguageModel, messages: list[ChatMessage]) -> list[int]:
    tokens = model._prefix_tokens(messages, ())
    assert tokens is not None
    return tokens


def test_only_llama_models_store_prefix_state(saved: tuple[LlamaLanguageModel, Path]) -> None:
    assert isinstance(saved[0], PrefixStateStore)
    assert not isinstance(ScriptedLanguageModel([]), PrefixStateStore)


def test_a_saved_prefix_restores_into_a_fresh_model(saved: tuple[LlamaLanguageModel, Path],
                                                    fresh: Factory) -> None:
    model, path = saved
    tokens = prefix_tokens(model, SYSTEM)
    assert 250 <= len(tokens) <= 400
    assert path.stat().st_mode & 0o777 == 0o600 and path.name.endswith(SUFFIX)
    header = json.loads(path.read_bytes().split(b"\n", 1)[0])
    assert header["n_tokens"] == len(tokens) and header["n_ctx"] == 2048
    # Only the cells in use are written (~23 KB a token), not the whole 2048-token context.
    assert path.stat().st_size < 30_000 * len(tokens)
    restarted = fresh()
    assert restarted.restore_prefix_state(SYSTEM, path.parent)
    llama = restarted._llama
    assert llama.n_tokens == len(tokens)
    assert llama.input_ids[: llama.n_tokens].tolist() == tokens
    assert restarted.restore_prefix_state(SYSTEM, path.parent)  # already held: still True


def test_after_a_restore_the_next_request_evaluates_only_its_new_tokens(
        saved: tuple[LlamaLanguageModel, Path], fresh: Factory) -> None:
    model, path = saved
    restarted = fresh()
    assert restarted.restore_prefix_state(SYSTEM, path.parent)
    evaluated: list[int] = []
    evaluate = restarted._llama.eval
    restarted._llama.eval = lambda batch: (evaluated.append(len(batch)), evaluate(batch))
    reply = "".join(p for p in restarted.stream([*SYSTEM, USER]) if isinstance(p, str))
    prefix = len(prefix_tokens(model, SYSTEM))
    whole = len(prefix_tokens(model, [*SYSTEM, USER]))
    # The user turn and the reply header (+ one token per generated token), nothing before.
    assert 0 < evaluated[0] <= whole - prefix + 8
    # The same reply as the model that evaluated the prefix itself (greedy).
    model.prewarm(SYSTEM)
    assert reply.strip()
    assert "".join(p for p in model.stream([*SYSTEM, USER]) if isinstance(p, str)) == reply


def damaged(path: Path, target: Path, change: Callable[[bytes], bytes]) -> Path:
    target.mkdir(exist_ok=True)
    copy = target / path.name
    copy.write_bytes(change(path.read_bytes()))
    return copy


def flip(blob: bytes, at: int) -> bytes:
    return blob[:at] + bytes([blob[at] ^ 0x5A]) + blob[at + 1:]


def rehash_with(blob: bytes, state: bytes) -> bytes:
    """A file whose header checksums `state`: garbage reaches llama.cpp itself."""
    import hashlib

    first, rest = blob.split(b"\n", 1)
    header = json.loads(first)
    tokens = rest[: 4 * header["n_tokens"]]
    header.update(state_bytes=len(state), state_sha256=hashlib.sha256(state).hexdigest())
    return json.dumps(header).encode() + b"\n" + tokens + state


@pytest.mark.parametrize(("name", "change"), [
    ("truncated", lambda b: b[: len(b) // 2]),
    ("cut-header", lambda b: b[:20]),
    ("empty", lambda b: b""),
    ("flipped-state", lambda b: flip(b, len(b) - 5000)),
    ("flipped-tokens", lambda b: flip(b, b.index(b"\n") + 9)),
    ("flipped-header", lambda b: flip(b, 30)),
    ("not-json", lambda b: b"\x00\xff" * 5000),
    ("garbage-state", lambda b: rehash_with(b, bytes(range(256)) * 200)),
    ("half-a-state", lambda b: rehash_with(b, b[-(len(b) // 3):])),
    ("foreign-model", lambda b: b.replace(b'"model": "', b'"model": "0', 1)),
])
def test_a_damaged_or_foreign_file_is_refused_without_harm(
        saved: tuple[LlamaLanguageModel, Path], fresh: Factory, tmp_path: Path, name: str,
        change: Callable[[bytes], bytes]) -> None:
    _, path = saved
    copy = damaged(path, tmp_path, change)
    restarted = fresh()
    assert not restarted.restore_prefix_state(SYSTEM, copy.parent)
    assert restarted._llama.n_tokens == 0
    # The model still works, and a good file still restores into it.
    assert restarted.restore_prefix_state(SYSTEM, path.parent)


def test_a_state_for_other_messages_or_another_context_size_is_not_used(
        saved: tuple[LlamaLanguageModel, Path], fresh: Factory, tmp_path: Path) -> None:
    _, path = saved
    other = [{"role": "system", "content": "You are the voice of a train station kiosk."}]
    assert not fresh().restore_prefix_state(other, path.parent)
    small = fresh(context_tokens=1024)
    assert not small.restore_prefix_state(SYSTEM, path.parent)  # keyed by n_ctx: not found
    # Even under the name the 1024-token model looks for, the header refuses it.
    renamed = tmp_path / small._state_identity().file_name(prefix_tokens(small, SYSTEM))
    renamed.write_bytes(path.read_bytes())
    assert not small.restore_prefix_state(SYSTEM, tmp_path)
    assert small._llama.n_tokens == 0


def test_only_the_newest_few_states_are_kept(fresh: Factory, tmp_path: Path) -> None:
    model = fresh()
    paths = []
    for age, place in enumerate(("a bakery", "a museum", "a library", "a hotel", "a pharmacy")):
        path = model.save_prefix_state([{"role": "system", "content": f"You work at {place}."}],
                                       tmp_path)
        assert path is not None
        paths.append(path)
        # Saved in this order, whatever the file system's clock resolution says.
        os.utime(path, (1_000_000 + age, 1_000_000 + age))
    kept = sorted(p.name for p in tmp_path.iterdir())
    assert kept == sorted(p.name for p in paths[-KEEP_FILES:])


def test_a_stopped_evaluation_keeps_its_progress_and_a_later_one_completes_it(
        fresh: Factory) -> None:
    """The chunked evaluation a background summary runs: stopped, it keeps what it evaluated
    (at most the chunk in progress after the stop) and the next call continues from there."""
    model = fresh()
    llama = model._llama
    tokens = prefix_tokens(model, SYSTEM)
    pacer = ChunkPacer()
    stop = threading.Event()
    stop.set()
    assert not evaluate(llama, tokens, stop, pacer)
    assert llama.n_tokens == 0  # nothing evaluated once stopped
    stop.clear()
    at_set: list[int] = []
    timer = threading.Timer(0.3, lambda: (at_set.append(llama.n_tokens), stop.set()))
    timer.start()
    assert not evaluate(llama, tokens, stop, pacer)
    timer.join()
    assert at_set and llama.n_tokens - at_set[0] <= MAX_CHUNK_TOKENS  # the chunk in progress
    assert 0 < llama.n_tokens < len(tokens)
    assert llama.input_ids[: llama.n_tokens].tolist() == tokens[: llama.n_tokens]
    assert evaluate(llama, tokens[cached_prefix(llama, tokens):], threading.Event(), pacer)
    assert llama.n_tokens == len(tokens)
    assert llama.input_ids[: llama.n_tokens].tolist() == tokens
