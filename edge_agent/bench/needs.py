"""What a benchmark part needs from the machine, checked before it runs: a part whose need is
missing is skipped with the reason (`edge-agent bench` goes on with the others); run on its own
(`bench heard`, ...) it stops with that reason as its error."""

from __future__ import annotations

import importlib.util
import shutil
from collections.abc import Callable

from edge_agent.bench import pulse_rig
from edge_agent.bench.sound_server import SOUND_SERVERS
from edge_agent.config import Config
from edge_agent.errors import AudioDeviceError, EdgeAgentError, EngineError
from edge_agent.models.catalog import load_catalog


class SoundServerUnavailable(AudioDeviceError):
    """The sound server a part plays and records through cannot run or be reached here."""

    def __init__(self, part: str, reason: str, server: str = "private") -> None:
        """`part`: the benchmark that needs it ("" when said before any part runs); `server`:
        "private" (the bench's own PulseAudio) or "default" (the user's)."""
        who = f"the {part} benchmark " if part else ""
        super().__init__(f"{who}needs {SOUND_SERVERS[server]}: {reason}")


class PartsFailed(EdgeAgentError):
    """`edge-agent bench` ran, but some parts failed (each one's error is in the table and the
    JSON): exit status 1."""


Need = Callable[[Config], None]
"""Raises an EdgeAgentError saying what is missing, or returns."""


def pulseaudio(config: Config) -> None:
    del config
    try:
        pulse_rig.check_tools()
    except pulse_rig.PulseUnavailable as exc:
        raise SoundServerUnavailable("", str(exc)) from None


def espeak_ng(config: Config) -> None:
    del config
    if shutil.which("espeak-ng") is None:
        raise EngineError("espeak-ng is not installed (apt-get install espeak-ng): the clip set "
                          "speaks with its voices")


def room_acoustics(config: Config) -> None:
    """The simulator's rooms with people at their places (image sources)."""
    del config
    if importlib.util.find_spec("pyroomacoustics") is None:
        raise EngineError("pyroomacoustics is not installed (pip install 'edge-agent[rooms]'): "
                          "the café's rooms are rendered with it")


def models(with_llm: bool) -> Need:
    """Every model the config uses (the LLM too when `with_llm`) is on disk (ModelMissingError
    with the command that fetches it, otherwise)."""

    def check(config: Config) -> None:
        catalog = load_catalog(config.models_dir)
        for use in config.models_in_use(with_llm):
            catalog.resolve(use.reference, use.kind, use.key, config.source)

    return check
