"""The service, measured as systemd sees it: start to READY, idle CPU, RSS, watchdog pings, the
time to recover after the microphone comes back and a question answered after that, then the
same for the speaker (and how much of that answer reached it).

The real `edge-agent run` runs as a child process on a private PulseAudio server with a notify
socket this bench owns (as systemd would pass it: $NOTIFY_SOCKET, $WATCHDOG_USEC) and its stderr
connected as a journald stream ($JOURNAL_STREAM), so every figure comes from outside the agent:
READY=1 and STATUS= datagrams as they arrive, CPU time and memory from /proc. The microphone and
the speaker are devices PulseAudio can take away (`usbmic`, `usbspeaker`, like a USB headset
pulled out) and give back; recovery is from the moment one is back to the agent's STATUS saying
it listens again.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypedDict

import numpy as np

from edge_agent.audio.pulse_rig import MIC_RATE, PulseServer, pulse_server, stop
from edge_agent.bench.latency import audible_spans
from edge_agent.config import Config
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


class ServiceFigures(TypedDict):
    """What `bench service` measured."""

    ready_s: float
    """From starting the process to READY=1."""
    idle_s: float
    """How long the idle agent was watched."""
    idle_cpu_percent: float
    """CPU time of the idle agent (all its threads) over wall time, in % of one core."""
    idle_rss_mb: float
    """Resident memory while idle."""
    idle_pss_mb: float
    """Proportional resident memory while idle: pages shared with other processes (libraries,
    model files another process maps too) count for their share only."""
    peak_rss_mb: float
    """The process's high-water resident memory (VmHWM) once both questions were answered."""
    rss_after_answers_mb: float
    """Resident memory listening again, `AFTER_ANSWER_S` after the last answer was played."""
    watchdog_pings: int
    """WATCHDOG=1 received during the idle window (one per WATCHDOG_USEC / 2)."""
    mic_lost_status_s: float
    """From pulling the microphone to the STATUS saying the agent waits for it."""
    mic_recover_s: float
    """From the microphone's return to the STATUS saying the agent listens again."""
    answered_after_return_s: float
    """A question asked once the microphone is back: from the end of its words (as played into
    the microphone) to the STATUS saying the agent speaks its answer."""
    speaker_lost_status_s: float
    """From pulling the speaker to the STATUS saying the agent waits for it."""
    speaker_recover_s: float
    """From the speaker's return to the STATUS saying the agent listens again."""
    answered_after_speaker_return_s: float
    """The question asked again once the speaker is back: from the end of its words to the
    STATUS saying the agent speaks."""
    answer_heard_s: float
    """Seconds of that answer that reached the returned speaker (recorded from its monitor)."""
    statuses: list[str]
    """Every STATUS= line, in order."""
    journal: list[str]
    """Every line the agent wrote to its stderr, connected as a journald stream is."""


class JournalStream:
    """A pipe the agent gets as its stderr, announced as systemd announces a journald stream
    ($JOURNAL_STREAM, its device and inode), read line by line as the agent writes."""

    def __init__(self) -> None:
        self._read, self.write_fd = os.pipe()
        status = os.fstat(self.write_fd)
        self.variable = f"{status.st_dev}:{status.st_ino}"
        self.lines: list[str] = []
        self._thread = threading.Thread(target=self._drain, daemon=True)
        self._thread.start()

    def _drain(self) -> None:
        with open(self._read, encoding="utf-8", errors="replace") as stream:
            for line in stream:
                self.lines.append(line.rstrip("\n"))

    def started(self) -> None:
        """The agent holds the write end now: close ours, so the end of its output is seen."""
        os.close(self.write_fd)

    def finish(self, timeout: float = 30.0) -> list[str]:
        """Every line, once the agent has exited (its end of the pipe closed)."""
        self._thread.join(timeout)
        return list(self.lines)


class NotifyListener:
    """A datagram socket that receives what the agent tells systemd, with arrival times."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / "notify.sock"
        self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._socket.bind(str(self.path))
        self.messages: list[tuple[float, str]] = []
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._receive, daemon=True)
        self._thread.start()

    def _receive(self) -> None:
        while True:
            try:
                data = self._socket.recv(4096)
            except OSError:
                return
            with self._changed:
                for line in data.decode("utf-8", "replace").splitlines():
                    self.messages.append((time.monotonic(), line))
                self._changed.notify_all()

    def wait_for(self, message: str, after: float, timeout: float) -> float:
        """When `message` arrived after `after` (monotonic); RuntimeError after `timeout`."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                for at, line in self.messages:
                    if at >= after and line == message:
                        return at
                left = deadline - time.monotonic()
                if left <= 0:
                    raise RuntimeError(f"the agent did not send {message!r} within {timeout:.0f} s"
                                       f" (got: {[m for _, m in self.messages][-8:]})")
                self._changed.wait(left)

    def count(self, message: str, start: float, end: float) -> int:
        with self._changed:
            return sum(1 for at, line in self.messages if line == message and start <= at <= end)

    def close(self) -> None:
        self._socket.close()


def run_service(config: Config, idle_s: float, say: Callable[[str], None]) -> ServiceFigures:
    """Start the agent as a service would, watch it idle, pull and return its microphone."""
    with tempfile.TemporaryDirectory(prefix="edge-agent-bench-") as scratch, \
            pulse_server(hotplug=True) as pulse:
        work = Path(scratch)
        settings = dataclasses.replace(
            config, data_dir=str(work / "data"),
            audio=dataclasses.replace(config.audio, input_device="usbmic",
                                      output_device="usbspeaker"))
        config_file = work / "edge-agent.toml"
        config_file.write_text(to_toml(settings), encoding="utf-8")
        question = _question_wav(config, work / "question.wav")
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
        try:
            ready = listener.wait_for("READY=1", started, START_TIMEOUT)
            say(f"  READY after {ready - started:.2f} s")
            listener.wait_for(f"STATUS={LISTENING}", ready, STATUS_TIMEOUT)
            _quiet_after_greeting(listener, ready)
            idle_start, cpu_start = time.monotonic(), _cpu_seconds(agent.pid)
            time.sleep(idle_s)  # the measurement itself: the agent is watched while idle
            idle_end, cpu_end = time.monotonic(), _cpu_seconds(agent.pid)
            memory = _memory_kb(agent.pid)
            pings = listener.count("WATCHDOG=1", idle_start, idle_end)
            cpu = 100 * (cpu_end - cpu_start) / (idle_end - idle_start)
            say(f"  idle {idle_s:.0f} s: CPU {cpu:.1f} % of one core, RSS "
                f"{memory['VmRSS'] / 1024:.0f} MB (PSS {memory['Pss'] / 1024:.0f} MB), "
                f"{pings} watchdog pings")
            mic_lost, mic_back = _pull_and_return(pulse, listener, "usbmic", "microphone")
            say(f"  microphone pulled: said after {mic_lost:.2f} s; back: listening "
                f"after {mic_back:.2f} s")
            said, speaking, _ = _ask(pulse, listener, question, work)
            say(f"  a question after the return: answered (speaking) {speaking - said:.2f} s "
                "after its words ended")
            speaker_lost, speaker_back = _pull_and_return(pulse, listener, "usbspeaker",
                                                          "speaker")
            said_again, speaking_again, audible = _ask(pulse, listener, question, work)
            say(f"  speaker pulled: said after {speaker_lost:.2f} s; back: listening after "
                f"{speaker_back:.2f} s; the next answer {speaking_again - said_again:.2f} s "
                f"after the question, {audible:.2f} s of it heard at the speaker")
            time.sleep(AFTER_ANSWER_S)
            after = _memory_kb(agent.pid)
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
        return {"ready_s": round(ready - started, 3), "idle_s": idle_s,
                "idle_cpu_percent": round(cpu, 2),
                "idle_rss_mb": round(memory["VmRSS"] / 1024, 1),
                "idle_pss_mb": round(memory["Pss"] / 1024, 1),
                "peak_rss_mb": round(after["VmHWM"] / 1024, 1),
                "rss_after_answers_mb": round(after["VmRSS"] / 1024, 1), "watchdog_pings": pings,
                "mic_lost_status_s": round(mic_lost, 3), "mic_recover_s": round(mic_back, 3),
                "answered_after_return_s": round(speaking - said, 3),
                "speaker_lost_status_s": round(speaker_lost, 3),
                "speaker_recover_s": round(speaker_back, 3),
                "answered_after_speaker_return_s": round(speaking_again - said_again, 3),
                "answer_heard_s": round(audible, 3), "statuses": statuses,
                "journal": journal.finish()}


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


def _question_wav(config: Config, path: Path) -> Path:
    """A caller's question in the configured voice, at the microphone's rate, padded with
    silence: what the agent must answer once its microphone is back."""
    from edge_agent.app import load_voice
    from edge_agent.audio.pcm import resample, silence, write_wav
    from edge_agent.audio.pulse_rig import MIC_RATE

    speech = load_voice(config).synthesize(QUESTION)
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


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])  # utime + stime, all threads
    return ticks / os.sysconf("SC_CLK_TCK")


def _memory_kb(pid: int) -> dict[str, int]:
    values = {}
    for name in ("status", "smaps_rollup"):
        for line in Path(f"/proc/{pid}/{name}").read_text().splitlines():
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM", "Pss"):
                values[key] = int(rest.split()[0])
    return values


def to_toml(config: Config) -> str:
    """`config` as a TOML file that loads back to the same values (a child's config)."""
    lines = [f"data_dir = {json.dumps(config.data_dir)}"]
    for section in dataclasses.fields(config):
        value = getattr(config, section.name)
        if not dataclasses.is_dataclass(value):
            continue
        lines.append(f"[{section.name}]")
        for item in dataclasses.fields(value):
            lines.append(f"{item.name} = {_toml_value(getattr(value, item.name))}")
    return "\n".join(lines) + "\n"


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    return json.dumps(value, ensure_ascii=False)


def table(result: dict[str, Any]) -> str:
    figures: ServiceFigures = result["figures"]
    rows = [("start to READY", f"{figures['ready_s']:.2f} s"),
            ("idle CPU", f"{figures['idle_cpu_percent']:.1f} % of one core (target <= 5 %)"),
            ("idle RSS", f"{figures['idle_rss_mb']:.0f} MB (PSS {figures['idle_pss_mb']:.0f} MB)"),
            ("peak RSS", f"{figures['peak_rss_mb']:.0f} MB (target <= 600 MB)"),
            ("RSS after answering", f"{figures['rss_after_answers_mb']:.0f} MB"),
            ("watchdog pings", f"{figures['watchdog_pings']} in {figures['idle_s']:.0f} s"),
            ("mic pulled -> STATUS", f"{figures['mic_lost_status_s']:.2f} s"),
            ("mic back -> listening", f"{figures['mic_recover_s']:.2f} s"),
            ("then a question", f"answered {figures['answered_after_return_s']:.2f} s after "
                                "its words ended"),
            ("speaker pulled -> STATUS", f"{figures['speaker_lost_status_s']:.2f} s"),
            ("speaker back -> listening", f"{figures['speaker_recover_s']:.2f} s"),
            ("then a question", f"answered {figures['answered_after_speaker_return_s']:.2f} s "
                                f"after its words ended, {figures['answer_heard_s']:.1f} s of "
                                "it heard")]
    return "\n".join(f"  {name:24}{value}" for name, value in rows)
