"""A LAN server that misbehaves, on 127.0.0.1 (real sockets, real HTTP, hostile answers): it
never holds a turn past its deadlines, never grows the kiosk's memory, and whatever it sends
either becomes a bounded, storable reply or counts as "server unavailable", so that the
on-device model answers."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from edge_agent.clock import MonotonicClock
from edge_agent.config.lan import parse_server_url
from edge_agent.engines.base import ToolCall, ToolSpec
from edge_agent.engines.llm.fallback import FallbackLanguageModel
from edge_agent.engines.llm.http_stream import MAX_LINE_BYTES
from edge_agent.engines.llm.server import (
    CHARS_PER_TOKEN,
    MAX_CALLS,
    ServerLanguageModel,
    ServerUnavailable,
)
from edge_agent.errors import EngineError
from tests.fakes import FakeLanguageModel
from tests.sse_server import ScriptedChatServer, piece, sse

HELLO = [{"role": "user", "content": "Hi"}]
HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
TIMEOUT_S = 0.6
"""The first word's time in these tests: every server case must give up within it."""
SLACK_S = 0.5
"""What giving up may take beyond a deadline."""
MAX_TOKENS = 40
BOOK: ToolSpec = {"type": "function", "function": {
    "name": "book_table", "description": "Book a table.",
    "parameters": {"type": "object", "properties": {"people": {"type": "integer"}}}}}


def client(url: str, **options: Any) -> ServerLanguageModel:
    return ServerLanguageModel(parse_server_url(url), timeout_s=TIMEOUT_S, max_tokens=MAX_TOKENS,
                               temperature=0.3, seed=7, **options)


def trickle(data: bytes, every_s: float, head: bytes = b"") -> Callable[[socket.socket], None]:
    """An answer that sends `head`, then `data` one byte every `every_s` seconds (over and
    over, for at most 30 s), until the client hangs up."""
    def answer(connection: socket.socket) -> None:
        try:
            connection.sendall(head)
            end = time.monotonic() + 30
            while time.monotonic() < end:
                for byte in data:
                    connection.sendall(bytes([byte]))
                    time.sleep(every_s)
        except OSError:
            return  # the client gave up: what the test wants
    return answer


def flood(head: bytes, block: bytes, total: int) -> Callable[[socket.socket], None]:
    """An answer that sends `head`, then `block` over and over, up to `total` bytes, as fast
    as the client takes them (until it hangs up)."""
    def answer(connection: socket.socket) -> None:
        try:
            connection.sendall(head)
            for _ in range(total // len(block)):
                connection.sendall(block)
        except OSError:
            return
    return answer


def chunked(*parts: bytes) -> bytes:
    return (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n" + b"".join(parts))


HOSTILE: dict[str, Callable[[socket.socket], None] | bytes] = {
    "drips its reply a byte at a time": trickle(
        f"data: {json.dumps(piece('Hello'))}\n\n".encode(), 0.05, HEAD),
    "drips its status line": trickle(HEAD, 0.05),
    "sends only keep-alive comments": trickle(b": ping\n\n", 0.01, HEAD),
    "sends a 400 MB data line": flood(HEAD + b"data: ", b"x" * 1024 * 1024, 400 * 1024 * 1024),
    "nests its JSON 100 000 deep": HEAD + b"data: " + b"[" * 100_000 + b"\n\n",
    "gives a chunk size of 2^64": chunked(b"10000000000000000\r\n", b"data: x\n\n"),
    "gives a chunk size that is not hex": chunked(b"zz\r\n", b"data: x\n\n"),
    "answers with a deeply nested error": (
        b"HTTP/1.1 500 Oops\r\nContent-Length: 200000\r\nConnection: close\r\n\r\n"
        + b"{" * 200_000),
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_a_hostile_server_is_unavailable_within_the_first_words_time(case: str) -> None:
    with ScriptedChatServer([HOSTILE[case]]) as server:
        began = time.monotonic()
        with pytest.raises(ServerUnavailable) as raised:
            list(client(server.url).stream(HELLO))
        took = time.monotonic() - began
    assert took < TIMEOUT_S + SLACK_S, (case, took)
    assert "127.0.0.1" in str(raised.value)


@pytest.mark.parametrize("case", ["drips its reply a byte at a time",
                                  "sends a 400 MB data line", "nests its JSON 100 000 deep"])
def test_the_device_answers_in_its_place_and_the_server_is_not_asked_again_at_once(
        case: str) -> None:
    local = FakeLanguageModel(["From the device.", "Again from the device."])
    with ScriptedChatServer([HOSTILE[case]]) as server:
        model = FallbackLanguageModel(client(server.url), local, MonotonicClock())
        said: list[str] = []
        model.announce_to(said.append)
        began = time.monotonic()
        pieces = iter(model.stream(HELLO))
        first = next(pieces)
        took = time.monotonic() - began
        assert first + "".join(pieces) == "From the device."
        assert "".join(model.stream(HELLO)) == "Again from the device."
    assert model.answered_by == "device"
    assert took < TIMEOUT_S + SLACK_S, took
    assert len(server.requests) == 1 and len(said) == 1, said


def test_a_reply_that_stalls_after_its_first_piece_fails_within_the_stall_limit() -> None:
    hello = f"data: {json.dumps(piece('Hello'))}\n\n".encode()
    with ScriptedChatServer([trickle(b": ping\n\n", 0.01, HEAD + hello)]) as server:
        pieces = client(server.url, stall_s=0.5).stream(HELLO)
        assert next(pieces) == "Hello"
        began = time.monotonic()
        with pytest.raises(EngineError, match="failed mid-reply: no reply within the time"):
            next(pieces)
    assert time.monotonic() - began < 0.5 + SLACK_S


def test_a_server_that_ignores_max_tokens_is_cut_at_the_kiosks_own_count() -> None:
    words = [piece(f"word{n} ") for n in range(20_000)]
    with ScriptedChatServer([sse(*words), sse(piece("x" * 60_000)),
                             sse(*[piece("a")] * 1000)]) as server:
        model = client(server.url)
        said: list[str] = []
        model.announce_to(said.append)
        pieces = list(model.stream(HELLO))
        whole = list(model.stream(HELLO))
        letters = list(model.stream(HELLO))
    allowed = MAX_TOKENS + MAX_TOKENS // 4 + 8
    assert all(p.startswith("word") for p in pieces[:-1])
    assert len("".join(pieces)) == allowed * CHARS_PER_TOKEN  # the characters' count
    assert len("".join(whole)) == allowed * CHARS_PER_TOKEN  # one huge piece, cut
    assert len(letters) == allowed  # the pieces' count
    assert said == [f"the LLM server at {model.address.shown} sent more than [llm] max_tokens "
                    f"({MAX_TOKENS}) allows: its replies are cut there"]


def test_text_that_cannot_be_stored_is_replaced_and_said_once() -> None:
    calls = [{"choices": [{"index": 0, "finish_reason": None, "delta": {"tool_calls": [
        {"index": 0, "id": "c\ud800", "function": {"name": "book\udfff",
                                                    "arguments": '{"people": "\ud800"}'}}]}}]}]
    with ScriptedChatServer([sse(piece("Caf\ud800 open"), piece(" \udc00")),
                             sse(*calls)]) as server:
        model = client(server.url, tools="native")
        said: list[str] = []
        model.announce_to(said.append)
        text = "".join(p for p in model.stream(HELLO) if isinstance(p, str))
        (call,) = [p for p in model.stream(HELLO, [BOOK]) if isinstance(p, ToolCall)]
    assert text == "Caf\ufffd open \ufffd"
    assert (call.call_id, call.name, call.arguments) == (
        "c\ufffd", "book\ufffd", '{"people": "\ufffd"}')
    text.encode("utf-8")  # storable: no lone surrogate left
    assert len([s for s in said if "cannot be stored" in s]) == 1


def test_a_reply_makes_at_most_a_few_calls() -> None:
    deltas = [{"choices": [{"index": 0, "finish_reason": None, "delta": {"tool_calls": [
        {"index": n, "id": f"c{n}", "function": {"name": "book_table", "arguments": "{}"}}]}}]}
        for n in range(1000)]
    with ScriptedChatServer([sse(*deltas, finish="tool_calls")]) as server:
        items = list(client(server.url, tools="native").stream(HELLO, [BOOK]))
    assert [i.call_id for i in items if isinstance(i, ToolCall)] == [
        f"c{n}" for n in range(MAX_CALLS)]


def test_a_line_just_under_the_bound_is_read_and_one_over_it_is_not() -> None:
    near = f"data: {json.dumps(piece('ok'))}".encode()
    near += b" " * (MAX_LINE_BYTES - len(near) - 1) + b"\n"
    with ScriptedChatServer([HEAD + near + b"\n" + sse(piece("."))[len(HEAD):],
                             HEAD + b"data: " + b" " * MAX_LINE_BYTES + b"\n\n"]) as server:
        assert "".join(client(server.url).stream(HELLO)) == "ok."
        with pytest.raises(ServerUnavailable, match="a line of more than 64 kB"):
            list(client(server.url).stream(HELLO))


# -- from outside the process: memory and time -------------------------------------------

def _child(url: str) -> tuple[dict[str, Any], int, float]:
    """One reply through the kiosk's client in a process of its own: what it printed, its peak
    resident memory (kB: the kernel's VmHWM of the child's own image, read from /proc while it
    waits to exit) and the wall time to its answer."""
    began = time.monotonic()
    child = subprocess.Popen([sys.executable, "-m", "tests.lan_client_child", url,
                              str(TIMEOUT_S)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True)
    assert child.stdin is not None and child.stdout is not None
    try:
        out = child.stdout.readline()
        wall = time.monotonic() - began
        status = Path(f"/proc/{child.pid}/status").read_text()
        peak_kb = int(status.split("VmHWM:")[1].split()[0])
    finally:
        child.communicate("\n", timeout=30)
    assert child.returncode == 0, out
    return json.loads(out), peak_kb, wall


@pytest.mark.parametrize("case", ["sends a 400 MB data line", "drips its reply a byte at a time",
                                  "nests its JSON 100 000 deep"])
def test_memory_and_time_stay_bounded_measured_from_outside(case: str) -> None:
    with ScriptedChatServer([sse(piece("Hello"), piece(" there.")), HOSTILE[case]]) as server:
        calm, calm_rss_kb, calm_wall = _child(server.url)
        hostile, rss_kb, wall = _child(server.url)
    assert calm["ended"] == "reply" and calm["chars"] == len("Hello there.")
    assert hostile["ended"] == "unavailable" and hostile["seconds"] < TIMEOUT_S + SLACK_S
    assert rss_kb < calm_rss_kb + 32 * 1024, (rss_kb, calm_rss_kb)  # never the line read whole
    assert wall < calm_wall + TIMEOUT_S + 2 * SLACK_S, (wall, calm_wall)


def test_a_flood_past_max_tokens_stays_small_measured_from_outside() -> None:
    words = sse(*(piece(f"word{n} ") for n in range(200_000)))
    with ScriptedChatServer([sse(piece("Hello")), words]) as server:
        _, calm_rss_kb, _ = _child(server.url)
        flooded, rss_kb, _ = _child(server.url)
    allowed = 120 + 120 // 4 + 8  # the child's max_tokens
    assert flooded["ended"] == "reply" and flooded["chars"] == allowed * CHARS_PER_TOKEN
    assert rss_kb < calm_rss_kb + 32 * 1024, (rss_kb, calm_rss_kb)
