from __future__ import annotations

import importlib.util
import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from edge_agent.bench import pulse_rig as pulse
from edge_agent.bench.postgres_rig import LocalPostgres, local_postgres
from edge_agent.models.catalog import Catalog, load_catalog
from tests import model_server
from tests.cli import BenchRun, edge_agent, write_config

REALTIME = "realtime"
"""The pytest-xdist group of every test marked `realtime`: one worker runs them one after the
other, as the serial suite did, while the other worker takes the rest of the suite."""

BESIDE_REALTIME_NICE = 10
"""The nice value of a test that is not `realtime`, run by a pytest-xdist worker beside one
that is: a realtime test's audio keeps the wall clock's pace only if it gets the CPU when it
needs it (a CPU-bound test beside a demo call made it interrupt itself on its own echo)."""


LONGEST_TEST_ID = 4096
"""pytest puts the running test's id in $PYTEST_CURRENT_TEST, which every child process the test
starts inherits; Linux refuses to start a program given one variable over 128 KiB. A parameter
used as its own id (200 kB of brackets) did that."""


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups off the markers
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    too_long = [item.nodeid[:120] for item in items if len(item.nodeid) > LONGEST_TEST_ID]
    if too_long:
        raise pytest.UsageError(
            f"test ids longer than {LONGEST_TEST_ID} characters (give the parameters ids=): "
            + "; ".join(f"{nodeid}..." for nodeid in too_long))
    for item in items:
        if item.get_closest_marker(REALTIME) is not None:
            item.add_marker(pytest.mark.xdist_group(REALTIME))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Under pytest-xdist (`-n 2`), a `realtime` test fails at once if it is not in the realtime
    group, and runs at normal priority, any other test at nice 10, set before its fixtures are
    (a PulseAudio server, a child process and every thread they start inherit it). Only where
    the priority can be raised back again (root, as CI runs): elsewhere every test keeps the
    priority it started with."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        return
    realtime = item.get_closest_marker(REALTIME) is not None
    if realtime and item.config.getvalue("loadgroup") and not item.nodeid.endswith(f"@{REALTIME}"):
        # pytest-xdist marks a grouped test by the suffix `@<group>` on its node id; pytest 9.2
        # ignores it (pytest-xdist issue 1386), and the realtime tests would silently run two at
        # a time and fail on their own timing.
        pytest.fail(f"pytest-xdist did not put this realtime test in its group: pytest "
                    f"{pytest.__version__} ignores the group on the node id (pytest-xdist issue "
                    "1386); install the pinned versions: "
                    "pip install -c config/constraints.txt pytest pytest-xdist", pytrace=False)
    if os.geteuid() != 0:
        return
    os.setpriority(os.PRIO_PROCESS, 0, 0 if realtime else BESIDE_REALTIME_NICE)


@pytest.fixture(scope="session")
def catalog(tmp_path_factory: pytest.TempPathFactory) -> Catalog:
    return load_catalog(tmp_path_factory.mktemp("models"))


@pytest.fixture(scope="session")
def model_path(catalog: Catalog):  # type: ignore[no-untyped-def]
    def path(name: str) -> Path:
        status = catalog.status(name)
        if status.path is None:
            pytest.fail(f"model {name} is not installed: {catalog.fetch_hint(status.spec)}")
        return status.path

    return path


@pytest.fixture(scope="session")
def smollm2_path(model_path) -> Path:  # type: ignore[no-untyped-def]
    """SmolLM2-135M-Instruct, the default LLM: its GGUF file."""
    path: Path = model_path("smollm2-135m")
    return path


@pytest.fixture(scope="session")
def smollm2(smollm2_path: Path) -> Callable[..., Any]:
    """SmolLM2 opened as the agent opens it: `smollm2(context_tokens=1024, ...)` gives a
    `LlamaLanguageModel` with those settings, and otherwise greedy, seed 7, 2 threads, 40 tokens
    a reply, a 2048-token context. Each call is a context of its own (a test's cache is its
    own); llama.cpp maps the file once."""
    from edge_agent.engines.llm.llama import LlamaLanguageModel

    defaults = {"context_tokens": 2048, "threads": 2, "max_tokens": 40, "temperature": 0.0,
                "seed": 7}

    def open_model(**settings: Any) -> LlamaLanguageModel:
        return LlamaLanguageModel(smollm2_path, **{**defaults, **settings})

    return open_model


@pytest.fixture(scope="session")
def piper(model_path):  # type: ignore[no-untyped-def]
    from edge_agent.engines.tts import PiperSpeech

    voice = model_path("joe-medium")
    return PiperSpeech.load(voice, voice.with_name(voice.name + ".json"))


def has_module(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


@pytest.fixture(scope="module")
def pulse_audio() -> Iterator[pulse.PulseServer]:
    """A private PulseAudio server with virtual devices, one per test module."""
    try:
        with pulse.pulse_server() as server:
            yield server
    except pulse.PulseUnavailable as exc:
        pytest.skip(f"PulseAudio not available: {exc}")


@pytest.fixture
def server() -> Iterator[model_server.Server]:
    """A local HTTP server for `edge-agent models` tests (tests/model_server.py)."""
    with model_server.running_server() as running:
        yield running


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[LocalPostgres]:
    """One PostgreSQL (Debian's server, initdb in a temporary directory) for the whole run."""
    with local_postgres(durable=False) as running:
        yield running


@pytest.fixture
def venue(postgres_server: LocalPostgres) -> LocalPostgres:
    """The run's PostgreSQL with no edge-agent schema in it yet."""
    import psycopg
    with psycopg.connect(postgres_server.admin_url, autocommit=True) as admin:
        admin.execute("DROP SCHEMA IF EXISTS edge_agent CASCADE")
    return postgres_server


@pytest.fixture(scope="session")
def bench_quick(tmp_path_factory: pytest.TempPathFactory) -> BenchRun:
    """`edge-agent bench --quick` on the real models and a private PulseAudio server, run once
    for the whole session (~4 min): the suite's test and the rooms part's test read the same
    run rather than measuring a room twice."""
    try:
        pulse.check_tools()
    except pulse.PulseUnavailable as exc:
        pytest.skip(f"PulseAudio not available: {exc}")
    directory = tmp_path_factory.mktemp("bench-quick")
    results = directory / "bench.json"
    started = time.monotonic()
    done = edge_agent("bench", "--quick", "--json", results, config=write_config(directory),
                      timeout=720, cwd=directory)
    wall = time.monotonic() - started
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr[-4000:]}"
    return BenchRun(done, json.loads(results.read_text(encoding="utf-8")), wall)


CHROMIUM = Path("/usr/bin/chromium")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Debian's chromium, headless, driven by Playwright (`browser` tests)."""
    if os.environ.get("CI"):  # .ci/run installs both: never skipped there
        from playwright import sync_api
        assert CHROMIUM.exists(), f"no {CHROMIUM}: .ci/run must apt-get install chromium"
    else:
        if not CHROMIUM.exists():
            pytest.skip(f"no {CHROMIUM}: apt-get install chromium")
        sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as playwright:
        # Debian's chromium, not a downloaded one: `playwright install` needs the network.
        launched = playwright.chromium.launch(
            executable_path=str(CHROMIUM), args=["--headless", "--no-sandbox", "--disable-gpu"])
        yield launched
        launched.close()
