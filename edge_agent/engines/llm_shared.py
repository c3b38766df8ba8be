"""Other work in the reply model's llama.cpp context, without losing the conversation cached
there.

The LLM summarizer used to open the reply model's GGUF file a second time, in a context of its
own: RSS counted the ~92 MB of the same file pages twice (SmolLM2-135M), plus ~40 MB of that
context's buffers. It now runs in the reply context itself, inside `set_aside`: the KV cells of
the conversation (sequence 0, about 23 KB a token for SmolLM2-135M) are copied out first and put
back afterwards with the token ids they hold, so a reply after a summary, even one that cut the
summary short, finds its prompt prefix cached as before. Both run on the LLM owner thread, never
at the same time.
"""

from __future__ import annotations

import contextlib
import ctypes
from collections.abc import Iterator
from typing import Any

from edge_agent.engines.llm_state import clear_memory


@contextlib.contextmanager
def set_aside(llama: Any, threads: int) -> Iterator[None]:
    """While inside, `llama`'s context is empty and runs on `threads` threads; on exit it holds
    the conversation it held on entry again (or, if llama.cpp refused the copy back, nothing:
    the next request evaluates its prompt from the start)."""
    import llama_cpp

    ctx = llama._ctx.ctx
    count = int(llama.n_tokens)
    held = llama.input_ids[:count].copy()
    buffer: Any = None
    written = 0
    if count:
        size = int(llama_cpp.llama_state_seq_get_size(ctx, 0))
        buffer = (ctypes.c_uint8 * size)()
        written = int(llama_cpp.llama_state_seq_get_data(ctx, buffer, size, 0))
        if not 0 < written <= size:
            buffer, written = None, 0
    llama._ctx.set_n_threads(threads, threads)
    clear_memory(llama)
    try:
        yield
    finally:
        clear_memory(llama)
        llama._ctx.set_n_threads(llama.n_threads, llama.n_threads_batch)
        if buffer is not None and int(
                llama_cpp.llama_state_seq_set_data(ctx, buffer, written, 0)) == written:
            llama.input_ids[:count] = held
            llama.n_tokens = count
