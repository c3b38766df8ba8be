from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path

import pytest

from edge_agent.bench import pulse_rig as pulse
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
