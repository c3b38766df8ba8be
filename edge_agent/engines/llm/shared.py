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
from collections.abc import Iterator
from typing import Any

from edge_agent.engines.llm import native


@contextlib.contextmanager
def set_aside(llama: Any, threads: int) -> Iterator[None]:
    """While inside, `llama`'s context is empty and runs on `threads` threads; on exit it holds
    the conversation it held on entry again (or, if llama.cpp refused the copy back, nothing:
    the next request evaluates its prompt from the start)."""
    count = int(llama.n_tokens)
    held = llama.input_ids[:count].copy()
    state = native.sequence_state(llama) if count else None
    native.set_threads(llama, threads)
    native.clear_memory(llama)
    try:
        yield
    finally:
        native.clear_memory(llama)
        native.restore_threads(llama)
        if state is not None and native.load_sequence_state(llama, state):
            llama.input_ids[:count] = held
            llama.n_tokens = count
