"""Language models: llama.cpp on a GGUF file, and a scripted model that replies from a list."""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from edge_agent.engines.base import ChatMessage, ToolCall, ToolSpec
from edge_agent.errors import ConfigError, EngineError
from edge_agent.tomlfile import parse_toml, read_text


class LlamaLanguageModel:
    """llama-cpp-python with one `Llama` object, so the evaluated prompt prefix is reused."""

    def __init__(
        self,
        model_path: Path,
        *,
        context_tokens: int,
        threads: int,
        max_tokens: int,
        temperature: float,
        seed: int,
    ) -> None:
        from llama_cpp import Llama

        try:
            self._llama: Any = Llama(
                model_path=str(model_path),
                n_ctx=context_tokens,
                n_threads=threads,
                seed=seed,
                verbose=False,
            )
        except Exception as exc:
            raise EngineError(f"cannot load GGUF model {model_path}: {exc}") from exc
        self._max_tokens = max_tokens
        self._temperature = temperature

    def stream(self, messages: list[ChatMessage], tools: Sequence[ToolSpec] = ()
               ) -> Iterator[str | ToolCall]:
        if tools:
            # Small models need grammar-constrained tool calls; until that exists, refuse
            # rather than hand back tool-call JSON as speech.
            raise EngineError("tool calls through llama.cpp are not supported yet; configure "
                              "no tools with the llama engine")
        completion = self._llama.create_chat_completion(
            messages=messages,
            stream=True,
            max_tokens=self._max_tokens,
            temperature=self._temperature,
        )
        try:
            for chunk in completion:
                piece = chunk["choices"][0]["delta"].get("content")
                if piece:
                    yield piece
        finally:
            completion.close()


class ScriptedLanguageModel:
    """Replies with the next line of a script, word by word, whatever it is asked.

    Makes demos and regression calls reproducible without a model download. When the script
    runs out it says nothing (an empty reply) and the loop reports it.
    """

    def __init__(self, replies: Sequence[str]) -> None:
        self._replies = list(replies)
        self._next = 0

    @property
    def exhausted(self) -> bool:
        return self._next >= len(self._replies)

    @classmethod
    def from_file(cls, path: Path) -> ScriptedLanguageModel:
        """Read `replies = [...]` at the top level or under `[agent]` of a TOML file."""
        data = parse_toml(read_text(path, "script file"), str(path))
        replies = data.get("replies", data.get("agent", {}).get("replies"))
        key = "replies" if "replies" in data else "agent.replies"
        if not isinstance(replies, list) or not all(isinstance(r, str) for r in replies):
            raise ConfigError(str(path), key, "must be a list of strings (one reply each)")
        return cls(replies)

    def stream(self, messages: list[ChatMessage], tools: Sequence[ToolSpec] = ()
               ) -> Iterator[str | ToolCall]:
        if self.exhausted:
            return
        reply = self._replies[self._next]
        self._next += 1
        yield from re.findall(r"\S+\s*|\s+", reply)


def load_language_model(path: Path, **options: Any) -> LlamaLanguageModel:
    if not path.is_file():
        raise EngineError(f"GGUF model file {path} does not exist")
    return LlamaLanguageModel(path, **options)
