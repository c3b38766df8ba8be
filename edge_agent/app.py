"""Composition root: config -> engines, memory and devices -> conversation. Nothing else builds
parts (`edge_agent.runner` runs what is built here)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from edge_agent.audio.device import Microphone, Speaker
from edge_agent.audio.echo_cancel import (
    MicrophoneProcessing,
    ProcessedMicrophone,
    WebRtcProcessing,
)
from edge_agent.audio.talker_gate import GateSettings, LevelGate, TalkerGate
from edge_agent.audio.unit_audio import UnitAudioSink, UnitAudioSinks, UnitAudioWriter
from edge_agent.clock import Clock, MonotonicClock
from edge_agent.config import NOISE_SUPPRESSION_AUTO, Config
from edge_agent.conversation.agent import Conversation, ConversationSettings, Engines
from edge_agent.conversation.backchannel import BackchannelClassifier, load_classifier
from edge_agent.conversation.builtin_tools import load_tools
from edge_agent.conversation.echo import EchoFilter
from edge_agent.conversation.endpoint import EndpointRules
from edge_agent.conversation.segmenter import SegmenterSettings
from edge_agent.conversation.tools import Toolbox
from edge_agent.conversation.turn_taking import TurnRules
from edge_agent.engines.base import LanguageModel, SpeechRecognizer
from edge_agent.engines.cpu_share import CpuShare, ProcLoadMeter, usable_cores
from edge_agent.engines.engine_check import ensure_llm_runs
from edge_agent.engines.heap import release_freed_heap
from edge_agent.engines.llm.fallback import FallbackLanguageModel
from edge_agent.engines.llm.llama import LlamaLanguageModel, load_language_model
from edge_agent.engines.llm.scripted import ScriptedLanguageModel, ScriptedReply
from edge_agent.engines.llm.server import ServerLanguageModel, read_api_key
from edge_agent.engines.moonshine import MoonshineRecognizer
from edge_agent.engines.stt import PocketSphinxRecognizer, VoskRecognizer
from edge_agent.engines.tts import PiperSpeech, make_voice_repeatable
from edge_agent.engines.turn_end import SmartTurn
from edge_agent.engines.vad import SileroVad
from edge_agent.errors import ConfigError, ModelFileError
from edge_agent.events import EventLog, Notice
from edge_agent.heard.truncation import HeardPolicy
from edge_agent.lan import parse_server_url
from edge_agent.memory.context import WindowSettings
from edge_agent.memory.conversation_memory import (
    ConversationMemory,
    MemorySettings,
    iso,
    utc_now,
)
from edge_agent.memory.kept_audio import AudioKeeper
from edge_agent.memory.record import SessionRecord, session_record
from edge_agent.memory.store import MemoryStore
from edge_agent.memory.summarizer import ExtractiveSummarizer, Summarizer, load_summarizer
from edge_agent.memory.writer import StoreWriter
from edge_agent.memory.writer_lock import WriterLock
from edge_agent.models.catalog import Catalog, load_catalog
from edge_agent.owner import Owner, OwnerThread


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
                  catalog: Catalog | None = None, repeatable: bool = False,
                  crash_checked: bool = False, share: CpuShare | None = None
                  ) -> tuple[Engines, dict[str, str]]:
    """Load every engine the config names (blocking: seconds). `replies` scripts the LLM.
    `repeatable`: the voice says the same sentences, in the same order, as the same audio in
    every run (a demo, a replay: see `make_voice_repeatable`). `crash_checked`: run the LLM
    once in a child process first, so that a llama.cpp build this CPU cannot run is an
    EngineCrash here rather than the death of this process (`engine_check.ensure_llm_runs`:
    remembered in the data dir once it passed). `share`: where the engines tell each other how
    many cores they use (default: a new one measuring this machine)."""
    if repeatable:
        make_voice_repeatable()
    catalog = catalog or load_catalog(config.models_dir)
    scripted = _scripted_llm(config, replies)
    paths = resolve_models(config, catalog, with_llm=scripted is None)
    if crash_checked and scripted is None:
        ensure_llm_runs(config, paths["llm"])
    # The voice and the recognizer are rewritten in memory while they load (temporary copies
    # of ~60-90 MB each, given back right after): loaded first and one at a time, their copies
    # never sit on top of everything else, which keeps the start-up peak lowest.
    # The engines work at the same time (the voice speaks while the model writes): the LLM
    # takes only the cores the others and other programs leave free.
    share = share or CpuShare(usable_cores(), ProcLoadMeter())
    voice = paths["tts"]
    with _fix_hint(config, catalog, "tts"):
        tts = _piper(config, voice, share)
    release_freed_heap()
    with _fix_hint(config, catalog, "stt"):
        stt = _recognizer(config, paths["stt"], share)
    release_freed_heap()
    llm: LanguageModel
    if scripted is not None:
        llm, llm_name = scripted
    else:
        with _fix_hint(config, catalog, "llm"):
            llm = load_language_model(
                paths["llm"], context_tokens=config.llm.context_tokens,
                threads=config.llm.threads, max_tokens=config.llm.max_tokens,
                temperature=config.llm.temperature, seed=config.llm.seed, share=share)
        llm_name = f"llama.cpp ({paths['llm'].name})"
        if config.llm.server:
            llm = _with_server(config, llm, MonotonicClock())
            llm_name = f"{config.llm.server} (on-device: {llm_name})"
    with _fix_hint(config, catalog, "vad"):
        vad = SileroVad(paths["vad"])
    turn_end = None
    names = {"vad": f"silero ({paths['vad'].name})", "stt": config.stt_engine, "llm": llm_name,
             "tts": f"piper ({voice.name})"}
    if "turn" in paths:
        with _fix_hint(config, catalog, "turn"):
            turn_end = SmartTurn(paths["turn"])
        names["turn_end"] = f"smart-turn ({paths['turn'].name})"
    engines = Engines(vad=vad, stt=stt, llm=llm, tts=tts, turn_end=turn_end, cpu=share)
    return engines, names


def _with_server(config: Config, local: LanguageModel, clock: Clock) -> FallbackLanguageModel:
    """`local` behind the LAN server `[llm] server` names: the server answers while it can."""
    return FallbackLanguageModel(lan_server(config), local, clock)


def lan_server(config: Config, *, timeout_s: float | None = None,
               max_tokens: int | None = None) -> ServerLanguageModel:
    """The client of the LAN server `[llm] server` names, as configured (`timeout_s`,
    `max_tokens`: other than configured, for a check)."""
    llm = config.llm
    return ServerLanguageModel(
        parse_server_url(llm.server, config.source),
        timeout_s=llm.server_timeout_ms / 1000 if timeout_s is None else timeout_s,
        max_tokens=llm.max_tokens if max_tokens is None else max_tokens,
        temperature=llm.temperature, seed=llm.seed, model=llm.server_model,
        slot=llm.server_slot, api_key=read_api_key(llm.server_key_file, config.source),
        ca_file=llm.server_ca_file)


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


def _piper(config: Config, voice: Path, share: CpuShare | None = None) -> PiperSpeech:
    voice_config = voice.with_name(voice.name + ".json")
    return PiperSpeech.load(voice, voice_config if voice_config.exists() else None,
                            config.tts.length_scale, threads=config.tts.threads, share=share)


def _recognizer(config: Config, model: Path, share: CpuShare | None = None
                ) -> SpeechRecognizer:
    if config.stt_engine == "moonshine":
        return MoonshineRecognizer(model, threads=config.stt.threads, share=share)
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
        greeting=turns.greeting if greeting is None else greeting,
        segmenter=SegmenterSettings(vad.threshold, vad.min_speech_ms),
        endpoint=EndpointRules(complete_ms=vad.end_silence_complete_ms,
                               incomplete_ms=vad.end_silence_incomplete_ms,
                               unknown_ms=vad.end_silence_ms,
                               speculate_ms=vad.speculate_after_ms,
                               sound_done_ms=vad.end_silence_sound_ms,
                               sound_threshold=vad.end_model_threshold,
                               sound_hold_below=vad.end_model_hold_below),
        preroll_ms=vad.preroll_ms,
        turns=TurnRules(pause_on_speech=turns.pause_on_speech,
                        barge_in_min_ms=turns.barge_in_min_ms,
                        barge_in_min_words=turns.barge_in_min_words,
                        barge_in_force_ms=turns.barge_in_force_ms,
                        echo_coherence=turns.echo_coherence,
                        language=turns.language),
        heard_policy=HeardPolicy(config.heard.policy),
        interrupted_marker=config.heard.marker,
        memory=MemorySettings(
            system_prompt=config.llm.system_prompt, marker=config.heard.marker,
            window=WindowSettings(window_turns=turns.history_turns,
                                  fold_turns=config.memory.fold_turns,
                                  max_facts=config.memory.max_facts),
            identity=config.memory.identity, session_ttl_s=config.memory.session_ttl_s,
            summary_chars=config.memory.summary_chars),
        checkpoint_ms=config.memory.checkpoint_ms,
        prefix_state_dir=config.data_path / "llm-state" if config.memory.prefix_state else None,
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


def conversation_parts(config: Config, greeting: str | None = None,
                       db_path: Path | None = None, tools: Toolbox | None = None
                       ) -> ConversationParts:
    """The loop's settings, classifier, echo filter and tools (writing to `db_path`, else the
    config's database; or `tools`, e.g. a replay's recorded results), built before any model
    loads: a bad plugin fails at once (exit 2)."""
    return ConversationParts(
        settings=conversation_settings(config, greeting),
        classifier=load_classifier(config.turns.backchannel_classifier, config.source),
        echo=EchoFilter(min_match=config.turns.echo_min_match),
        tools=tools if tools is not None else load_tools(
            config.tools.enabled, db_path or config.db_path, config.source),
    )


def microphone_processing(config: Config, mic_rate: int,
                          speaker_audible: bool) -> MicrophoneProcessing | None:
    """The cleaning `[audio]` asks for (None: none). echo_cancel "auto" is on when the
    microphone can hear the speaker (`speaker_audible`: a live device, a call with an echo
    path); noise_suppression "auto" is NOISE_SUPPRESSION_AUTO."""
    audio = config.audio
    cancel = audio.echo_cancel == "on" or (audio.echo_cancel == "auto" and speaker_audible)
    suppress = audio.noise_suppression == "on" or (audio.noise_suppression == "auto"
                                                   and NOISE_SUPPRESSION_AUTO)
    if not (cancel or suppress):
        return None
    return WebRtcProcessing(mic_rate, echo_cancellation=cancel, noise_suppression=suppress)


def build_conversation(config: Config, parts: ConversationParts, *, mic: Microphone,
                       speaker: Speaker, engines: Engines, log: EventLog,
                       memory: ConversationMemory | None = None,
                       unit_audio: UnitAudioWriter | None = None,
                       owner: Callable[[str], Owner] = OwnerThread,
                       processing: MicrophoneProcessing | None = None) -> Conversation:
    """The loop with its parts around it. With `[memory] keep_audio` (and a memory database),
    the caller's speech and the played units are kept in it too. `owner`: where the engines'
    blocking calls run (their own threads; inline on the loop for a virtual-clock replay).
    With `processing` (see `microphone_processing`), everything the loop hears from the
    microphone, kept audio included, is cleaned (the speaker's echo, steady noise)."""
    if processing is not None:
        mic = ProcessedMicrophone(mic, speaker, processing, log.clock, owner("microphone"))
    if isinstance(engines.llm, FallbackLanguageModel):
        publish = log.publisher()
        engines.llm.announce_to(lambda text: publish(Notice(text)))
    tools = parts.tools
    if isinstance(engines.llm, ScriptedLanguageModel) and engines.llm.tool_names - tools.names:
        missing = ", ".join(sorted(engines.llm.tool_names - tools.names))
        raise ConfigError(config.source, "tools.enabled",
                          f"the scripted replies call {missing}, which is not enabled; add it to "
                          "[tools] enabled (or to [agent] tools in the call file)")
    keeper = (AudioKeeper(memory, log, mic.sample_rate)
              if config.memory.keep_audio and memory is not None else None)
    sinks: list[UnitAudioSink] = [sink for sink in (unit_audio, keeper) if sink is not None]
    return Conversation(
        mic=mic, speaker=speaker, engines=engines, log=log,
        unit_audio=UnitAudioSinks(sinks) if sinks else None,
        caller_audio=keeper, memory=memory, settings=parts.settings, owner=owner,
        classifier=parts.classifier, echo=parts.echo, tools=tools,
        gate=talker_gate(config, mic.sample_rate))


def talker_gate(config: Config, mic_rate: int) -> TalkerGate | None:
    """The gate `[audio] talker_gate` asks for (None: "off")."""
    audio = config.audio
    if audio.talker_gate == "off":
        return None
    return LevelGate(GateSettings(floor_db=audio.talker_floor_db,
                                  margin_db=audio.talker_margin_db), mic_rate)


@dataclass
class Memory:
    """A run's memory: the conversation's side and the database writer behind it."""

    conversation: ConversationMemory
    writer: StoreWriter
    owner: Owner


def build_summarizer(config: Config, reply_model: LanguageModel,
                     catalog: Catalog | None = None) -> Summarizer:
    """The configured summarizer. An "llm" one with no summarizer_model runs in the reply
    model's own context (`LlamaSummarizer(shared=...)`: the model in memory once; with a LAN
    server, the on-device model's); with a
    summarizer_model it loads that (blocking); with a scripted reply model and no
    summarizer_model there is no model to run: summaries are extractive."""
    memory = config.memory
    model_path = None
    shared = None
    if memory.summarizer == "llm":
        if memory.summarizer_model:
            catalog = catalog or load_catalog(config.models_dir)
            model_path = catalog.resolve(memory.summarizer_model, "llm",
                                         "memory.summarizer_model", config.source)
        elif isinstance(reply_model, LlamaLanguageModel):
            shared = reply_model.llama
        elif isinstance(reply_model, FallbackLanguageModel) and isinstance(
                reply_model.local, LlamaLanguageModel):
            # Summaries stay on the kiosk: the on-device model, in its context.
            shared = reply_model.local.llama
        else:
            return ExtractiveSummarizer(max_chars=memory.summary_chars)
    # One thread: summaries are background work, and llama.cpp's worker threads spin-wait on
    # each other, so two of them next to the recognizer and the voice on 2 cores both slow the
    # agent and take up to ~170 ms to notice the stop (one thread: ~30 ms).
    return load_summarizer(memory.summarizer, model_path=model_path, source=config.source,
                           key="memory.summarizer", threads=1, max_chars=memory.summary_chars,
                           shared=shared)


async def open_memory(config: Config, parts: ConversationParts, log: EventLog,
                      engines: dict[str, str], summarizer: Summarizer,
                      db_path: Path | None = None, lock: WriterLock | None = None) -> Memory:
    """Open the memory database (exit 8 with one line if it cannot be used) and the
    conversation's memory on it; old event logs expire. `lock`: the database's writer lock,
    if the caller took it already (else the store takes it: exit 9 if another writer has it)."""
    owner = OwnerThread("store")
    try:
        store = await owner.call(lambda: MemoryStore.open(db_path or config.db_path, lock=lock))
    except BaseException:
        owner.close()
        raise
    def warn(text: str) -> None:
        log.publish(Notice(text))

    writer = StoreWriter(store, owner, log.clock, warn=warn)
    cutoff = iso(utc_now() - timedelta(days=config.memory.retention_days))
    writer.submit(lambda s: s.expire_events(cutoff), durable=False, what="expire old logs")
    conversation = ConversationMemory(parts.settings.memory, log, writer=writer,
                                      summarizer=summarizer, engines=engines)
    return Memory(conversation, writer, owner)


async def close_memory(memory: Memory) -> SessionRecord:
    """Commit what is queued, read the run's record back from the database, close it."""
    conversation = memory.conversation
    try:
        return await memory.writer.read(
            lambda store: session_record(store, conversation.session_ids, conversation.run_id))
    finally:
        await memory.writer.close()
        memory.owner.close()
