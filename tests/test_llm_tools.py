"""Tool calls from the language models: the JSON reply reader, the prompt for small-model
chat templates, scripted tool calls (and their validation), and real SmolLM2 under the grammar."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from edge_agent.conversation.builtin_tools import load_tools
from edge_agent.conversation.tools import Toolbox
from edge_agent.demo.callfile import parse_call
from edge_agent.engines.base import ChatMessage, ToolCall
from edge_agent.engines.llm.llama import LlamaLanguageModel
from edge_agent.engines.llm.scripted import ScriptedLanguageModel, ScriptedToolReply, parse_replies
from edge_agent.engines.llm.tool_replies import JsonReplyReader, ToolFormat
from edge_agent.errors import ConfigError


def read(pieces: list[str]) -> tuple[list[str], JsonReplyReader]:
    reader = JsonReplyReader()
    return [reader.push(p) for p in pieces], reader


def test_say_text_streams_without_the_json_around_it() -> None:
    said, reader = read(['{"', "say", '":', ' "', "Sure", ",", " for", " how", ' many?"', "}"])
    assert said == ["", "", "", "", "Sure", ",", " for", " how", " many?", ""]
    assert reader.kind == "say" and reader.tool_call("c") is None


@pytest.mark.parametrize("pieces", [
    ['{ "say" : "', "Caf", "\\", "u00", "e9", " ", "\\", '"', "ok", "\\", 'n"}'],
    ["{", "\n", '"say"', ":", '"Caf\\u00e9 ', '\\"ok\\n', '"', " }"],
    ['{"say":"Caf\\u00e9 \\"ok\\n"}'],
    ['\t{  "say"  :  "Caf\\', "u", "0", "0", "E", "9", " \\", '"', "o", "k", "\\n", '"', "}"],
])
def test_escapes_split_across_pieces_decode_once(pieces: list[str]) -> None:
    said, _ = read(pieces)
    assert "".join(said) == 'Café "ok\n'
    # Nothing is said before its characters are complete, and nothing twice.
    assert all("\\" not in s and "{" not in s for s in said)


def test_surrogate_pairs_and_other_escapes() -> None:
    said, _ = read(['{"say": "hi \\ud83d', "\\ude00", " \\/\\\\\\t", " \\ud83d!", '"}'])
    assert "".join(said) == "hi \U0001f600 /\\\t \ufffd!"
    said, _ = read(['{"say": "a\\ud83d\\', "u", "d", "e", "0", "0", '"}'])
    assert said[-2:] == ["\U0001f600", ""] and "".join(said) == "a\U0001f600"


def test_a_tool_object_is_buffered_and_parsed_at_the_end() -> None:
    pieces = ['{', ' "', 'tool', '":', ' "', 'book', '_table', '",', ' "arguments":',
              ' {"time": "7 PM', '", "people": 4}', ' }']
    said, reader = read(pieces)
    assert said == [""] * len(pieces) and reader.kind == "tool"
    call = reader.tool_call("call-9")
    assert call == ToolCall("call-9", "book_table", '{"time": "7 PM", "people": 4}')


def test_a_tool_call_cut_short_still_reaches_the_toolbox_as_an_error() -> None:
    _, reader = read(['{"tool": "book_table", "arguments": {"time": "7 P'])
    call = reader.tool_call("c")
    assert call is not None and call.name == "book_table"
    box = load_tools(["book_table"], Path("/nonexistent/never-opened.db"), "x")
    assert box.run(call).startswith("error: the arguments are not valid JSON")
    _, other = read(["Hello there"])
    assert other.kind == "other" and other.tool_call("c") is None


BOOK_SPEC = load_tools(["book_table"], Path("/nonexistent/x.db"), "x").specs()


def test_history_is_rendered_for_plain_chat_templates() -> None:
    form = ToolFormat(BOOK_SPEC)
    messages: list[ChatMessage] = [
        {"role": "system", "content": "SYS"},
        {"role": "user", "content": "book 4 at 7"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "k1", "type": "function",
             "function": {"name": "book_table", "arguments": '{"time": "7 PM", "people": 4}'}}]},
        {"role": "tool", "tool_call_id": "k1", "content": "booked: B1"},
        {"role": "user", "content": "thanks"},
        {"role": "assistant", "content": "Enjoy, café [interrupted]"},
    ]
    prompt = form.prompt(messages)
    assert prompt[0]["role"] == "system" and prompt[0]["content"].startswith("SYS\n\nTools")
    assert "book_table: Book a table" in prompt[0]["content"]
    assert prompt[1:] == [
        {"role": "user", "content": "book 4 at 7"},
        {"role": "assistant",
         "content": '{"tool": "book_table", "arguments": {"time": "7 PM", "people": 4}}'},
        {"role": "user", "content": "Result of book_table: booked: B1\nthanks"},
        {"role": "assistant", "content": '{"say": "Enjoy, café [interrupted]"}'},
    ]
    assert all(set(m) == {"role", "content"} for m in prompt)
    # No system prompt: the instruction becomes one.
    assert form.prompt([{"role": "user", "content": "hi"}])[0] == {
        "role": "system", "content": form.instruction}


def test_the_grammar_allows_speech_or_each_tool_with_its_arguments() -> None:
    form = ToolFormat(BOOK_SPEC)
    say, book = form.schema["anyOf"]
    assert say["properties"]["say"] == {"type": "string", "minLength": 1}
    assert book["properties"]["tool"] == {"const": "book_table"}
    assert book["properties"]["arguments"]["required"] == ["time", "people"]
    grammar = form.grammar._grammar
    assert '"\\"book_table\\""' in grammar and '"\\"say\\""' in grammar
    assert "book_table" not in form.say_grammar._grammar


# --- scripted tool calls -------------------------------------------------------------------

def test_scripted_tool_reply_says_then_calls_and_the_next_hop_takes_the_next_entry() -> None:
    llm = ScriptedLanguageModel([
        ScriptedToolReply("book_table", '{"time": "7 PM", "people": 4}', "Let me book that."),
        ScriptedToolReply("book_table", "{}"),
        "Done.",
    ])
    assert llm.tool_names == {"book_table"}
    first = list(llm.stream([], BOOK_SPEC))
    assert first == ["Let ", "me ", "book ", "that.",
                     ToolCall("scripted-1", "book_table", '{"time": "7 PM", "people": 4}')]
    assert list(llm.stream([], BOOK_SPEC)) == [ToolCall("scripted-2", "book_table", "{}")]
    assert list(llm.stream([], BOOK_SPEC)) == ["Done."]
    assert llm.exhausted and list(llm.stream([], BOOK_SPEC)) == []


SCRIPT = '''
replies = [
  "Sure.",
  { say = "Let me book that.", tool = "book_table", arguments = { time = "7 PM", people = 4 } },
  { tool = "book_table", arguments = { time = "8 PM", people = 2 } },
  "Booked.",
]
'''


def test_from_file_reads_tool_entries(tmp_path: Path) -> None:
    path = tmp_path / "script.toml"
    path.write_text(SCRIPT, encoding="utf-8")
    llm = ScriptedLanguageModel.from_file(path)
    assert list(llm.stream([], ())) == ["Sure."]
    *said, call = list(llm.stream([], ()))
    assert "".join(str(s) for s in said) == "Let me book that."
    assert isinstance(call, ToolCall) and json.loads(call.arguments) == {"time": "7 PM", "people": 4}
    box = load_tools(["book_table"], tmp_path / "b.db", "x")
    assert box.run(call).startswith("booked: a table for 4 people at 7 PM")


def test_call_file_replies_take_tool_entries() -> None:
    call = parse_call(SCRIPT.replace("replies", "[agent]\nreplies", 1)
                      + '[[caller]]\nsay = "hi"\nat = 0.5\n', "call.toml")
    assert call.replies is not None and call.replies[0] == "Sure."
    assert call.replies[2] == ScriptedToolReply("book_table", '{"time": "8 PM", "people": 2}', "")


@pytest.mark.parametrize(("entry", "key", "says"), [
    ('{ say = "x" }', "agent.replies[2].tool", "must name the tool"),
    ('{ tool = "" }', "agent.replies[2].tool", "must name the tool"),
    ('{ tool = "book_table", say = 3 }', "agent.replies[2].say", "must be a string"),
    ('{ tool = "book_table", arguments = [1] }', "agent.replies[2].arguments", "must be a table"),
    ('{ tool = "book_table", arguments = { time = 19:00:00 } }', "agent.replies[2].arguments",
     "TOML date or time"),
    ('{ tool = "book_table", args = {} }', "agent.replies[2].args", "unknown key"),
    ("42", "agent.replies[2]", "must be a string or a tool-call table"),
])
def test_bad_reply_entries_name_file_key_and_reason(entry: str, key: str, says: str) -> None:
    text = f'[agent]\nreplies = ["Hi.", {entry}]\n[[caller]]\nsay = "hi"\nat = 0.5\n'
    with pytest.raises(ConfigError) as caught:
        parse_call(text, "call.toml")
    assert (caught.value.path, caught.value.key) == ("call.toml", key)
    assert says in caught.value.reason


def test_script_file_errors_name_the_file(tmp_path: Path) -> None:
    path = tmp_path / "s.toml"
    path.write_text('replies = "one"\n', encoding="utf-8")
    with pytest.raises(ConfigError, match=r"s\.toml: replies: must be a list of strings"):
        ScriptedLanguageModel.from_file(path)
    with pytest.raises(ConfigError) as caught:
        parse_replies(["ok", {"tool": "t", "arguments": "x"}], "f.toml", "replies")
    assert caught.value.key == "replies[2].arguments"


# --- real SmolLM2-135M under the grammar ---------------------------------------------------

SYSTEM = "You are a helpful voice assistant for Luigi's restaurant. Answer in one or two short sentences."
BOOKING_REQUESTS = ["Book a table for 4 people at 7 PM", "Reserve a table for 6 at 9 PM please."]


@pytest.fixture(scope="module")
def smollm(smollm2: Callable[..., LlamaLanguageModel]) -> LlamaLanguageModel:
    return smollm2(max_tokens=80, temperature=0.3)


def run(llm: LlamaLanguageModel, messages: list[ChatMessage], box: Toolbox
        ) -> tuple[str, list[ToolCall]]:
    items = list(llm.stream(messages, box.specs()))
    calls = [i for i in items if isinstance(i, ToolCall)]
    text = "".join(i for i in items if isinstance(i, str))
    return text, calls


@pytest.mark.models
def test_smollm_books_a_table_with_valid_arguments(smollm: LlamaLanguageModel, tmp_path: Path
                                                   ) -> None:
    box = load_tools(["book_table"], tmp_path / "b.db", "x")
    outcomes = []
    for request in BOOKING_REQUESTS * 2:  # twice: the same prompt gives the same reply
        text, calls = run(smollm, [{"role": "system", "content": SYSTEM},
                                   {"role": "user", "content": request}], box)
        # Only valid output: speech without JSON, or exactly one call the Toolbox accepts.
        assert not any(c in text for c in '{}"')
        assert len(calls) <= 1 and (calls or text.strip())
        outcomes.append((text, [(c.name, json.loads(c.arguments)) for c in calls]))
        for call in calls:
            assert not box.run(call).startswith("error:")
    # What SmolLM2-135M does with this prompt (seed 7, temperature 0.3): it always calls the
    # tool, with numbers from the request, but not always in the right place (measured: "7 PM"
    # and 4 for the first request; for the second, "9 PM"/6 or "6"/9 depending on what the
    # KV cache held before). The same prompt on the same state gives the same reply.
    assert outcomes[:2] == outcomes[2:]
    assert outcomes[0] == ("", [("book_table", {"time": "7 PM", "people": 4})])
    text, [(name, arguments)] = outcomes[1]
    assert text == "" and name == "book_table"
    assert {arguments["people"], int(arguments["time"].split()[0])} == {6, 9}


@pytest.mark.models
def test_after_a_result_the_model_must_speak(smollm: LlamaLanguageModel, tmp_path: Path) -> None:
    box = load_tools(["book_table"], tmp_path / "b.db", "x")
    call = ToolCall("k1", "book_table", '{"time": "7 PM", "people": 4}')
    result = box.run(call)
    messages: list[ChatMessage] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": BOOKING_REQUESTS[0]},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "k1", "type": "function",
             "function": {"name": call.name, "arguments": call.arguments}}]},
        {"role": "tool", "tool_call_id": "k1", "content": result},
    ]
    text, calls = run(smollm, messages, box)
    assert calls == [] and text.strip() and not any(c in text for c in '{}"')
    assert "B1" in text  # SmolLM2 reads the result back, reference included


@pytest.mark.models
def test_closing_the_stream_stops_generation_and_plain_replies_are_unchanged(
        smollm: LlamaLanguageModel, tmp_path: Path) -> None:
    box = load_tools(["book_table"], tmp_path / "b.db", "x")
    stream = smollm.stream([{"role": "system", "content": SYSTEM},
                            {"role": "user", "content": BOOKING_REQUESTS[0]}], box.specs())
    next(stream)  # a token of the tool call: "" (nothing to say)
    started = time.monotonic()
    stream.close()
    assert time.monotonic() - started < 0.5
    plain = list(smollm.stream([{"role": "system", "content": SYSTEM},
                                {"role": "user", "content": "Hello!"}]))
    assert plain and all(isinstance(p, str) and p for p in plain)
    assert not "".join(plain).lstrip().startswith("{")
