"""Engines are tried once in a child process first: a real SmolLM2 generation must survive it
(the test that catches a llama.cpp build this CPU cannot run, naming the signal), and a child
that dies by a signal, or hangs, is reported with the stage and the fix instead of killing the
caller. `run` checks the LLM this way once per build, CPU and model file (remembered in the
data dir).

The crashing engine is a stand-in `llama_cpp` package, put first on the child's PYTHONPATH: it
dies by the signal a real mis-compiled build dies by, at the stage asked for. Nothing in this
process imports it.
"""

from __future__ import annotations

import dataclasses
import json
import signal
from pathlib import Path

import pytest

from edge_agent.app import build_engines
from edge_agent.config import Config, LlmConfig
from edge_agent.engines import engine_check, llama_build
from edge_agent.engines.engine_check import EngineCheckFailed, EngineCrash, check_engine
from edge_agent.errors import EngineError
from tests.gguf_files import tiny_model, write_gguf

_CRASHING_LLAMA = '''\
import os, signal, time

def llama_print_system_info():
    return b"CPU : SSE3 = 1 | AVX = 1 | AVX2 = 1 | AVX512 = 1 | AMX_INT8 = 1 | LLAMAFILE = 1 |"

class Llama:
    def __init__(self, *args, **kwargs):
        if {when!r} == "load":
            os.kill(os.getpid(), signal.{signal})
        if {when!r} == "hang":
            time.sleep(3600)

    def create_completion(self, *args, **kwargs):
        os.kill(os.getpid(), signal.{signal})
'''


def _crashing_llama(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, when: str,
                    signal_name: str = "SIGILL") -> Config:
    """A config whose LLM is a well-formed GGUF file and whose children import a llama_cpp
    that dies by `signal_name` when `when` ("load", "run") comes, or hangs at load."""
    package = tmp_path / "fake" / "llama_cpp"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(
        _CRASHING_LLAMA.format(when=when, signal=signal_name), encoding="utf-8")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "fake"))
    metadata, tensors = tiny_model()
    model = write_gguf(tmp_path / "model.gguf", metadata, tensors)
    return Config(data_dir=str(tmp_path / "data"),
                  llm=LlmConfig(model=str(model), context_tokens=256, max_tokens=32))


def test_a_signal_while_generating_names_it_and_the_portable_reinstall(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = _crashing_llama(tmp_path, monkeypatch, when="run")
    with pytest.raises(EngineCrash) as caught:
        check_engine(config, "llm")
    message = str(caught.value)
    assert caught.value.signal == "SIGILL (illegal instruction)"
    assert caught.value.exit_code == EngineError.exit_code
    assert message.startswith("the LLM (llama.cpp) crashed with SIGILL (illegal instruction) "
                              "while running it"), message
    assert "built for one CPU (SSE3 AVX AVX2 AVX512 AMX_INT8)" in message  # what the build says
    assert llama_build.reinstall_command() in message
    assert ('CMAKE_ARGS="-DGGML_NATIVE=OFF -DLLAVA_BUILD=OFF" pip install --force-reinstall '
            "--no-cache-dir --no-deps 'llama-cpp-python==") in message


def test_a_segfault_while_loading_may_also_be_the_file(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    config = _crashing_llama(tmp_path, monkeypatch, when="load", signal_name="SIGSEGV")
    with pytest.raises(EngineCrash) as caught:
        check_engine(config, "llm")
    message = str(caught.value)
    assert "crashed with SIGSEGV (segmentation fault) while loading it" in message
    assert "the model file may be damaged" in message
    assert llama_build.reinstall_command() in message


def test_a_hung_engine_is_killed_at_its_time(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    # 20 s: far more than the child needs to import its way to the hang, even on a busy
    # machine (3 s could run out while the child was still importing: "starting", a flake).
    config = _crashing_llama(tmp_path, monkeypatch, when="hang")
    with pytest.raises(EngineCrash, match="did not finish loading and running once within 20 s "
                                          r"\(loading it\)"):
        check_engine(config, "llm", timeout_s=20)


def test_a_clean_failure_in_the_child_keeps_its_message_and_exit_status(tmp_path: Path) -> None:
    missing = Config(data_dir=str(tmp_path / "data"),
                     llm=LlmConfig(model=str(tmp_path / "nothing.gguf")))
    with pytest.raises(EngineCheckFailed) as caught:
        check_engine(missing, "llm")
    assert caught.value.exit_code == 3 and "nothing.gguf" in str(caught.value)


def test_run_refuses_a_crashing_llm_before_loading_anything(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = _crashing_llama(tmp_path, monkeypatch, when="run")
    with pytest.raises(EngineCrash, match="crashed with SIGILL"):
        build_engines(config, crash_checked=True)
    assert not (tmp_path / "data" / engine_check.CACHE_NAME).exists()  # a failure is not kept


@pytest.mark.models
def test_smollm2_generates_in_a_child_process() -> None:
    """The check that would have caught the crash of a native build on an AMX Xeon VM."""
    try:
        ran = check_engine(Config(), "llm")
    except EngineCrash as exc:
        pytest.fail(f"SmolLM2 died in llama.cpp: {exc.signal or 'no signal'}: {exc}")
    assert ran.detail.startswith("16 tokens on 1 thread, first after "), ran
    assert ran.load_s > 0 and ran.run_s > 0


@pytest.mark.models
@pytest.mark.parametrize("kind", ["vad", "stt", "tts"])
def test_the_other_engines_run_in_a_child_process(kind: str) -> None:
    ran = check_engine(Config(), kind)
    assert ran.run_s > 0 and ran.detail, ran


@pytest.mark.models
def test_a_passed_check_is_remembered_for_this_build_cpu_and_model(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, smollm2_path: Path) -> None:
    smollm2 = smollm2_path
    config = Config(data_dir=str(tmp_path / "data"))
    engine_check.ensure_llm_runs(config, smollm2)
    cache = config.data_path / engine_check.CACHE_NAME
    assert len(json.loads(cache.read_text())["passed"]) == 1
    assert cache.stat().st_mode & 0o077 == 0
    # Any child from now on would crash: a remembered check starts none.
    crashing = _crashing_llama(tmp_path, monkeypatch, when="run")
    engine_check.ensure_llm_runs(config, smollm2)
    # Another model file is another check, and this one crashes.
    with pytest.raises(EngineCrash, match="crashed with SIGILL"):
        engine_check.ensure_llm_runs(dataclasses.replace(config, llm=crashing.llm),
                                     Path(crashing.llm.model))
    assert len(json.loads(cache.read_text())["passed"]) == 1


def test_signal_names_say_what_happened() -> None:
    from edge_agent.machine.child_probe import signal_name

    assert signal_name(signal.SIGILL) == "SIGILL (illegal instruction)"
    assert signal_name(signal.SIGTERM) == "SIGTERM"
    assert signal_name(200) == "signal 200"


def test_the_doctor_reports_a_crashing_llm_as_its_fail_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from edge_agent.config import ModelUse
    from edge_agent.doctor import checks as doctor_checks
    from edge_agent.models.catalog import load_catalog

    config = _crashing_llama(tmp_path, monkeypatch, when="run")
    record = doctor_checks._model(config, load_catalog(config.models_dir),
                                  ModelUse("llm", config.llm.model, "llm.model"), quick=True)
    assert record["status"] == "FAIL", record
    assert record["detail"].startswith(
        "the LLM (llama.cpp) crashed with SIGILL (illegal instruction) while running it"), record
    assert record["fix"].startswith("reinstall llama-cpp-python built for any CPU (this one is "
                                    "built for one CPU (SSE3 AVX AVX2 AVX512 AMX_INT8))"), record


@pytest.mark.models
def test_what_a_check_holds_for_is_the_same_in_every_process(smollm2_path: Path) -> None:
    import os
    import subprocess
    import sys

    smollm2 = smollm2_path
    code = ("import sys; from pathlib import Path; from edge_agent.engines import engine_check; "
            "print(engine_check._check_key(Path(sys.argv[1])))")
    keys = {subprocess.run([sys.executable, "-c", code, str(smollm2)], capture_output=True,
                           text=True, check=True, env={**os.environ, "PYTHONHASHSEED": seed}
                           ).stdout.strip() for seed in ("1", "2", "3")}
    assert len(keys) == 1 and len(next(iter(keys))) == 64, keys  # sets hash differently per seed
