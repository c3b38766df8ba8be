"""The parts of `edge-agent bench`, one function each: `bench` runs them all on a shared
`Workbench`, `bench <part>` runs one; both get the same part JSON from the same function.

Each function takes the workbench and its sizes, reports progress through `bench.say` (with
i/n where it counts), and returns the part's JSON: every raw sample and its summary.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edge_agent.bench import sizes
from edge_agent.bench.latency import REPLY
from edge_agent.bench.memory import MemoryPlan
from edge_agent.bench.rooms import RoomsPlan
from edge_agent.bench.workbench import Workbench
from edge_agent.errors import ConfigError, EngineError

if TYPE_CHECKING:
    from edge_agent.bench.screen_figures import ScreenResult


def engines_part(bench: Workbench, sentences: int, prompts: int, busy: int = 0
                 ) -> dict[str, Any]:
    """The engines loaded (timed) and each one's speed alone and together (`speeds`), with
    `busy` processes keeping cores busy beside them while they are timed."""
    from edge_agent.bench.cotenant import busy_processes
    from edge_agent.bench.speeds import run_speeds

    started = time.perf_counter()
    _, names = bench.engines()
    loaded = time.perf_counter()
    llm = bench.llm()
    done = time.perf_counter()
    bench.say(f"loaded the voice, the recognizer and the VAD in {loaded - started:.1f} s"
              f"{f', the LLM in {done - loaded:.1f} s' if llm is not None else ''}")
    llm_name = f"llama.cpp ({Path(bench.config.llm.model).name})"
    with busy_processes(busy):
        result = run_speeds(bench.voice(), bench.recognizer(), llm, sentences, prompts,
                            bench.say, {"tts": names["tts"], "stt": names["stt"], "llm": llm_name})
    result["busy_processes"] = busy
    result["load_s"] = {"voice_recognizer_vad": round(loaded - started, 2),
                        "llm": round(done - loaded, 2) if llm is not None else None}
    return result


def latency_part(bench: Workbench, exchanges: int, seed: int, llm: str = "scripted",
                 caller: str = "", reply: str = REPLY,
                 interrupt_every: int = sizes.LATENCY_INTERRUPT_EVERY.full,
                 busy: int = 0, lines: str = "questions", sound_server: str = "private"
                 ) -> dict[str, Any]:
    """The live agent on a private PulseAudio server or the user's (`sound_server`, see
    `latency`). `llm`: "scripted" (the shared engines answer with `reply`) or "config" (the
    configured LLM, loaded for this). `busy`: processes keeping cores busy beside the agent
    throughout the call. `lines`: the caller's turns, "questions" or "natural" (see
    `latency.LINE_SETS`)."""
    from edge_agent.bench.cotenant import busy_processes
    from edge_agent.bench.latency import LINE_SETS, latency_call, run_latency
    from edge_agent.demo.voices import VOICES

    voices = {v.name: v for v in VOICES}
    if caller and caller not in voices:
        raise ConfigError("--caller", caller, f"unknown voice (known: {', '.join(voices)})")
    scripted = llm == "scripted"
    call, script = latency_call(exchanges, seed, scripted, reply, interrupt_every,
                                LINE_SETS[lines])
    if scripted and call.replies is not None:
        engines = bench.scripted_engines(call.replies)
    else:
        from edge_agent.app import build_engines

        engines = build_engines(bench.config)
    bench.say(f"{exchanges} exchanges through the live agent, {len(call.lines)} caller lines")
    with busy_processes(busy):
        figures = run_latency(bench.config, engines, call, script, bench.say,
                              voices.get(caller), sound_server)
    return {"benchmark": "latency", "llm": figures["engines"]["llm"], "busy_processes": busy,
            "pause_on_speech": bench.config.turns.pause_on_speech, "seed": seed, "line_set": lines,
            "exchanges": exchanges, "interrupt_every": interrupt_every, **figures}


def heard_part(bench: Workbench, runs: int, seed: int) -> dict[str, Any]:
    """Barge-ins through PyAudio into a PulseAudio sink, against its recording (`heard`)."""
    from edge_agent.bench.heard import CutTrial, report, run_trials
    from edge_agent.heard.truncation import HeardPolicy

    policy = HeardPolicy(bench.config.heard.policy)
    done = 0

    def progress(trial: CutTrial) -> None:
        nonlocal done
        done += 1
        mark = "ok" if trial.words_exact else "WORDS DIFFER"
        bench.say(f"cut {done}/{runs} at {trial.cut_after_ms:7.1f} ms: error "
                  f"{trial.error_ms:+6.2f} ms, stop {trial.stop_ms:5.2f} ms, {mark}")

    return report(run_trials(bench.voice(), runs, seed, policy, progress=progress,
                             period=bench.config.audio.output_period), seed, policy)


def screen_part(bench: Workbench, units: int) -> ScreenResult:
    """The kiosk's screen server beside the playback of `units` Piper units, its pages'
    captions against the speaker's recording (`screen`)."""
    from edge_agent.app.conversation import conversation_settings
    from edge_agent.bench.screen import run_screen
    from edge_agent.heard.truncation import HeardPolicy

    return run_screen(bench.voice(), conversation_settings(bench.config).memory, units,
                      HeardPolicy(bench.config.heard.policy), bench.say,
                      bench.config.audio.output_period)


def stt_part(bench: Workbench, engines: Sequence[str], every: int) -> dict[str, Any]:
    """Every recognizer in `engines` on every `every`-th clip of the clip set (`stt`)."""
    from edge_agent.bench.clipset import Clip, clip_count
    from edge_agent.bench.stt import run_stt
    from edge_agent.config import STT_ENGINES

    if not engines:
        raise ConfigError("--engines", "", f"name at least one recognizer (known: "
                          f"{', '.join(STT_ENGINES)})")
    for name in engines:
        if name not in STT_ENGINES:
            raise ConfigError("--engines", name,
                              f"unknown recognizer (known: {', '.join(STT_ENGINES)})")
    recognizers = {name: bench.recognizer(name) for name in engines}
    total = clip_count(every) * len(engines)
    done = 0

    def progress(engine: str, clip: Clip, text: str, errors: int) -> None:
        nonlocal done
        done += 1
        mark = "ok" if not errors else f"{errors} error(s)"
        bench.say(f"clip {done}/{total} {engine:13} {clip.voice.name:19} {clip.condition:12} "
                  f"{mark:11} {text!r}")

    return run_stt(bench.voice(), recognizers, every, progress)


def backchannel_part(bench: Workbench, corpus: Path | None, every: int) -> dict[str, Any]:
    """Every `every`-th clip of the corpus, spoken, recognized, classified (`backchannel`)."""
    from edge_agent.bench.backchannel import ClipResult, load_corpus, run_corpus, voices_for
    from edge_agent.conversation.backchannel import load_classifier

    clips = load_corpus(corpus)[::every]
    classifier = load_classifier(bench.config.turns.backchannel_classifier, bench.config.source)
    total = sum(len(voices_for(clip)) for clip in clips)
    done = 0

    def progress(clip: ClipResult) -> None:
        nonlocal done
        done += 1
        bench.say(f"clip {done}/{total} [{clip.language}, {clip.voice}] {clip.say!r} -> "
                  f"{clip.transcript!r}: {clip.got}{'' if clip.correct else ' (WRONG)'}")

    return run_corpus(bench.voice(), bench.recognizer(), classifier, clips, progress=progress)


def memory_part(bench: Workbench, plan: MemoryPlan) -> dict[str, Any]:
    """A long session through the real memory and model, restarts, kills (`memory`)."""
    from edge_agent.bench.memory import run_memory
    from edge_agent.models.catalog import load_catalog

    config = bench.config
    model = load_catalog(config.models_dir).resolve(config.llm.model, "llm", "llm.model",
                                                    config.source)
    bench.say(f"{plan.turns} turns, {plan.kills} SIGKILL(s)")
    return run_memory(config, model, plan, bench.say)


def service_part(bench: Workbench, idle_s: float, devices: bool) -> dict[str, Any]:
    """The real `edge-agent run` as a service, watched from outside (`service`)."""
    from edge_agent.bench.service import run_service

    bench.say(f"the agent as a child process on a private PulseAudio server, idle "
              f"{idle_s:.0f} s{', then its microphone and speaker pulled and given back' if devices else ''}")
    try:
        figures = run_service(bench.config, idle_s, bench.say, devices, bench.voice())
    except RuntimeError as exc:
        raise EngineError(f"the agent under test: {exc}") from None
    return {"benchmark": "service", "figures": figures}


def rooms_part(bench: Workbench, plan: RoomsPlan) -> dict[str, Any]:
    """The echo canceller and the agent in a simulated room, through the real engines on the
    virtual audio pair (`rooms`)."""
    from edge_agent.bench.rooms import run_rooms

    return run_rooms(bench.config, bench.voice(), plan, bench.say)
