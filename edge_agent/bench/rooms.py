"""`edge-agent bench rooms`: the echo canceller and the agent in a simulated room (a loudspeaker
and a microphone in one box: 40 ms delay, 150 ms of reverberation, a small speaker's clipping),
through the real engines on the virtual audio pair, as `demo --call` runs them.

- the canceller alone (`rooms_canceller`): ERLE in the first second and steady, at echo 0.3
  and 1.0; its CPU per second of audio; the latency it adds;
- interruptions (`rooms_calls.interruption_call`, at echo 0.3 and 1.0): the caller cuts into
  the agent's replies; the WER of what it said over the agent (double talk), the share of
  interruptions taken and onset -> playback stopped, on the first reply (the canceller still
  learning the room) and on later ones;
- self-interruptions (`replies_call`, echo 1.0): replies with nobody speaking over them;
- listening (`LISTENING_SCENARIOS`): the caller's WER in a room that is not quiet;
- microphone arrays (`rooms_arrays`): one microphone and 2-, 4- and 6-mic arrays in a café
  where everyone has a place (WER with 0, 2 and 4 people talking nearby, interruptions at echo
  1.0, each beamformer's CPU and latency).

The caller's lines are said in the agent's own Piper voice (as in `demo --call`). Scripted
replies; the cue of each interruption is drawn from `seed`.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from edge_agent.audio.room import Room
from edge_agent.bench.clipset import BABBLE_LINES
from edge_agent.bench.latency import INTERRUPTIONS, QUESTIONS, REPLY
from edge_agent.bench.rooms_arrays import measure_arrays
from edge_agent.bench.rooms_calls import (
    CallRunner,
    LineOutcome,
    interruption_call,
    kept_events,
    line_json,
    line_outcomes,
    questions_call,
    replies_call,
    room_config,
    run_call,
    self_interruptions,
    wer_percent,
)
from edge_agent.bench.rooms_canceller import FAR_END_TEXTS, measure_canceller
from edge_agent.bench.sizes import ROOM_INTERRUPTIONS, ROOM_REPLIES
from edge_agent.bench.stats import summarize
from edge_agent.config import Config
from edge_agent.demo.talkers import Talker
from edge_agent.engines.base import TextToSpeech
from edge_agent.memory.record import record_events

ROOM = Room(delay_ms=40.0, reverb_ms=150.0, clip=0.5, seed=1)
"""The kiosk's echo path (its gain is each measurement's)."""
ECHO_GAINS = (0.3, 1.0)
"""A quiet kiosk (the agent 10 dB down in its own microphone) and a loud one."""
SELF_ECHO_GAIN = 1.0
SELF_REPLY = "Reply number one is here, and it keeps talking for a little while longer."
"""Each reply of the self-interruption call (~4 s)."""
SHORT_REPLY = "Sure, one moment."
TARGETS = {"erle_steady_db": ">= 30", "self_interruptions": "0",
           "interruptions_taken_echo_1": "100 %", "stop_ms": "<= 250",
           "cpu_percent_of_core": "<= 10"}
"""The issue's targets, printed next to the figures."""


@dataclass(frozen=True)
class ListeningScenario:
    """A room the caller is heard in (no interruptions: questions said while the agent is
    silent, at echo 0.3), and the microphone's processing in it."""

    name: str
    """The figure's name in the table."""
    room: Room
    noise_suppression: str = "off"
    """`[audio] noise_suppression` for the call."""
    talkers: tuple[Talker, ...] = ()
    """Other people talking in the room."""
    talker_gate: str | None = None
    """`[audio] talker_gate` for the call (None: as the config has it)."""


def _two_talkers(level_db: float) -> tuple[Talker, ...]:
    """Two people chatting nearby, each `level_db` against the caller, the second a little
    after the first (espeak-ng voices: not the caller's)."""
    return (Talker(BABBLE_LINES[:2], level_db=level_db),
            Talker(BABBLE_LINES[2:], level_db=level_db, start=1.3))


LISTENING_SCENARIOS = (
    ListeningScenario("steady noise -35 dBFS pink, suppression off",
                      dataclasses.replace(ROOM, echo_gain=0.3, noise_db=-35.0), "off"),
    ListeningScenario("steady noise -35 dBFS pink, suppression on",
                      dataclasses.replace(ROOM, echo_gain=0.3, noise_db=-35.0), "on"),
    ListeningScenario("two talkers 10 dB down, talker gate off",
                      dataclasses.replace(ROOM, echo_gain=0.3), talkers=_two_talkers(-10.0),
                      talker_gate="off"),
    ListeningScenario("two talkers 10 dB down, talker gate level",
                      dataclasses.replace(ROOM, echo_gain=0.3), talkers=_two_talkers(-10.0),
                      talker_gate="level"),
    ListeningScenario("two talkers 5 dB down, talker gate level",
                      dataclasses.replace(ROOM, echo_gain=0.3), talkers=_two_talkers(-5.0),
                      talker_gate="level"),
)
"""The rooms whose caller WER `bench rooms` reports, one row each."""


@dataclass(frozen=True)
class RoomsPlan:
    """How much `bench rooms` measures (the full run's sizes, or `quick`)."""

    interruptions: int = ROOM_INTERRUPTIONS.full
    """Interruptions per call, at each echo gain: the first cuts the first reply."""
    replies: int = ROOM_REPLIES.full
    """Replies of the self-interruption call."""
    listening_lines: int = 6
    """Questions per listening scenario."""
    far_end_texts: int = len(FAR_END_TEXTS)
    """Replies the canceller's ERLE is measured on (~5 s each)."""
    array_lines: int = 8
    """Questions per call in the café, for each microphone setup and scenario."""
    array_interruptions: int = 4
    """Interruptions over the agent per microphone setup, at echo 1.0."""
    arrays_quick: bool = False
    """Only one microphone and the 4-mic array, with two talkers 10 dB down."""
    seed: int = 1


def quick_plan(seed: int) -> RoomsPlan:
    """About 2 minutes on a 2-core PC: one later reply, 5 replies, 2 questions a room."""
    return RoomsPlan(interruptions=ROOM_INTERRUPTIONS.quick, replies=ROOM_REPLIES.quick,
                     listening_lines=2, far_end_texts=2, array_lines=2,
                     array_interruptions=ROOM_INTERRUPTIONS.quick, arrays_quick=True, seed=seed)


def run_rooms(config: Config, tts: TextToSpeech, plan: RoomsPlan, say: Callable[[str], None],
              calls: CallRunner = run_call) -> dict[str, Any]:
    """Every measurement of the plan; the part's JSON (see the module docstring). `calls`
    runs each call (the real engines on the virtual audio pair)."""
    say(f"the canceller on {plan.far_end_texts} replies through the room, echo "
        f"{' and '.join(map(str, ECHO_GAINS))}")
    canceller = measure_canceller(tts, ROOM, ECHO_GAINS, FAR_END_TEXTS[:plan.far_end_texts])
    for erle in canceller["erle"]:
        say(f"  ERLE at echo {erle['echo_gain']}: first second {erle['first_second_db']} dB, "
            f"steady {erle['steady_db']} dB")
    rng = random.Random(plan.seed)
    interruptions = [_interruptions(config, gain, offset, plan, rng, say, calls)
                     for offset, gain in enumerate(ECHO_GAINS)]
    say(f"{plan.replies} replies at echo {SELF_ECHO_GAIN}, nobody speaking over them")
    record = calls(room_config(config), replies_call(
        dataclasses.replace(ROOM, echo_gain=SELF_ECHO_GAIN), plan.replies, SELF_REPLY))
    own = {"echo_gain": SELF_ECHO_GAIN, **self_interruptions(record),
           "events": kept_events(record)}
    say(f"  {own['barge_ins']} self-interruption(s), {own['pauses']} pause(s) in "
        f"{own['replies']} replies")
    listening = [_listening(config, scenario, plan, say, calls)
                 for scenario in LISTENING_SCENARIOS]
    arrays = measure_arrays(config, plan.arrays_quick, plan.array_lines,
                            plan.array_interruptions, plan.seed, say, calls)
    return {"benchmark": "rooms", "seed": plan.seed,
            "room": {"delay_ms": ROOM.delay_ms, "reverb_ms": ROOM.reverb_ms, "clip": ROOM.clip,
                     "seed": ROOM.seed},
            "caller_voice": "the agent's voice", "targets": dict(TARGETS),
            "canceller": canceller, "interruptions": interruptions,
            "self_interruptions": own, "listening": listening, "arrays": arrays}


def _interruptions(config: Config, gain: float, offset: int, plan: RoomsPlan,
                   rng: random.Random, say: Callable[[str], None], calls: CallRunner
                   ) -> dict[str, Any]:
    # Each gain's call starts `offset` phrases further: a recognizer's luck on one phrase is
    # not the figure.
    texts = [INTERRUPTIONS[(i + offset) % len(INTERRUPTIONS)]
             for i in range(plan.interruptions)]
    cues = [round(rng.uniform(1.5, 3.0), 2) for _ in texts]
    say(f"{len(texts)} interruptions at echo {gain}, at {', '.join(f'{c} s' for c in cues)} "
        "into the replies")
    call = interruption_call(dataclasses.replace(ROOM, echo_gain=gain), QUESTIONS, texts, cues,
                             REPLY, SHORT_REPLY)
    record = calls(room_config(config), call)
    outcomes = line_outcomes(call, record_events(record))
    over = [o for o in outcomes if o.kind == "interruption"]
    for outcome in over:
        say(f"  {outcome.say!r} -> {outcome.heard!r}: "
            f"{f'stopped in {outcome.stop_ms:.0f} ms' if outcome.taken else 'NOT TAKEN'}"
            f"{' (already paused on its own echo)' if outcome.already_paused else ''}")
    return {"echo_gain": gain, "double_talk_wer_percent": wer_percent(over),
            "first_reply": _barge_ins(over[:1]), "later_replies": _barge_ins(over[1:]),
            "lines": [line_json(o) for o in outcomes], "unsaid": len(call.lines) - len(outcomes),
            "events": kept_events(record)}


def _barge_ins(outcomes: Sequence[LineOutcome]) -> dict[str, Any]:
    taken = [o for o in outcomes if o.taken]
    return {"count": len(outcomes), "taken": len(taken),
            "already_paused": sum(o.already_paused for o in taken),
            "stop_ms": summarize([o.stop_ms for o in taken if o.stop_ms is not None])}


def _listening(config: Config, scenario: ListeningScenario, plan: RoomsPlan,
               say: Callable[[str], None], calls: CallRunner) -> dict[str, Any]:
    questions = [QUESTIONS[i % len(QUESTIONS)] for i in range(plan.listening_lines)]
    say(f"{len(questions)} questions, {scenario.name}")
    call = questions_call(scenario.room, questions, SHORT_REPLY, scenario.talkers)
    call_config = room_config(config, scenario.noise_suppression, scenario.talker_gate)
    record = calls(call_config, call)
    outcomes = line_outcomes(call, record_events(record))
    say(f"  WER {wer_percent(outcomes)} %")
    return {"scenario": scenario.name, "echo_gain": scenario.room.echo_gain,
            "noise_db": scenario.room.noise_db, "noise_kind": scenario.room.noise_kind,
            "noise_suppression": scenario.noise_suppression,
            "talkers_db": [t.level_db for t in scenario.talkers],
            "talker_gate": call_config.audio.talker_gate,
            "wer_percent": wer_percent(outcomes), "lines": [line_json(o) for o in outcomes],
            "unsaid": len(call.lines) - len(outcomes)}


def table(result: dict[str, Any]) -> str:
    """`bench rooms`' own table: the summary rows with the targets beside them."""
    from edge_agent.bench.summary import rooms_rows

    lines = [f"rooms: delay {result['room']['delay_ms']:.0f} ms, reverb "
             f"{result['room']['reverb_ms']:.0f} ms, clip {result['room']['clip']}; the caller "
             f"in {result['caller_voice']}", f"{'':60}{'value':>9}{'p95':>9}{'n':>5}"]
    for row in rooms_rows(result):
        value = row["p50"] if row["value"] is None else row["value"]
        shown = "-" if value is None else f"{value:g}"
        p95 = "-" if row["p95"] is None else f"{row['p95']:g}"
        note = f"  ({row['note']})" if row["note"] else ""
        lines.append(f"{row['figure']:60}{shown:>9}{p95:>9}{row['n']:>5}  {row['unit']}{note}")
    return "\n".join(lines)
