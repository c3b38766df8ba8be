"""What the benchmark parts share: the configuration, the engines (each loaded once, whichever
part needs it first), where progress lines go, and how much each part measures (`Plan`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from edge_agent.bench import sizes
from edge_agent.bench.latency import REPLY, SHORT_REPLY
from edge_agent.bench.memory import MemoryPlan
from edge_agent.bench.rooms import RoomsPlan, quick_plan
from edge_agent.config import Config
from edge_agent.conversation.settings import Engines
from edge_agent.engines.base import SpeechRecognizer
from edge_agent.engines.cpu_share import CpuShare, ProcLoadMeter, usable_cores
from edge_agent.engines.llm.llama import LlamaLanguageModel
from edge_agent.engines.llm.scripted import ScriptedLanguageModel, ScriptedReply
from edge_agent.engines.tts import PiperSpeech
from edge_agent.errors import EngineError


@dataclass(frozen=True)
class Plan:
    """How much each part of `edge-agent bench` measures: the full run's sizes (the
    subcommands' defaults), or `--quick`'s (a few minutes on a 2-core PC)."""

    quick: bool
    seed: int = 1
    heard_runs: int = sizes.HEARD_RUNS.full
    """Random barge-ins played and recorded."""
    latency_exchanges: int = sizes.LATENCY_EXCHANGES.full
    """Questions asked of the live agent."""
    latency_interrupt_every: int = sizes.LATENCY_INTERRUPT_EVERY.full
    """Every n-th exchange the caller interrupts (else says a backchannel)."""
    latency_reply: str = REPLY
    """The scripted reply to every line."""
    stt_every: int = sizes.STT_CLIP_EVERY.full
    """Every n-th clip of the 96 of the clip set."""
    stt_engines: tuple[str, ...] = ("moonshine", "pocketsphinx")
    """Recognizers measured on the clip set (the configured one is always among them)."""
    backchannel_every: int = sizes.BACKCHANNEL_CLIP_EVERY.full
    """Every n-th clip of the backchannel corpus."""
    memory: MemoryPlan = field(default_factory=MemoryPlan)
    rooms: RoomsPlan = field(default_factory=RoomsPlan)
    service_idle_s: float = sizes.SERVICE_IDLE_S.full
    """Seconds the idle agent is watched."""
    service_devices: bool = True
    """Pull and return the microphone and the speaker."""
    engine_sentences: int = sizes.ENGINE_SENTENCES.full
    """Sentences through the voice and the recognizer alone."""
    llm_prompts: int = sizes.LLM_PROMPTS.full
    """Questions to the LLM alone."""


def plan_for(quick: bool, seed: int, config: Config) -> Plan:
    """The full plan, or the quick one. The recognizers: the configured one, and in full also
    the other built-in one of moonshine / pocketsphinx (their WERs side by side)."""
    configured = config.stt_engine
    full = Plan(quick=False, seed=seed, stt_engines=tuple(dict.fromkeys(
        (configured, "moonshine", "pocketsphinx"))), memory=MemoryPlan(seed=seed),
        rooms=RoomsPlan(seed=seed))
    if not quick:
        return full
    return dataclasses.replace(
        full, quick=True, heard_runs=sizes.HEARD_RUNS.quick,
        latency_exchanges=sizes.LATENCY_EXCHANGES.quick,
        latency_interrupt_every=sizes.LATENCY_INTERRUPT_EVERY.quick, latency_reply=SHORT_REPLY,
        stt_every=sizes.STT_CLIP_EVERY.quick, stt_engines=(configured,),
        backchannel_every=sizes.BACKCHANNEL_CLIP_EVERY.quick,
        memory=MemoryPlan(turns=sizes.MEMORY_TURNS.quick, kills=sizes.MEMORY_KILLS.quick,
                          seed=seed, repeats=3, sliding=False, restarts=0, preemptions=0),
        rooms=quick_plan(seed), service_idle_s=sizes.SERVICE_IDLE_S.quick, service_devices=False,
        engine_sentences=sizes.ENGINE_SENTENCES.quick, llm_prompts=sizes.LLM_PROMPTS.quick)


class Workbench:
    """The configuration and the engines the parts share, each loaded once."""

    def __init__(self, config: Config, say: Callable[[str], None]) -> None:
        self.config = config
        self.say = say
        """Where a part's progress lines go (the suite prefixes them with the part and time)."""
        self._engines: tuple[Engines, dict[str, str]] | None = None
        self._voice: PiperSpeech | None = None
        self._recognizers: dict[str, SpeechRecognizer] = {}
        self._llm: LlamaLanguageModel | None = None
        self.share = CpuShare(usable_cores(), ProcLoadMeter())
        """How many cores the engines loaded here use: the LLM leaves the others theirs."""

    def engines(self) -> tuple[Engines, dict[str, str]]:
        """The voice, the recognizer and the VAD of the config, with a scripted LLM that has
        nothing to say (a part gives it its script: `scripted_engines`)."""
        if self._engines is None:
            from edge_agent.app import build_engines

            self._engines = build_engines(self.config, replies=(), share=self.share)
        return self._engines

    def scripted_engines(self, replies: Sequence[ScriptedReply]
                         ) -> tuple[Engines, dict[str, str]]:
        """The shared engines, answering with `replies`."""
        engines, names = self.engines()
        return (dataclasses.replace(engines, llm=ScriptedLanguageModel(replies)),
                {**names, "llm": "scripted (call file)"})

    def voice(self) -> PiperSpeech:
        """The configured voice (the shared engines' when loaded, else on its own)."""
        if self._engines is not None:
            tts = self._engines[0].tts
            if not isinstance(tts, PiperSpeech):
                raise EngineError(f"the benchmarks need the Piper voice, not {type(tts).__name__}")
            return tts
        if self._voice is None:
            from edge_agent.app import load_voice

            self._voice = load_voice(self.config)
        return self._voice

    def recognizer(self, engine: str | None = None) -> SpeechRecognizer:
        """The configured recognizer, or the one named `engine` (moonshine, pocketsphinx, vosk)
        with the rest of the config's [stt] settings."""
        name = engine or self.config.stt_engine
        if name == self.config.stt_engine and self._engines is not None:
            return self._engines[0].stt
        if name not in self._recognizers:
            from edge_agent.app import load_recognizer

            config = self.config
            if name != config.stt_engine:
                config = dataclasses.replace(config, stt=dataclasses.replace(config.stt,
                                                                             engine=name))
            self._recognizers[name] = load_recognizer(config)
        return self._recognizers[name]

    def llm(self) -> LlamaLanguageModel | None:
        """The configured LLM, loaded as the agent loads it; None for a scripted config."""
        if self.config.llm.engine != "llama":
            return None
        if self._llm is None:
            from edge_agent.engines.llm.llama import load_language_model
            from edge_agent.models.catalog import load_catalog

            llm = self.config.llm
            path = load_catalog(self.config.models_dir).resolve(
                llm.model, "llm", "llm.model", self.config.source)
            self._llm = load_language_model(
                path, context_tokens=llm.context_tokens, threads=llm.threads,
                max_tokens=llm.max_tokens, temperature=llm.temperature, seed=llm.seed,
                share=self.share)
        return self._llm
