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
- with tools, the chat API's own tool calling (`[llm] server_tools = "native"`): `tools` in
  the request, `tool_calls` deltas in the stream (a call's arguments in pieces, by index),
  calls and results in history as assistant `tool_calls` and `tool` messages with their
  `tool_call_id` (llama-server with `--jinja`, llama_cpp.server with a function-calling chat
  format, Ollama, vLLM with auto tool choice); or (`"json"`) the JSON reply format the
  on-device model writes (`tool_replies`), asked for as `response_format: {"type":
  "json_object", "schema": ...}`, which both llama.cpp servers enforce with a grammar. `"auto"`
  (the default) asks natively first and keeps to it unless the server refuses `tools` (an HTTP
  error before any reply: llama-server without `--jinja`, vLLM without auto tool choice, an
  Ollama model without tools), then uses the JSON form from then on; what it chose is said once.
  Whatever comes back is used: a reply in plain text where the JSON form was asked for is
  spoken as text (said once), a malformed call is a call the toolbox refuses with an error the
  model sees;
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
import logging
import ssl
import threading
import time
import uuid
from collections.abc import Callable, Generator, Iterator, Sequence
from typing import Any

from edge_agent.engines.base import ChatMessage, ToolCall, ToolSpec
from edge_agent.engines.llm.tool_replies import JsonReplyReader, ToolFormats
from edge_agent.errors import EngineError
from edge_agent.lan import API_KEY_VARIABLE, ServerAddress, read_secret
from edge_agent.printable import shown

log = logging.getLogger("edge_agent")

STALL_S = 30.0
"""Seconds without a new chunk, once the reply has begun, before the reply counts as failed."""


MAX_CALL_CHARS = 16_384
"""A tool call's arguments, at most (the rest of a longer one is not kept: the call is then
invalid JSON, which the toolbox refuses with an error the model sees)."""
MAX_WHOLE_BYTES = 1024 * 1024
"""An unstreamed reply, at most."""
TOOL_MODES = ("auto", "native", "json")
"""`[llm] server_tools`."""


class ServerUnavailable(EngineError):
    """The LLM server gave no reply this time (unreachable, an error, too slow to start)."""


class _Refused(ServerUnavailable):
    """The server answered the request with an HTTP error (it may not take `tools`)."""

    def __init__(self, message: str, reason: str, streamed: bool = False) -> None:
        super().__init__(message)
        self.reason = reason
        self.streamed = streamed
        """It accepted the request and failed in its stream (not an HTTP error)."""


def read_api_key(key_file: str, source: str = "config") -> str:
    """The API key: the first line of `key_file`, else `$EDGE_AGENT_LLM_API_KEY`, else ""."""
    return read_secret(key_file, API_KEY_VARIABLE, source, "llm.server_key_file",
                       "the server's API key")


class ServerLanguageModel:
    """Replies streamed from an OpenAI-compatible server (see the module's doc)."""

    def __init__(self, address: ServerAddress, *, timeout_s: float, max_tokens: int,
                 temperature: float, seed: int, model: str = "", slot: int = -1,
                 api_key: str = "", ca_file: str = "", tools: str = "auto") -> None:
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
        self.tools_mode = tools
        """How tools are asked for: "native", "json", or "auto" until the server decides it."""
        self._announce: Callable[[str], None] = log.warning
        self._said_plain = False
        self._stream_tools = True
        """False once the server failed to stream a reply with tools offered."""

    def announce_to(self, sink: Callable[[str], None]) -> None:
        """Tell what was chosen or noticed (once each) to `sink`, on the model's thread."""
        self._announce = sink

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
        """The reply as the server writes it: text in pieces, then the tool calls it made.
        ServerUnavailable before the first piece; closing the iterator closes the connection,
        which stops the server's work."""
        if not tools:
            yield from (p for p in self._pieces(self._body(messages)) if isinstance(p, str))
            return
        if self.tools_mode != "json":
            try:
                yield from self._native(messages, tools)
                return
            except _Refused as refused:
                if self.tools_mode != "auto":
                    raise
                self._decide("json", f"it refused tool calling ({refused.reason})")
        yield from self._json(messages, tools)

    def _native(self, messages: list[ChatMessage], tools: Sequence[ToolSpec]
                ) -> Iterator[str | ToolCall]:
        """The API's own tool calling, streamed; for a server that cannot stream it
        (llama_cpp.server: "Automatic streaming tool choice is not supported"), the whole reply
        at once, from then on."""
        extra = {"tools": list(tools), "tool_choice": "auto"}
        failed = ""
        if self._stream_tools:
            try:
                for piece in self._pieces(self._body(messages, extra)):
                    if isinstance(piece, ToolCall):
                        self._decide("native", "it made a tool call")
                    yield piece
                return
            except _Refused as refused:
                if not refused.streamed:
                    raise  # tools refused outright: not asked for unstreamed either
                failed = refused.reason
        items = self._whole(self._body(messages, {**extra, "stream": False}))
        if failed:  # and the whole reply came: so from now on
            self._stream_tools = False
            self._announce(f"the LLM server at {self.address.shown} cannot stream tool calls "
                           f"({failed}): with tools offered, its replies come whole")
        if any(isinstance(item, ToolCall) for item in items):
            self._decide("native", "it made a tool call")
        yield from items

    def _whole(self, body: bytes) -> list[str | ToolCall]:
        """A reply asked for unstreamed: its text and its calls, read within the time a first
        word has (ServerUnavailable, or _Refused for the server's own error, otherwise)."""
        where = self.address.shown
        connection = self._connect()
        try:
            response = self._request(connection, body, time.monotonic() + self._timeout)
            data = response.read(MAX_WHOLE_BYTES + 1)
            if len(data) > MAX_WHOLE_BYTES:
                raise _Ended(f"a reply of more than {MAX_WHOLE_BYTES // 1024} kB")
            reply = json.loads(data)
            message = reply["choices"][0]["message"]
        except _HttpError as exc:
            raise _Refused(f"the LLM server at {where}: {exc}", str(exc)) from None
        except (ValueError, KeyError, IndexError, TypeError, RecursionError, _Ended) as exc:
            reason = f"not a chat reply ({type(exc).__name__})"
            raise _Refused(f"the LLM server at {where}: {reason}", reason) from None
        except (OSError, http.client.HTTPException) as exc:
            raise ServerUnavailable(f"the LLM server at {where}: {_reason(exc)}") from None
        finally:
            connection.close()
        calls = _Calls()
        calls.add([{"index": i, **call} for i, call in enumerate(message.get("tool_calls") or [])
                   if isinstance(call, dict)])
        text = message.get("content")
        return [*([text] if isinstance(text, str) and text else []), *calls.made()]

    def _json(self, messages: list[ChatMessage], tools: Sequence[ToolSpec]
              ) -> Iterator[str | ToolCall]:
        """The JSON reply format; a reply that is not JSON is spoken as the text it is."""
        form = self._tool_formats.of(tools)
        answering = bool(messages) and messages[-1].get("role") == "tool"
        schema = form.schema["anyOf"][0] if answering else form.schema
        body = self._body(form.prompt(messages), {
            "response_format": {"type": "json_object", "schema": schema}})
        reader = JsonReplyReader()
        spoken = 0
        for piece in self._pieces(body):
            if not isinstance(piece, str):
                continue  # a call in the API's own form, not asked for here: never made
            said = reader.push(piece)
            if reader.kind == "other":  # plain text: the server ignored the format
                self._plain()
                yield reader.raw[spoken:]
                spoken = len(reader.raw)
                continue
            yield said
        call = reader.tool_call(f"call-{uuid.uuid4().hex[:12]}")
        text = _text_of(reader.raw) if (call is not None and not call.name) or (
            reader.kind is None) else ""
        if text:  # JSON of the server's own shape ({"answer": ...}), or not JSON at all
            self._plain()
            yield text
        elif call is not None:
            yield call

    def _plain(self) -> None:
        if not self._said_plain:
            self._said_plain = True
            self._announce(f"the LLM server at {self.address.shown} answered in its own words "
                           "where the JSON reply format was asked for: spoken as they are (its "
                           "tools never run this way; [llm] server_tools = \"native\" may)")

    def _decide(self, mode: str, why: str) -> None:
        """`auto` settles on `mode`, said once."""
        if self.tools_mode != "auto":
            return
        self.tools_mode = mode
        how = ("its own tool calling (tools, tool_calls)" if mode == "native"
               else "the JSON reply format (response_format with a schema)")
        self._announce(f"the LLM server at {self.address.shown}: tools through {how}, since "
                       f"{why} ([llm] server_tools = \"{mode}\" says so at once)")

    def _body(self, messages: list[ChatMessage], extra: dict[str, Any] | None = None) -> bytes:
        body: dict[str, Any] = {"messages": messages, "stream": True,
                                "max_tokens": self._max_tokens,
                                "temperature": self._temperature, "seed": self._seed,
                                "cache_prompt": True, **(extra or {})}
        if self._model:
            body["model"] = self._model
        if self._slot >= 0:
            body["id_slot"] = self._slot
        return json.dumps(body).encode("utf-8")

    def _pieces(self, body: bytes) -> Iterator[str | ToolCall]:
        """The reply's text pieces as they come, then its tool calls (in the API's form)."""
        deadline = time.monotonic() + self._timeout
        where = self.address.shown
        calls = _Calls()
        connection = self._connect()
        try:
            try:
                response = self._request(connection, body, deadline)
                lines = _event_lines(response)
                first = _next_piece(lines, connection, deadline, calls)
            except (_HttpError, _Ended) as exc:  # the server answered, and failed
                raise _Refused(f"the LLM server at {where}: {exc}", str(exc),
                               isinstance(exc, _Ended)) from None
            except (OSError, http.client.HTTPException) as exc:
                raise ServerUnavailable(f"the LLM server at {where}: {_reason(exc)}") from None
            piece = first
            while piece is not None:
                if piece:
                    yield piece
                try:
                    piece = _next_piece(lines, connection, time.monotonic() + STALL_S, calls)
                except (OSError, http.client.HTTPException) as exc:
                    raise EngineError(f"the LLM server at {where} failed mid-reply: "
                                      f"{_reason(exc)}") from None
            yield from calls.made()
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
            raise _HttpError(_http_error(response))
        return response


class _Ended(http.client.HTTPException):
    """The stream ended otherwise than with a finished reply."""


class _HttpError(http.client.HTTPException):
    """The server answered with an HTTP error status."""


class _Calls:
    """Tool calls as they stream in `tool_calls` deltas: by index, the id and name once, the
    arguments in pieces."""

    def __init__(self) -> None:
        self._calls: dict[int, dict[str, str]] = {}

    def add(self, deltas: object) -> bool:
        """Take a chunk's `tool_calls`; True if it held any."""
        if not isinstance(deltas, list):
            return False
        for delta in deltas:
            if not isinstance(delta, dict):
                continue
            index = delta.get("index", len(self._calls))
            call = self._calls.setdefault(index if isinstance(index, int) else 0,
                                          {"id": "", "name": "", "arguments": ""})
            function = delta.get("function")
            function = function if isinstance(function, dict) else {}
            if isinstance(delta.get("id"), str) and delta["id"]:
                call["id"] = delta["id"][:200]
            if isinstance(function.get("name"), str):
                call["name"] = (call["name"] + function["name"])[:200]
            if isinstance(function.get("arguments"), str):
                room = MAX_CALL_CHARS - len(call["arguments"])
                call["arguments"] += function["arguments"][:max(0, room)]
        return bool(deltas)

    def made(self) -> list[ToolCall]:
        return [ToolCall(call["id"] or f"call-{uuid.uuid4().hex[:12]}", call["name"],
                         call["arguments"])
                for _, call in sorted(self._calls.items())]


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


def _text_of(raw: str) -> str:
    """The words in a reply that is not in the JSON reply format: its string values when it
    is a JSON object of another shape, else the text itself."""
    try:
        reply = json.loads(raw)
    except (ValueError, RecursionError):
        return raw.strip()
    if isinstance(reply, dict):
        return " ".join(v.strip() for v in reply.values() if isinstance(v, str) and v.strip())
    return reply.strip() if isinstance(reply, str) else ""


def _until(connection: http.client.HTTPConnection, deadline: float) -> None:
    """The connection's next read or write must be done by `deadline` (TimeoutError if it is
    already past)."""
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise TimeoutError("no reply within the time allowed")
    if connection.sock is not None:
        connection.sock.settimeout(remaining)


def _next_piece(lines: Iterator[dict[str, Any] | None], connection: http.client.HTTPConnection,
                deadline: float, calls: _Calls) -> str | None:
    """The next non-empty piece of text ("" for a piece of a tool call, kept in `calls`),
    read before `deadline` (TimeoutError after it); None when the reply is complete."""
    while True:
        _until(connection, deadline)
        chunk = next(lines, None)
        if chunk is None:
            return None
        choices = chunk.get("choices")
        first = choices[0] if isinstance(choices, list) and choices else {}
        delta = first.get("delta") if isinstance(first, dict) else None
        if not isinstance(delta, dict):
            continue
        if calls.add(delta.get("tool_calls")):
            return ""
        piece = delta.get("content")
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
