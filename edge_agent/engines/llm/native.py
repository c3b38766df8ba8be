"""The one adapter to llama-cpp-python's private parts and its low-level C API.

`Llama`'s public methods cover loading, tokenizing, evaluating and sampling; what the agent also
needs is not public there: setting the thread count between tokens (`CpuShare`), copying the KV
cells of sequence 0 out and back (a prompt prefix saved across restarts, a summary run in the
reply model's own context), removing cells, the last logits and a token's text. They are reached
through `Llama._ctx` (its `LlamaContext`) and `Llama._model` (its `LlamaModel`), here and nowhere
else: an upgrade of llama-cpp-python that renames them breaks this module and its tests
(`tests/test_llm_state.py`, `tests/test_summarizer.py` on SmolLM2), not code all over the
package. Measured with llama-cpp-python 0.3.x."""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np


def set_threads(llama: Any, threads: int, batch_threads: int | None = None) -> None:
    """Run the next evaluations on `threads` threads (`batch_threads` for prompt batches;
    default the same), without reloading anything."""
    llama._ctx.set_n_threads(threads, threads if batch_threads is None else batch_threads)


def threads_in_use(llama: Any) -> int:
    """The threads the next token will be computed on."""
    import llama_cpp

    return int(llama_cpp.llama_n_threads(llama._ctx.ctx))


def restore_threads(llama: Any) -> None:
    """Back to the thread counts `llama` was opened with."""
    llama._ctx.set_n_threads(llama.n_threads, llama.n_threads_batch)


def token_text(llama: Any, token: int) -> str:
    """The text of one token as the model's vocabulary spells it ("<|im_end|>")."""
    return str(llama._model.token_get_text(token))


def ends_generation(llama: Any, token: int) -> bool:
    """Whether `token` ends a generation (an end-of-turn or end-of-text token of the model)."""
    import llama_cpp

    return bool(llama_cpp.llama_vocab_is_eog(llama._model.vocab, token))


def sequence_state(llama: Any) -> bytes | None:
    """A copy of the KV cells of sequence 0 (only the cells in use, no logits); None when
    llama.cpp gives no state (an empty context, or a refusal)."""
    import llama_cpp

    ctx = llama._ctx.ctx
    size = int(llama_cpp.llama_state_seq_get_size(ctx, 0))
    if size <= 0:
        return None
    buffer = (ctypes.c_uint8 * size)()
    written = int(llama_cpp.llama_state_seq_get_data(ctx, buffer, size, 0))
    return bytes(buffer)[:written] if 0 < written <= size else None


def load_sequence_state(llama: Any, state: bytes) -> bool:
    """Put `state` (from `sequence_state`) back into sequence 0; whether llama.cpp took all of
    it. The caller sets `llama.input_ids` / `n_tokens` to the tokens it holds."""
    import llama_cpp

    buffer = (ctypes.c_uint8 * len(state)).from_buffer_copy(state)
    return int(llama_cpp.llama_state_seq_set_data(llama._ctx.ctx, buffer, len(state), 0)) \
        == len(state)


def held_positions(llama: Any) -> tuple[int, int]:
    """The first and last positions sequence 0's cells hold (-1, -1 when empty)."""
    import llama_cpp

    memory = llama_cpp.llama_get_memory(llama._ctx.ctx)
    return (int(llama_cpp.llama_memory_seq_pos_min(memory, 0)),
            int(llama_cpp.llama_memory_seq_pos_max(memory, 0)))


def clear_memory(llama: Any) -> None:
    """Empty the KV memory, positions and all (a rejected state can leave cells at negative
    positions that removing a position range would miss)."""
    import llama_cpp

    llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(llama._ctx.ctx), True)
    llama.n_tokens = 0


def drop_cells_from(llama: Any, position: int) -> None:
    """Remove every cell at `position` and after, in every sequence."""
    llama._ctx.kv_cache_seq_rm(-1, position, -1)


def last_logits(llama: Any) -> np.ndarray:
    """The logits of the last evaluated token (a view into llama.cpp's buffer)."""
    return np.ctypeslib.as_array(llama._ctx.get_logits_ith(-1), shape=(llama.n_vocab(),))
