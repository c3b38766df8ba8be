"""Each engine loaded and run once in a child process, so that a native crash is a report.

The engines are native code (llama.cpp; onnxruntime under Silero, Moonshine and Piper). One
compiled for instructions this CPU does not execute dies by a signal on first use, and takes
the agent with it: under systemd, a restart loop with nothing in the journal but "code=dumped".
`check_engine` loads the configured engine in a child (`python -m
edge_agent.engine_child KIND`, the config pickled on its stdin), runs it once (the LLM
generates 16 tokens on one thread, the voice says a word, the recognizer hears half a second,
the VAD scores frames), and reports how long each took, or the signal and the stage it died in, with the fix.

`edge-agent doctor` checks every engine this way. `edge-agent run` checks the LLM before it
loads it (`ensure_llm_runs`): the only engine compiled on the user's machine, so the only one
whose build can differ from the machine it runs on (onnxruntime's wheels choose instructions
at run time). That costs one child, ~1.5 s on 2 cores with SmolLM2, once: a success is
remembered in the data dir (`engine-checks.json`) for this llama.cpp build, this CPU and this
model file, so later starts pay nothing; a failure is never remembered.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import pickle
import platform
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edge_agent.config import Config
from edge_agent.engines import llama_build
from edge_agent.errors import EdgeAgentError, EngineError
from edge_agent.machine import cpu_model
from edge_agent.machine.child_probe import ChildOutcome, python_child_env, run_child
from edge_agent.printable import clip

CHECK_TIMEOUT_S = 300.0
"""A child that has not loaded and run its engine by then is killed (SmolLM2 takes ~1.5 s, a
1.5B model ~10 s on a Pi 5)."""
CACHE_NAME = "engine-checks.json"
_NAMES = {"vad": "the voice activity detector (onnxruntime)", "stt": "the recognizer",
          "tts": "the voice (Piper on onnxruntime)", "llm": "the LLM (llama.cpp)",
          "turn": "the end-of-turn model (onnxruntime)",
          "wake": "the wake word model (TensorFlow Lite)"}
_RUNTIMES = {"vad": ("onnxruntime",), "turn": ("onnxruntime",), "wake": ("pymicro-wakeword",),
             "tts": ("onnxruntime", "piper-tts"),
             "moonshine": ("onnxruntime",), "pocketsphinx": ("pocketsphinx",),
             "vosk": ("vosk",)}
"""The packages whose native code runs each engine (the recognizer by `stt.engine`)."""


@dataclass(frozen=True)
class EngineRun:
    load_s: float
    """Seconds to load the engine in the child."""
    run_s: float
    """Seconds its one run took."""
    resident_growth: int | None
    """Bytes of resident memory the load added (rough: freed memory is not always returned)."""
    detail: str
    """What the run did (`16 tokens, first after 61 ms, 97 tokens/s`)."""


class EngineCheckFailed(EdgeAgentError):
    """The engine failed cleanly in the child: the message is its error's, the exit status
    the one that error would have had."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class EngineCrash(EngineError):
    """The engine killed its process (a signal) or never finished; says which stage and how to
    fix it."""

    def __init__(self, message: str, signal: str) -> None:
        super().__init__(message)
        self.signal = signal
        """`SIGILL (illegal instruction)`, "timeout", or "" for a plain non-zero exit."""


def check_engine(config: Config, kind: str, timeout_s: float = CHECK_TIMEOUT_S) -> EngineRun:
    """Load and run the `kind` engine of `config` once in a child process."""
    if not sys.executable:
        raise EngineError("cannot check the engines: no Python interpreter to run them in "
                          "(an embedded Python)")
    argv = [sys.executable, "-m", "edge_agent.engine_child", kind]
    try:
        outcome = run_child(argv, timeout_s, stdin=pickle.dumps(config), env=python_child_env())
    except OSError as exc:
        raise EngineError(f"cannot start a process to check {_NAMES[kind]}: {exc}") from None
    stages = _stages(outcome.stdout)
    if outcome.returncode == 0 and "ran" in stages:
        loaded, ran = stages["loaded"], stages["ran"]
        return EngineRun(float(loaded["seconds"]), float(ran["seconds"]),
                         loaded.get("resident_growth"), str(ran["detail"]))
    if "error" in stages:
        error = stages["error"]
        raise EngineCheckFailed(str(error["message"]), int(error["exit_code"]))
    runtime = config.stt_engine if kind == "stt" else kind
    raise _crash(kind, runtime, outcome, stage=_last_stage(stages), timeout_s=timeout_s)


def _stages(stdout: str) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = {}
    for line in stdout.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue  # a library printed on stdout
        if isinstance(record, dict) and isinstance(record.get("stage"), str):
            found[record["stage"]] = record
    return found


def _last_stage(stages: dict[str, dict[str, Any]]) -> str:
    return "running it" if "loaded" in stages else "loading it" if "load" in stages else "starting"


def _crash(kind: str, runtime: str, outcome: ChildOutcome, stage: str, timeout_s: float
           ) -> EngineCrash:
    native = _native_words(outcome.native)
    said = f"; it printed: {native}" if native else ""
    if outcome.returncode is None:
        return EngineCrash(f"{_NAMES[kind]} did not finish loading and running once within "
                           f"{timeout_s:.0f} s ({stage}){said}. Fix: the machine may be "
                           "swapping or far too slow for this model: choose a smaller one",
                           "timeout")
    if not outcome.crashed:
        return EngineCrash(f"{_NAMES[kind]} exited with status {outcome.returncode} while "
                           f"{stage}{said}. Fix: {_fix(runtime, '', stage)}", "")
    return EngineCrash(f"{_NAMES[kind]} crashed with {outcome.signal} while {stage}{said}. "
                       f"Fix: {_fix(runtime, outcome.signal, stage)}", outcome.signal)


def _native_words(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return clip(" | ".join(lines[-3:]), 400)


def _fix(runtime: str, signal: str, stage: str) -> str:
    if runtime == "llm":
        build = (f"reinstall llama-cpp-python built for any CPU (this one is "
                 f"{_llama_build_words()}): {llama_build.reinstall_command()}")
        if stage == "loading it" and not signal.startswith("SIGILL"):
            return (f"the model file may be damaged (`edge-agent models verify`, or download it "
                    f"again); otherwise {build}")
        return build
    packages = " ".join(f"'{name}=={llama_build.installed_version(name)}'"
                        for name in _RUNTIMES[runtime])
    return (f"reinstall its runtime: pip install --force-reinstall --no-deps {packages}; if it "
            "still crashes, the model file may be damaged (`edge-agent models verify`)")


def _llama_build_words() -> str:
    """Read in a child: the library may be the thing that crashes."""
    outcome = run_child([sys.executable, "-c", "import llama_cpp; "
                         "print(llama_cpp.llama_print_system_info().decode())"], 60)
    if outcome.returncode != 0:
        return "a build that cannot even report its features"
    return llama_build.describe(llama_build.parse_features(outcome.stdout))


# -- the start-up check ----------------------------------------------------------------------

def ensure_llm_runs(config: Config, model: Path) -> None:
    """Raise EngineCrash when the configured LLM (at `model`) crashes in a child; remembered
    in the data dir when it runs. A clean failure is left to the in-process load, which reports
    it with its own message."""
    key = _check_key(model)
    cache = config.data_path / CACHE_NAME
    if key is not None and key in _remembered(cache):
        return
    try:
        check_engine(config, "llm")
    except EngineCheckFailed:
        return
    if key is not None:
        _remember(cache, key)


def _check_key(model: Path) -> str | None:
    """What a passed check holds for: this llama.cpp build, this CPU, this kernel, this model
    file. None when the build cannot be found (no caching then)."""
    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or not spec.submodule_search_locations:
        return None
    flags = llama_build.cpu_flags()
    parts = [platform.release(), sys.version, " ".join(sorted(flags or ())), cpu_model()]
    library = Path(spec.submodule_search_locations[0]) / "lib"
    try:
        for path in [*sorted(library.glob("*.so*")), model]:
            stat = path.stat()
            parts.append(f"{path.resolve()} {stat.st_size} {stat.st_mtime_ns}")
    except OSError:
        return None
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def _remembered(cache: Path) -> list[str]:
    try:
        passed = json.loads(cache.read_text(encoding="utf-8")).get("passed", [])
    except (OSError, ValueError, AttributeError):
        return []
    return [k for k in passed if isinstance(k, str)] if isinstance(passed, list) else []


def _remember(cache: Path, key: str) -> None:
    from edge_agent.files.jsonfile import write_json

    kept = [*[k for k in _remembered(cache) if k != key][-7:], key]  # a few builds and models
    with contextlib.suppress(EdgeAgentError):  # not remembered: the next start checks again
        write_json({"passed": kept}, cache)
