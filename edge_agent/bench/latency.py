"""`edge-agent bench latency`: turn-taking as a caller meets it, measured from recorded audio.

The live agent (`runner.run_live`: PyAudio devices, the configured engines) runs against a private
PulseAudio server. A scripted caller says its lines into the virtual microphone (`paplay`) at
their cues, and both sides are recorded on one clock: the microphone on the left channel, the
agent's speaker on the right (`pulse_rig`, `tap=True`). Each exchange is a question, then,
while the agent answers, a backchannel or (every third) a real interruption.

From the recording:
- **answer gap**: the caller's last audible sample of a question -> the agent's first audible
  sample after it (capture, VAD, end-of-turn silence, recognizer, model, voice, playback: all of
  it, as the caller hears it);
- **stop**: the first audible sample of a real interruption -> the agent's audio stops.
From the agent's event log (in-process, the caller's onset taken when `paplay` started):
- **word error rate** of what the agent heard of each answered line (through the microphone;
  the caller may speak with an espeak-ng voice, `--caller`);
- **barge-in confirmed**: onset -> the interruption decided (playback cut for good);
- **false interruptions**: backchannel lines that cut the agent off;
- **stages** of each answered question, from the end of the caller's speech as the agent
  heard it: transcript, request, first token, first piece, first audio.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import random
import resource
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from edge_agent.audio import pulse_rig
from edge_agent.audio.pcm import resample, write_wav
from edge_agent.bench.clipset import Voice, speak
from edge_agent.bench.stats import summarize
from edge_agent.bench.wer import word_error_rate
from edge_agent.clock import MonotonicClock
from edge_agent.config import AudioConfig, Config
from edge_agent.conversation.settings import Engines
from edge_agent.demo.caller import ScriptedCaller
from edge_agent.demo.callfile import CallerLine, CallScript
from edge_agent.engines.tts import PiperSpeech
from edge_agent.errors import AudioDeviceError, EngineError
from edge_agent.events import EventLog

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

AUDIBLE = 150
"""RMS (int16) of a 10 ms window above which it is audible (-47 dBFS)."""
_WINDOW = 160
"""10 ms at 16 kHz."""


def latency_call(exchanges: int, seed: int, scripted: bool) -> tuple[CallScript, list[str]]:
    """The call, and each caller line's kind: "question", "backchannel" or "interruption"."""
    rng = random.Random(seed)
    lines: list[CallerLine] = []
    kinds: list[str] = []
    replies: list[str] = []
    for number in range(exchanges):
        question = QUESTIONS[number % len(QUESTIONS)]
        lines.append(CallerLine(question, at=1.0) if number == 0
                     else CallerLine(question, after_agent_done=True, pause=0.8))
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


class PulseCallerVoice:
    """The caller's lines into the virtual microphone of a private PulseAudio server."""

    sample_rate = pulse_rig.MIC_RATE

    def __init__(self, server: pulse_rig.PulseServer, scratch: Path) -> None:
        self._server = server
        self._scratch = scratch
        self._playing: list[subprocess.Popen[bytes]] = []

    def say(self, pcm: bytes) -> None:
        wav = self._scratch / f"line-{len(self._playing)}.wav"
        write_wav(wav, pcm, self.sample_rate)
        self._playing.append(self._server.play(wav))

    async def wait_said(self) -> None:
        for proc in self._playing:
            await asyncio.to_thread(proc.wait)


def run_latency(config: Config, engines: tuple[Engines, dict[str, str]], call: CallScript,
                kinds: Sequence[str], printer: Callable[[str], None],
                caller: Voice | None = None) -> dict[str, Any]:
    """Run the call against the live agent on a private PulseAudio server; the figures.
    `caller`: the voice of the caller's lines (default: the agent's own Piper voice)."""
    from edge_agent.runner import run_live

    tts = engines[0].tts
    if caller is None:
        lines = [(line, resample(tts.synthesize(line.say).pcm, tts.sample_rate,
                                 pulse_rig.MIC_RATE)) for line in call.lines]
    elif isinstance(tts, PiperSpeech):
        lines = [(line, speak(tts, caller, line.say)) for line in call.lines]
    else:
        raise EngineError("a caller voice needs the Piper voice of the clip set")
    # The server's default devices, and the call's greeting (none: the first line is a question).
    config = dataclasses.replace(config, audio=AudioConfig(),
                                 turns=dataclasses.replace(config.turns, greeting=call.greeting or ""))
    with contextlib.ExitStack() as stack:
        try:
            server = stack.enter_context(pulse_rig.pulse_server(tts.sample_rate, tap=True))
        except pulse_rig.PulseUnavailable as exc:
            raise AudioDeviceError(
                f"the latency benchmark needs a private PulseAudio server: {exc}") from None
        scratch = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="ea-latency-")))
        stack.enter_context(pulse_rig.client_environment(server.env))
        recording = scratch / "both-sides.raw"
        recorder = server.record_tap(recording)

        async def call_in(log: EventLog, _: Engines) -> None:
            voice = PulseCallerVoice(server, scratch)
            await ScriptedCaller(MonotonicClock(), voice, log, lines).run()

        try:
            record = asyncio.run(run_live(config, asyncio.Event(), printer,
                                          max_seconds=60.0 + 40.0 * len(lines),
                                          companion=call_in, loaded=engines))
        finally:
            pulse_rig.stop(recorder)
        both = np.frombuffer(recording.read_bytes(), dtype=np.int16)
    both = both[: len(both) // 2 * 2].reshape(-1, 2)
    return {**analyze(both[:, 0], both[:, 1], kinds, record["events"]),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
            "caller_voice": caller.name if caller is not None else "the agent's voice",
            "engines": record["engines"], "events": record["events"]}



def audible_spans(samples: np.ndarray, bridge_ms: int) -> list[tuple[float, float]]:
    """(start, end) seconds of audible stretches, gaps shorter than `bridge_ms` bridged."""
    windows = len(samples) // _WINDOW
    if windows == 0:
        return []
    power = samples[: windows * _WINDOW].astype(np.float64).reshape(windows, _WINDOW) ** 2
    loud = np.sqrt(power.mean(axis=1)) >= AUDIBLE
    spans: list[list[int]] = []
    for index in np.flatnonzero(loud):
        if spans and index - spans[-1][1] <= bridge_ms // 10:
            spans[-1][1] = int(index) + 1
        else:
            spans.append([int(index), int(index) + 1])
    rate = pulse_rig.MIC_RATE
    return [(_edge(samples, a * _WINDOW, rising=True) / rate,
             _edge(samples, b * _WINDOW, rising=False) / rate) for a, b in spans]


def _edge(samples: np.ndarray, at: int, rising: bool) -> int:
    """The first (rising) or last (falling) sample near window boundary `at` whose magnitude is
    audible: sample-exact ends of a span."""
    window = samples[max(0, at - _WINDOW):at + _WINDOW].astype(np.int32)
    loud = np.flatnonzero(np.abs(window) >= AUDIBLE)
    if not len(loud):
        return at
    return max(0, at - _WINDOW) + int(loud[0] if rising else loud[-1] + 1)


def analyze(caller: np.ndarray, agent: np.ndarray, kinds: Sequence[str],
            events: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The figures from the recording (caller and agent channels) and the event log."""
    said = audible_spans(caller, bridge_ms=600)
    played = audible_spans(agent, bridge_ms=250)
    gaps: list[float] = []
    stops: list[float] = []
    unanswered = 0
    lines = said[: len(kinds)]
    for index, (kind, (start, end)) in enumerate(zip(kinds, lines, strict=False)):
        following = lines[index + 1][0] if index + 1 < len(lines) else float("inf")
        if kind == "question":
            after = [a for a, _ in played if end < a < following]
            if after:
                gaps.append(1000 * (after[0] - end))
            else:
                unanswered += 1
        elif kind == "interruption":
            cut = [b for a, b in played if a < start < b]
            if cut:
                stops.append(1000 * (cut[0] - start))
    return {
        "lines": len(kinds), "lines_heard_in_recording": len(said),
        "answer_gap_ms": summarize(gaps),
        "questions_unanswered": unanswered,
        "stop_ms": summarize(stops),
        **_from_events(kinds, events),
    }


def _from_events(kinds: Sequence[str], events: Sequence[dict[str, Any]]) -> dict[str, Any]:
    confirmed: list[float] = []
    false_interruptions = missed = 0
    line = -1
    onset = 0.0
    cut = False
    speech_end: float | None = None
    turn_ends: dict[int, float] = {}  # user turn -> end of its speech, as the agent heard it
    turn_stages: dict[int, dict[str, float]] = {}
    said = ""
    heard_lines: list[tuple[str, str]] = []  # (line said, what the agent heard), answered lines
    for event in events:
        kind, at = event["type"], float(event["at"])
        if kind == "CallerSpoke":
            if line >= 0 and kinds[line] == "interruption" and not cut:
                missed += 1
            line += 1
            onset = at + float(event.get("speech_offset", 0.0))
            cut = False
            said = str(event["text"])
        elif kind == "BargeIn" and line >= 0 and not cut:
            cut = True
            if kinds[line] == "interruption":
                confirmed.append(1000 * (at - onset))
            elif kinds[line] == "backchannel":
                false_interruptions += 1
            # (a question said over the agent, when an earlier mistake shifted the replies,
            # is the caller talking over it: not the agent's judgement of a backchannel)
        elif kind == "UserSpeechEnded":
            speech_end = at - float(event.get("silence_ms", 0)) / 1000
        elif kind == "UserTurn":
            heard_lines.append((said, str(event["text"])))
            said = ""
            if speech_end is not None:
                turn_ends[len(turn_ends) + 1] = speech_end
        elif kind == "SpeculationCancelled":
            turn_stages.pop(int(event["turn"]), None)
        elif kind == "TurnStage":
            turn_stages.setdefault(int(event["turn"]), {})[event["stage"]] = at
    if line >= 0 and kinds[line] == "interruption" and not cut:
        missed += 1
    stages: dict[str, list[float]] = {}
    heard = [(said, text) for said, text in heard_lines if said]
    for turn, end in turn_ends.items():
        for stage, at in turn_stages.get(turn, {}).items():
            stages.setdefault(stage, []).append(1000 * (at - end))
    return {
        "user_turns_wer_percent": round(100 * word_error_rate(heard), 1),
        "user_turns": [{"said": a, "heard": b} for a, b in heard],
        "barge_in_confirmed_ms": summarize(confirmed),
        "interruptions": {"count": kinds.count("interruption"), "missed": missed},
        "backchannels": {"count": kinds.count("backchannel"),
                         "false_interruptions": false_interruptions},
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
        f"turn-taking on the real audio path: {result['exchanges']} exchanges, LLM "
        f"{result['engines']['llm']}, STT {result['engines']['stt']}",
        f"{'':48}{'p50':>8}{'p95':>8}{'max':>8}",
        row("caller's last sample -> agent's first sample", result["answer_gap_ms"]),
        *(row(f"  speech end (as heard) -> {name.replace('_', ' ')}", stages[name])
          for name in ("transcript", "request", "first_token", "first_piece", "first_audio")
          if name in stages),
        row("interruption onset -> agent silent", result["stop_ms"]),
        row("interruption onset -> barge-in confirmed", result["barge_in_confirmed_ms"]),
        f"word error rate of the answered lines, through the microphone: "
        f"{result['user_turns_wer_percent']:.1f} % ({len(result['user_turns'])} lines, caller "
        f"voice: {result['caller_voice']})",
        f"questions unanswered: {result['questions_unanswered']}; peak RSS of the process "
        f"{result['peak_rss_mb']} MB",
        f"interruptions missed: {result['interruptions']['missed']}/"
        f"{result['interruptions']['count']}",
        f"false interruptions on backchannels: {result['backchannels']['false_interruptions']}/"
        f"{result['backchannels']['count']}",
    ]
    return "\n".join(lines)

