"""`bench latency`'s figures, read off the two-channel recording and the agent's event log.

From the recording (caller on one channel, the agent's speaker on the other):
- **answer gap**: the caller's last audible sample of a question -> the agent's first audible
  sample after it (capture, VAD, end-of-turn silence, recognizer, model, voice, playback: all of
  it, as the caller hears it);
- **stop**: the first audible sample of a real interruption -> the agent's audio stops.
From the event log (the caller's onset taken when its line started playing):
- **word error rate** of what the agent heard of each answered line;
- **barge-in confirmed**: onset -> the interruption decided (playback cut for good);
- **interruptions missed**: interruption lines begun while the agent spoke that did not cut
  it off; one begun after the reply had ended (a short model reply) interrupts nothing and is
  counted apart (`said_in_silence`), and so is one whose reply ended on its own before the
  agent heard the line begin (`said_as_it_ended`: no speech had started over it, there was
  nothing to judge yet);
- **false interruptions**: backchannel lines that cut the agent off;
- **cut off**: questions taken as two turns or more (a pause inside the line ended the turn);
- **stages** of each answered question, from the end of the caller's speech as the agent
  heard it: transcript, request, first token, first piece, first audio;
- **audio**: the sound devices' callback threads' scheduling, the overflows and underruns
  the device reported and the devices lost (the last `AudioHealth` of the call).

The caller's lines are matched to its `CallerSpoke` events by their text, in order: an event
that matches no line of the script (a line said twice, a stray event) is reported in
`unmatched_caller_events` and attributed to no line, and a line with no event is counted in
`lines_unsaid`, instead of shifting every later line onto the wrong event.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from edge_agent.bench.recording import audible_spans
from edge_agent.bench.stats import summarize
from edge_agent.bench.wer import word_error_rate
from edge_agent.events import (
    AudioHealth,
    BargeIn,
    CallerSpoke,
    LoggedEvent,
    PlaybackStarted,
    SpeculationCancelled,
    TurnStage,
    UnitFinalized,
    UserSpeechEnded,
    UserSpeechStarted,
    UserTurn,
)


class ScriptedLine(NamedTuple):
    """One caller line of the benchmark's call."""

    kind: str
    """"question", "backchannel" or "interruption"."""
    say: str
    """What the caller says (the text of its `CallerSpoke` event)."""


STAGES = ("transcript", "request", "first_token", "first_piece", "first_audio")
"""The `TurnStage` stages, in the order a turn reaches them."""


def analyze(caller: np.ndarray, agent: np.ndarray, script: Sequence[ScriptedLine],
            events: Sequence[LoggedEvent]) -> dict[str, Any]:
    """The figures from the recording (caller and agent channels) and the event log."""
    said = audible_spans(caller, bridge_ms=600)
    played = audible_spans(agent, bridge_ms=250)
    gaps: list[float] = []
    stops: list[float] = []
    unanswered = 0
    lines = said[: len(script)]
    for index, (line, (start, end)) in enumerate(zip(script, lines, strict=False)):
        following = lines[index + 1][0] if index + 1 < len(lines) else float("inf")
        if line.kind == "question":
            after = [a for a, _ in played if end < a < following]
            if after:
                gaps.append(1000 * (after[0] - end))
            else:
                unanswered += 1
        elif line.kind == "interruption":
            cut = [b for a, b in played if a < start < b]
            if cut:
                stops.append(1000 * (cut[0] - start))
    return {
        "lines": len(script), "lines_heard_in_recording": len(said),
        "answer_gap_ms": summarize(gaps),
        "questions_unanswered": unanswered,
        "stop_ms": summarize(stops),
        **from_events(script, events),
        "audio": audio_health(events),
    }


def audio_health(events: Sequence[LoggedEvent]) -> dict[str, Any]:
    """The last `AudioHealth` of the call, as figures (nothing reported: not known, 0 each)."""
    last = next((e.event for e in reversed(events) if isinstance(e.event, AudioHealth)),
                AudioHealth("", 0, 0, 0))
    return {"scheduling": last.scheduling, "input_overflows": last.input_overflows,
            "output_underflows": last.output_underflows, "device_losses": last.losses}


def _next_line(script: Sequence[ScriptedLine], current: int | None, last: int, text: str
               ) -> int | None:
    """The script line a `CallerSpoke` with `text` stands for: the line after the last one
    matched, else a later line with that text (the lines between were never said); None for
    a repeat of the line just said or a text the script does not have."""
    if last + 1 < len(script) and script[last + 1].say == text:
        return last + 1
    if current is not None and script[current].say == text:
        return None  # the same line again: not a new line of the script
    return next((i for i in range(last + 1, len(script)) if script[i].say == text), None)


def from_events(script: Sequence[ScriptedLine], events: Sequence[LoggedEvent]
                ) -> dict[str, Any]:
    """The figures the event log gives (see the module docstring)."""
    confirmed: list[float] = []
    false_interruptions = 0
    uncut = {"missed": 0, "said_in_silence": 0, "said_as_it_ended": 0}  # lines that cut nothing
    playing: set[str] = set()  # units the agent has started playing and not finalized
    talking_at_onset = False
    heard_over = False  # the agent heard speech begin since the line's onset
    ended_unheard = False  # the agent's playback ended on its own before that
    current: int | None = None  # the script line being said, None for an unmatched event
    last = -1  # the last script line matched
    matched = 0
    unmatched: list[str] = []
    onset = 0.0
    cut = False
    speech_end: float | None = None
    turn_ends: dict[int, float] = {}  # user turn -> end of its speech, as the agent heard it
    turn_stages: dict[int, dict[str, float]] = {}
    said = ""
    heard_lines: list[tuple[str, str]] = []  # (line said, what the agent heard), answered lines
    turns_per_line: dict[int, int] = {}  # script line -> user turns taken while it was said

    def kind() -> str:
        return script[current].kind if current is not None else "unmatched"

    def end_line() -> None:
        if kind() == "interruption" and not cut:
            uncut["said_in_silence" if not talking_at_onset
                  else "said_as_it_ended" if ended_unheard else "missed"] += 1

    for entry in events:
        event, at = entry.event, entry.at
        if isinstance(event, CallerSpoke):
            end_line()
            talking_at_onset = bool(playing)
            heard_over = ended_unheard = False
            current = _next_line(script, current, last, event.text)
            if current is None:
                unmatched.append(event.text)
            else:
                last, matched = current, matched + 1
            onset = at + event.speech_offset
            cut = False
            said = event.text
        elif isinstance(event, BargeIn) and current is not None and not cut:
            cut = True
            if kind() == "interruption":
                confirmed.append(1000 * (at - onset))
            elif kind() == "backchannel":
                false_interruptions += 1
            # (a question said over the agent, when an earlier mistake shifted the replies,
            # is the caller talking over it: not the agent's judgement of a backchannel)
        elif isinstance(event, UserSpeechStarted):
            heard_over = True
        elif isinstance(event, UserSpeechEnded):
            speech_end = at - event.silence_ms / 1000
        elif isinstance(event, UserTurn):
            if current is not None:
                turns_per_line[current] = turns_per_line.get(current, 0) + 1
            heard_lines.append((said, event.text))
            said = ""
            if speech_end is not None:
                turn_ends[len(turn_ends) + 1] = speech_end
        elif isinstance(event, SpeculationCancelled):
            turn_stages.pop(event.turn, None)
        elif isinstance(event, TurnStage):
            turn_stages.setdefault(event.turn, {})[event.stage] = at
        elif isinstance(event, PlaybackStarted):
            playing.add(event.unit_id)
        elif isinstance(event, UnitFinalized):
            playing.discard(event.finalize.unit_id)
            if talking_at_onset and not playing and not cut and not heard_over:
                ended_unheard = True
    end_line()
    stages: dict[str, list[float]] = {}
    heard = [(said, text) for said, text in heard_lines if said]
    for turn, end in turn_ends.items():
        for stage, at in turn_stages.get(turn, {}).items():
            stages.setdefault(stage, []).append(1000 * (at - end))
    kinds = [line.kind for line in script]
    return {
        "user_turns_wer_percent": round(100 * word_error_rate(heard), 1),
        "user_turns": [{"said": a, "heard": b} for a, b in heard],
        "barge_in_confirmed_ms": summarize(confirmed),
        "interruptions": {"count": kinds.count("interruption"), **uncut},
        "backchannels": {"count": kinds.count("backchannel"),
                         "false_interruptions": false_interruptions},
        # A question taken as two turns or more: a pause inside it ended the turn, and the
        # agent answered part of it (audibly or not: the caller may have resumed first).
        "questions_cut_off": sum(1 for line, turns in turns_per_line.items()
                                 if script[line].kind == "question" and turns > 1),
        "lines_unsaid": len(script) - matched,
        "unmatched_caller_events": unmatched,
        "stages_ms": {stage: summarize(values) for stage, values in stages.items()},
    }


def table(result: dict[str, Any]) -> str:
    def row(name: str, stats: dict[str, Any]) -> str:
        if not stats["n"]:
            return f"{name:48}{'-':>8}{'-':>8}{'-':>8}  (none)"
        return (f"{name:48}{stats['p50']:>8.0f}{stats['p95']:>8.0f}{stats['max']:>8.0f}"
                f"  ms (n={stats['n']})")

    stages = result["stages_ms"]
    lines = [
        f"turn-taking on the real audio path: {result['exchanges']} exchanges "
        f"({result.get('line_set', 'questions')} lines), LLM "
        f"{result['engines']['llm']}, STT {result['engines']['stt']}"
        + (f", {result['busy_processes']} busy processes beside the agent"
           if result.get("busy_processes") else ""),
        f"{'':48}{'p50':>8}{'p95':>8}{'max':>8}",
        row("caller's last sample -> agent's first sample", result["answer_gap_ms"]),
        *(row(f"  speech end (as heard) -> {name.replace('_', ' ')}", stages[name])
          for name in STAGES if name in stages),
        row("interruption onset -> agent silent", result["stop_ms"]),
        row("interruption onset -> barge-in confirmed", result["barge_in_confirmed_ms"]),
        f"word error rate of the answered lines, through the microphone: "
        f"{result['user_turns_wer_percent']:.1f} % ({len(result['user_turns'])} lines, caller "
        f"voice: {result['caller_voice']})",
        f"questions unanswered: {result['questions_unanswered']}; taken as two turns (cut "
        f"off in a pause inside the line): {result['questions_cut_off']}/"
        f"{result['exchanges']}; peak RSS of the process {result['peak_rss_mb']} MB",
        f"interruptions missed: {result['interruptions']['missed']}/"
        f"{result['interruptions']['count']} ({result['interruptions']['said_in_silence']} "
        f"said after the reply had ended, "
        f"{result['interruptions']['said_as_it_ended']} as it ended, before the agent "
        f"heard them begin)",
        f"false interruptions on backchannels: {result['backchannels']['false_interruptions']}/"
        f"{result['backchannels']['count']}",
    ]
    if "sound_server" in result:
        lines.extend(_sound_server_lines(result))
    if "audio" in result:
        audio = result["audio"]
        lines.append(f"audio callback threads: {audio['scheduling'] or 'not known'}; "
                     f"microphone overflows {audio['input_overflows']}, speaker underruns "
                     f"{audio['output_underflows']}, devices lost {audio['device_losses']}")
    if result["unmatched_caller_events"] or result["lines_unsaid"]:
        lines.append(f"caller events matching no line: {result['unmatched_caller_events']}; "
                     f"lines never said: {result['lines_unsaid']}")
    return "\n".join(lines)


def _sound_server_lines(result: dict[str, Any]) -> list[str]:
    """The sound server, the agent's streams as it saw them, and the sound path's share of the
    answer gap: the gap as recorded minus the gap as the agent timed it (speech end as heard
    -> first audio at the DAC), i.e. what capture, the VAD's hearing of the end and playback
    add that the agent's own clock does not see."""
    facts = result["sound_server"]
    lines = [f"sound server: {facts['server']} ({facts['mode']}; its devices by default "
             f"{facts['default_sample_spec']})"]
    for name in ("speaker", "microphone"):
        stream = facts[name]
        if stream is None:
            lines.append(f"  the agent's {name} stream: not seen on {name}")
            continue
        converted = (f", converted by {stream['resample_method']}"
                     if stream["sample_spec"] != stream["device_sample_spec"] else "")
        lines.append(f"  the agent's {name} stream: {stream['sample_spec']} on a "
                     f"{stream['device_sample_spec']} device{converted}; buffered "
                     f"{stream['buffer_latency_ms']:.0f} ms in the stream, "
                     f"{stream['device_latency_ms']:.0f} ms in the device")
    gap, inside = result["answer_gap_ms"], result["stages_ms"].get("first_audio")
    if gap["n"] and inside and inside["n"]:
        lines.append(f"  the sound path's share of the answer gap (p50 as recorded - p50 as "
                     f"timed inside): {gap['p50'] - inside['p50']:.0f} ms")
    return lines
