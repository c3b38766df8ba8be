"""Session records built in Python, shaped like the agent's own (the events it publishes, in
the order it publishes them), for `edge-agent inspect`'s tests."""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edge_agent.events import (
    Backchannel,
    BargeIn,
    EchoIgnored,
    Event,
    LoggedEvent,
    PlaybackPaused,
    PlaybackResumed,
    PlaybackStarted,
    TurnStage,
    UserSpeechEnded,
    UserSpeechStarted,
    UserTurn,
)
from edge_agent.memory.record import (
    SessionRecord,
    TurnRecord,
    UnitRecord,
    WordRecord,
    record_events,
)
from edge_agent.memory.store import MemoryStore
from tests.logged import finalized

WORD_MS, WORD_GAP_MS = 250, 50
"""Each word of a built unit lasts 250 ms, with 50 ms before the next."""
MIC_LAG = 0.03
"""How far the events' clock runs after the microphone's audio time."""


def tone(seconds: float, rate: int, amplitude: float) -> bytes:
    """`seconds` of a sine at `amplitude` (0-1) of full scale, as int16 PCM."""
    count = round(seconds * rate)
    return struct.pack(f"<{count}h", *(round(amplitude * 32767 * math.sin(i / 5))
                                       for i in range(count)))


def words_of(text: str) -> list[WordRecord]:
    step = WORD_MS + WORD_GAP_MS
    return [{"text": w, "start_ms": i * step, "end_ms": i * step + WORD_MS}
            for i, w in enumerate(text.split())]


@dataclass
class SessionBuilder:
    """Appends a conversation's events one exchange at a time, on a run's clock."""

    session_id: str = "5e55101d0000"
    run_id: str = "run-a"
    events: list[dict[str, Any]] = field(default_factory=list)
    units: list[UnitRecord] = field(default_factory=list)
    turns: list[TurnRecord] = field(default_factory=list)
    unit_count: int = 0
    answered: int = 0

    def event(self, at: float, event: Event) -> None:
        self.events.append(LoggedEvent(round(at, 4), event, self.run_id).to_json())

    def new_run(self, run_id: str) -> None:
        """The agent restarted and resumed the session: a new clock, turns counted anew."""
        self.run_id, self.answered = run_id, 0

    def agent(self, text: str, at: float, *, cut_at: float | None = None,
              pause: tuple[float, float] | None = None) -> UnitRecord:
        """A unit starting to play at `at`; `pause` = (at, length): held, then resumed;
        `cut_at`: paused there by caller speech and never resumed (a barge-in)."""
        self.unit_count += 1
        unit_id = f"u{self.unit_count}"
        words = words_of(text)
        self.event(at, PlaybackStarted(unit_id=unit_id))
        played_ms = words[-1]["end_ms"] if words else 0
        end = at + played_ms / 1000
        if pause is not None:
            self.event(pause[0], PlaybackPaused(unit_id=unit_id))
            self.event(pause[0] + pause[1], PlaybackResumed(unit_id=unit_id))
            end += pause[1]
        heard = text
        if cut_at is not None:
            played_ms = round((cut_at - at) * 1000)
            heard = " ".join(w["text"] for w in words if w["end_ms"] <= played_ms)
            self.event(cut_at, PlaybackPaused(unit_id=unit_id))
            end = cut_at + 0.4
            self.event(end, BargeIn(unit_id=unit_id, words="wait"))
        unit: UnitRecord = {"unit_id": unit_id, "generated": text, "heard": heard,
                            "interrupted": heard != text, "played_ms": played_ms,
                            "inexact_words": 0, "words": words}
        self.event(end + 0.001, finalized(unit_id, text, heard, played_samples=played_ms * 22))
        self.units.append(unit)
        self.turns.append({"role": "assistant", "text": heard, "generated": text,
                           "unit_id": unit_id, "interrupted": heard != text, "session": 1})
        return unit

    def caller(self, text: str, start: float, length: float, silence_ms: int = 300) -> float:
        """Caller speech from `start` for `length` s, answered: the events up to the answer's
        first audio; returns the time the answer starts playing."""
        spoken_end = self.speech(start, length)
        self.answered += 1
        turn = self.answered
        for stage, after in (("transcript", 0.25), ("request", 0.251), ("first_token", 0.26)):
            self.event(spoken_end + after, TurnStage(turn=turn, stage=stage, speculative=True))
        detected = spoken_end + silence_ms / 1000
        self.event(detected, UserSpeechEnded(round(detected - MIC_LAG, 4), silence_ms))
        self.event(detected + 0.002,
                   UserTurn(text, tuple((w, None, None) for w in text.split())))
        self.turns.append({"role": "user", "text": text, "session": 1})
        first_audio = detected + 0.1
        self.event(first_audio - 0.001, TurnStage(turn, "first_piece", speculative=False))
        self.event(first_audio, TurnStage(turn=turn, stage="first_audio", speculative=False))
        return first_audio

    def overlap(self, kind: type[Backchannel | EchoIgnored], text: str, start: float,
                length: float) -> None:
        """Speech over the agent judged not a turn: a backchannel or the agent's echo."""
        spoken_end = self.speech(start, length)
        detected = spoken_end + 0.4
        self.event(detected, UserSpeechEnded(round(detected - MIC_LAG, 4), silence_ms=400))
        if kind is Backchannel:
            self.event(detected + 0.05, Backchannel(text, speech_ms=round(length * 1000)))
        else:
            self.event(detected + 0.05, EchoIgnored(text, playing=text))

    def speech(self, start: float, length: float) -> float:
        """Caller speech from `start` for `length` s: its onset only (the caller adds what
        became of it); returns where it ends."""
        self.event(start + 0.13, UserSpeechStarted(audio_time=round(start - MIC_LAG, 4)))
        return start + length

    def record(self) -> SessionRecord:
        runs = list(dict.fromkeys(e["run_id"] for e in self.events))
        return {"session_id": self.session_id, "sessions": [self.session_id],
                "engines": {"stt": "built", "tts": "built"}, "turns": self.turns,
                "units": self.units, "llm_requests": [],
                "events": sorted(self.events, key=lambda e: (runs.index(e["run_id"]), e["at"]))}


def long_session(turns: int) -> SessionRecord:
    """`turns` exchanges: a question, an answer of 10 words; every 10th answer cut by the
    caller (who then asks again), every 7th acknowledged by a backchannel."""
    built = SessionBuilder()
    moment = 0.5
    for n in range(1, turns + 1):
        answer_at = built.caller(f"question number {n} about the menu", moment, 1.4)
        reply = f"answer {n} has ten words so the page shows a lot"
        if n % 10 == 0:
            cut = answer_at + 1.1
            built.agent(reply, answer_at, cut_at=cut)
            moment = cut - 0.15
        else:
            unit = built.agent(reply, answer_at)
            if n % 7 == 0:
                built.overlap(Backchannel, "okay", answer_at + 0.8, 0.4)
            moment = answer_at + unit["words"][-1]["end_ms"] / 1000 + 0.6
    return built.record()


def store_record(db: Path, record: SessionRecord, audio: bool = False) -> None:
    """`record` written into the memory database at `db` as the agent writes it; `audio`:
    with a kept clip of each unit (22.05 kHz) and one of the caller (16 kHz)."""
    store = MemoryStore.open(db)
    session_id = record["session_id"]
    store.insert_session({"id": session_id, "identity": "kiosk", "run_id": "run-a",
                          "how": "start-up", "started_at": "2026-12-01T10:00:00",
                          "last_active_at": "2026-12-01T10:01:00", "engines": "{}"})
    for seq, unit in enumerate(record["units"]):
        store.put_unit({"session_id": session_id, "unit_id": unit["unit_id"], "state": "final",
                        "seq": seq, "generated": unit["generated"], "heard": unit["heard"],
                        "played_ms": unit["played_ms"], "words": json.dumps(unit["words"]),
                        "updated_at": "2026-12-01T10:01:00"})
    for event in record["events"]:
        data = {k: v for k, v in event.items() if k != "run_id"}
        store.add_event({"session_id": session_id, "run_id": event["run_id"], "at": event["at"],
                         "type": event["type"], "data": json.dumps(data)})
    if audio:
        started = {e.event.unit_id: e.at for e in record_events(record)
                   if isinstance(e.event, PlaybackStarted)}
        for unit in record["units"]:
            store.add_audio({"session_id": session_id, "run_id": "run-a", "kind": "agent",
                             "ref": unit["unit_id"], "at": started[unit["unit_id"]],
                             "sample_rate": 22050,
                             "pcm": tone(unit["played_ms"] / 1000, 22050, 0.3)})
        store.add_audio({"session_id": session_id, "run_id": "run-a", "kind": "caller",
                         "ref": "c1", "at": 1.9, "sample_rate": 16000,
                         "pcm": tone(1.3, 16000, 0.3)})
    store.close()
