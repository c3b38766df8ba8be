"""The composition root's conversation: config -> the loop's settings, classifier, echo filter,
tools, microphone processing and the `Conversation` itself."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from edge_agent.app.house import build_house
from edge_agent.audio.adaptive_beamformer import build_beamformer
from edge_agent.audio.array import MicArray
from edge_agent.audio.beamformer import ArrayMicrophone, BeamformedMicrophone
from edge_agent.audio.device import Microphone, Speaker
from edge_agent.audio.echo_cancel import (
    MicrophoneProcessing,
    ProcessedMicrophone,
    WebRtcProcessing,
)
from edge_agent.audio.talker_gate import GateSettings, LevelGate, TalkerGate
from edge_agent.audio.unit_audio import UnitAudioSink, UnitAudioSinks, UnitAudioWriter
from edge_agent.config import INCREMENTAL_RECOGNIZERS, NOISE_SUPPRESSION_AUTO, Config
from edge_agent.conversation.agent import Conversation, ConversationSettings, Engines
from edge_agent.conversation.backchannel import BackchannelClassifier, load_classifier
from edge_agent.conversation.builtin_tools import load_tools
from edge_agent.conversation.echo import EchoFilter
from edge_agent.conversation.endpoint import EndpointRules
from edge_agent.conversation.segmenter import SegmenterSettings
from edge_agent.conversation.timekeeper import RingSettings
from edge_agent.conversation.tools import Toolbox
from edge_agent.conversation.turn_taking import TurnRules
from edge_agent.engines.llm.fallback import FallbackLanguageModel
from edge_agent.engines.llm.scripted import ScriptedLanguageModel
from edge_agent.errors import ConfigError
from edge_agent.events import EventLog, Notice
from edge_agent.heard.truncation import HeardPolicy
from edge_agent.house.link import HouseLink
from edge_agent.house.tools import house_tools
from edge_agent.knowledge.live import Grounder
from edge_agent.memory.context import WindowSettings
from edge_agent.memory.conversation_memory import (
    ConversationMemory,
    MemorySettings,
)
from edge_agent.memory.kept_audio import AudioKeeper
from edge_agent.owner import Owner, OwnerThread
from edge_agent.timers.desk import TimerDesk
from edge_agent.timers.store import TimerStore


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
                               sound_hold_below=vad.end_model_hold_below,
                               sound_sure_above=vad.end_model_sure_above,
                               sure_ms=vad.end_silence_sure_ms),
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
        knowledge_reload_s=config.knowledge.reload_s,
        words_every_ms=(config.screen.partials_ms if config.screen.enabled
                        and config.stt_engine in INCREMENTAL_RECOGNIZERS else 0),
        push_to_talk=config.screen.enabled and config.screen.push_to_talk,
        rings=RingSettings(ring_for_s=config.timers.ring_for_s,
                           ring_pause_s=config.timers.ring_pause_s,
                           snooze_s=config.timers.snooze_s),
    )


@dataclass(frozen=True)
class ConversationParts:
    """Everything the config chooses around the loop."""

    settings: ConversationSettings
    classifier: BackchannelClassifier
    echo: EchoFilter
    tools: Toolbox
    timers: TimerDesk | None
    """With `[timers] enabled`: the timers in the memory database."""
    house: HouseLink | None
    """With `[mqtt] url`: the link to the house's broker (its task is the runner's)."""


def conversation_parts(config: Config, greeting: str | None = None,
                       db_path: Path | None = None, tools: Toolbox | None = None,
                       effects: bool = True) -> ConversationParts:
    """The loop's settings, classifier, echo filter, tools, timers and house (writing to
    `db_path`, else the config's database; or `tools`, e.g. a replay's recorded results;
    `effects` False: no timers and no house, as a replay touches nothing), built before any
    model loads: a bad plugin or credential fails at once (exit 2)."""
    db_path = db_path or config.db_path
    house = build_house(config) if effects else None
    return ConversationParts(
        timers=TimerDesk(TimerStore(db_path, config.memory.retention_days), zone=None)
        if effects and config.timers.enabled else None,
        house=house,
        settings=conversation_settings(config, greeting),
        classifier=load_classifier(config.turns.backchannel_classifier, config.source),
        echo=EchoFilter(min_match=config.turns.echo_min_match),
        tools=tools if tools is not None else load_tools(
            config.tools.enabled, db_path, config.source,
            house_tools(config.mqtt.tools, house) if house is not None else ()),
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


def steered(config: Config, array: MicArray, mic: ArrayMicrophone, speaker: Speaker
            ) -> Microphone:
    """The array's channels as the one channel the loop hears: the beamformer `[audio]` asks
    for, toward the caller (an adaptive one keeps the agent's own voice out of what it
    adapts to)."""
    audio = config.audio
    return BeamformedMicrophone(mic, build_beamformer(
        array, mic.sample_rate, audio.look_azimuth_deg, audio.look_elevation_deg,
        audio.beamformer, speaker.played_frames))


def build_conversation(config: Config, parts: ConversationParts, *, mic: Microphone,
                       speaker: Speaker, engines: Engines, log: EventLog,
                       memory: ConversationMemory | None = None,
                       unit_audio: UnitAudioWriter | None = None,
                       owner: Callable[[str], Owner] = OwnerThread,
                       processing: MicrophoneProcessing | None = None,
                       knowledge: Grounder | None = None) -> Conversation:
    """The loop with its parts around it. With `[memory] keep_audio` (and a memory database),
    the caller's speech and the played units are kept in it too. `owner`: where the engines'
    blocking calls run (their own threads; inline on the loop for a virtual-clock replay).
    With `processing` (see `microphone_processing`), everything the loop hears from the
    microphone, kept audio included, is cleaned (the speaker's echo, steady noise).
    `knowledge`: the venue's (`open_knowledge`), looked up for every turn."""
    gate = talker_gate(config, mic)  # an array's steered channel, before it is cleaned
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
        gate=gate, knowledge=knowledge, timers=parts.timers)


def talker_gate(config: Config, mic: Microphone) -> TalkerGate | None:
    """The gate `[audio] talker_gate` asks for (None: none; "auto" is on for an array's
    steered channel only); on an array's steered channel it also hears where each frame came
    from."""
    audio = config.audio
    array = mic if isinstance(mic, BeamformedMicrophone) else None
    if audio.talker_gate == "off" or (audio.talker_gate == "auto" and array is None):
        return None
    return LevelGate(GateSettings(floor_db=audio.talker_floor_db,
                                  margin_db=audio.talker_margin_db), mic.sample_rate,
                     array.from_the_look if array is not None else None)
