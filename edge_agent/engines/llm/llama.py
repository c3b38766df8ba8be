"""Language models: llama.cpp on a GGUF file, and a scripted model that replies from a list.

With tools offered, llama.cpp's reply is constrained by a grammar (see `tool_replies`). Every
prompt is fitted to the context less the reply's `max_tokens` before it is sent (see
`prompt_budget`): a long system prompt or history never makes a request fail.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from edge_agent.engines import gguf, llama_build
from edge_agent.engines.base import ChatMessage, ToolCall, ToolSpec
from edge_agent.engines.cpu_share import CpuShare, usable_cores
from edge_agent.engines.llm import native
from edge_agent.engines.llm import state as llm_state
from edge_agent.engines.llm.prompt_budget import Fit, TokenCounter, fit_prompt
from edge_agent.engines.llm.tool_replies import JsonReplyReader, ToolFormats
from edge_agent.errors import EngineError, ModelFileError, OutputError
from edge_agent.printable import shown

log = logging.getLogger("edge_agent")


MESSAGE_MARKUP_ESTIMATE = 16
"""Tokens allowed per message, and once for the reply header, for the chat markup when the
prompt cannot be rendered exactly: llama.cpp's built-in formats (llama-2, chatml, llama-3,
mistral) add fewer."""


PREWARM_CHUNK_S = 0.1
"""Time one chunk of a stoppable prewarm should take: a request waits for at most about one.
Measured on a 2-core PC, SmolLM2-135M, a 1680-token prompt: in one batch 13.0-14.3 s; in
chunks of 0.1 s (at most 64 tokens) 14.7-15.7 s; of 0.04 s (at most 32) 26-27 s, the chunks
shrinking to single tokens late in a long prompt."""
PREWARM_CHUNK_TOKENS = 64


class LlamaLanguageModel:
    """llama-cpp-python with one `Llama` object, so the evaluated prompt prefix is reused.

    The reply's room is `max_tokens`, always: a prompt is fitted to `context_tokens -
    max_tokens` (rather than shrinking the reply to what a long prompt leaves, which could
    leave none). After each request `last_fit` says what fitting took."""

    def __init__(
        self,
        model_path: Path,
        *,
        context_tokens: int,
        threads: int,
        max_tokens: int,
        temperature: float,
        seed: int,
        share: CpuShare | None = None,
    ) -> None:
        """`threads`: at most this many (0: every core); with `share`, before a request and
        between tokens only as many as are free (see `cpu_share`)."""
        # The configuration checks this too; the engine does not rely on it.
        if max_tokens < 1 or max_tokens >= context_tokens:
            raise EngineError(f"llm.max_tokens ({max_tokens}) must be at least 1 and less than "
                              f"llm.context_tokens ({context_tokens}): the prompt and the reply "
                              "share the context; raise llm.context_tokens or lower "
                              "llm.max_tokens")
        self._threads = threads or (share.cores if share is not None else usable_cores())
        self._share = share
        self._pacer = llm_state.ChunkPacer(PREWARM_CHUNK_S, PREWARM_CHUNK_TOKENS)
        """Sizes a preemptible prewarm's chunks (learned)."""
        self._llama: Any = open_llama(model_path, context_tokens=context_tokens,
                                      threads=self._threads, seed=seed)
        self._max_tokens = max_tokens
        self._temperature = temperature
        self._tool_formats = ToolFormats()
        self._context = context_tokens
        self._prefix_format = chat_formatter(self._llama, reply_header=False)
        # Counting is exact only when create_chat_completion renders with the GGUF's own
        # template, as chat_formatter does; for a template llama-cpp-python recognizes it uses
        # its built-in format instead, and without one llama-2's: those are estimated.
        exact = self._llama.chat_handler is None and self._llama.chat_format == "chat_template.default"
        self._reply_format = chat_formatter(self._llama, reply_header=True) if exact else None
        self._model_path = model_path
        self._identity: llm_state.ModelIdentity | None = None
        self._trim_reported = False
        # Fail at start-up, not at the first turn, when not even empty messages fit.
        self._fit([{"role": "system", "content": ""}, {"role": "user", "content": ""}],
                  self.count_tokens)
        self.last_fit: Fit | None = None
        """What fitting the latest request's prompt took (None before the first)."""

    @property
    def llama(self) -> Any:
        """The loaded llama.cpp model, for other work in its context on the same owner thread
        (the summarizer: `engines.llm.shared.set_aside`)."""
        return self._llama

    def withdraw(self) -> None:
        """Replies depend only on the messages: nothing to undo."""

    def prewarm(self, messages: list[ChatMessage], tools: Sequence[ToolSpec] = (),
                stop: threading.Event | None = None) -> None:
        """Evaluate the chat-templated `messages` (no reply header) into llama.cpp's KV cache,
        reusing what it already holds; the next request with these messages first only
        evaluates its new user turn. Tokens at a message boundary tokenize the same in the
        prefix as in the whole prompt (ChatML and the like end each message with a special
        token), so the cached prefix matches. With `stop`: in chunks of ~`PREWARM_CHUNK_S`
        (`llm_state.evaluate`), ending at the first chunk after it is set; what was evaluated
        stays cached, so a reply with the same prompt loses nothing by it, and one with
        another prompt (the window moved meanwhile) does not wait seconds for a stale one."""
        tokens = self._prefix_tokens(messages, tools)
        if tokens is not None:
            self._evaluate_prefix(tokens, stop)

    def _evaluate_prefix(self, tokens: list[int], stop: threading.Event | None) -> bool:
        """`prewarm` of `tokens`; False when `stop` ended it early."""
        llama = self._llama
        cached = llm_state.cached_prefix(llama, tokens)
        if cached >= len(tokens):
            return True
        llama.n_tokens = cached
        # Threads are chosen again before each chunk: the recognizer may have begun meanwhile.
        return llm_state.evaluate(llama, tokens[cached:], stop, self._pacer,
                                  self._take_free_cores)

    def _take_free_cores(self) -> None:
        """Run the next steps on the cores nobody else needs now (all `threads` without a
        share): a llama.cpp thread without a core stalls every token. While a listener waits
        for the first piece of a reply, first wait: the voice needs every core then."""
        if self._share is not None:
            self._share.hold_while_listener_waits()
            threads = self._share.llm_threads(self._threads)
            native.set_threads(self._llama, threads)

    def save_prefix_state(self, messages: list[ChatMessage], directory: Path, *,
                          tools: Sequence[ToolSpec] = (),
                          stop: threading.Event | None = None) -> Path | None:
        """Evaluate the chat-templated `messages` if needed, then save llama.cpp's state for
        exactly their tokens to a file in `directory` (format: `engines.llm.state`); the path.

        `messages` are a stable prefix (the system message, with `tools` as offered on every
        request). Whatever the cache held after them is dropped (the next request evaluates
        it again): call this at start-up or when the conversation is new. None when there is
        nothing to save: no chat template, or a prefix too long to keep, or `stop` was set
        before the prefix was evaluated (see `prewarm`). Raises OutputError when the file
        cannot be written."""
        tokens = self._prefix_tokens(messages, tools)
        if not tokens or not self._evaluate_prefix(tokens, stop):
            return None
        try:
            return llm_state.save_state(self._llama, tokens, directory, self._state_identity())
        except OSError as exc:
            raise OutputError(directory, exc) from None
        except RuntimeError:  # llama.cpp gave no state: a cold start next time, nothing worse
            return None

    def restore_prefix_state(self, messages: list[ChatMessage], directory: Path, *,
                             tools: Sequence[ToolSpec] = ()) -> bool:
        """Load the state `save_prefix_state` saved for these messages (and tools), if
        `directory` holds a valid one for this model file, llama.cpp version and context size.
        True when the cache then holds exactly their tokens (verified), or already did. False,
        never an exception, when there is no such file (the cache is untouched) or it is
        damaged or foreign (the cache is left empty). Meant for start-up: a restored state
        replaces whatever the cache held."""
        try:
            tokens = self._prefix_tokens(messages, tools)
            if not tokens:
                return False
            llama = self._llama
            if llm_state.cached_prefix(llama, tokens) == len(tokens):
                return True
            return llm_state.restore_state(llama, tokens, directory, self._state_identity())
        except Exception:  # a cache that cannot be used is a cold start, never a failure
            return False

    def _prefix_tokens(self, messages: list[ChatMessage], tools: Sequence[ToolSpec]
                       ) -> list[int] | None:
        """The tokens of the chat-templated prefix; None without a chat template or when the
        prefix would leave no room for a reply (the request will have to fit itself)."""
        if self._prefix_format is None:
            return None
        if tools:
            messages = self._tool_formats.of(tools).prompt(messages)
        tokens = self._render_tokens(self._prefix_format, messages)
        if len(tokens) + self._max_tokens >= self._context:
            return None
        return tokens

    def _render_tokens(self, formatter: Any, messages: list[ChatMessage]) -> list[int]:
        """The tokens of `messages` rendered by `formatter`, tokenized as
        create_chat_completion tokenizes its prompt."""
        rendered = formatter(messages=messages)
        tokens: list[int] = self._llama.tokenize(rendered.prompt.encode("utf-8"),
                                                 add_bos=not rendered.added_special, special=True)
        return tokens

    def count_tokens(self, messages: list[ChatMessage]) -> int:
        """The prompt tokens create_chat_completion makes of `messages` (no tool format
        applied): exact with the model's own chat template, otherwise an upper estimate."""
        if self._reply_format is not None:
            return len(self._render_tokens(self._reply_format, messages))
        total = MESSAGE_MARKUP_ESTIMATE
        for message in messages:
            content = message.get("content")
            text = f"{message.get('role', '')}\n{content if isinstance(content, str) else ''}"
            # special=False: markup typed into content counts as text, which is never fewer.
            total += MESSAGE_MARKUP_ESTIMATE + len(self._llama.tokenize(
                text.encode("utf-8"), add_bos=False, special=False))
        return total

    def _fit(self, messages: list[ChatMessage], count: TokenCounter) -> list[ChatMessage]:
        """`messages` fitted to the context less the reply's room (see `prompt_budget`);
        trimming is logged, as a warning the first time for this model."""
        fit = fit_prompt(messages, count, self._context - self._max_tokens,
                         advice=f"llm.context_tokens is {self._context} and llm.max_tokens "
                                f"{self._max_tokens}: raise the first or lower the second")
        self.last_fit = fit
        if fit.changed:
            # Warned once per model: a conversation past the context would warn every turn.
            report = log.debug if self._trim_reported else log.warning
            self._trim_reported = True
            report("the prompt did not fit llm.context_tokens (%d) less llm.max_tokens (%d): "
                   "dropped the %d oldest messages, cut %d characters from the end of the "
                   "system prompt and %d from the start of the last message (%d tokens now). "
                   "Raise llm.context_tokens, or shorten the system prompt or the memory window "
                   "(further trims are logged at debug level)", self._context, self._max_tokens,
                   fit.dropped, fit.system_cut, fit.last_cut, fit.tokens)
        return fit.messages

    def _state_identity(self) -> llm_state.ModelIdentity:
        if self._identity is None:
            self._identity = llm_state.identity_of(self._llama, self._model_path)
        return self._identity

    def stream(self, messages: list[ChatMessage], tools: Sequence[ToolSpec] = ()
               ) -> Iterator[str | ToolCall]:
        """Without tools: the reply's text as it is generated. With tools: the `say` text as
        it is decoded, or one ToolCall at the end; every token that adds nothing to say yields
        "" so that a consumer which stops at its next item cancels at once."""
        if not tools:
            yield from self._pieces(self._fit(messages, self.count_tokens), None)
            return
        form = self._tool_formats.of(tools)
        reader = JsonReplyReader()
        # Asked again with a tool's result, SmolLM2-135M repeated the same call every time
        # (a table booked once per hop): unless chaining is allowed, that hop may only speak.
        answering = bool(messages) and messages[-1].get("role") == "tool"
        # A hop that answers a tool result must speak: small models otherwise repeat the call.
        grammar = form.say_grammar if answering else form.grammar
        # Fitted before the tool format is applied, counted after: the tool instruction is
        # never cut and the prompt sent is the one counted. The last message is kept, so
        # `answering` holds for the fitted messages too.
        fitted = self._fit(messages, lambda m: self.count_tokens(form.prompt(m)))
        for piece in self._pieces(form.prompt(fitted), grammar):
            yield reader.push(piece)
        call = reader.tool_call(f"call-{uuid.uuid4().hex[:12]}")
        if call is not None:
            yield call

    def _pieces(self, messages: list[ChatMessage], grammar: Any) -> Iterator[str]:
        self._take_free_cores()
        completion = self._llama.create_chat_completion(
            messages=messages,
            stream=True,
            max_tokens=self._max_tokens,
            temperature=self._temperature,
            grammar=grammar,
        )
        try:
            for chunk in completion:
                self._take_free_cores()
                piece = chunk["choices"][0]["delta"].get("content")
                if piece:
                    yield piece
        finally:
            completion.close()


def chat_formatter(llama: Any, *, reply_header: bool) -> Any:
    """A llama_cpp Jinja2ChatFormatter for the model's own chat template, ending with the
    assistant's reply header (what `create_chat_completion` renders) or not (a prefix to
    prewarm); None when the GGUF has no template."""
    from llama_cpp import llama_chat_format

    template = llama.metadata.get("tokenizer.chat_template")
    if not template:
        return None
    eos, bos = llama.token_eos(), llama.token_bos()
    return llama_chat_format.Jinja2ChatFormatter(
        template=template,
        eos_token=native.token_text(llama, eos) if eos != -1 else "",
        bos_token=native.token_text(llama, bos) if bos != -1 else "",
        add_generation_prompt=reply_header,
    )


def load_language_model(path: Path, **options: Any) -> LlamaLanguageModel:
    return LlamaLanguageModel(path, **options)


def open_llama(path: Path, *, context_tokens: int, threads: int, seed: int,
               batch_tokens: int = 512) -> Any:
    """A llama.cpp `Llama` on the GGUF file at `path`, checked in Python first (`gguf`:
    damaged, truncated, too big for the memory there is) so that llama.cpp's native loader is
    only given files it can read; ModelFileError (exit 3) otherwise."""
    from llama_cpp import Llama

    if not path.is_file():
        raise ModelFileError(path, "not a file (a GGUF model is one .gguf file)")
    header = gguf.check_model_file(path, context_tokens)
    try:
        return Llama(model_path=str(path), n_ctx=context_tokens, n_batch=batch_tokens,
                     n_threads=threads, n_threads_batch=threads, seed=seed, verbose=False)
    except Exception as exc:
        raise ModelFileError(
            path, f"llama-cpp-python {llama_build.installed_version()} cannot load this GGUF model of "
            f"architecture {shown(header.architecture, 80)!r} ({exc}): an architecture this "
            "llama.cpp does not know, or damaged tensors",
            "Fix: choose a model of an architecture llama.cpp supports (llama, qwen2, gemma3, "
            "phi3, ...), or upgrade llama-cpp-python") from None
