"""Tool calls inside a reply (heard-truth guarantee 5): a hop that only calls a tool opens no
unit; the call and its result are in history even when the sentence about it was never heard."""

from __future__ import annotations

import json

import pytest

from edge_agent.conversation.tools import MAX_STRING, Tool, Toolbox
from edge_agent.engines.base import ToolCall
from edge_agent.events import BargeIn, LlmRequest, Notice, ToolUsed, UnitFinalized
from edge_agent.memory.context import MemoryContext, WindowSettings
from tests.fakes import speech
from tests.timeline import Harness, stop

BOOK = ToolCall("call-1", "book_table", json.dumps({"time": "7 PM", "people": 4}))


class Bookings:
    """A tool with a visible side effect: the bookings it made."""

    def __init__(self) -> None:
        self.made: list[tuple[str, int]] = []

    def book_table(self, time: str, people: int) -> str:
        self.made.append((time, people))
        return f"booked: table for {people} at {time}, reference B{len(self.made)}"

    def toolbox(self) -> Toolbox:
        return Toolbox([Tool(
            "book_table", "Book a table tonight.",
            {"type": "object", "properties": {"time": {"type": "string"},
                                              "people": {"type": "integer"}},
             "required": ["time", "people"]},
            self.book_table)])


async def test_a_hop_that_only_calls_a_tool_opens_no_unit() -> None:
    bookings = Bookings()
    h = Harness(transcripts=["book seven pm for four"], greeting="",
                replies=[[BOOK], "Done, a table for four at 7 PM."], tools=bookings.toolbox())
    task = await h.start()
    h.mic.say(speech(0.6))
    await h.run_until(lambda: len(h.events(UnitFinalized)) == 1)
    await stop(task)

    assert bookings.made == [("7 PM", 4)]
    (unit,) = [e.finalize for e in h.events(UnitFinalized)]  # type: ignore[attr-defined]
    assert unit.unit_id == "u1" and unit.heard == "Done, a table for four at 7 PM."
    turns = h.conversation.history.turns
    assert [t.role for t in turns] == ["user", "tool", "assistant"]
    assert turns[1].tool_call == BOOK and turns[1].text.startswith("booked:")
    # Both hops were offered the tool; the second saw the call and its result.
    assert h.llm.tools_offered[0][0]["function"]["name"] == "book_table"
    assert h.llm.requests[1][-2:] == [
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "call-1", "type": "function",
             "function": {"name": "book_table", "arguments": BOOK.arguments}}]},
        {"role": "tool", "tool_call_id": "call-1",
         "content": "booked: table for 4 at 7 PM, reference B1"},
    ]
    requests = h.events(LlmRequest)
    assert [(r.turn, r.hop) for r in requests] == [(1, 1), (1, 2)]  # type: ignore[attr-defined]


async def test_unheard_announcement_leaves_no_turn_but_the_tool_call_stays() -> None:
    bookings = Bookings()
    # TTS takes 0.8 s: the announcement exists as text, never as played audio, when the user
    # cuts in.
    h = Harness(transcripts=["book seven pm for four", "wait, make it eight"], greeting="",
                replies=[["Let me book that for you. ", BOOK], "All set.", "Eight it is."],
                tools=bookings.toolbox(), tts_delay=0.8)
    task = await h.start()
    h.mic.say(speech(0.6))
    await h.run_until(lambda: len(h.events(ToolUsed)) == 1)
    h.mic.say(speech(0.6))
    await h.run_until(lambda: len(h.events(BargeIn)) == 1)
    await h.run_until(lambda: len(h.llm.requests) == 3)
    await h.run_until(lambda: len(h.events(UnitFinalized)) == 3)
    await stop(task)

    assert bookings.made == [("7 PM", 4)]  # the action happened
    finals = [e.finalize for e in h.events(UnitFinalized)]  # type: ignore[attr-defined]
    assert [(f.generated, f.heard) for f in finals[:2]] == [
        ("Let me book that for you. ", ""), ("All set.", "")]
    turns = [(t.role, t.text) for t in h.conversation.history.turns]
    assert turns == [
        ("user", "book seven pm for four"),
        ("tool", "booked: table for 4 at 7 PM, reference B1"),
        ("user", "wait, make it eight"),
        ("assistant", "Eight it is."),
    ]
    third = h.llm.requests[2]
    assert not any("Let me book" in str(m.get("content")) for m in third)
    assert any(m["role"] == "tool" for m in third)


async def test_tool_errors_reach_the_model_and_the_record() -> None:
    bookings = Bookings()
    bad = [ToolCall("c1", "book_table", '{"time": "7 PM"}'),
           ToolCall("c2", "order_pizza", "{}"),
           ToolCall("c3", "book_table", "{not json")]
    h = Harness(transcripts=["book"], greeting="", replies=[bad, "Sorry, that did not work."],
                tools=bookings.toolbox())
    task = await h.start()
    h.mic.say(speech(0.6))
    await h.run_until(lambda: len(h.events(UnitFinalized)) == 1)
    await stop(task)
    results = [e.result for e in h.events(ToolUsed)]  # type: ignore[attr-defined]
    assert results[0] == "error: missing argument(s): people"
    assert results[1].startswith("error: there is no tool named 'order_pizza'")
    assert results[2].startswith("error: the arguments are not valid JSON")
    assert bookings.made == []
    assert [t.role for t in h.conversation.history.turns] == [
        "user", "tool", "tool", "tool", "assistant"]


async def test_a_model_that_keeps_calling_tools_is_stopped() -> None:
    bookings = Bookings()
    h = Harness(transcripts=["book"], greeting="", replies=[[BOOK]] * 10,
                tools=bookings.toolbox())
    task = await h.start()
    h.mic.say(speech(0.6))
    await h.run_until(lambda: any("max_hops" in n.text  # type: ignore[attr-defined]
                                  for n in h.events(Notice)))
    await stop(task)
    assert len(bookings.made) == 3  # max_hops (3): exactly that many calls run
    assert len(h.events(ToolUsed)) == 3
    assert len(h.llm.requests) == 4  # the fourth asked for a fourth call, which was not run
    assert h.events(UnitFinalized) == []


@pytest.mark.parametrize("allowed", [0, 1, 2])
async def test_max_hops_is_the_number_of_tool_calls_a_turn_may_run(allowed: int) -> None:
    bookings = Bookings()
    h = Harness(transcripts=["book"], greeting="", replies=[[BOOK]] * 5,
                tools=bookings.toolbox(), overrides={"max_tool_hops": allowed})
    task = await h.start()
    h.mic.say(speech(0.6))
    await h.run_until(lambda: bool(h.events(Notice)))
    await stop(task)
    assert len(bookings.made) == allowed
    assert len(h.llm.requests) == allowed + 1
    (notice,) = h.events(Notice)
    assert f"more than the {allowed} tool call(s)" in notice.text  # type: ignore[attr-defined]
    # 0: no tool is even offered, so a real model answers in words.
    assert all(bool(offered) == (allowed > 0) for offered in h.llm.tools_offered)


async def test_calls_in_one_hop_count_one_by_one() -> None:
    bookings = Bookings()
    two = [BOOK, ToolCall("call-2", "book_table", json.dumps({"time": "8 PM", "people": 2}))]
    h = Harness(transcripts=["book"], greeting="", replies=[two, "Both booked."],
                tools=bookings.toolbox(), overrides={"max_tool_hops": 1})
    task = await h.start()
    h.mic.say(speech(0.6))
    await h.run_until(lambda: bool(h.events(Notice)))
    await stop(task)
    assert bookings.made == []  # two calls asked for, one allowed: neither half is run
    assert len(h.llm.requests) == 1


def test_tool_turns_are_assembled_as_call_and_result() -> None:
    context = MemoryContext("SYS", " [x]", WindowSettings(window_turns=1, fold_turns=1,
                                                          max_facts=8))
    context.history.add_user("book it")
    context.history.add_tool(BOOK, "booked")
    context.apply_fold(1, "")
    messages = context.messages()
    assert [m["role"] for m in messages] == ["system", "assistant", "tool"]
    assert messages[1]["tool_calls"][0]["function"]["name"] == "book_table"


def test_argument_types_are_checked() -> None:
    bookings = Bookings()
    box = bookings.toolbox()
    wrong = ToolCall("c", "book_table", json.dumps({"time": "7", "people": "four"}))
    assert box.run(wrong) == (
        "error: argument 'people' must be of JSON type integer, got 'four'")
    boolean = ToolCall("c", "book_table", json.dumps({"time": "7", "people": True}))
    assert box.run(boolean).startswith("error: argument 'people'")
    extra = ToolCall("c", "book_table", json.dumps({"time": "7", "people": 2, "vip": True}))
    assert box.run(extra).startswith("error: unknown argument 'vip'")
    assert box.run(ToolCall("c", "book_table", "[1]")) == "error: the arguments must be a JSON object"
    assert bookings.made == []


def test_arguments_are_checked_against_the_whole_schema_before_the_tool_runs() -> None:
    ran: list[dict[str, object]] = []
    schema = {"type": "object", "properties": {
        "seat": {"type": "string", "enum": ["inside", "outside"]},
        "name": {"type": "string", "maxLength": 40}, "note": {"type": "string"},
        "people": {"type": "integer", "minimum": 1, "maximum": 20}}}
    box = Toolbox([Tool("reserve", "Reserve.", schema, lambda **a: str(ran.append(a)))])

    def run(**arguments: object) -> str:
        return box.run(ToolCall("c", "reserve", json.dumps(arguments)))

    assert run(seat="roof") == "error: argument 'seat' must be one of 'inside', 'outside'"
    assert run(name="x" * 41) == "error: argument 'name' must be at most 40 characters long"
    assert run(note="x" * (MAX_STRING + 1)) == (
        f"error: argument 'note' must be at most {MAX_STRING} characters long")
    assert run(people=0) == "error: argument 'people' must be at least 1"
    assert run(people=21) == "error: argument 'people' must be at most 20"
    deep = ToolCall("c", "reserve", "[" * 2000 + "]" * 2000)  # within the length bound
    assert box.run(deep).startswith("error: the arguments are not valid JSON")
    assert ran == []
    assert run(seat="outside", name="Ann", note="window", people=20) == "None"
    assert ran == [{"seat": "outside", "name": "Ann", "note": "window", "people": 20}]


def test_a_result_is_made_storable() -> None:
    box = Toolbox([Tool("echo", "Echo.", {"type": "object", "properties": {}},
                        lambda: "caf\ud800")])
    assert box.run(ToolCall("c", "echo", "{}")) == "caf\ufffd"


def test_a_script_calling_a_tool_that_is_not_enabled_is_refused_before_the_call() -> None:
    import pytest

    from edge_agent.app import build_conversation, conversation_parts
    from edge_agent.audio.virtual import VirtualMicrophone, VirtualSpeaker
    from edge_agent.clock import VirtualClock
    from edge_agent.config import Config
    from edge_agent.conversation.agent import Engines
    from edge_agent.engines.llm.scripted import ScriptedLanguageModel, ScriptedToolReply
    from edge_agent.errors import ConfigError
    from edge_agent.events import EventLog
    from tests.fakes import FakeRecognizer, FakeSpeech, FakeVad

    clock = VirtualClock()
    script = ScriptedLanguageModel([ScriptedToolReply("book_table", BOOK.arguments)])
    engines = Engines(FakeVad(), FakeRecognizer([]), script, FakeSpeech())
    with pytest.raises(ConfigError, match="book_table, which is not enabled"):
        build_conversation(Config(), conversation_parts(Config()), mic=VirtualMicrophone(clock),
                           speaker=VirtualSpeaker(clock, 16000), engines=engines,
                           log=EventLog(clock))
