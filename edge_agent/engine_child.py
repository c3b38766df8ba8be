"""The child process of `engines.engine_check`: load one engine as the agent loads it, run it
once, and say each stage on stdout as one JSON line (`python -m edge_agent.engine_child KIND`,
the config pickled on stdin). It builds the engine through the composition root
(`edge_agent.app`), beside which it lives: the parent side, in `engines/`, is imported by the
composition root and never imports it back."""

from __future__ import annotations

import json
import os
import pickle
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from edge_agent.config import Config
from edge_agent.errors import EdgeAgentError
from edge_agent.machine import memory_kb
from edge_agent.machine.child_probe import forbid_core_files


def _say(stage: str, **fields: Any) -> None:
    print(json.dumps({"stage": stage, **fields}), flush=True)


def _resident() -> int | None:
    try:
        return memory_kb(os.getpid())["VmRSS"] * 1024
    except (OSError, KeyError):
        return None


def _loaders(config: Config) -> dict[str, Callable[[], Any]]:
    from edge_agent.app import load_recognizer, load_voice, resolve_model
    from edge_agent.engines.llm.llama import open_llama
    from edge_agent.engines.turn_end import SmartTurn
    from edge_agent.engines.vad import SileroVad
    from edge_agent.engines.wake_word import MicroWakeWordDetector
    from edge_agent.models.catalog import load_catalog

    catalog = load_catalog(config.models_dir, config_source=config.source)
    llm = config.llm

    def path(kind: str) -> Path:
        # Only this engine's model: a missing one of another kind is that kind's own failure.
        return resolve_model(config, kind, catalog)

    return {
        "vad": lambda: SileroVad(path("vad")),
        "turn": lambda: SmartTurn(path("turn")),
        "wake": lambda: MicroWakeWordDetector(path("wake")),
        "stt": lambda: load_recognizer(config, catalog),
        "tts": lambda: load_voice(config, catalog),
        # One thread: the same kernels as the configured threads, without llama.cpp's threads
        # spinning for a core (on a busy 2-core machine, 2 threads took 37 s for 16 tokens).
        "llm": lambda: open_llama(path("llm"), context_tokens=llm.context_tokens, threads=1,
                                  seed=llm.seed),
    }


def _run_once(kind: str, engine: Any) -> str:
    if kind == "vad":
        for _ in range(8):
            engine.speech_probability(bytes(2 * engine.frame_samples))
        return "scored 8 frames"
    if kind == "turn":
        finished = engine.complete_probability(bytes(2 * engine.sample_rate))
        return f"judged a second of silence (finished: {finished:.2f})"
    if kind == "wake":
        woke = engine.heard(bytes(2 * engine.sample_rate))
        return f"heard a second of silence ({'woke: wrong' if woke else 'did not wake'})"
    if kind == "stt":
        engine.begin()
        engine.feed(bytes(2 * 8000))  # half a second of silence at 16 kHz
        heard = engine.end()
        return f"heard half a second of silence ({len(heard.text)} characters)"
    if kind == "tts":
        speech = engine.synthesize("Hello.")
        return f"said a word ({speech.samples / speech.sample_rate:.2f} s of audio)"
    started = time.perf_counter()
    first = None
    tokens = 0
    for chunk in engine.create_completion("The capital of France is", max_tokens=16,
                                          temperature=0.0, stream=True):
        if chunk["choices"][0]["finish_reason"] is None:  # the last chunk only says why it ended
            tokens += 1
            first = first or time.perf_counter() - started
    seconds = time.perf_counter() - started
    return (f"{tokens} tokens on 1 thread, first after {1000 * (first or seconds):.0f} ms, "
            f"{tokens / seconds:.1f} tokens/s")


def child_main(kind: str) -> int:
    """The child: load, run once, say each stage on stdout as one JSON line."""
    forbid_core_files()
    try:
        config = pickle.loads(sys.stdin.buffer.read())
        loader = _loaders(config)[kind]
        _say("load")
        before, started = _resident(), time.perf_counter()
        engine = loader()
        loaded_s, after = time.perf_counter() - started, _resident()
        grew = after - before if before is not None and after is not None else None
        _say("loaded", seconds=loaded_s, resident_growth=grew)
        started = time.perf_counter()
        detail = _run_once(kind, engine)
        _say("ran", seconds=time.perf_counter() - started, detail=detail)
    except Exception as exc:  # reported to the parent, which raises it there
        _say("error", message=str(exc) if isinstance(exc, EdgeAgentError)
             else f"{type(exc).__name__}: {exc}", exit_code=getattr(exc, "exit_code", 1))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(child_main(sys.argv[1]))
