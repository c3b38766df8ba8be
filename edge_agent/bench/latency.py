"""`edge-agent bench latency`: turn-taking figures through the real engines.

A generated call runs like `edge-agent demo` (Silero, PocketSphinx, Piper, the scripted or the
configured LLM, on the clock-paced virtual audio pair in real time). Each exchange is a question,
then, while the agent answers, either a backchannel or a real interruption. From the event log:

- response: end of user speech (the VAD's end-of-turn silence completed) -> first agent audio
  at the device; the configured end-of-turn silence comes on top and is reported separately;
- stop: speech onset over the agent (first loud sample of the caller's line) -> playback
  stopped (paused at the onset, or cut by the barge-in), for real interruptions;
- barge-in: the same onset -> the interruption confirmed (playback cut for good);
- false interruptions: backchannel lines that cut the agent off.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from edge_agent.bench.stats import summarize
from edge_agent.demo.callfile import CallerLine, CallScript

QUESTIONS = (
    "What time do you open tomorrow?",
    "Do you have a table for two tonight?",
    "Is there parking near the restaurant?",
    "Can I bring my dog?",
    "Do you have vegetarian dishes?",
    "How much is the set menu?",
    "Do you take credit cards?",
    "Is the terrace open in the evening?",
)
BACKCHANNELS = ("mm-hmm", "yeah", "okay", "right", "I see", "sure")
INTERRUPTIONS = (
    "Wait, what about Sunday?",
    "Sorry, can you say that again?",
    "No, I said two people.",
    "Hold on, is it open on Monday?",
)
REPLY = ("We open at nine in the morning and close at eleven at night. The kitchen takes "
         "the last orders at half past ten, and on weekends we serve brunch from ten until three "
         "in the afternoon.")
"""Every scripted reply: long enough that any cue of the call lands inside one, whatever the
agent did with the lines before."""


def latency_call(exchanges: int, seed: int, scripted: bool) -> tuple[CallScript, list[str]]:
    """The call, and each caller line's kind: "question", "backchannel" or "interruption"."""
    rng = random.Random(seed)
    lines: list[CallerLine] = []
    kinds: list[str] = []
    replies: list[str] = []
    for number in range(exchanges):
        question = QUESTIONS[number % len(QUESTIONS)]
        lines.append(CallerLine(question, at=0.5) if number == 0
                     else CallerLine(question, after_agent_done=True, pause=0.6))
        kinds.append("question")
        replies.append(REPLY)
        if number % 3 == 2:
            lines.append(CallerLine(rng.choice(INTERRUPTIONS),
                                    barge_in_after=round(rng.uniform(1.5, 3.0), 2)))
            kinds.append("interruption")
            replies.append(REPLY)
        else:
            lines.append(CallerLine(rng.choice(BACKCHANNELS),
                                    barge_in_after=round(rng.uniform(1.2, 3.0), 2)))
            kinds.append("backchannel")
    replies += [REPLY] * exchanges  # spares, for backchannels taken as turns
    call = CallScript(source="(bench latency)", lines=tuple(lines), greeting="",
                      replies=tuple(replies) if scripted else None)
    return call, kinds


def analyze(record: dict[str, Any], kinds: Sequence[str], end_silence_ms: int) -> dict[str, Any]:
    response: list[float] = []
    stop: list[float] = []
    confirmed: list[float] = []
    false_interruptions = backchannels = missed = 0
    line = -1
    onset = 0.0
    stopped = cut = False
    speech_ended: float | None = None
    waiting_since: float | None = None

    def close_line() -> None:
        nonlocal missed
        if line >= 0 and kinds[line] == "interruption" and not cut:
            missed += 1

    for event in record["events"]:
        kind, at = event["type"], float(event["at"])
        if kind == "CallerSpoke":
            close_line()
            line += 1
            onset = at + float(event.get("speech_offset", 0.0))
            stopped = cut = False
            backchannels += kinds[line] == "backchannel"
        elif kind in ("PlaybackPaused", "BargeIn") and line >= 0 and kinds[line] != "question":
            if kinds[line] == "interruption" and not stopped:
                stop.append(1000 * (at - onset))
            stopped = True
            if kind == "BargeIn" and not cut:
                cut = True
                if kinds[line] == "interruption":
                    confirmed.append(1000 * (at - onset))
                else:
                    false_interruptions += 1
        elif kind == "UserSpeechEnded":
            speech_ended = at
        elif kind == "UserTurn":
            waiting_since = speech_ended
        elif kind == "PlaybackStarted" and waiting_since is not None:
            response.append(1000 * (at - waiting_since))
            waiting_since = None
    close_line()
    return {
        "exchanges": kinds.count("question"),
        "end_of_turn_silence_ms": end_silence_ms,
        "response_ms": summarize(response),
        "stop_ms": summarize(stop),
        "barge_in_confirmed_ms": summarize(confirmed),
        "interruptions": {"count": kinds.count("interruption"), "missed": missed},
        "backchannels": {"count": backchannels, "false_interruptions": false_interruptions,
                         "rate_percent": round(100 * false_interruptions / backchannels, 1)
                         if backchannels else None},
    }


def table(result: dict[str, Any]) -> str:
    def row(name: str, stats: dict[str, Any]) -> str:
        if not stats["n"]:
            return f"{name:44}{'-':>8}{'-':>8}{'-':>8}  (none)"
        return (f"{name:44}{stats['p50']:>8.0f}{stats['p95']:>8.0f}{stats['max']:>8.0f}"
                f"  ms (n={stats['n']})")

    backchannels, interruptions = result["backchannels"], result["interruptions"]
    return "\n".join([
        f"turn-taking: {result['exchanges']} exchanges, LLM {result['llm']}, "
        f"pause_on_speech {result['pause_on_speech']}",
        f"{'':44}{'p50':>8}{'p95':>8}{'max':>8}",
        row("end of user speech -> first agent audio", result["response_ms"]),
        f"  (+ end-of-turn silence {result['end_of_turn_silence_ms']} ms before that, configured)",
        row("speech onset -> playback stopped", result["stop_ms"]),
        row("speech onset -> barge-in confirmed", result["barge_in_confirmed_ms"]),
        f"interruptions missed: {interruptions['missed']}/{interruptions['count']}",
        f"false interruptions on backchannels: {backchannels['false_interruptions']}/"
        f"{backchannels['count']}",
    ])
