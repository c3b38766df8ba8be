"""`edge-agent bench lan`: the venue's LLM server (`[llm] server`) against the kiosk's own model,
and how long a reply waits when the server is not there.

Measured, each over the same questions: the first word of a reply from the server and from the
on-device model (milliseconds from the request, as the loop sees it); then the first word when
the server's port refuses (a server that is down: the fallback's cost is noticing it) and when
it accepts and never answers (a server hung or a network black hole: the cost is
`[llm] server_timeout_ms`). Voice to voice through the live agent is `bench latency --llm
config`, with and without `[llm] server`.

Not part of `edge-agent bench` (a venue's server is not on every machine): run on its own.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TypedDict

from edge_agent.bench.stats import summarize
from edge_agent.clock import MonotonicClock
from edge_agent.config.lan import ServerAddress
from edge_agent.engines.base import ChatMessage, LanguageModel, ToolCall
from edge_agent.engines.llm.fallback import FallbackLanguageModel
from edge_agent.engines.llm.server import ServerLanguageModel

SYSTEM = "You are the voice of a restaurant's kiosk. Answer in one or two short sentences."
QUESTIONS = ("What time do you open?", "Do you have a table for four tonight?",
             "Is there anything vegetarian on the menu?", "Where can I park?",
             "Can I bring my dog?", "How much is the lunch menu?")


class LanResult(TypedDict):
    benchmark: str
    server: str
    """The server's address."""
    timeout_ms: int
    """`[llm] server_timeout_ms`."""
    server_first_word_ms: dict[str, Any]
    """From the server (stats: n, p50, p95, max, values)."""
    device_first_word_ms: dict[str, Any]
    """From the on-device model."""
    refused_first_word_ms: dict[str, Any]
    """With the server's port refusing: noticed, then the device."""
    silent_first_word_ms: dict[str, Any]
    """With a server that never answers: the timeout, then the device."""


def run_lan(server: ServerLanguageModel, local: LanguageModel, timeout_ms: int, questions: int,
            say: Callable[[str], None]) -> LanResult:
    """The four series over the first `questions` of `QUESTIONS` (cycled)."""
    asked = [QUESTIONS[i % len(QUESTIONS)] for i in range(questions)]
    say(f"{len(asked)} questions to the server at {server.address.shown}")
    from_server = [_first_word_ms(server, question) for question in asked]
    say(f"{len(asked)} questions to the on-device model")
    from_device = [_first_word_ms(local, question) for question in asked]
    say("the same with the server's port refusing, then with a server that never answers")
    with _refusing_port() as refusing, _silent_server() as silent:
        refused = [_first_word_ms(_fallback(server, refusing, local), question)
                   for question in asked]
        hung = [_first_word_ms(_fallback(server, silent, local), question) for question in asked]
    return {"benchmark": "lan", "server": server.address.shown, "timeout_ms": timeout_ms,
            "server_first_word_ms": summarize(from_server),
            "device_first_word_ms": summarize(from_device),
            "refused_first_word_ms": summarize(refused),
            "silent_first_word_ms": summarize(hung)}


def _fallback(server: ServerLanguageModel, port: int, local: LanguageModel
              ) -> FallbackLanguageModel:
    """A fresh fallback (its server never failed yet) to the server's twin at `port`."""
    address = ServerAddress("http", "127.0.0.1", port, server.address.path)
    model = FallbackLanguageModel(server.at(address), local, MonotonicClock())
    model.announce_to(lambda _: None)
    return model


def _first_word_ms(model: LanguageModel, question: str) -> float:
    messages: list[ChatMessage] = [{"role": "system", "content": SYSTEM},
                                   {"role": "user", "content": question}]
    began = time.perf_counter()
    pieces = model.stream(messages)
    try:
        for piece in pieces:
            if isinstance(piece, ToolCall) or piece.strip():
                break
    finally:
        close = getattr(pieces, "close", None)
        if close is not None:
            close()
    return (time.perf_counter() - began) * 1000


@contextlib.contextmanager
def _refusing_port() -> Iterator[int]:
    """A port on 127.0.0.1 nothing listens on."""
    with socket.create_server(("127.0.0.1", 0)) as probe:
        port = int(probe.getsockname()[1])
    yield port


@contextlib.contextmanager
def _silent_server() -> Iterator[int]:
    """A port that accepts connections and never answers."""
    listener = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    done = threading.Event()

    def accept() -> None:
        while not done.is_set():
            try:
                connection, _ = listener.accept()
            except OSError:
                return
            held.append(connection)

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield int(listener.getsockname()[1])
    finally:
        done.set()
        listener.close()
        for connection in held:
            connection.close()
        thread.join(timeout=5)


def table(result: LanResult) -> str:
    def row(name: str, stats: dict[str, Any]) -> str:
        return (f"  {name:44}{stats['p50']:>8.0f}{stats['p95']:>8.0f}  ms (n={stats['n']})"
                if stats.get("n") else f"  {name:44}-")

    return "\n".join([
        f"{'first word of a reply':46}{'p50':>8}{'p95':>8}",
        row(f"from the server ({result['server']})", result["server_first_word_ms"]),
        row("from the on-device model", result["device_first_word_ms"]),
        row("server down (port refused): on-device", result["refused_first_word_ms"]),
        row(f"server silent: on-device after {result['timeout_ms']} ms",
            result["silent_first_word_ms"])])
