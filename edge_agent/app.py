"""Composition root: config -> engines and devices -> conversation. Nothing else builds parts."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import uuid
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edge_agent.audio.device import Microphone, Speaker
from edge_agent.audio.pcm import resample
from edge_agent.audio.unit_audio import UnitAudioWriter
from edge_agent.audio.virtual import VirtualMicrophone, VirtualSpeaker
from edge_agent.clock import Clock, MonotonicClock
from edge_agent.config import Config
from edge_agent.console import describe
from edge_agent.conversation.agent import Conversation, ConversationSettings, Engines
from edge_agent.conversation.backchannel import BackchannelClassifier, load_classifier
from edge_agent.conversation.builtin_tools import load_tools
from edge_agent.conversation.echo import EchoFilter
from edge_agent.conversation.endpoint import EndpointRules
from edge_agent.conversation.segmenter import SegmenterSettings
from edge_agent.conversation.tools import Toolbox
from edge_agent.conversation.turn_taking import TurnRules
from edge_agent.demo.caller import ScriptedCaller
from edge_agent.demo.callfile import CallerLine, CallScript
from edge_agent.engines.base import LanguageModel, SpeechRecognizer, TextToSpeech
from edge_agent.engines.llm import ScriptedLanguageModel, ScriptedReply, load_language_model
from edge_agent.engines.moonshine import MoonshineRecognizer
from edge_agent.engines.stt import PocketSphinxRecognizer, VoskRecognizer
from edge_agent.engines.tts import PiperSpeech
from edge_agent.engines.vad import SileroVad
from edge_agent.errors import ConfigError, ModelFileError
from edge_agent.events import EventLog
from edge_agent.heard.truncation import HeardPolicy
from edge_agent.models.catalog import Catalog, load_catalog
from edge_agent.session import session_record

Printer = Callable[[str], None]
IDLE_TO_END = 1.5
"""Seconds the demo waits with nothing happening after the last caller line before it ends."""


def resolve_models(config: Config, catalog: Catalog, with_llm: bool) -> dict[str, Path]:
    """Every model the config needs, by kind, found on disk before anything heavy loads."""
    return {use.kind: catalog.resolve(use.reference, use.kind, use.key, config.source)
            for use in config.models_in_use(with_llm)}


def _scripted_llm(config: Config, replies: Sequence[ScriptedReply] | None
                  ) -> tuple[ScriptedLanguageModel, str] | None:
    if replies is not None:
        return ScriptedLanguageModel(replies), "scripted (call file)"
    if config.llm.engine != "scripted":
        return None
    if not config.llm.script:
        raise ConfigError(config.source, "llm.script",
                          'must name a replies file when llm.engine = "scripted"')
    script = Path(config.llm.script).expanduser()
    return ScriptedLanguageModel.from_file(script), f"scripted ({script})"


def build_engines(config: Config, replies: Sequence[ScriptedReply] | None = None,
                  catalog: Catalog | None = None) -> tuple[Engines, dict[str, str]]:
    """Load every engine the config names (blocking: seconds). `replies` scripts the LLM."""
    catalog = catalog or load_catalog(config.models_dir)
    scripted = _scripted_llm(config, replies)
    paths = resolve_models(config, catalog, with_llm=scripted is None)
    with _fix_hint(config, catalog, "stt"):
        stt = _recognizer(config, paths["stt"])
    llm: LanguageModel
    if scripted is not None:
        llm, llm_name = scripted
    else:
        with _fix_hint(config, catalog, "llm"):
            llm = load_language_model(
                paths["llm"], context_tokens=config.llm.context_tokens,
                threads=config.llm.threads, max_tokens=config.llm.max_tokens,
                temperature=config.llm.temperature, seed=config.llm.seed)
        llm_name = f"llama.cpp ({paths['llm'].name})"
    voice = paths["tts"]
    with _fix_hint(config, catalog, "tts"):
        tts = _piper(config, voice)
    with _fix_hint(config, catalog, "vad"):
        vad = SileroVad(paths["vad"])
    engines = Engines(vad=vad, stt=stt, llm=llm, tts=tts)
    names = {"vad": f"silero ({paths['vad'].name})", "stt": config.stt_engine, "llm": llm_name,
             "tts": f"piper ({voice.name})"}
    return engines, names


@contextlib.contextmanager
def _fix_hint(config: Config, catalog: Catalog, kind: str) -> Iterator[None]:
    """A model file that fails to load: name how to get a good copy of it."""
    try:
        yield
    except ModelFileError as exc:
        [use] = [u for u in config.models_in_use() if u.kind == kind]
        if use.reference in catalog.specs:
            spec = catalog.spec(use.reference)
            fix = (f"Model '{spec.name}' ({use.key}) may be damaged: check it with `edge-agent "
                   f"models verify {spec.name}`; {catalog.fetch_hint(spec)}")
        else:
            fix = f"Fix or replace the file, or point {use.key} at a good copy"
        raise exc.with_fix(fix) from None


def _piper(config: Config, voice: Path) -> PiperSpeech:
    voice_config = voice.with_name(voice.name + ".json")
    return PiperSpeech(voice, voice_config if voice_config.exists() else None,
                       config.tts.length_scale)


def _recognizer(config: Config, model: Path) -> SpeechRecognizer:
    if config.stt_engine == "moonshine":
        return MoonshineRecognizer(model, threads=config.stt.threads)
    return VoskRecognizer(model) if config.stt_engine == "vosk" else PocketSphinxRecognizer(model)


def load_voice(config: Config, catalog: Catalog | None = None) -> PiperSpeech:
    """Only the configured Piper voice (for tools that need no other engine)."""
    return _piper(config, _model_path(config, "tts", catalog))


def load_recognizer(config: Config, catalog: Catalog | None = None) -> SpeechRecognizer:
    """Only the configured speech recognizer."""
    catalog = catalog or load_catalog(config.models_dir)
    with _fix_hint(config, catalog, "stt"):
        return _recognizer(config, _model_path(config, "stt", catalog))


def _model_path(config: Config, kind: str, catalog: Catalog | None) -> Path:
    catalog = catalog or load_catalog(config.models_dir)
    [use] = [use for use in config.models_in_use(with_llm=False) if use.kind == kind]
    return catalog.resolve(use.reference, use.kind, use.key, config.source)


def conversation_settings(config: Config, greeting: str | None = None) -> ConversationSettings:
    """The loop's settings, all from `config` (the one place defaults live)."""
    turns, vad = config.turns, config.vad
    return ConversationSettings(
        system_prompt=config.llm.system_prompt,
        greeting=turns.greeting if greeting is None else greeting,
        segmenter=SegmenterSettings(vad.threshold, vad.min_speech_ms),
        endpoint=EndpointRules(complete_ms=vad.end_silence_complete_ms,
                               incomplete_ms=vad.end_silence_incomplete_ms,
                               unknown_ms=vad.end_silence_ms,
                               speculate_ms=vad.speculate_after_ms),
        preroll_ms=vad.preroll_ms,
        turns=TurnRules(pause_on_speech=turns.pause_on_speech,
                        barge_in_min_ms=turns.barge_in_min_ms,
                        barge_in_min_words=turns.barge_in_min_words,
                        barge_in_force_ms=turns.barge_in_force_ms,
                        echo_coherence=turns.echo_coherence,
                        language=turns.language),
        heard_policy=HeardPolicy(config.heard.policy),
        interrupted_marker=config.heard.marker,
        history_turns=turns.history_turns,
        max_tool_hops=config.tools.max_hops,
        session_start=config.session.start,
        wake_phrase=config.session.wake_phrase,
        idle_end_s=config.session.idle_end_s,
    )


@dataclass(frozen=True)
class ConversationParts:
    """Everything the config chooses around the loop."""

    settings: ConversationSettings
    classifier: BackchannelClassifier
    echo: EchoFilter
    tools: Toolbox


def conversation_parts(config: Config, greeting: str | None = None) -> ConversationParts:
    """The loop's settings, classifier, echo filter and tools, built before any model loads: a
    value a component refuses is reported as the config error it is (exit 2), at once."""
    with _refused_as_config_error(config, "turns.echo_min_match"):
        echo = EchoFilter(min_match=config.turns.echo_min_match)
    return ConversationParts(
        settings=conversation_settings(config, greeting),
        classifier=load_classifier(config.turns.backchannel_classifier, config.source),
        echo=echo,
        tools=load_tools(config.tools.enabled, config.data_path / "edge-agent.db",
                         config.source),
    )


@contextlib.contextmanager
def _refused_as_config_error(config: Config, key: str) -> Iterator[None]:
    try:
        yield
    except ValueError as exc:
        raise ConfigError(config.source, key, str(exc)) from None


def build_conversation(config: Config, parts: ConversationParts, *, mic: Microphone,
                       speaker: Speaker, engines: Engines, log: EventLog,
                       unit_audio: UnitAudioWriter | None = None) -> Conversation:
    """The loop with its parts around it."""
    tools = parts.tools
    if isinstance(engines.llm, ScriptedLanguageModel) and engines.llm.tool_names - tools.names:
        missing = ", ".join(sorted(engines.llm.tool_names - tools.names))
        raise ConfigError(config.source, "tools.enabled",
                          f"the scripted replies call {missing}, which is not enabled; add it to "
                          "[tools] enabled (or to [agent] tools in the call file)")
    return Conversation(
        mic=mic, speaker=speaker, engines=engines, log=log, unit_audio=unit_audio,
        settings=parts.settings, classifier=parts.classifier, echo=parts.echo, tools=tools)


async def _print_events(log: EventLog, printer: Printer) -> None:
    queue = log.subscribe()
    while True:
        line = describe(await queue.get())
        if line:
            printer(line)


async def run_demo(config: Config, call: CallScript, printer: Printer = print,
                   clock: Clock | None = None, max_seconds: float = 300.0,
                   audio_dir: Path | None = None) -> dict[str, Any]:
    """A whole call through the real engines on the virtual audio pair; returns the record.
    With `audio_dir`, each unit's played audio is written there as `<unit_id>.wav`."""
    clock = clock or MonotonicClock()
    if call.tools is not None:
        config = dataclasses.replace(config, tools=dataclasses.replace(config.tools,
                                                                       enabled=list(call.tools)))
    parts = conversation_parts(config, call.greeting)
    engines, names = await asyncio.to_thread(build_engines, config, call.replies)
    speaker = VirtualSpeaker(clock, engines.tts.sample_rate)
    mic = VirtualMicrophone(clock, echo_of=speaker if call.echo_gain else None,
                            echo_gain=call.echo_gain)
    lines = await asyncio.to_thread(_caller_audio, engines.tts, call, mic.sample_rate)
    log = EventLog(clock)
    unit_audio = UnitAudioWriter(audio_dir) if audio_dir is not None else None
    talk = build_conversation(config, parts, mic=mic, speaker=speaker, engines=engines, log=log,
                              unit_audio=unit_audio)
    caller = ScriptedCaller(clock, mic, log, lines)

    async def call_then_idle(talking: asyncio.Task[None]) -> None:
        await _until_first(talking, caller.run(), clock, max_seconds)
        await _until_first(talking, _idle(talk, log, clock), clock, max_seconds)

    return await _session(talk, log, names, printer, call_then_idle, unit_audio)


def _caller_audio(tts: TextToSpeech, call: CallScript, rate: int) -> list[tuple[CallerLine, bytes]]:
    return [(line, resample(tts.synthesize(line.say).pcm, tts.sample_rate, rate))
            for line in call.lines]


async def _session(conversation: Conversation, log: EventLog, names: dict[str, str],
                   printer: Printer, hold: Callable[[asyncio.Task[None]], Awaitable[None]],
                   unit_audio: UnitAudioWriter | None) -> dict[str, Any]:
    """Converse while `hold` runs, then stop (finalizing what is open) and make the record."""
    printing = asyncio.create_task(_print_events(log, printer))
    talking = asyncio.create_task(conversation.run())
    try:
        await hold(talking)
    finally:
        talking.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await talking
        printing.cancel()
        if unit_audio is not None:
            written = await asyncio.to_thread(unit_audio.close)
            printer(f"unit audio: {len(written)} file(s) in {unit_audio.directory}")
    return session_record(uuid.uuid4().hex[:12], conversation.histories, log, names)


async def _until_first(talking: asyncio.Task[None], work: Awaitable[Any], clock: Clock,
                       max_seconds: float | None) -> None:
    """Run `work` while the conversation runs; a conversation failure surfaces at once."""
    task = asyncio.ensure_future(work)
    waiting: set[asyncio.Future[Any]] = {task, talking}
    limit = asyncio.ensure_future(clock.sleep(max_seconds)) if max_seconds is not None else None
    if limit is not None:
        waiting.add(limit)
    done, _ = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
    if limit is not None:
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
                   max_seconds: float | None = None, audio_dir: Path | None = None,
                   companion: Callable[[EventLog, Engines], Awaitable[None]] | None = None,
                   loaded: tuple[Engines, dict[str, str]] | None = None) -> dict[str, Any]:
    """The live loop on PyAudio devices until `stop` is set (or `max_seconds` pass). With a
    `companion` (a benchmark's caller), until it is done and the conversation is idle.
    `loaded`: engines already loaded, with their names (else the config's are loaded)."""
    from edge_agent.audio.pyaudio_io import (
        PyAudioMicrophone,
        PyAudioSpeaker,
        find_device,
        open_pyaudio,
    )

    clock = MonotonicClock()
    parts = conversation_parts(config)
    pa = open_pyaudio()
    try:
        in_dev = find_device(pa, config.audio.input_device, output=False)
        out_dev = find_device(pa, config.audio.output_device, output=True)
        if loaded is None:
            loaded = await asyncio.to_thread(build_engines, config)
        engines, names = loaded
        mic = PyAudioMicrophone(pa, in_dev)
        speaker = PyAudioSpeaker(pa, out_dev, engines.tts.sample_rate, clock)
        log = EventLog(clock)
        unit_audio = UnitAudioWriter(audio_dir) if audio_dir is not None else None
        talk = build_conversation(config, parts, mic=mic, speaker=speaker, engines=engines,
                                  log=log, unit_audio=unit_audio)

        async def until_stopped(talking: asyncio.Task[None]) -> None:
            printer("edge-agent: listening (Ctrl-C to stop)")
            if companion is None:
                await _until_first(talking, stop.wait(), clock, max_seconds)
                return
            await _until_first(talking, companion(log, engines), clock, max_seconds)
            await _until_first(talking, _idle(talk, log, clock), clock, max_seconds)

        try:
            return await _session(talk, log, names, printer, until_stopped, unit_audio)
        finally:
            speaker.close()
    finally:
        pa.terminate()
