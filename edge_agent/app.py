"""Composition root: config -> engines and devices -> conversation. Nothing else builds parts."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edge_agent.audio.pcm import resample
from edge_agent.audio.virtual import VirtualMicrophone, VirtualSpeaker
from edge_agent.clock import Clock, MonotonicClock
from edge_agent.config import Config
from edge_agent.console import describe
from edge_agent.conversation.agent import Conversation, ConversationSettings, Engines
from edge_agent.conversation.segmenter import SegmenterSettings
from edge_agent.demo.caller import ScriptedCaller
from edge_agent.demo.callfile import CallScript
from edge_agent.engines.base import LanguageModel, SpeechRecognizer
from edge_agent.engines.llm import ScriptedLanguageModel, load_language_model
from edge_agent.engines.stt import PocketSphinxRecognizer, VoskRecognizer
from edge_agent.engines.tts import PiperSpeech
from edge_agent.engines.vad import SileroVad
from edge_agent.errors import ConfigError
from edge_agent.events import EventLog
from edge_agent.heard.truncation import HeardPolicy
from edge_agent.models.catalog import Catalog, load_catalog
from edge_agent.session import session_record

Printer = Callable[[str], None]
IDLE_TO_END = 1.5
"""Seconds the demo waits with nothing happening after the last caller line before it ends."""


@dataclass(frozen=True)
class ModelPaths:
    vad: Path
    stt: tuple[str, Path | None]
    llm: Path | None
    tts: Path


def resolve_models(config: Config, catalog: Catalog, scripted: bool) -> ModelPaths:
    """Every model the config needs, found on disk before anything heavy loads."""
    src = config.source
    vad = catalog.resolve(config.vad.model, "vad", "vad.model", src)
    engine = config.stt.engine
    if engine == "auto":
        engine = "vosk" if config.stt.vosk_model else "pocketsphinx"
    if engine == "vosk":
        if not config.stt.vosk_model:
            raise ConfigError(src, "stt.vosk_model", 'must name a Vosk model when engine = "vosk"')
        stt: tuple[str, Path | None] = (
            "vosk", catalog.resolve(config.stt.vosk_model, "stt", "stt.vosk_model", src))
    else:
        stt = ("pocketsphinx", catalog.resolve("pocketsphinx-en-us", "stt", "stt.engine", src))
    llm = None if scripted else catalog.resolve(config.llm.model, "llm", "llm.model", src)
    tts = catalog.resolve(config.tts.voice, "tts", "tts.voice", src)
    return ModelPaths(vad, stt, llm, tts)


def build_engines(config: Config, replies: Sequence[str] | None = None,
                  catalog: Catalog | None = None) -> tuple[Engines, dict[str, str]]:
    catalog = catalog or load_catalog(config.models_dir)
    scripted_file = None
    if replies is None and config.llm.engine == "scripted":
        if not config.llm.script:
            raise ConfigError(config.source, "llm.script",
                              'must name a replies file when llm.engine = "scripted"')
        scripted_file = Path(config.llm.script).expanduser()
    paths = resolve_models(config, catalog, scripted=replies is not None or scripted_file is not None)
    stt: SpeechRecognizer = (
        VoskRecognizer(paths.stt[1]) if paths.stt[0] == "vosk" and paths.stt[1]
        else PocketSphinxRecognizer(paths.stt[1])
    )
    llm: LanguageModel
    if replies is not None:
        llm, llm_name = ScriptedLanguageModel(replies), "scripted (call file)"
    elif scripted_file is not None:
        llm, llm_name = ScriptedLanguageModel.from_file(scripted_file), f"scripted ({scripted_file})"
    else:
        assert paths.llm is not None
        llm = load_language_model(
            paths.llm, context_tokens=config.llm.context_tokens, threads=config.llm.threads,
            max_tokens=config.llm.max_tokens, temperature=config.llm.temperature,
            seed=config.llm.seed)
        llm_name = f"llama.cpp ({paths.llm.name})"
    voice_config = paths.tts.with_name(paths.tts.name + ".json")
    tts = PiperSpeech(paths.tts, voice_config if voice_config.exists() else None,
                      config.tts.length_scale)
    engines = Engines(vad=SileroVad(paths.vad), stt=stt, llm=llm, tts=tts)
    names = {"vad": f"silero ({paths.vad.name})", "stt": paths.stt[0], "llm": llm_name,
             "tts": f"piper ({paths.tts.name})"}
    return engines, names


def conversation_settings(config: Config, greeting: str | None = None) -> ConversationSettings:
    return ConversationSettings(
        system_prompt=config.llm.system_prompt,
        greeting=config.turns.greeting if greeting is None else greeting,
        segmenter=SegmenterSettings(config.vad.threshold, config.vad.min_speech_ms,
                                    config.vad.end_silence_ms),
        preroll_ms=config.vad.preroll_ms,
        barge_in_min_ms=config.turns.barge_in_min_ms,
        heard_policy=HeardPolicy(config.heard.policy),
        interrupted_marker=config.heard.marker,
        history_turns=config.turns.history_turns,
    )


async def _print_events(log: EventLog, printer: Printer) -> None:
    queue = log.subscribe()
    while True:
        line = describe(await queue.get())
        if line:
            printer(line)


async def run_demo(config: Config, call: CallScript, printer: Printer = print,
                   clock: Clock | None = None, max_seconds: float = 300.0) -> dict[str, Any]:
    """A whole call through the real engines on the virtual audio pair; returns the record."""
    clock = clock or MonotonicClock()
    engines, names = build_engines(config, replies=call.replies)
    tts = engines.tts
    mic = VirtualMicrophone(clock)
    lines = [
        (line, resample(tts.synthesize(line.say).pcm, tts.sample_rate, mic.sample_rate))
        for line in call.lines
    ]
    speaker = VirtualSpeaker(clock, tts.sample_rate)
    log = EventLog(clock)
    conversation = Conversation(mic=mic, speaker=speaker, engines=engines,
                                settings=conversation_settings(config, call.greeting), log=log)
    caller = ScriptedCaller(clock, mic, log, lines)
    printing = asyncio.create_task(_print_events(log, printer))
    talking = asyncio.create_task(conversation.run())
    try:
        await _until_first(talking, caller.run(), clock, max_seconds)
        await _until_first(talking, _idle(conversation, log, clock), clock, max_seconds)
    finally:
        talking.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await talking
        printing.cancel()
    return session_record(uuid.uuid4().hex[:12], conversation.history, conversation.finalized,
                          log, names)


async def _until_first(talking: asyncio.Task[None], work: Any, clock: Clock,
                       max_seconds: float) -> None:
    """Run `work` while the conversation runs; a conversation failure surfaces at once."""
    task = asyncio.ensure_future(work)
    limit = asyncio.ensure_future(clock.sleep(max_seconds))
    done, _ = await asyncio.wait({task, talking, limit}, return_when=asyncio.FIRST_COMPLETED)
    limit.cancel()
    if talking in done:
        task.cancel()
        talking.result()  # raises the engine's error
    if task not in done:
        task.cancel()
        return
    task.result()


async def _idle(conversation: Conversation, log: EventLog, clock: Clock) -> None:
    quiet_since = clock.now()
    seen = len(log.entries)
    while True:
        await clock.sleep(0.1)
        if conversation.busy or len(log.entries) != seen:
            quiet_since = clock.now()
            seen = len(log.entries)
        elif clock.now() - quiet_since >= IDLE_TO_END:
            return


async def run_live(config: Config, stop: asyncio.Event, printer: Printer = print,
                   max_seconds: float | None = None) -> dict[str, Any]:
    """The live loop on PyAudio devices until `stop` is set (or `max_seconds` pass)."""
    from edge_agent.audio.pyaudio_io import (
        PyAudioMicrophone,
        PyAudioSpeaker,
        find_device,
        open_pyaudio,
    )

    clock = MonotonicClock()
    pa = open_pyaudio()
    try:
        in_dev = find_device(pa, config.audio.input_device, output=False)
        out_dev = find_device(pa, config.audio.output_device, output=True)
        engines, names = build_engines(config)
        mic = PyAudioMicrophone(pa, in_dev)
        speaker = PyAudioSpeaker(pa, out_dev, engines.tts.sample_rate)
        log = EventLog(clock)
        conversation = Conversation(mic=mic, speaker=speaker, engines=engines,
                                    settings=conversation_settings(config), log=log)
        printing = asyncio.create_task(_print_events(log, printer))
        talking = asyncio.create_task(conversation.run())
        printer("edge-agent: listening (Ctrl-C to stop)")
        try:
            limit = 10 * 365 * 86400.0 if max_seconds is None else max_seconds
            await _until_first(talking, stop.wait(), clock, limit)
        finally:
            talking.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await talking
            printing.cancel()
            speaker.close()
        return session_record(uuid.uuid4().hex[:12], conversation.history,
                              conversation.finalized, log, names)
    finally:
        pa.terminate()
