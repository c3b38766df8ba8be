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

A server that cannot be reached, answers with an error or with anything unusable, or sends no
piece of the reply within `timeout_s` (every phase of the exchange counts against it, however
slowly its bytes trickle in: `http_stream`) raises `ServerUnavailable` before anything was
yielded: the caller
(`fallback.FallbackLanguageModel`) answers that turn on the device instead. Once pieces came,
a failure is an `EngineError` like any engine's mid-reply failure. llama-cpp-python's server
ends a stream early with `[DONE]` and no finish reason when another request reaches it
meanwhile (start it with `--interrupt_requests false` to queue them instead): that ending, or
one without `[DONE]` (its answer to a prompt longer than its context), is a failure too, never a
complete reply. Each later piece must come within `stall_s`; a reply holds at most what
`max_tokens` allows by the kiosk's own count (`_Allowance`: a server may ignore it), at most
`MAX_CALLS` calls of bounded arguments, and only storable text (lone surrogates, which a JSON
escape can make, are replaced; each of these is said once). The API key (a file, or
`$EDGE_AGENT_LLM_API_KEY`) is sent as a bearer token and never appears in a message or a log.
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

from edge_agent.config.lan import API_KEY_VARIABLE, ServerAddress, read_secret
from edge_agent.engines.base import MAX_TOOL_ARGUMENTS, ChatMessage, ToolCall, ToolSpec
from edge_agent.engines.llm.http_stream import (
    Now,
    TimedConnection,
    TimedTlsConnection,
    Unusable,
    event_chunks,
    parsed,
)
from edge_agent.engines.llm.tool_replies import JsonReplyReader, ToolFormats
from edge_agent.errors import EngineError
from edge_agent.printable import shown, storable

log = logging.getLogger("edge_agent")

STALL_S = 5.0
"""Seconds for each later piece of a reply, once it has begun (a server streams a token in a
fraction of a second; keep-alive comments do not count as pieces): missed, the reply failed."""
MAX_CALLS = 8
"""Tool calls in one reply, at most (the rest are not made)."""
MAX_WHOLE_BYTES = 1024 * 1024
"""An unstreamed reply, at most."""
CHARS_PER_TOKEN = 4
"""The kiosk's own count of a reply's tokens: each piece is one, and every 4 characters at
least one (English text averages 4-5 characters a token)."""
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
                 api_key: str = "", ca_file: str = "", tools: str = "auto",
                 now: Now = time.monotonic, stall_s: float = STALL_S) -> None:
        self.address = address
        self._timeout = timeout_s
        self._stall = stall_s
        self._max_tokens = max_tokens
        self._temperature = temperature
        self._seed = seed
        self._model = model
        self._slot = slot
        self._api_key = api_key
        self._now = now
        self._tls = (ssl.create_default_context(cafile=ca_file or None)
                     if address.scheme == "https" else None)
        self._tool_formats = ToolFormats()
        self.tools_mode = tools
        """How tools are asked for: "native", "json", or "auto" until the server decides it."""
        self._announce: Callable[[str], None] = log.warning
        self._said: set[str] = set()
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
        ServerUnavailable before the first piece, which must come within `timeout_s` of this
        call whatever is tried meanwhile; closing the iterator closes the connection, which
        stops the server's work."""
        first_by = self._now() + self._timeout
        if not tools:
            yield from (p for p in self._pieces(self._body(messages), first_by)
                        if isinstance(p, str))
            return
        if self.tools_mode != "json":
            try:
                yield from self._native(messages, tools, first_by)
                return
            except _Refused as refused:
                if self.tools_mode != "auto":
                    raise
                self._decide("json", f"it refused tool calling ({refused.reason})")
        yield from self._json(messages, tools, first_by)

    def _native(self, messages: list[ChatMessage], tools: Sequence[ToolSpec], first_by: float
                ) -> Iterator[str | ToolCall]:
        """The API's own tool calling, streamed; for a server that cannot stream it
        (llama_cpp.server: "Automatic streaming tool choice is not supported"), the whole reply
        at once, from then on."""
        extra = {"tools": list(tools), "tool_choice": "auto"}
        failed = ""
        if self._stream_tools:
            try:
                for piece in self._pieces(self._body(messages, extra), first_by):
                    if isinstance(piece, ToolCall):
                        self._decide("native", "it made a tool call")
                    yield piece
                return
            except _Refused as refused:
                if not refused.streamed:
                    raise  # tools refused outright: not asked for unstreamed either
                failed = refused.reason
        items = self._whole(self._body(messages, {**extra, "stream": False}), first_by)
        if failed:  # and the whole reply came: so from now on
            self._stream_tools = False
            self._announce(f"the LLM server at {self.address.shown} cannot stream tool calls "
                           f"({failed}): with tools offered, its replies come whole")
        if any(isinstance(item, ToolCall) for item in items):
            self._decide("native", "it made a tool call")
        yield from items

    def _whole(self, body: bytes, first_by: float) -> list[str | ToolCall]:
        """A reply asked for unstreamed: its head by `first_by`, its body within `stall_s`
        after (ServerUnavailable, or _Refused for the server's own error or an unusable reply,
        otherwise)."""
        where = self.address.shown
        connection = self._connect(first_by)
        try:
            response = self._request(connection, body)
            connection.until(self._now() + self._stall)
            data = response.read(MAX_WHOLE_BYTES + 1)
            if len(data) > MAX_WHOLE_BYTES:
                raise Unusable(f"a reply of more than {MAX_WHOLE_BYTES // 1024} kB")
            message = parsed(data)["choices"][0]["message"]
            text, tool_calls = message.get("content"), message.get("tool_calls")
        except _HttpError as exc:
            raise _Refused(f"the LLM server at {where}: {exc}", str(exc)) from None
        except (OSError, http.client.HTTPException) as exc:
            if not isinstance(exc, Unusable):
                raise ServerUnavailable(f"the LLM server at {where}: {_reason(exc)}") from None
            raise _Refused(f"the LLM server at {where}: not a chat reply ({exc})",
                           f"not a chat reply ({exc})") from None
        except Exception as exc:  # whatever the reply's shape makes the parser raise
            reason = f"not a chat reply ({type(exc).__name__})"
            raise _Refused(f"the LLM server at {where}: {reason}", reason) from None
        finally:
            connection.close()
        calls = _Calls()
        calls.add([{"index": i, **call} for i, call in enumerate(tool_calls or [])
                   if isinstance(call, dict)] if isinstance(tool_calls, list) else None)
        allowance = _Allowance(self._max_tokens)
        kept = allowance.take(text) if isinstance(text, str) else ""
        if allowance.over:
            self._too_long()
        return [*([self._stored(kept)] if kept else []), *map(self._stored_call, calls.made())]

    def _json(self, messages: list[ChatMessage], tools: Sequence[ToolSpec], first_by: float
              ) -> Iterator[str | ToolCall]:
        """The JSON reply format; a reply that is not JSON is spoken as the text it is."""
        form = self._tool_formats.of(tools)
        answering = bool(messages) and messages[-1].get("role") == "tool"
        schema = form.schema["anyOf"][0] if answering else form.schema
        body = self._body(form.prompt(messages), {
            "response_format": {"type": "json_object", "schema": schema}})
        reader = JsonReplyReader()
        spoken = 0
        for piece in self._pieces(body, first_by):
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

    def _once(self, what: str, text: str) -> None:
        """Tell `text`, the first time `what` happens."""
        if what not in self._said:
            self._said.add(what)
            self._announce(text)

    def _plain(self) -> None:
        self._once("plain", f"the LLM server at {self.address.shown} answered in its own words "
                   "where the JSON reply format was asked for: spoken as they are (its tools "
                   "never run this way; [llm] server_tools = \"native\" may)")

    def _too_long(self) -> None:
        self._once("long", f"the LLM server at {self.address.shown} sent more than [llm] "
                   f"max_tokens ({self._max_tokens}) allows: its replies are cut there")

    def _stored(self, text: str) -> str:
        """`text` as it can be stored (lone surrogates replaced), said once when it was not."""
        kept = storable(text)
        if kept != text:
            self._once("unstorable", f"the LLM server at {self.address.shown} sent text that "
                       "cannot be stored (lone surrogates, from a \\ud800-style JSON escape): "
                       "replaced with U+FFFD")
        return kept

    def _stored_call(self, call: ToolCall) -> ToolCall:
        return ToolCall(self._stored(call.call_id), self._stored(call.name),
                        self._stored(call.arguments))

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

    def _pieces(self, body: bytes, first_by: float) -> Iterator[str | ToolCall]:
        """The reply's text pieces as they come, then its tool calls (in the API's form): the
        first by `first_by`, each later one within `stall_s` of the one before, and no more
        than `max_tokens` allows (`_Allowance`): the rest is not read."""
        where = self.address.shown
        calls = _Calls()
        allowance = _Allowance(self._max_tokens)
        connection = self._connect(first_by)
        try:
            try:
                chunks = event_chunks(self._request(connection, body))
                piece = _next_piece(chunks, calls)
            except _HttpError as exc:
                raise _Refused(f"the LLM server at {where}: {exc}", str(exc)) from None
            except Unusable as exc:  # it took the request, and failed in its stream
                raise _Refused(f"the LLM server at {where}: {exc}", str(exc), True) from None
            except Exception as exc:  # unreachable, too slow, or bytes the parser chokes on
                raise ServerUnavailable(f"the LLM server at {where}: {_reason(exc)}") from None
            while piece is not None:
                kept = allowance.take(piece)
                if kept:
                    yield self._stored(kept)
                if allowance.over:
                    self._too_long()
                    break
                connection.until(self._now() + self._stall)
                try:
                    piece = _next_piece(chunks, calls)
                except Exception as exc:  # as above, once the reply has begun
                    raise EngineError(f"the LLM server at {where} failed mid-reply: "
                                      f"{_reason(exc)}") from None
            yield from map(self._stored_call, calls.made())
        finally:
            connection.close()

    def _connect(self, first_by: float) -> TimedConnection:
        """A connection whose reads and writes end by `first_by` until moved on (it is closed
        with the response it holds: `TimedConnection.close`)."""
        address = self.address
        if self._tls is not None:
            return TimedTlsConnection(address.host, address.port, self._now, first_by,
                                      context=self._tls)
        return TimedConnection(address.host, address.port, self._now, first_by)

    def _request(self, connection: TimedConnection, body: bytes) -> http.client.HTTPResponse:
        """Connected, sent, and the response's head read, all by the connection's deadline."""
        headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        connection.request("POST", f"{self.address.path}/chat/completions", body, headers)
        response = connection.getresponse()
        if response.status != 200:
            raise _HttpError(_http_error(response))
        return response


class _HttpError(http.client.HTTPException):
    """The server answered with an HTTP error status."""


class _Allowance:
    """What `[llm] max_tokens` lets one reply hold, by the kiosk's own count (a server may
    ignore the `max_tokens` it was sent): each piece is a token, and each `CHARS_PER_TOKEN`
    characters at least one; a quarter more, and 8, for the count's roughness."""

    def __init__(self, max_tokens: int) -> None:
        self._tokens = max_tokens + max_tokens // 4 + 8
        self._chars = self._tokens * CHARS_PER_TOKEN
        self.over = False
        """The reply has had all it may hold."""

    def take(self, piece: str) -> str:
        """`piece`, cut to what the reply may still hold."""
        kept = piece[:max(0, self._chars)]
        self._tokens -= 1
        self._chars -= len(piece)
        self.over = self._tokens <= 0 or self._chars <= 0
        return kept


class _Calls:
    """Tool calls as they stream in `tool_calls` deltas: by index (at most `MAX_CALLS`), the
    id and name once, the arguments in pieces (one character more than `MAX_TOOL_ARGUMENTS` is
    kept of a longer one, so the toolbox can tell it was too long)."""

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
            index = index if isinstance(index, int) else 0
            if index not in self._calls and len(self._calls) >= MAX_CALLS:
                continue
            call = self._calls.setdefault(index, {"id": "", "name": "", "arguments": ""})
            function = delta.get("function")
            function = function if isinstance(function, dict) else {}
            if isinstance(delta.get("id"), str) and delta["id"]:
                call["id"] = delta["id"][:200]
            if isinstance(function.get("name"), str):
                call["name"] = (call["name"] + function["name"])[:200]
            if isinstance(function.get("arguments"), str):
                room = MAX_TOOL_ARGUMENTS + 1 - len(call["arguments"])
                call["arguments"] += function["arguments"][:max(0, room)]
        return bool(deltas)

    def made(self) -> list[ToolCall]:
        return [ToolCall(call["id"] or f"call-{uuid.uuid4().hex[:12]}", call["name"],
                         call["arguments"])
                for _, call in sorted(self._calls.items())]


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


def _next_piece(chunks: Iterator[dict[str, Any] | None], calls: _Calls) -> str | None:
    """The next non-empty piece of text ("" for a piece of a tool call, kept in `calls`);
    None when the reply is complete."""
    for chunk in chunks:
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
    return None


def _http_error(response: http.client.HTTPResponse) -> str:
    """`HTTP 400: <the server's message>` from an error response."""
    text = response.read(4096).decode("utf-8", "replace")
    try:
        error = parsed(text).get("error", text)
        message = error.get("message", error) if isinstance(error, dict) else error
    except (Unusable, AttributeError):
        message = text
    return f"HTTP {response.status} {response.reason}: {shown(str(message), 200)}"


def _reason(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "no reply within the time allowed"
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused (is the server running?)"
    if isinstance(exc, ssl.SSLError):
        return f"TLS failed: {exc.reason or exc}"
    if not isinstance(exc, (OSError, http.client.HTTPException)):
        return f"not a usable answer ({type(exc).__name__}: {shown(str(exc), 120)})"
    return f"{type(exc).__name__}: {shown(str(exc), 200)}" if str(exc) else type(exc).__name__
