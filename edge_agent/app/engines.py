"""The composition root's engines: config -> the VAD, recognizer, language model (on the
device, or a LAN server with the device's as fallback), voice and end-of-turn model."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from edge_agent.clock import Clock, MonotonicClock
from edge_agent.config import Config
from edge_agent.config.lan import (
    parse_server_url,
)
from edge_agent.conversation.agent import Engines
from edge_agent.engines.base import LanguageModel, SpeechRecognizer
from edge_agent.engines.cpu_share import CpuShare, ProcLoadMeter, usable_cores
from edge_agent.engines.engine_check import ensure_llm_runs
from edge_agent.engines.heap import release_freed_heap
from edge_agent.engines.llm.fallback import FallbackLanguageModel
from edge_agent.engines.llm.llama import load_language_model
from edge_agent.engines.llm.scripted import ScriptedLanguageModel, ScriptedReply
from edge_agent.engines.llm.server import ServerLanguageModel, read_api_key
from edge_agent.engines.moonshine import MoonshineRecognizer
from edge_agent.engines.stt import PocketSphinxRecognizer, VoskRecognizer
from edge_agent.engines.tts import PiperSpeech, make_voice_repeatable
from edge_agent.engines.turn_end import SmartTurn
from edge_agent.engines.vad import SileroVad
from edge_agent.engines.wake_word import MicroWakeWordDetector
from edge_agent.errors import ConfigError, ModelFileError
from edge_agent.models.catalog import Catalog, load_catalog

if TYPE_CHECKING:
    pass



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
    wake = None
    if "wake" in paths:
        with _fix_hint(config, catalog, "wake"):
            wake = MicroWakeWordDetector(paths["wake"])
        names["wake"] = f"microwakeword ({paths['wake'].name}: {wake.phrase})"
    engines = Engines(vad=vad, stt=stt, llm=llm, tts=tts, turn_end=turn_end, wake=wake,
                      cpu=share)
    return engines, names


def _with_server(config: Config, local: LanguageModel, clock: Clock) -> FallbackLanguageModel:
    """`local` behind the LAN server `[llm] server` names: the server answers while it can."""
    return FallbackLanguageModel(lan_server(config, clock=clock), local, clock)


def lan_server(config: Config, *, timeout_s: float | None = None,
               max_tokens: int | None = None, clock: Clock | None = None
               ) -> ServerLanguageModel:
    """The client of the LAN server `[llm] server` names, as configured (`timeout_s`,
    `max_tokens`: other than configured, for a check); its deadlines on `clock`'s time."""
    llm = config.llm
    return ServerLanguageModel(
        parse_server_url(llm.server, config.source),
        timeout_s=llm.server_timeout_ms / 1000 if timeout_s is None else timeout_s,
        max_tokens=llm.max_tokens if max_tokens is None else max_tokens,
        temperature=llm.temperature, seed=llm.seed, model=llm.server_model,
        slot=llm.server_slot, api_key=read_api_key(llm.server_key_file, config.source),
        ca_file=llm.server_ca_file, tools=llm.server_tools,
        now=(clock or MonotonicClock()).now)


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
    return _piper(config, resolve_model(config, "tts", catalog))


def load_recognizer(config: Config, catalog: Catalog | None = None) -> SpeechRecognizer:
    """Only the configured speech recognizer."""
    catalog = catalog or load_catalog(config.models_dir)
    with _fix_hint(config, catalog, "stt"):
        return _recognizer(config, resolve_model(config, "stt", catalog))


def resolve_model(config: Config, kind: str, catalog: Catalog | None = None) -> Path:
    """Only the configured model of `kind` (a missing one of another kind is no concern)."""
    catalog = catalog or load_catalog(config.models_dir)
    [use] = [use for use in config.models_in_use() if use.kind == kind]
    return catalog.resolve(use.reference, use.kind, use.key, config.source)
