"""The KV state of a llama.cpp context: evaluation in chunks that a stop event can interrupt,
and the state of a stable prompt prefix saved to a file, so that a restarted agent does not
evaluate that prefix again.

A state file, `<model key>-<sha256 of the token ids, 16 hex>.kvstate`, holds:

1. one JSON line (UTF-8, ends with a newline): `format` ("edge-agent-kv-state"),
   `version` (1), `model` (the GGUF fingerprint, see `model_fingerprint`), `llama_cpp` (the
   llama-cpp-python version: the byte layout is llama.cpp's own and may change with it),
   `n_ctx`, `n_tokens`, `tokens_sha256`, `next_token` (the greedy next token after the prefix,
   a check that the restored cache computes what the saved one did), `state_bytes` and
   `state_sha256`;
2. the token ids, `n_tokens` little-endian int32;
3. `state_bytes` bytes from `llama_state_seq_get_data` for sequence 0: only the KV cells in
   use (about 23 KB a token for SmolLM2-135M), no logits.

llama.cpp checks little of what it loads (flipped bytes in its own header were accepted and left
cells at absurd positions), so nothing reaches it before the header, the tokens and the
sha256 of the state bytes match; after loading, the cells must cover exactly positions
0..n-1 and the last token must predict the saved `next_token`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from edge_agent.engines.llm import native

FORMAT = "edge-agent-kv-state"
VERSION = 1
SUFFIX = ".kvstate"
KEEP_FILES = 3
"""State files kept per model key (the newest written or restored)."""
MAX_CHUNK_TOKENS = 32
CHUNK_SECONDS = 0.04
"""Time one chunk should take: a stop is noticed between chunks, so this bounds the delay
before a preempted evaluation lets the reply run. On a 2-core EPYC VM a 32-token chunk of
SmolLM2-135M takes ~165 ms, so the chunk size is learned, not fixed."""
_FIRST_CHUNK = 4
_EDGE_BYTES = 1 << 20
_MAX_HEADER = 4096


class ChunkPacer:
    """Sizes evaluation chunks to take about `budget` seconds, at most `limit` tokens each.

    The time per token is learned from the chunks evaluated: a slower chunk (the machine got
    busy) counts at once, a faster one only halfway, so chunks shrink quickly and grow slowly.
    """

    def __init__(self, budget: float = CHUNK_SECONDS, limit: int = MAX_CHUNK_TOKENS) -> None:
        self._budget = budget
        self._limit = limit
        self._per_token: float | None = None

    def size(self) -> int:
        """Tokens for the next chunk."""
        if self._per_token is None:
            return min(_FIRST_CHUNK, self._limit)
        return max(1, min(self._limit, int(self._budget / self._per_token)))

    def measured(self, tokens: int, seconds: float) -> None:
        """A chunk of `tokens` took `seconds`."""
        rate = seconds / max(1, tokens)
        if self._per_token is None or rate > self._per_token:
            self._per_token = rate
        else:
            self._per_token = (self._per_token + rate) / 2


def evaluate(llama: Any, tokens: Sequence[int], stop: threading.Event | None,
             pacer: ChunkPacer, before_chunk: Callable[[], None] | None = None) -> bool:
    """Evaluate `tokens` after the `llama.n_tokens` the context holds. Without `stop`, in one
    call; with it, in paced chunks, returning False as soon as `stop` is set between chunks
    (what was evaluated stays: `n_tokens` counts it). True when all tokens were evaluated.
    `before_chunk` runs before each call to llama.cpp (the reply model picks its threads)."""
    if stop is None:
        if tokens:
            if before_chunk is not None:
                before_chunk()
            llama.eval(list(tokens))
        return True
    done = 0
    while done < len(tokens):
        if stop.is_set():
            return False
        if before_chunk is not None:
            before_chunk()
        chunk = list(tokens[done: done + pacer.size()])
        started = time.perf_counter()
        llama.eval(chunk)
        pacer.measured(len(chunk), time.perf_counter() - started)
        done += len(chunk)
    return True


def cached_prefix(llama: Any, tokens: Sequence[int]) -> int:
    """How many of `tokens` the context already holds, from the start."""
    cached = 0
    for have, want in zip(llama.input_ids[: llama.n_tokens], tokens, strict=False):
        if have != want:
            break
        cached += 1
    return cached


def model_fingerprint(path: Path) -> str:
    """sha256 of a GGUF file's size, first MiB and last MiB.

    The content, not the name and mtime: a reinstalled or copied model (new mtime) keeps its
    states, and two fine-tunes with the same name, size and tokenizer differ in the last MiB,
    which is tensor data (the first MiB is mostly the header and vocabulary). Reads 2 MiB.
    """
    size = path.stat().st_size
    digest = hashlib.sha256(f"gguf {size}\n".encode())
    with path.open("rb") as file:
        digest.update(file.read(_EDGE_BYTES))
        if size > 2 * _EDGE_BYTES:
            file.seek(size - _EDGE_BYTES)
        digest.update(file.read())
    return digest.hexdigest()


@dataclass(frozen=True)
class ModelIdentity:
    """What a saved state is only valid for: the model file, llama.cpp and the context size."""

    fingerprint: str
    n_ctx: int
    llama_cpp: str

    @property
    def key(self) -> str:
        """16 hex characters naming this identity in state file names."""
        text = f"{self.fingerprint} {self.n_ctx} {self.llama_cpp}"
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def file_name(self, tokens: Sequence[int]) -> str:
        return f"{self.key}-{_tokens_sha256(tokens)[:16]}{SUFFIX}"


def identity_of(llama: Any, model_path: Path) -> ModelIdentity:
    import llama_cpp

    return ModelIdentity(model_fingerprint(model_path), int(llama.n_ctx()), llama_cpp.__version__)


def save_state(llama: Any, tokens: Sequence[int], directory: Path, identity: ModelIdentity,
               keep: int = KEEP_FILES) -> Path:
    """Write the state of `tokens` (which the context must hold from the start; whatever it
    holds after them is dropped) to `directory`, atomically, mode 0600; keep the `keep` newest
    files of this identity. Raises OSError when the file cannot be written and RuntimeError
    when llama.cpp gives no state."""
    tokens = list(tokens)
    count = len(tokens)
    if count == 0 or cached_prefix(llama, tokens) < count:
        raise RuntimeError("the context does not hold the tokens to save")
    next_token = _redecode_last(llama, tokens)
    state = native.sequence_state(llama)
    if state is None:
        raise RuntimeError("llama.cpp gave no state for the tokens")
    written = len(state)
    header = {
        "format": FORMAT, "version": VERSION, "model": identity.fingerprint,
        "llama_cpp": identity.llama_cpp, "n_ctx": identity.n_ctx, "n_tokens": count,
        "tokens_sha256": _tokens_sha256(tokens), "next_token": next_token,
        "state_bytes": written, "state_sha256": hashlib.sha256(state).hexdigest(),
    }
    path = directory / identity.file_name(tokens)
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(dir=directory, prefix=".", suffix=SUFFIX + ".tmp")
    try:
        with os.fdopen(descriptor, "wb") as file:  # mkstemp creates it 0600
            file.write(json.dumps(header, sort_keys=True).encode() + b"\n")
            file.write(np.asarray(tokens, dtype="<i4").tobytes())
            file.write(state)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    _prune(directory, identity.key, keep)
    return path


def restore_state(llama: Any, tokens: Sequence[int], directory: Path,
                  identity: ModelIdentity) -> bool:
    """Load the state saved for exactly `tokens` under `identity`, if a valid one is in
    `directory`. False, with the context emptied when it was touched, for a missing, damaged,
    truncated or foreign file; never raises."""
    tokens = list(tokens)
    if not tokens or len(tokens) >= identity.n_ctx:
        return False
    path = directory / identity.file_name(tokens)
    try:
        blob = path.read_bytes()
    except OSError:
        return False
    checked = _checked(blob, tokens, identity)
    if checked is None:
        return False
    next_token, state = checked
    try:
        loaded = _load(llama, tokens, state, next_token)
    except Exception:  # a state llama.cpp cannot take is a cold start, not a failure
        loaded = False
    if not loaded:
        native.clear_memory(llama)
        return False
    with contextlib.suppress(OSError):
        os.utime(path)  # recently used: pruning keeps it
    return True


def _tokens_sha256(tokens: Sequence[int]) -> str:
    return hashlib.sha256(np.asarray(tokens, dtype="<i4").tobytes()).hexdigest()


def _checked(blob: bytes, tokens: list[int], identity: ModelIdentity) -> tuple[int, bytes] | None:
    """(next token, state bytes) of a file whose header, tokens and checksum all match."""
    end = blob.find(b"\n", 0, _MAX_HEADER)
    if end < 0:
        return None
    try:
        header = json.loads(blob[:end])
    except ValueError:
        return None
    if not isinstance(header, dict):
        return None
    expected = {
        "format": FORMAT, "version": VERSION, "model": identity.fingerprint,
        "llama_cpp": identity.llama_cpp, "n_ctx": identity.n_ctx, "n_tokens": len(tokens),
        "tokens_sha256": _tokens_sha256(tokens),
    }
    if any(header.get(name) != value for name, value in expected.items()):
        return None
    next_token, size, digest = (header.get(k) for k in ("next_token", "state_bytes", "state_sha256"))
    if not isinstance(next_token, int) or not isinstance(size, int) or not isinstance(digest, str):
        return None
    start = end + 1 + 4 * len(tokens)
    if len(blob) != start + size or size <= 0:
        return None
    if np.frombuffer(blob[end + 1: start], dtype="<i4").tolist() != tokens:
        return None
    state = blob[start:]
    if hashlib.sha256(state).hexdigest() != digest:
        return None
    return next_token, state


def _load(llama: Any, tokens: list[int], state: bytes, next_token: int) -> bool:
    count = len(tokens)
    native.clear_memory(llama)
    if not native.load_sequence_state(llama, state):
        return False
    if native.held_positions(llama) != (0, count - 1):
        return False
    llama.input_ids[:count] = tokens
    llama.n_tokens = count
    if llama.input_ids[:count].tolist() != tokens:
        return False
    return _redecode_last(llama, tokens) == next_token


def _redecode_last(llama: Any, tokens: list[int]) -> int:
    """Evaluate the last token again on the cells before it; its greedy successor. Leaves the
    context holding exactly `tokens`, with fresh logits."""
    count = len(tokens)
    native.drop_cells_from(llama, count - 1)
    llama.n_tokens = count - 1
    llama.eval([tokens[-1]])
    return int(np.argmax(native.last_logits(llama)))


def _prune(directory: Path, key: str, keep: int) -> None:
    """Delete all but the `keep` newest state files of `key`, and temporary files left by a
    save that died more than an hour ago."""
    now = time.time()
    files: list[tuple[float, Path]] = []
    for path in directory.iterdir():
        try:
            modified = path.stat().st_mtime
        except OSError:
            continue
        if path.name.startswith(".") and path.name.endswith(SUFFIX + ".tmp"):
            if now - modified > 3600:
                with contextlib.suppress(OSError):
                    path.unlink()
        elif path.name.startswith(key + "-") and path.name.endswith(SUFFIX):
            files.append((modified, path))
    for _, path in sorted(files, reverse=True)[keep:]:
        with contextlib.suppress(OSError):
            path.unlink()
