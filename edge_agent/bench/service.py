"""The service, measured as systemd sees it: start to READY, idle CPU, RSS, watchdog pings, the
time to recover after the microphone comes back and a question answered after that, then the
same for the speaker (and how much of that answer reached it).

The real `edge-agent run` runs as a child process on a private PulseAudio server with a notify
socket this bench owns (as systemd would pass it: $NOTIFY_SOCKET, $WATCHDOG_USEC) and its stderr
connected as a journald stream ($JOURNAL_STREAM), so every figure comes from outside the agent:
READY=1 and STATUS= datagrams as they arrive, CPU time and memory from /proc, sampled every
second while it idles. The microphone and the speaker are devices PulseAudio can take away
(`usbmic`, `usbspeaker`, like a USB headset pulled out) and give back; recovery is from the
moment one is back to the agent's STATUS saying it listens again. Without `devices` (the quick
run) nothing is pulled: one question is asked and answered.
"""

from __future__ import annotations

import contextlib
import dataclasses
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypedDict

import numpy as np

from edge_agent.audio.device import MIC_RATE
from edge_agent.bench.needs import SoundServerUnavailable
from edge_agent.bench.pulse_rig import PulseServer, PulseUnavailable, pulse_server, stop
from edge_agent.bench.recording import audible_spans
from edge_agent.bench.service_child import (
    JournalStream,
    NotifyListener,
    cpu_seconds,
    to_toml,
    with_model_paths,
)
from edge_agent.config import Config
from edge_agent.engines.base import TextToSpeech
from edge_agent.machine import memory_kb
from edge_agent.service.status import LISTENING, device_status

WATCHDOG_USEC = 4_000_000
"""The watchdog the bench asks for (4 s: a ping every 2 s)."""
START_TIMEOUT = 300.0
"""Seconds the agent may take to load its models and open its devices."""
STATUS_TIMEOUT = 60.0
QUESTION = "What time do you open tomorrow?"
AFTER_ANSWER_S = 2.0
QUESTION_PAD_S = 0.5
"""Silence before and after the question in its audio file."""
SAMPLE_S = 1.0
"""The idle agent's CPU and memory are read this often."""
SETTLE_S = 1.0
"""Left out before the idle window: the agent gives back the greeting's heap as it starts to
listen (~15 % of a core for a moment), a one-off, not what idling costs."""


class ServiceFigures(TypedDict):
    """What `bench service` measured. The device figures are None when nothing was pulled."""

    ready_s: float
    """From starting the process to READY=1."""
    idle_s: float
    """How long the idle agent was watched."""
    idle_cpu_percent: float
    """CPU time of the idle agent (all its threads) over wall time, in % of one core."""
    idle_cpu_samples: list[float]
    """The same, for each `SAMPLE_S` of the idle window, in order."""
    idle_rss_samples_mb: list[float]
    """Resident memory at the end of each `SAMPLE_S` of the idle window."""
    idle_rss_mb: float
    """Resident memory while idle."""
    idle_pss_mb: float
    """Proportional resident memory while idle: pages shared with other processes (libraries,
    model files another process maps too) count for their share only."""
    peak_rss_mb: float
    """The process's high-water resident memory (VmHWM) once the questions were answered."""
    rss_after_answers_mb: float
    """Resident memory listening again, `AFTER_ANSWER_S` after the last answer was played."""
    watchdog_pings: int
    """WATCHDOG=1 received during the idle window (one per WATCHDOG_USEC / 2)."""
    answered_s: float
    """The first question asked (after the microphone's return, when devices are pulled): from
    the end of its words (as played into the microphone) to the STATUS saying the agent speaks
    its answer."""
    mic_lost_status_s: float | None
    """From pulling the microphone to the STATUS saying the agent waits for it."""
    mic_recover_s: float | None
    """From the microphone's return to the STATUS saying the agent listens again."""
    answered_after_return_s: float | None
    """`answered_s`, when that question was asked after the microphone's return."""
    speaker_lost_status_s: float | None
    """From pulling the speaker to the STATUS saying the agent waits for it."""
    speaker_recover_s: float | None
    """From the speaker's return to the STATUS saying the agent listens again."""
    answered_after_speaker_return_s: float | None
    """The question asked again once the speaker is back: from the end of its words to the
    STATUS saying the agent speaks."""
    answer_heard_s: float
    """Seconds of the last answer that reached the speaker (recorded from its monitor)."""
    statuses: list[str]
    """Every STATUS= line, in order."""
    journal: list[str]
    """Every line the agent wrote to its stderr, connected as a journald stream is."""


def run_service(config: Config, idle_s: float, say: Callable[[str], None],
                devices: bool = True, voice: TextToSpeech | None = None) -> ServiceFigures:
    """Start the agent as a service would, watch it idle, then (with `devices`) pull and return
    its microphone and its speaker, a question answered after each; without, one question.
    `voice`: the configured voice already loaded (it speaks the caller's question)."""
    with contextlib.ExitStack() as stack:
        scratch = stack.enter_context(tempfile.TemporaryDirectory(prefix="edge-agent-bench-"))
        try:
            pulse = stack.enter_context(pulse_server(hotplug=True))
        except PulseUnavailable as exc:
            raise SoundServerUnavailable("service", str(exc)) from None
        return _measure(config, idle_s, say, devices, voice, pulse, Path(scratch))


def _measure(config: Config, idle_s: float, say: Callable[[str], None], devices: bool,
             voice: TextToSpeech | None, pulse: PulseServer, work: Path) -> ServiceFigures:
    settings = dataclasses.replace(
        with_model_paths(config), data_dir=str(work / "data"),
        audio=dataclasses.replace(config.audio, input_device="usbmic",
                                  output_device="usbspeaker"))
    config_file = work / "edge-agent.toml"
    config_file.write_text(to_toml(settings), encoding="utf-8")
    question = _question_wav(config, voice, work / "question.wav")
    listener = NotifyListener(work)
    journal = JournalStream()
    env = {**pulse.env, "NOTIFY_SOCKET": str(listener.path),
           "WATCHDOG_USEC": str(WATCHDOG_USEC), "PYTHONUNBUFFERED": "1",
           "JOURNAL_STREAM": journal.variable}
    started = time.monotonic()
    try:
        agent = subprocess.Popen(
            [sys.executable, "-m", "edge_agent", "-c", str(config_file), "run"], env=env,
            stdout=subprocess.DEVNULL, stderr=journal.write_fd)
    finally:
        journal.started()
    mic: tuple[float, float] | None = None
    speaker: tuple[float, float] | None = None
    again: tuple[float, float, float] | None = None
    try:
        ready = listener.wait_for("READY=1", started, START_TIMEOUT)
        say(f"READY after {ready - started:.2f} s")
        listener.wait_for(f"STATUS={LISTENING}", ready, STATUS_TIMEOUT)
        _quiet_after_greeting(listener, ready)
        time.sleep(SETTLE_S)
        idle_start, cpu_start = time.monotonic(), cpu_seconds(agent.pid)
        cpu_samples, rss_samples = _watch_idle(agent.pid, idle_s, say)
        idle_end, cpu_end = time.monotonic(), cpu_seconds(agent.pid)
        memory = memory_kb(agent.pid)
        pings = listener.count("WATCHDOG=1", idle_start, idle_end)
        cpu = 100 * (cpu_end - cpu_start) / (idle_end - idle_start)
        say(f"idle {idle_s:.0f} s: CPU {cpu:.1f} % of one core, RSS "
            f"{memory['VmRSS'] / 1024:.0f} MB (PSS {memory['Pss'] / 1024:.0f} MB), "
            f"{pings} watchdog pings")
        if devices:
            mic = _pull_and_return(pulse, listener, "usbmic", "microphone")
            say(f"microphone pulled: said after {mic[0]:.2f} s; back: listening after "
                f"{mic[1]:.2f} s")
        said, speaking, audible = _ask(pulse, listener, question, work)
        say(f"a question{' after the return' if devices else ''}: answered (speaking) "
            f"{speaking - said:.2f} s after its words ended")
        if devices:
            speaker = _pull_and_return(pulse, listener, "usbspeaker", "speaker")
            again = _ask(pulse, listener, question, work)
            audible = again[2]
            say(f"speaker pulled: said after {speaker[0]:.2f} s; back: listening after "
                f"{speaker[1]:.2f} s; the next answer {again[1] - again[0]:.2f} s after the "
                f"question, {audible:.2f} s of it heard at the speaker")
        time.sleep(AFTER_ANSWER_S)
        after = memory_kb(agent.pid)
    except RuntimeError as exc:
        agent.kill()
        agent.wait(30)
        output = "\n".join(journal.finish())
        raise RuntimeError(f"{exc}; agent stderr: {output[-1500:]}") from None
    finally:
        if agent.poll() is None:
            agent.send_signal(signal.SIGTERM)
            try:
                agent.wait(60)
            except subprocess.TimeoutExpired:
                agent.kill()
                agent.wait()
        listener.close()
    statuses = [m.removeprefix("STATUS=") for _, m in listener.messages
                if m.startswith("STATUS=")]
    answered = round(speaking - said, 3)
    return {"ready_s": round(ready - started, 3), "idle_s": idle_s,
            "idle_cpu_percent": round(cpu, 2), "idle_cpu_samples": cpu_samples,
            "idle_rss_samples_mb": rss_samples,
            "idle_rss_mb": round(memory["VmRSS"] / 1024, 1),
            "idle_pss_mb": round(memory["Pss"] / 1024, 1),
            "peak_rss_mb": round(after["VmHWM"] / 1024, 1),
            "rss_after_answers_mb": round(after["VmRSS"] / 1024, 1), "watchdog_pings": pings,
            "answered_s": answered,
            "mic_lost_status_s": _rounded(mic, 0), "mic_recover_s": _rounded(mic, 1),
            "answered_after_return_s": answered if devices else None,
            "speaker_lost_status_s": _rounded(speaker, 0),
            "speaker_recover_s": _rounded(speaker, 1),
            "answered_after_speaker_return_s":
                round(again[1] - again[0], 3) if again is not None else None,
            "answer_heard_s": round(audible, 3), "statuses": statuses,
            "journal": journal.finish()}


def _rounded(pair: tuple[float, float] | None, index: int) -> float | None:
    return round(pair[index], 3) if pair is not None else None


def _watch_idle(pid: int, idle_s: float, say: Callable[[str], None]
                ) -> tuple[list[float], list[float]]:
    """Watch the idle agent for `idle_s`: its CPU (% of one core) and RSS (MB) per sample."""
    cpu: list[float] = []
    rss: list[float] = []
    end = time.monotonic() + idle_s
    while (left := end - time.monotonic()) > 0.05:
        step = min(SAMPLE_S, left)
        before, since = cpu_seconds(pid), time.monotonic()
        time.sleep(step)  # the measurement itself: the agent is watched while idle
        cpu.append(round(100 * (cpu_seconds(pid) - before) / (time.monotonic() - since), 2))
        rss.append(round(memory_kb(pid)["VmRSS"] / 1024, 1))
        say(f"idle {len(cpu)}/{max(1, round(idle_s / SAMPLE_S))}: CPU {cpu[-1]:.1f} %, "
            f"RSS {rss[-1]:.0f} MB")
    return cpu, rss


def _pull_and_return(pulse: PulseServer, listener: NotifyListener, name: str, device: str
                     ) -> tuple[float, float]:
    """Unplug device `name` (the agent's `device`, "microphone" or "speaker") and plug it back:
    (seconds until the agent said it waits for it, seconds from its return to listening)."""
    pulled = time.monotonic()
    module = pulse.unplug(name)
    waiting = listener.wait_for(f"STATUS={device_status(device, 'lost')}", pulled,
                                STATUS_TIMEOUT)
    pulse.plug(module)
    back = time.monotonic()
    listening = listener.wait_for(f"STATUS={LISTENING}", back, STATUS_TIMEOUT)
    return waiting - pulled, listening - back


def _ask(pulse: PulseServer, listener: NotifyListener, question: Path, work: Path
         ) -> tuple[float, float, float]:
    """Play the question into the microphone and wait until the answer has been played: (end
    of its words, when the agent started speaking, seconds of the answer audible at
    `usbspeaker`, recorded from its monitor)."""
    asked = time.monotonic()
    answer = work / "answer.raw"
    recording = pulse.record(answer, "usbspeaker.monitor", MIC_RATE)
    try:
        caller = pulse.play(question, "micsink")
        caller.wait(STATUS_TIMEOUT)
        said = time.monotonic() - QUESTION_PAD_S  # the end of the words, not of the file
        listener.wait_for("STATUS=answering", asked, STATUS_TIMEOUT)
        speaking = listener.wait_for("STATUS=speaking", asked, STATUS_TIMEOUT)
        listener.wait_for(f"STATUS={LISTENING}", speaking, STATUS_TIMEOUT)
    finally:
        stop(recording)
    pcm = answer.read_bytes()
    samples = np.frombuffer(pcm[:len(pcm) // 2 * 2], dtype=np.int16)
    return said, speaking, sum(end - start for start, end in audible_spans(samples, 0))


def asked(config: Config) -> str:
    """The question as the caller says it: after the wake word (or phrase) when the agent
    waits for one (`[session] start = "wake"`)."""
    session = config.session
    if session.start != "wake":
        return QUESTION
    question = QUESTION[0].lower() + QUESTION[1:]
    if not session.wake_word:
        return f"{session.wake_phrase}, {question}"
    from edge_agent.engines.wake_word import model_phrase
    from edge_agent.models.catalog import load_catalog

    catalog = load_catalog(config.models_dir, config_source=config.source)
    path = catalog.resolve(session.wake_word, "wake", "session.wake_word", config.source)
    return f"{model_phrase(path)}, {question}"


def _question_wav(config: Config, voice: TextToSpeech | None, path: Path) -> Path:
    """A caller's question in the configured voice, at the microphone's rate, padded with
    silence: what the agent must answer once its microphone is back."""
    from edge_agent.app import load_voice
    from edge_agent.audio.pcm import resample, silence, write_wav

    speech = (voice or load_voice(config)).synthesize(asked(config))
    pad = silence(int(QUESTION_PAD_S * MIC_RATE))
    write_wav(path, pad + resample(speech.pcm, speech.sample_rate, MIC_RATE) + pad, MIC_RATE)
    return path


def _quiet_after_greeting(listener: NotifyListener, ready: float) -> None:
    """Wait out the greeting: the agent speaks, then listens."""
    try:
        speaking = listener.wait_for("STATUS=speaking", ready, 10)
    except RuntimeError:
        return  # no greeting configured
    listener.wait_for(f"STATUS={LISTENING}", speaking, STATUS_TIMEOUT)


def table(result: dict[str, Any]) -> str:
    figures: ServiceFigures = result["figures"]
    rows = [("start to READY", f"{figures['ready_s']:.2f} s"),
            ("idle CPU", f"{figures['idle_cpu_percent']:.1f} % of one core (target <= 5 %)"),
            ("idle RSS", f"{figures['idle_rss_mb']:.0f} MB (PSS {figures['idle_pss_mb']:.0f} MB)"),
            ("peak RSS", f"{figures['peak_rss_mb']:.0f} MB (target <= 600 MB)"),
            ("RSS after answering", f"{figures['rss_after_answers_mb']:.0f} MB"),
            ("watchdog pings", f"{figures['watchdog_pings']} in {figures['idle_s']:.0f} s")]
    if figures["mic_lost_status_s"] is None:
        rows.append(("a question", f"answered {figures['answered_s']:.2f} s after its words "
                                   "ended (devices not pulled)"))
    else:
        rows += [("mic pulled -> STATUS", f"{figures['mic_lost_status_s']:.2f} s"),
                 ("mic back -> listening", f"{figures['mic_recover_s']:.2f} s"),
                 ("then a question", f"answered {figures['answered_s']:.2f} s after its words "
                                     "ended"),
                 ("speaker pulled -> STATUS", f"{figures['speaker_lost_status_s']:.2f} s"),
                 ("speaker back -> listening", f"{figures['speaker_recover_s']:.2f} s"),
                 ("then a question", f"answered {figures['answered_after_speaker_return_s']:.2f}"
                                     f" s after its words ended, "
                                     f"{figures['answer_heard_s']:.1f} s of it heard")]
    return "\n".join(f"  {name:24}{value}" for name, value in rows)
