"""A conversation on a virtual clock with one scripted fake per engine (LiveKit-style)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from edge_agent.app import conversation_settings
from edge_agent.audio.room import Room
from edge_agent.audio.talker_gate import TalkerGate
from edge_agent.audio.virtual import VirtualMicrophone, VirtualSpeaker
from edge_agent.clock import VirtualClock
from edge_agent.config import Config
from edge_agent.conversation.agent import Conversation, Engines
from edge_agent.conversation.endpoint import EndpointRules
from edge_agent.conversation.tools import Toolbox
from edge_agent.conversation.turn_taking import TurnRules
from edge_agent.engines.base import ChatMessage, TextToSpeech, WakeWordDetector
from edge_agent.engines.cpu_share import CpuShare
from edge_agent.events import Event, EventLog, Notice
from edge_agent.knowledge.live import Grounder
from edge_agent.memory.conversation_memory import ConversationMemory, utc_now
from edge_agent.memory.kept_audio import AudioKeeper
from edge_agent.memory.record import SessionRecord, session_record
from edge_agent.memory.store import MemoryStore
from edge_agent.memory.summarizer import Summarizer
from edge_agent.memory.writer import StoreWriter
from edge_agent.owner import Owner
from edge_agent.timers.desk import TimerDesk
from tests.fakes import (
    FakeLanguageModel,
    FakeRecognizer,
    FakeSpeech,
    FakeTurnEnd,
    FakeVad,
    InlineOwner,
    Reply,
)

TURN_RULES = {f.name for f in dataclasses.fields(TurnRules)}
ENDPOINT_RULES = {f.name for f in dataclasses.fields(EndpointRules)}


@dataclass
class Harness:
    transcripts: list[str]
    replies: list[Reply]
    greeting: str = "Hello there."
    tts_delay: float = 0.0
    tools: Toolbox | None = None
    tts: TextToSpeech = field(default_factory=FakeSpeech)
    pause_on_speech: bool = False
    overrides: dict[str, Any] = field(default_factory=dict)
    """Other ConversationSettings, TurnRules or EndpointRules fields to set."""
    clock: VirtualClock = field(default_factory=VirtualClock)
    partials: list[str] | None = None
    """Scripted partial transcripts, one per utterance (else partials reveal the words)."""
    db_path: Path | None = None
    """Record into a real memory database here (else the conversation keeps memory in-process)."""
    summarizer: Summarizer | None = None
    on_request: Callable[[list[ChatMessage]], None] | None = None
    """Called with each request's messages as the fake model receives it."""
    llm_fail_after: Callable[[int], int | None] | None = None
    """Which model requests fail, after how many pieces (`FakeLanguageModel`)."""
    wall: Callable[[], datetime] = utc_now
    keep_audio: bool = False
    """Keep the caller's and the agent's audio in the database (needs `db_path`)."""
    sounds: list[float | Exception] | None = None
    """The end-of-turn model's verdicts, in order (None: no model)."""
    turn_end_delay: float = 0.0
    """Seconds each verdict of the end-of-turn model takes (on the virtual clock)."""
    cpu: CpuShare | None = None
    """Where the engines share the cores (`Engines.cpu`)."""
    real: Engines | None = None
    """Real engines to use instead of the fakes: its VAD, recognizer and end-of-turn model
    (the language model and the voice stay scripted)."""
    knowledge: Grounder | None = None
    """The venue's knowledge, looked up for every turn."""
    wake: WakeWordDetector | None = None
    """The wake word model (`Engines.wake`)."""
    timers: TimerDesk | None = None
    """The timers (`[timers] enabled`); they and the memory read `wall`."""
    room: Room | None = None
    """The echo path: the microphone hears the agent's speaker through it (None: it does not)."""
    gate: TalkerGate | None = None
    """The talker gate (`[audio] talker_gate`; None: "off")."""

    def __post_init__(self) -> None:
        self.speaker = VirtualSpeaker(self.clock, self.tts.sample_rate)
        self.mic = VirtualMicrophone(self.clock, echo_of=self.speaker, room=self.room)
        self.llm = FakeLanguageModel(self.replies, on_request=self.on_request,
                                     fail_after=self.llm_fail_after)
        self.log = EventLog(self.clock)
        defaults = conversation_settings(Config())
        turns = {k: v for k, v in self.overrides.items() if k in TURN_RULES}
        endpoint = {k: v for k, v in self.overrides.items() if k in ENDPOINT_RULES}
        rest = {k: v for k, v in self.overrides.items() if k not in {*turns, *endpoint}}
        settings = dataclasses.replace(
            defaults,
            memory=dataclasses.replace(defaults.memory, system_prompt="SYSTEM"),
            greeting=self.greeting,
            endpoint=dataclasses.replace(defaults.endpoint, **{"unknown_ms": 320, **endpoint}),
            turns=dataclasses.replace(defaults.turns, barge_in_min_ms=200,
                                      pause_on_speech=self.pause_on_speech, **turns),
            **rest,
        )
        self.turn_end = FakeTurnEnd(self.sounds) if self.sounds is not None else None
        engines = Engines(FakeVad(), FakeRecognizer(self.transcripts, partials=self.partials),
                          self.llm, self.tts, self.turn_end, self.cpu, self.wake)
        if self.real is not None:
            engines = dataclasses.replace(self.real, llm=self.llm, tts=self.tts)

        def owner(name: str) -> Owner:
            delay = {"tts": self.tts_delay, "turn-end": self.turn_end_delay}.get(name, 0.0)
            return InlineOwner(name, self.clock, delay)

        self.writer: StoreWriter | None = None
        if self.db_path is not None:
            store = MemoryStore.open(self.db_path)
            def warn(text: str) -> None:
                self.log.publish(Notice(text))

            self.writer = StoreWriter(store, InlineOwner("store"), self.clock, warn=warn)
        self.memory = ConversationMemory(settings.memory, self.log, writer=self.writer,
                                         summarizer=self.summarizer, wall=self.wall)
        keeper = (AudioKeeper(self.memory, self.log, self.mic.sample_rate)
                  if self.keep_audio else None)
        self.conversation = Conversation(mic=self.mic, speaker=self.speaker, engines=engines,
                                         settings=settings, log=self.log, owner=owner,
                                         tools=self.tools, memory=self.memory,
                                         unit_audio=keeper, caller_audio=keeper,
                                         knowledge=self.knowledge, timers=self.timers,
                                         wall=self.wall, gate=self.gate)

    async def start(self) -> asyncio.Task[None]:
        return asyncio.create_task(self.conversation.run())

    async def run_until(self, condition: Callable[[], bool], limit: float = 30.0) -> None:
        deadline = self.clock.now() + limit
        while not condition():
            assert self.clock.now() < deadline, "condition not reached in virtual time"
            await self.clock.advance(0.01)

    async def record(self) -> SessionRecord:
        """The record from the database (needs `db_path`)."""
        assert self.writer is not None
        return await self.writer.read(
            lambda store: session_record(store, self.memory.session_ids, self.memory.run_id))

    def events(self, kind: type[Event]) -> list[Event]:
        return [e.event for e in self.log.entries if isinstance(e.event, kind)]

    def at(self, kind: type[Event]) -> list[float]:
        return [e.at for e in self.log.entries if isinstance(e.event, kind)]


async def stop(task: asyncio.Task[None]) -> None:
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
