"""What the recorded agent said and did, to be said and done again in the replay.

The replay isolates turn-taking and heard truth from the model: the language model is the
scripted one, answering each request with what the recorded model generated for it (and each
turn the venue's knowledge answered itself with what it said), and tools return their recorded
results (a replay never books a table twice). The session starts as it
did (greeted at start-up, opened by speech or by the wake phrase) with the recorded greeting.

Which request produced which unit is not written anywhere; it is worked out from the events:
a unit belongs to the user turn after which it started (one finalized right after a user turn
was stopped by it, so it belongs to the turn before), a turn's requests are its hops, in
order, and its units go to its hops in order. A hop that called a tool says something before
the call only when there are more units than hops without a tool (llama.cpp's tool grammar
lets a hop speak or call, the scripted model may do both).
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from edge_agent.conversation.failures import FALLBACK_LINE
from edge_agent.conversation.tools import Tool, Toolbox
from edge_agent.engines.llm.scripted import ScriptedReply, ScriptedToolReply
from edge_agent.events import (
    CommandAnswered,
    Event,
    KnowledgeUsed,
    Notice,
    PlaybackStarted,
    ReplyFailed,
    SessionStarted,
    ToolUsed,
    TurnStage,
    UnitFinalized,
    UserTurn,
)
from edge_agent.heard.ledger import Finalize
from edge_agent.knowledge.ground import SAID
from edge_agent.memory.record import LlmRequestRecord
from edge_agent.replay.timeline import TimedEvent, Timeline

SESSION_START = {"start-up": "immediate", "speech": "speech", "wake": "wake",
                 "resumed": "immediate", "timer": "speech", "announcement": "speech"}
"""How the recorded session opened -> the replay's `[session] start`."""


@dataclass(frozen=True)
class ToolResult:
    """A tool call of the recording and what it returned."""

    name: str
    arguments: str
    """The arguments as the model wrote them (JSON text)."""
    result: str


@dataclass(frozen=True)
class AgentScript:
    session_start: str
    """"immediate", "speech" or "wake"."""
    greeting: str
    """What the agent said on its own at the start ("" for nothing)."""
    replies: tuple[ScriptedReply, ...]
    """One per model request, in order."""
    tool_results: tuple[ToolResult, ...]
    """Every tool call's recorded result, in order."""
    notes: tuple[str, ...]
    """What of the recording cannot be said again (shown with the report)."""


def agent_script(requests: Sequence[LlmRequestRecord], timeline: Timeline) -> AgentScript:
    """The script of a session from its `llm_requests` and its events."""
    notes: list[str] = []
    events = list(timeline.events)
    started = timeline.of_type(SessionStarted)
    how = started[0].event.how if started else "start-up"
    finals = {e.event.finalize.unit_id: e.event.finalize
              for e in timeline.of_type(UnitFinalized)}
    failed = bool(timeline.of_type(ReplyFailed))
    by_turn: dict[Turn, list[Finalize]] = {}
    for unit_id, turn in _unit_turns(events).items():
        finalize = finals.get(unit_id)
        if finalize is None:
            continue
        if failed and finalize.generated == FALLBACK_LINE:
            notes.append(f"{unit_id} was the fallback line after an engine failure; failures "
                         "are not replayed")
            continue
        by_turn.setdefault(turn, []).append(finalize)
    greeting_units = [unit for turn in sorted(by_turn) if turn[1] == 0
                      for unit in by_turn.pop(turn)]
    # A session a ring or an announcement opened had no greeting: each unit of its own is one.
    greeted = how not in ("timer", "announcement") and bool(greeting_units)
    greeting = greeting_units[0].generated if greeted else ""
    rings = greeting_units[1:] if greeted else greeting_units
    if rings:
        notes.append(f"{len(rings)} unit(s) said on the agent's own after the greeting (a "
                     f"timer's ring or the house's announcement: "
                     f"{', '.join(u.unit_id for u in rings)}); neither is replayed")
    runs = _run_numbers(events)
    tools: dict[Turn, list[ToolResult]] = {}
    for used in timeline.of_type(ToolUsed):
        call = used.event.call
        tools.setdefault((runs[used.run_id], used.event.turn), []).append(
            ToolResult(call.name, call.arguments, used.event.result))
    answering = list(dict.fromkeys(runs[e.run_id] for e in timeline.of_type(UserTurn)))
    # A turn the venue's knowledge answered itself had no request: the scripted model (the
    # replay has no knowledge) says its words in one hop.
    knew = {((runs[e.run_id], e.event.turn), 1) for e in timeline.of_type(KnowledgeUsed)
            if e.event.how in SAID}
    # A timer command was answered by the agent's rules (the replay has no timers): the script
    # says its words, or nothing, so the turns after it keep their replies.
    commands = {((runs[e.run_id], e.event.turn), 1) for e in timeline.of_type(CommandAnswered)}
    if commands:
        notes.append(f"{len(commands)} turn(s) answered by the timers' rules: their words are "
                     "said again, but no timer is set or rung")
    hops = sorted({*_with_runs(requests, answering), *knew, *commands})
    replies = _replies(hops, by_turn, tools, notes)
    for (run, number), units in sorted(by_turn.items()):
        notes.append(f"turn {number}{_of_run(run)}: {len(units)} unit(s) with no model request "
                     "to match; not said again")
    results = tuple(result for key in sorted(tools) for result in tools[key])
    session_start = SESSION_START.get(how, "immediate")
    if how == "wake" and not _phrase_woke(events, started[0]):
        # Nothing of the wake word is kept (the room is not recorded while waiting): the
        # replay opens the session as the word did, greeting or answering the first words.
        session_start = "immediate" if greeting else "speech"
        notes.append("the session was opened by the wake word model: the replay opens it at "
                     "the start")
    return AgentScript(session_start, greeting, tuple(replies), results, tuple(notes))


Turn = tuple[int, int]
"""(run, user turn): turns are numbered from 1 in each run of a session (0: the greeting)."""


def _run_numbers(events: Sequence[TimedEvent[Event]]) -> dict[str, int]:
    return {run_id: number
            for number, run_id in enumerate(dict.fromkeys(e.run_id for e in events))}


def _of_run(run: int) -> str:
    return f" of run {run + 1}" if run else ""


def _with_runs(requests: Sequence[LlmRequestRecord], answering: Sequence[int]
               ) -> list[tuple[Turn, int]]:
    """Each request's (run, turn) and hop. Requests do not name their run: a run's turns count
    up from 1, so a turn lower than the one before, or a turn and hop seen already, starts the
    next run that answered a turn."""
    found: list[tuple[Turn, int]] = []
    part, previous = 0, 0
    seen: set[tuple[int, int]] = set()
    for request in requests:
        turn, hop = request["turn"], request["hop"]
        if turn < previous or (turn, hop) in seen:
            part += 1
            seen.clear()
        previous = turn
        seen.add((turn, hop))
        run = answering[part] if part < len(answering) else part
        found.append(((run, turn), hop))
    return found


def _replies(requests: Sequence[tuple[Turn, int]], units: dict[Turn, list[Finalize]],
             tools: Mapping[Turn, list[ToolResult]], notes: list[str]) -> list[ScriptedReply]:
    replies: list[ScriptedReply] = []
    for turn in dict.fromkeys(turn for turn, _ in requests):
        hops = len({hop for other, hop in requests if other == turn})
        calls = tools.get(turn, [])
        said = units.pop(turn, [])
        where = f"turn {turn[1]}{_of_run(turn[0])}"
        if len(calls) > hops:
            notes.append(f"{where}: {len(calls)} tool calls in {hops} model request(s); "
                         "only one per request is replayed")
        if len(said) > hops:
            notes.append(f"{where}: {len(said)} units from {hops} model request(s); the "
                         "extra ones are not said again")
        calling = {hop: calls[hop] for hop in range(min(len(calls), hops))}
        # Units go to the hops without a tool call first, the latest first, kept in order.
        speaking = sorted(sorted(range(hops), key=lambda h: (h in calling, -h))[:len(said)])
        text = {hop: unit.generated for hop, unit in zip(speaking, said, strict=False)}
        for hop in range(hops):
            call = calling.get(hop)
            replies.append(text.get(hop, "") if call is None
                           else ScriptedToolReply(call.name, call.arguments, text.get(hop, "")))
    return replies


def _unit_turns(events: Sequence[TimedEvent[Event]]) -> dict[str, Turn]:
    """Each unit's turn (0: the greeting), in the order units appear."""
    turns: dict[str, Turn] = {}
    runs = _run_numbers(events)
    run = answered = current = 0
    stopping = False  # right after a user turn: units finalized now were stopped by it
    for index, event in enumerate(events):
        if runs[event.run_id] != run:
            run, answered, current = runs[event.run_id], 0, 0
        if isinstance(event.event, UserTurn):
            if _answered(events, index):
                answered += 1
                current = answered
                stopping = True
            elif _greeted(events, index):
                current = 0
            continue
        if isinstance(event.event, PlaybackStarted):
            turns.setdefault(event.event.unit_id, (run, current))
        elif isinstance(event.event, UnitFinalized):
            turns.setdefault(event.event.finalize.unit_id,
                             (run, max(0, current - 1) if stopping else current))
            continue
        stopping = False
    return turns


def _phrase_woke(events: Sequence[TimedEvent[Event]], opened: TimedEvent[Event]) -> bool:
    """Whether the wake session `opened` was opened by a wake phrase (a user turn right before
    it), not by the wake word model."""
    index = events.index(opened)
    return index > 0 and isinstance(events[index - 1].event, UserTurn)


def _answered(events: Sequence[TimedEvent[Event]], index: int) -> bool:
    """Whether the user turn at `index` was answered by the model (not a text said while no
    session was open, nor the wake phrase alone, which the greeting answers)."""
    following = events[index + 1].event if index + 1 < len(events) else None
    if following is None:
        return True
    if isinstance(following, Notice) and following.text.startswith("no session open"):
        return False
    return not _greeted(events, index)


def _greeted(events: Sequence[TimedEvent[Event]], index: int) -> bool:
    """The user turn at `index` was the wake phrase alone: a wake session opened and its
    greeting started playing before any stage of an answer."""
    following = events[index + 1].event if index + 1 < len(events) else None
    if not isinstance(following, SessionStarted) or following.how != "wake":
        return False
    for later in events[index + 2:]:
        if isinstance(later.event, TurnStage | UserTurn):
            return False
        if isinstance(later.event, PlaybackStarted):
            return True
    return False


def recorded_toolbox(results: Sequence[ToolResult]) -> Toolbox:
    """Tools named as in the recording, each returning its recorded results in order (a call
    past them is told so): nothing is run again, nothing is written."""
    queues: dict[str, deque[str]] = {}
    arguments: dict[str, set[str]] = {}
    for result in results:
        queues.setdefault(result.name, deque()).append(result.result)
        arguments.setdefault(result.name, set()).update(_argument_names(result.arguments))

    def returning(name: str) -> Tool:
        def run(**_: object) -> str:
            queue = queues[name]
            return queue.popleft() if queue else (
                f"error: the recording has no further result of {name}")

        return Tool(name, f"{name}, as recorded",
                    {"type": "object", "properties": {a: {} for a in sorted(arguments[name])}},
                    run)

    return Toolbox([returning(name) for name in queues])


def _argument_names(arguments: str) -> list[str]:
    try:
        parsed = json.loads(arguments or "{}")
    except (ValueError, RecursionError):  # not JSON, a huge number, nested thousands deep
        return []
    return list(parsed) if isinstance(parsed, dict) else []
