"""A language model on the LAN: an OpenAI-compatible chat server, streamed.

llama.cpp's `llama-server`, llama-cpp-python's `python -m llama_cpp.server`, Ollama and vLLM all
serve `POST {base}/chat/completions` with `"stream": true`: server-sent events, one
`data: {json}` line per chunk (`choices[0].delta.content` holds the next piece; lines starting
with ":" are keep-alive comments; a chunk with no choices carries usage), ending with
`data: [DONE]`. Sent with every request:

- `cache_prompt: true` (llama-server; others ignore it): the server keeps the evaluated prompt,
  so the stable prefix (system prompt, summary, facts) is not evaluated again next turn;
- `id_slot` when `[llm] server_slot` is set: llama-server started with `--parallel N` keeps one
  slot, and its cache, for this kiosk;
- with tools, the same JSON reply format the on-device model writes (`tool_replies`), asked for
  as `response_format: {"type": "json_object", "schema": ...}`, which both llama.cpp servers
  enforce with a grammar (Ollama and vLLM: JSON without the schema);
- `max_tokens`, `temperature`, `seed` as configured; `model` when `[llm] server_model` names
  one (Ollama and vLLM need it).

A server that cannot be reached, answers with an error, or sends no piece of the reply within
`timeout_s` raises `ServerUnavailable` before anything was yielded: the caller
(`fallback.FallbackLanguageModel`) answers that turn on the device instead. Once pieces came,
a failure is an `EngineError` like any engine's mid-reply failure. llama-cpp-python's server
ends a stream early with `[DONE]` and no finish reason when another request reaches it
meanwhile (start it with `--interrupt_requests false` to queue them instead): that ending, or
one without `[DONE]` (its answer to a prompt longer than its context), is a failure too, never a
complete reply. The API key (a file, or `$EDGE_AGENT_LLM_API_KEY`) is sent as a bearer token
and never appears in a message or a log.
"""

from __future__ import annotations

import copy
import http.client
import json
import ssl
import threading
import time
import uuid
from collections.abc import Generator, Iterator, Sequence
from typing import Any

from edge_agent.engines.base import ChatMessage, ToolCall, ToolSpec
from edge_agent.engines.llm.tool_replies import JsonReplyReader, ToolFormats
from edge_agent.errors import EngineError
from edge_agent.lan import API_KEY_VARIABLE, ServerAddress, read_secret
from edge_agent.printable import shown

STALL_S = 30.0
"""Seconds without a new chunk, once the reply has begun, before the reply counts as failed."""


class ServerUnavailable(EngineError):
    """The LLM server gave no reply this time (unreachable, an error, too slow to start)."""


def read_api_key(key_file: str, source: str = "config") -> str:
    """The API key: the first line of `key_file`, else `$EDGE_AGENT_LLM_API_KEY`, else ""."""
    return read_secret(key_file, API_KEY_VARIABLE, source, "llm.server_key_file",
                       "the server's API key")


class ServerLanguageModel:
    """Replies streamed from an OpenAI-compatible server (see the module's doc)."""

    def __init__(self, address: ServerAddress, *, timeout_s: float, max_tokens: int,
                 temperature: float, seed: int, model: str = "", slot: int = -1,
                 api_key: str = "", ca_file: str = "") -> None:
        self.address = address
        self._timeout = timeout_s
        self._max_tokens = max_tokens
        self._temperature = temperature
        self._seed = seed
        self._model = model
        self._slot = slot
        self._api_key = api_key
        self._tls = (ssl.create_default_context(cafile=ca_file or None)
                     if address.scheme == "https" else None)
        self._tool_formats = ToolFormats()

    def at(self, address: ServerAddress) -> ServerLanguageModel:
        """This client, sending to `address` instead (a benchmark's stand-ins)."""
        moved = copy.copy(self)
        moved.address = address
        return moved

    def prewarm(self, messages: list[ChatMessage], tools: Sequence[ToolSpec] = (),
                stop: threading.Event | None = None) -> None:
        """Nothing: the server caches the prompt it was sent last (`cache_prompt`)."""

    def withdraw(self) -> None:
        """Replies depend only on the messages: nothing to undo."""

    def stream(self, messages: list[ChatMessage], tools: Sequence[ToolSpec] = ()
               ) -> Generator[str | ToolCall, None, None]:
        """The reply as the server writes it (with tools: the `say` text, then one ToolCall at
        the end, as the on-device model gives them). ServerUnavailable before the first
        piece; closing the iterator closes the connection, which stops the server's work."""
        if not tools:
            yield from self._pieces(messages, None)
            return
        form = self._tool_formats.of(tools)
        answering = bool(messages) and messages[-1].get("role") == "tool"
        schema = form.schema["anyOf"][0] if answering else form.schema
        reader = JsonReplyReader()
        for piece in self._pieces(form.prompt(messages), schema):
            yield reader.push(piece)
        call = reader.tool_call(f"call-{uuid.uuid4().hex[:12]}")
        if call is not None:
            yield call

    def _body(self, messages: list[ChatMessage], schema: dict[str, Any] | None) -> bytes:
        body: dict[str, Any] = {"messages": messages, "stream": True,
                                "max_tokens": self._max_tokens,
                                "temperature": self._temperature, "seed": self._seed,
                                "cache_prompt": True}
        if self._model:
            body["model"] = self._model
        if self._slot >= 0:
            body["id_slot"] = self._slot
        if schema is not None:
            body["response_format"] = {"type": "json_object", "schema": schema}
        return json.dumps(body).encode("utf-8")

    def _pieces(self, messages: list[ChatMessage], schema: dict[str, Any] | None
                ) -> Iterator[str]:
        deadline = time.monotonic() + self._timeout
        where = self.address.shown
        connection = self._connect()
        try:
            try:
                response = self._request(connection, self._body(messages, schema), deadline)
                lines = _event_lines(response)
                first = _next_piece(lines, connection, deadline)
            except (OSError, http.client.HTTPException) as exc:
                raise ServerUnavailable(f"the LLM server at {where}: {_reason(exc)}") from None
            if first is None:
                return  # a finished reply that says nothing: the model's own choice
            yield first
            while True:
                try:
                    piece = _next_piece(lines, connection, time.monotonic() + STALL_S)
                except (OSError, http.client.HTTPException) as exc:
                    raise EngineError(f"the LLM server at {where} failed mid-reply: "
                                      f"{_reason(exc)}") from None
                if piece is None:
                    return
                yield piece
        finally:
            connection.close()

    def _connect(self) -> http.client.HTTPConnection:
        address = self.address
        if self._tls is not None:
            return http.client.HTTPSConnection(address.host, address.port,
                                               timeout=self._timeout, context=self._tls)
        return http.client.HTTPConnection(address.host, address.port, timeout=self._timeout)

    def _request(self, connection: http.client.HTTPConnection, body: bytes, deadline: float
                 ) -> http.client.HTTPResponse:
        """Sent, and the response's head read, before `deadline` (TimeoutError after it)."""
        headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        connection.connect()  # within the timeout it was made with
        _until(connection, deadline)
        connection.request("POST", f"{self.address.path}/chat/completions", body, headers)
        _until(connection, deadline)
        response = connection.getresponse()
        if response.status != 200:
            raise http.client.HTTPException(_http_error(response))
        return response


class _Ended(http.client.HTTPException):
    """The stream ended otherwise than with a finished reply."""


def _event_lines(response: http.client.HTTPResponse) -> Iterator[dict[str, Any] | None]:
    """Each `data:` chunk of the event stream, parsed; None once `[DONE]` ends it."""
    finished = False
    while True:
        raw = response.readline()
        if not raw:
            raise _Ended("the stream ended without [DONE]")
        line = raw.decode("utf-8", "replace").strip()
        if not line.startswith("data:"):
            continue  # blank lines between events, ":" keep-alive comments, event names
        data = line[len("data:"):].strip()
        if data == "[DONE]":
            if not finished:
                raise _Ended("the server stopped the reply before it was finished (another "
                             "request interrupted it?)")
            yield None
            return
        try:
            chunk = json.loads(data)
        except ValueError:
            raise _Ended(f"not a JSON chunk: {shown(data, 60)!r}") from None
        if isinstance(chunk, dict) and "error" in chunk:
            raise _Ended(f"error: {shown(json.dumps(chunk['error']), 200)}")
        choices = chunk.get("choices") if isinstance(chunk, dict) else None
        if isinstance(choices, list) and choices and isinstance(choices[0], dict):
            finished = finished or bool(choices[0].get("finish_reason"))
        yield chunk if isinstance(chunk, dict) else {}


def _until(connection: http.client.HTTPConnection, deadline: float) -> None:
    """The connection's next read or write must be done by `deadline` (TimeoutError if it is
    already past)."""
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise TimeoutError("no reply within the time allowed")
    if connection.sock is not None:
        connection.sock.settimeout(remaining)


def _next_piece(lines: Iterator[dict[str, Any] | None], connection: http.client.HTTPConnection,
                deadline: float) -> str | None:
    """The next non-empty piece of text, read before `deadline` (TimeoutError after it); None
    when the reply is complete."""
    while True:
        _until(connection, deadline)
        chunk = next(lines, None)
        if chunk is None:
            return None
        choices = chunk.get("choices")
        first = choices[0] if isinstance(choices, list) and choices else {}
        delta = first.get("delta") if isinstance(first, dict) else None
        piece = delta.get("content") if isinstance(delta, dict) else None
        if isinstance(piece, str) and piece:
            return piece


def _http_error(response: http.client.HTTPResponse) -> str:
    """`HTTP 400: <the server's message>` from an error response."""
    text = response.read(4096).decode("utf-8", "replace")
    try:
        error = json.loads(text).get("error", text)
        message = error.get("message", error) if isinstance(error, dict) else error
    except (ValueError, AttributeError):
        message = text
    return f"HTTP {response.status} {response.reason}: {shown(str(message), 200)}"


def _reason(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "no reply within the time allowed"
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused (is the server running?)"
    if isinstance(exc, ssl.SSLError):
        return f"TLS failed: {exc.reason or exc}"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
