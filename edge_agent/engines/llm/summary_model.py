"""The llama.cpp model a running summary is written by (`memory.summarizer.LlamaSummarizer`
decides what to ask it and reads what it says).

Either the reply model's own `Llama`, shared: its conversation is set aside while a summary runs
and put back after (`shared.set_aside`), so the model is in memory once and the next reply
finds its prefix cached; or a model of its own (`open`). The prompt is evaluated in chunks
sized to ~40 ms (at most 32 tokens: `state.ChunkPacer`) and the summary generated greedily
token by token, the stop event checked between any two; in a context of its own the
instruction part of the prompt stays cached between calls.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from edge_agent.engines.llm import native
from edge_agent.engines.llm.llama import chat_formatter, open_llama
from edge_agent.engines.llm.shared import set_aside
from edge_agent.engines.llm.state import ChunkPacer, cached_prefix, evaluate

REPEAT_PENALTY = 1.1


class SummaryModel:
    """A llama.cpp model to write summaries with (see the module docstring)."""

    def __init__(self, llama: Any, *, shared: bool, threads: int) -> None:
        self.llama = llama
        """The `Llama` (the reply model's when `shared`)."""
        self._shared = shared
        self._threads = threads
        self._format = chat_formatter(llama, reply_header=True)
        self._pacer = ChunkPacer()

    @classmethod
    def open(cls, model_path: Path, context_tokens: int, threads: int) -> SummaryModel:
        """A model of its own on the GGUF file at `model_path`."""
        # 32 tokens a batch: no call evaluates more at once (chunks are at most 32 tokens).
        llama = open_llama(model_path, context_tokens=context_tokens, threads=threads, seed=0,
                           batch_tokens=32)
        return cls(llama, shared=False, threads=threads)

    @property
    def context_tokens(self) -> int:
        return int(self.llama.n_ctx())

    def chat_tokens(self, system: str, user: str, lead: str) -> list[int]:
        """The tokens of a chat of `system` and `user` in the model's own template, the reply
        begun with `lead` (without a template: the three as plain paragraphs)."""
        if self._format is None:
            prompt, bos = f"{system}\n\n{user}\n\n{lead}", True
        else:
            rendered = self._format(messages=[{"role": "system", "content": system},
                                              {"role": "user", "content": user}])
            prompt, bos = rendered.prompt + lead, not rendered.added_special
        tokens: list[int] = self.llama.tokenize(prompt.encode("utf-8"), add_bos=bos,
                                                special=True)
        return tokens

    def generate(self, tokens: list[int], stop: threading.Event, max_tokens: int) -> str | None:
        """Greedy text after `tokens`, up to `max_tokens` tokens, an end token or a blank line;
        None when `stop` was set first (within one chunk of the prompt or one token)."""
        if not self._shared:
            return self._generate(tokens, stop, max_tokens)
        with set_aside(self.llama, self._threads):
            return self._generate(tokens, stop, max_tokens)

    def _generate(self, tokens: list[int], stop: threading.Event, max_tokens: int) -> str | None:
        llama = self.llama
        # The last prompt token is left to `generate`, which samples after evaluating it.
        llama.n_tokens = min(cached_prefix(llama, tokens), len(tokens) - 1)
        if not evaluate(llama, tokens[llama.n_tokens: -1], stop, self._pacer):
            return None
        generated: list[int] = []
        steps = llama.generate(tokens, temp=0.0, repeat_penalty=REPEAT_PENALTY)
        try:
            for token in steps:
                if stop.is_set():
                    return None
                if native.ends_generation(llama, token):
                    break
                generated.append(token)
                # A blank line ends the summary: after it SmolLM2 starts copying the prompt.
                if len(generated) >= max_tokens or b"\n\n" in llama.detokenize(generated):
                    break
        finally:
            steps.close()
        return str(llama.detokenize(generated).decode("utf-8", errors="ignore"))
