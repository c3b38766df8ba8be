"""`edge-agent bench latency`: turn-taking as a caller meets it, measured from recorded audio.

The live agent (`runner.run_live`: PyAudio devices, the configured engines) runs against a private
PulseAudio server (`--sound-server private`, the default) or the user's own with the bench's
devices added for the call (`default`, see `sound_server`), on a private data dir (the
benchmark's call never enters your memory database). A scripted caller says its lines into the
virtual microphone (`paplay`) at their cues, and both sides are recorded on one clock: the
microphone on the left channel, the agent's speaker on the right (`pulse_rig`, `tap=True`).
What the server says of the agent's two streams (format, resampler, audio buffered) is read
while the call runs and reported beside the figures. Each exchange is a question, then, while the
agent answers, a backchannel or (every `interrupt_every`-th exchange) a real interruption. The
figures are read off the recording and the event log by `latency_figures`.
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

from edge_agent.audio.device import MIC_RATE
from edge_agent.audio.pcm import resample, silence, write_wav
from edge_agent.bench import pulse_rig
from edge_agent.bench.latency_figures import ScriptedLine, analyze
from edge_agent.bench.needs import SoundServerUnavailable
from edge_agent.bench.recording import audible_part
from edge_agent.bench.sound_server import (
    NotReachedError,
    ServerFacts,
    StreamWatch,
    borrowed_server,
    check_reached,
    server_name,
)
from edge_agent.clock import MonotonicClock
from edge_agent.config import AudioConfig, Config
from edge_agent.conversation.settings import Engines
from edge_agent.demo.caller import ScriptedCaller
from edge_agent.demo.callfile import CallerLine, CallScript
from edge_agent.demo.voices import Voice, speak
from edge_agent.engines.tts import PiperSpeech
from edge_agent.errors import EngineError
from edge_agent.events import EventLog
from edge_agent.memory.record import record_events

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
NATURAL_LINES = (
    "Six people,",
    "It's for my daughter's birthday, | she turns ten.",
    "Tomorrow evening, around eight,",
    "I'd like a table for | four people.",
    "Yes, please,",
    "Can we sit outside, | on the terrace?",
    "The vegetarian menu,",
    "Thank you,",
)
"""Turns as people end them, not as written questions: on a comma, in two words, after a
pause in the middle (" | ": `MID_TURN_PAUSE_S` of silence). The words say nothing about being
finished (the recognizer writes the comma it hears), so the end of the turn is the sound's
to judge; a pause inside a line must not end it."""
LINE_SETS = {"questions": QUESTIONS, "natural": NATURAL_LINES}
"""`bench latency --lines`."""
PAUSE_MARK = " | "
MID_TURN_PAUSE_S = 0.5
"""A pause inside a caller's line: people pause 0.3-0.8 s mid-turn (under the recording's
600 ms bridge, so the line stays one span of the caller's channel)."""
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
SHORT_REPLY = ("We open at nine in the morning and close at eleven at night. The kitchen "
               "takes the last orders at half past ten.")
"""A reply of ~7 s (the quick run's): still longer than the latest cue (3 s) plus a line."""


def latency_call(exchanges: int, seed: int, scripted: bool, reply: str = REPLY,
                 interrupt_every: int = 3, questions: Sequence[str] = QUESTIONS
                 ) -> tuple[CallScript, list[ScriptedLine]]:
    """The call, and its caller lines with their kinds: every exchange a question (taken in
    turn from `questions`), then, while the agent answers, a backchannel or, every
    `interrupt_every`-th exchange, an interruption. `scripted`: the agent answers every line
    with `reply` (else the configured LLM does)."""
    rng = random.Random(seed)
    lines: list[CallerLine] = []
    script: list[ScriptedLine] = []
    replies: list[str] = []
    for number in range(exchanges):
        question = questions[number % len(questions)]
        lines.append(CallerLine(question, at=1.0) if number == 0
                     else CallerLine(question, after_agent_done=True, pause=0.8))
        script.append(ScriptedLine("question", question))
        replies.append(reply)
        if number % interrupt_every == interrupt_every - 1:
            lines.append(CallerLine(rng.choice(INTERRUPTIONS),
                                    barge_in_after=round(rng.uniform(1.5, 3.0), 2)))
            script.append(ScriptedLine("interruption", lines[-1].say))
            replies.append(reply)
        else:
            lines.append(CallerLine(rng.choice(BACKCHANNELS),
                                    barge_in_after=round(rng.uniform(1.2, 3.0), 2)))
            script.append(ScriptedLine("backchannel", lines[-1].say))
    replies += [reply] * exchanges  # spares, for backchannels taken as turns
    call = CallScript(source="(bench latency)", lines=tuple(lines), greeting="",
                      replies=tuple(replies) if scripted else None)
    return call, script


def with_pauses(text: str, said: Callable[[str], bytes]) -> bytes:
    """`text` spoken by `said` (16 kHz), each `PAUSE_MARK` a pause of `MID_TURN_PAUSE_S` from
    the last audible sample before it to the first after it, as the recording reads them (the
    voice's own silence at the join is cut)."""
    parts = [said(part) for part in text.split(PAUSE_MARK)]
    if len(parts) == 1:
        return parts[0]
    pause = silence(round(MID_TURN_PAUSE_S * MIC_RATE))
    return pause.join(audible_part(np.frombuffer(part, dtype=np.int16)).tobytes()
                      for part in parts)


class PulseCallerVoice:
    """The caller's lines into the virtual microphone of a private PulseAudio server."""

    sample_rate = MIC_RATE

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


REACH_TIMEOUT_S = 10.0
"""How long the agent's streams may take to appear on a borrowed server's devices."""


def run_latency(config: Config, engines: tuple[Engines, dict[str, str]], call: CallScript,
                script: Sequence[ScriptedLine], printer: Callable[[str], None],
                caller: Voice | None = None, sound_server: str = "private") -> dict[str, Any]:
    """Run the call against the live agent through `sound_server` (one of `SOUND_SERVERS`);
    the figures. `caller`: the voice of the caller's lines (default: the agent's own Piper
    voice)."""
    from edge_agent.runner import run_live

    tts = engines[0].tts

    def said(text: str) -> bytes:
        if caller is None:
            return resample(tts.synthesize(text).pcm, tts.sample_rate, MIC_RATE)
        if not isinstance(tts, PiperSpeech):
            raise EngineError("a caller voice needs the Piper voice of the clip set")
        return speak(tts, caller, text)

    lines = [(line, with_pauses(line.say, said)) for line in call.lines]
    with contextlib.ExitStack() as stack:
        try:
            server = stack.enter_context(
                pulse_rig.pulse_server(tts.sample_rate, tap=True) if sound_server == "private"
                else borrowed_server())
        except pulse_rig.PulseUnavailable as exc:
            raise SoundServerUnavailable("latency", str(exc), sound_server) from None
        scratch = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="ea-latency-")))
        # The server's default devices (the audio threads' priority as configured), the
        # call's greeting (none: the first line is a question), and a data dir of its own: the
        # call is not one of the user's sessions.
        config = dataclasses.replace(
            config, data_dir=str(scratch / "data"),
            audio=AudioConfig(realtime_priority=config.audio.realtime_priority,
                              output_period=config.audio.output_period),
            turns=dataclasses.replace(config.turns, greeting=call.greeting or ""))
        stack.enter_context(pulse_rig.client_environment(server.env))
        recording = scratch / "both-sides.raw"
        recorder = server.record_tap(recording)
        watch = StreamWatch(server)
        watch.start()

        async def call_in(log: EventLog, _: Engines) -> None:
            if sound_server != "private":
                await asyncio.to_thread(check_reached, server, REACH_TIMEOUT_S)
            voice = PulseCallerVoice(server, scratch)
            await ScriptedCaller(MonotonicClock(), voice, log, lines).run()

        try:
            record = asyncio.run(run_live(config, asyncio.Event(), printer,
                                          max_seconds=60.0 + 40.0 * len(lines),
                                          companion=call_in, loaded=engines))
        except NotReachedError as exc:
            raise SoundServerUnavailable("latency", str(exc), sound_server) from None
        finally:
            pulse_rig.stop(recorder)
            watch.stop()
        name, default_spec = server_name(server)
        speaker, microphone = watch.facts()
        facts = ServerFacts(mode=sound_server, server=name, default_sample_spec=default_spec,
                            speaker=speaker, microphone=microphone)
        both = np.frombuffer(recording.read_bytes(), dtype=np.int16)
    both = both[: len(both) // 2 * 2].reshape(-1, 2)
    return {**analyze(both[:, 0], both[:, 1], script, record_events(record)),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
            "caller_voice": caller.name if caller is not None else "the agent's voice",
            "sound_server": facts,
            "engines": record["engines"], "events": record["events"]}
