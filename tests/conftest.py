from __future__ import annotations

import importlib.util
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from edge_agent.bench import pulse_rig as pulse
from edge_agent.bench.postgres_rig import LocalPostgres, local_postgres
from edge_agent.models.catalog import Catalog, load_catalog
from tests import model_server


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
