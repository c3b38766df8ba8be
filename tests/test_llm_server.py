"""The LAN LLM server's client and the fallback to the on-device model, against a scripted chat
server on 127.0.0.1 (real sockets, real HTTP, scripted answers; no model)."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from pathlib import Path
from typing import Any

import pytest

from edge_agent.bench.lan import run_lan, table
from edge_agent.clock import VirtualClock
from edge_agent.config.file import load_config
from edge_agent.config.lan import API_KEY_VARIABLE, parse_server_url
from edge_agent.conversation.tools import Tool, Toolbox
from edge_agent.engines.base import MAX_TOOL_ARGUMENTS, ToolCall, ToolSpec
from edge_agent.engines.llm.fallback import RETRY_S, FallbackLanguageModel
from edge_agent.engines.llm.server import (
    ServerLanguageModel,
    ServerUnavailable,
    read_api_key,
)
from edge_agent.errors import ConfigError, EngineError
from tests.cli import edge_agent, write_config
from tests.fakes import FakeLanguageModel
from tests.llama_server import free_port
from tests.sse_server import ScriptedChatServer, http_error, piece, sse

HELLO = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
BOOK: ToolSpec = {"type": "function", "function": {
    "name": "book_table", "description": "Book a table.",
    "parameters": {"type": "object", "properties": {"people": {"type": "integer"}},
                   "required": ["people"]}}}


def client(url: str, timeout_s: float = 2.0, **options: object) -> ServerLanguageModel:
    return ServerLanguageModel(parse_server_url(url), timeout_s=timeout_s, max_tokens=50,
                               temperature=0.3, seed=7, **options)  # type: ignore[arg-type]


def later(clock: VirtualClock, seconds: float) -> None:
    asyncio.run(clock.advance(seconds))


# -- the client ------------------------------------------------------------------------------

def test_the_reply_streams_piece_by_piece_and_the_request_asks_for_a_cached_prompt() -> None:
    answer = sse(": ping\n\n", piece("Hello"), piece(""), piece(" there."),
                 {"choices": [], "usage": {"total_tokens": 9}})
    with ScriptedChatServer([answer]) as server:
        model = client(server.url, model="llama3", slot=2, api_key="s3cret")
        assert list(model.stream(HELLO)) == ["Hello", " there."]
    (request,) = server.requests
    assert request["path"] == "/v1/chat/completions"
    assert request["messages"] == HELLO and request["stream"] is True
    assert (request["cache_prompt"], request["id_slot"], request["model"]) == (True, 2, "llama3")
    assert (request["max_tokens"], request["temperature"], request["seed"]) == (50, 0.3, 7)
    assert "response_format" not in request
    assert server.headers[0]["Authorization"] == "Bearer s3cret"


def test_with_tools_the_json_reply_is_asked_for_by_schema_and_read_as_a_call() -> None:
    call = '{"tool": "book_table", "arguments": {"people": 4}}'
    with ScriptedChatServer([sse(*(piece(part) for part in (call[:9], call[9:30], call[30:])))
                             ]) as server:
        items = list(client(server.url, tools="json").stream(HELLO, [BOOK]))
    calls = [item for item in items if isinstance(item, ToolCall)]
    assert [(c.name, c.arguments) for c in calls] == [("book_table", '{"people": 4}')]
    assert all(item == "" for item in items if not isinstance(item, ToolCall))
    form = server.requests[0]["response_format"]
    assert form["type"] == "json_object" and "anyOf" in form["schema"]
    # The tool instruction is in the system message, as for the on-device model.
    assert "book_table" in server.requests[0]["messages"][0]["content"]


def calling(*parts: str, call_id: str = "call_7", index: int = 0, name: str = "book_table"
            ) -> list[dict[str, Any]]:
    """`tool_calls` deltas: the id and name first, then the arguments in `parts`."""
    first = {"index": index, "id": call_id, "type": "function",
             "function": {"name": name, "arguments": ""}}
    return [_delta({"tool_calls": [first]}),
            *(_delta({"tool_calls": [{"index": index, "function": {"arguments": part}}]})
              for part in parts)]


def _delta(delta: dict[str, Any]) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": delta, "finish_reason": None}]}


def test_tools_go_the_apis_own_way_and_calls_come_back_from_their_deltas() -> None:
    answer = sse(piece("Let me book that."),
                 *calling('{"peo', 'ple": 4}'),
                 *calling("{}", call_id="call_8", index=1, name="cancel"), finish="tool_calls")
    history = [*HELLO,
               {"role": "assistant", "content": "", "tool_calls": [
                   {"id": "c0", "type": "function",
                    "function": {"name": "book_table", "arguments": '{"people": 2}'}}]},
               {"role": "tool", "tool_call_id": "c0", "content": "booked: B1"}]
    with ScriptedChatServer([answer, sse(piece("Done."))]) as server:
        model = client(server.url)
        said: list[str] = []
        model.announce_to(said.append)
        items = list(model.stream(history, [BOOK]))
        assert list(model.stream(HELLO, [BOOK])) == ["Done."]
    assert items == ["Let me book that.", ToolCall("call_7", "book_table", '{"people": 4}'),
                     ToolCall("call_8", "cancel", "{}")]
    request = server.requests[0]
    assert request["tools"] == [BOOK] and request["tool_choice"] == "auto"
    assert request["messages"] == history  # calls and results as the API has them
    assert "response_format" not in request
    assert model.tools_mode == "native" and len(said) == 1
    assert "tools through its own tool calling" in said[0]


def test_a_server_that_refuses_tools_is_asked_in_the_json_form_from_then_on() -> None:
    refusal = http_error(500, "Internal Server Error", "tools param requires --jinja flag")
    with ScriptedChatServer([refusal, sse(piece('{"say": "We open at 9."}')),
                             sse(piece('{"say": "Yes."}'))]) as server:
        model = client(server.url)
        said: list[str] = []
        model.announce_to(said.append)
        assert "".join(p for p in model.stream(HELLO, [BOOK]) if isinstance(p, str)) == (
            "We open at 9.")
        assert "".join(p for p in model.stream(HELLO, [BOOK]) if isinstance(p, str)) == "Yes."
    first, retried, then = server.requests
    assert "tools" in first and "tools" not in retried and "tools" not in then
    assert retried["response_format"]["type"] == "json_object"
    assert model.tools_mode == "json" and len(said) == 1
    assert "the JSON reply format" in said[0] and "tools param requires --jinja" in said[0]
    # Told to speak natively, a refusal is the server being unusable: the device answers.
    with ScriptedChatServer([refusal]) as server, pytest.raises(ServerUnavailable):
        list(client(server.url, tools="native").stream(HELLO, [BOOK]))


def test_a_server_that_cannot_stream_tool_calls_gives_them_whole() -> None:
    body = json.dumps({"choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
        "role": "assistant", "content": None, "tool_calls": [
            {"id": "c9", "type": "function",
             "function": {"name": "book_table", "arguments": '{"people": 4}'}}]}}]})
    whole = (f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
             f"{len(body)}\r\nConnection: close\r\n\r\n{body}").encode()
    broken = sse(done=False, finish=None)  # llama_cpp.server: "Automatic streaming tool
    with ScriptedChatServer([broken, whole, whole]) as server:  # choice is not supported"
        model = client(server.url)
        said: list[str] = []
        model.announce_to(said.append)
        for _ in range(2):
            assert list(model.stream(HELLO, [BOOK])) == [
                ToolCall("c9", "book_table", '{"people": 4}')]
    streamed, first, second = server.requests
    assert streamed["stream"] is True and first["stream"] is False and second["stream"] is False
    assert model.tools_mode == "native" and len(said) == 2
    assert "cannot stream tool calls" in said[0] and "its own tool calling" in said[1]


def test_plain_text_where_json_was_asked_for_is_spoken_not_dropped() -> None:
    with ScriptedChatServer([sse(piece("Sure, we are"), piece(" open until nine tonight.")),
                             sse(piece("Yes."))]) as server:
        model = client(server.url, tools="json")
        said: list[str] = []
        model.announce_to(said.append)
        assert list(model.stream(HELLO, [BOOK])) == ["Sure, we are", " open until nine tonight."]
        assert list(model.stream(HELLO, [BOOK])) == ["Yes."]
    assert len(said) == 1 and "answered in its own words" in said[0]
    # JSON of the server's own shape: its words are spoken, nothing is called.
    with ScriptedChatServer([sse(piece('{"answer": "We open'), piece(' at nine."}'))]) as server:
        assert list(client(server.url, tools="json").stream(HELLO, [BOOK])) == [
            "", "", "We open at nine."]


def test_a_calls_arguments_are_bounded_and_a_longer_call_is_refused_before_it_runs() -> None:
    huge = "x" * (MAX_TOOL_ARGUMENTS + 5000)
    with ScriptedChatServer([sse(*calling('{"people": "', huge, '"}'))]) as server:
        (call,) = list(client(server.url, tools="native").stream(HELLO, [BOOK]))
    assert isinstance(call, ToolCall) and len(call.arguments) == MAX_TOOL_ARGUMENTS + 1
    ran: list[int] = []
    toolbox = Toolbox([Tool("book_table", "Book a table.", BOOK["function"]["parameters"],
                            lambda people: str(ran.append(people)))])
    assert toolbox.run(call).startswith(
        f"error: the arguments are longer than {MAX_TOOL_ARGUMENTS} characters")
    assert ran == []


@pytest.mark.parametrize(("answer", "reason"), [
    (http_error(500, "Internal Server Error", "top_p: must be at most 1"),
     "HTTP 500 Internal Server Error: top_p: must be at most 1"),
    (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n", "without [DONE]"),
    (sse(finish=None), "stopped the reply before it was finished"),
    (sse('data: {"error": {"message": "context overflow"}}\n\n', finish=None),
     "context overflow"),
])
def test_no_reply_is_server_unavailable_with_the_reason(answer: bytes, reason: str) -> None:
    with ScriptedChatServer([answer]) as server, pytest.raises(ServerUnavailable) as caught:
        list(client(server.url).stream(HELLO))
    assert reason in str(caught.value) and server.url.removesuffix("/v1") in str(caught.value)


def test_a_finished_reply_that_says_nothing_is_an_empty_reply() -> None:
    with ScriptedChatServer([sse(finish="stop")]) as server:
        assert list(client(server.url).stream(HELLO)) == []


def test_a_refused_connection_and_a_silent_server_are_unavailable_within_the_timeout() -> None:
    with pytest.raises(ServerUnavailable, match="connection refused"):
        list(client(f"http://127.0.0.1:{free_port()}/v1").stream(HELLO))

    def silent(connection: socket.socket) -> None:
        time.sleep(3.0)  # headers never come within the client's 0.3 s

    with ScriptedChatServer([silent]) as server:
        began = time.monotonic()
        with pytest.raises(ServerUnavailable, match="no reply within the time allowed"):
            list(client(server.url, timeout_s=0.3).stream(HELLO))
        assert time.monotonic() - began < 2.0  # given up on, not waited for


def test_a_reply_broken_off_midway_is_an_engine_failure() -> None:
    cut = sse(piece("We open"), piece(" at"), done=False, finish=None)
    with ScriptedChatServer([cut]) as server:
        pieces = client(server.url).stream(HELLO)
        assert next(pieces) == "We open"
        with pytest.raises(EngineError, match=r"failed mid-reply.*without \[DONE\]") as caught:
            list(pieces)
    assert not isinstance(caught.value, ServerUnavailable)


# -- the fallback ----------------------------------------------------------------------------

def fallback(url: str, local: FakeLanguageModel, clock: VirtualClock
             ) -> tuple[FallbackLanguageModel, list[str]]:
    said: list[str] = []
    model = FallbackLanguageModel(client(url, timeout_s=0.5), local, clock)
    model.announce_to(said.append)
    return model, said


def test_the_device_answers_while_the_server_is_down_and_the_server_again_once_it_is_back(
        ) -> None:
    clock = VirtualClock()
    local = FakeLanguageModel(["From the kiosk.", "Still the kiosk.", "Kiosk again."])
    port = free_port()
    model, said = fallback(f"http://127.0.0.1:{port}/v1", local, clock)
    assert "".join(map(str, model.stream(HELLO))) == "From the kiosk."
    assert model.answered_by == "device" and len(said) == 1
    assert "connection refused" in said[0] and "on-device model" in said[0]
    # Within RETRY_S the server is not asked again, and nothing more is announced.
    later(clock, RETRY_S - 1)
    assert "".join(map(str, model.stream(HELLO))) == "Still the kiosk."
    assert len(said) == 1 and len(local.requests) == 2
    later(clock, 1)
    with ScriptedChatServer([sse(piece("From the server."))]) as server:
        model.server = client(server.url)
        assert list(model.stream(HELLO)) == ["From the server."]
    assert model.answered_by == "server" and len(local.requests) == 2
    assert len(said) == 2 and "answers again" in said[1]


def test_a_slow_server_falls_back_within_its_timeout_and_a_broken_reply_is_not_replayed(
        ) -> None:
    clock = VirtualClock()
    local = FakeLanguageModel(["On the device."])

    def slow(connection: socket.socket) -> None:
        time.sleep(3.0)

    cut = sse(piece("We open"), done=False, finish=None)
    with ScriptedChatServer([cut, slow]) as server:
        model, said = fallback(server.url, local, clock)
        pieces = model.stream(HELLO)
        assert next(pieces) == "We open"
        with pytest.raises(EngineError):
            list(pieces)  # its first words may have been heard: not said again on the device
        assert local.requests == [] and "failed mid-reply" in said[0]
        later(clock, RETRY_S)
        began = time.monotonic()
        assert "".join(map(str, model.stream(HELLO))) == "On the device."
        assert time.monotonic() - began < 2.0  # given up on after 0.5 s, not waited for
        assert len(said) == 1  # it was down already: said once


def test_the_device_is_prewarmed_only_while_it_answers() -> None:
    clock = VirtualClock()
    local = FakeLanguageModel([])
    with ScriptedChatServer([sse(piece("Hi."))]) as server:
        model, _ = fallback(server.url, local, clock)
        model.prewarm(HELLO)
        assert local.prewarmed == []
        list(model.stream(HELLO))
    model.server = client(f"http://127.0.0.1:{free_port()}/v1")
    later(clock, RETRY_S)
    list(model.stream(HELLO))
    model.prewarm(HELLO)
    assert local.prewarmed == [HELLO]


# -- the config ------------------------------------------------------------------------------

@pytest.mark.parametrize(("url", "message"), [
    ("10.0.0.5:8080/v1", "must be an http:// or https:// address with a host"),
    ("ftp://10.0.0.5/v1", "must be an http:// or https:// address"),
    ("http://user:pw@10.0.0.5:8080/v1", "must not hold credentials"),
    ("http://10.0.0.5:99999/v1", "has no valid port"),
    ("http://10.0.0.5:8080/v1?key=x", "without ?query"),
])
def test_a_bad_server_address_is_a_config_error(tmp_path: Path, url: str, message: str) -> None:
    config = write_config(tmp_path, f'[llm]\nserver = "{url}"\n')
    with pytest.raises(ConfigError, match=r"llm\.server") as caught:
        load_config(config)
    assert message in str(caught.value)
    assert "pw" not in str(caught.value)


def test_the_address_and_the_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    address = parse_server_url("https://llm.venue.lan/v1/")
    assert (address.port, address.path, address.shown) == (
        443, "/v1", "https://llm.venue.lan:443/v1")
    assert parse_server_url("http://[fd00::5]:8080/v1").shown == "http://[fd00::5]:8080/v1"
    monkeypatch.setenv(API_KEY_VARIABLE, " from-env \n")
    assert read_api_key("") == "from-env"
    key = tmp_path / "key"
    key.write_text("from-file\nignored\n", encoding="utf-8")
    key.chmod(0o600)
    assert read_api_key(str(key)) == "from-file"
    with pytest.raises(ConfigError, match=r"server_key_file.*cannot read"):
        read_api_key(str(tmp_path / "missing"))
    key.write_text("\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="is empty"):
        read_api_key(str(key))


def test_bench_lan_times_the_first_word_each_way() -> None:
    local = FakeLanguageModel(["Nine.", "Yes.", "Nine.", "Yes.", "Nine.", "Yes."])
    lines: list[str] = []
    with ScriptedChatServer([sse(piece("At nine.")), sse(piece("We do."))]) as server:
        result = run_lan(client(server.url, timeout_s=0.3), local, 300, 2, lines.append)
    assert result["server"] == server.url and len(server.requests) == 2
    for series in ("server", "device", "refused", "silent"):
        assert result[f"{series}_first_word_ms"]["n"] == 2  # type: ignore[literal-required]
    # A silent server is waited for as long as the timeout, never less.
    assert min(result["silent_first_word_ms"]["values"]) >= 300
    assert len(local.requests) == 6  # the device answered its own and both fallbacks
    assert "from the server" in table(result) and len(lines) == 3


def test_bench_lan_needs_a_server_in_the_config(tmp_path: Path) -> None:
    result = edge_agent("bench", "lan", config=write_config(tmp_path), timeout=120)
    assert result.returncode == 2, result.stderr
    assert "llm.server: `bench lan` measures the LAN LLM server" in result.stderr


def test_a_withdrawn_request_is_withdrawn_from_the_model_that_answered_it() -> None:
    clock = VirtualClock()
    local = FakeLanguageModel(["From the kiosk."])
    with ScriptedChatServer([sse(piece("From the server."))]) as server:
        model, _ = fallback(server.url, local, clock)
        list(model.stream(HELLO))
        model.withdraw()  # the server's: the kiosk's model was never asked
        assert local.withdrawn == []
    model.server = client(f"http://127.0.0.1:{free_port()}/v1")
    later(clock, RETRY_S)
    list(model.stream(HELLO))
    model.withdraw()
    assert local.withdrawn == [HELLO]
