"""One scripted fake per engine interface, for deterministic loop tests on a virtual clock."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any, cast

import numpy as np

from edge_agent.config import Config
from edge_agent.demo.callfile import CallScript
from edge_agent.engines.base import (
    ChatMessage,
    RecognizedWord,
    SpeechAudio,
    ToolCall,
    ToolSpec,
    Transcript,
)
from edge_agent.engines.cpu_share import CpuShare
from edge_agent.events import (
    BargeIn,
    CallerSpoke,
    EchoIgnored,
    LlmRequest,
    LoggedEvent,
    PlaybackPaused,
    PlaybackStarted,
    SessionStarted,
    UserTurn,
)
from edge_agent.heard.timings import WordTiming, tokenize
from edge_agent.memory.record import SessionRecord
from edge_agent.memory.summarizer import Summary, SummaryPreempted
from edge_agent.owner import InlineOwner as InlineOwner  # re-exported: tests take it from here

SPEECH_LEVEL = 8000


def speech(seconds: float, rate: int = 16000, seed: int = 1) -> bytes:
    """Fake 'speech': loud noise the fake VAD recognizes (noise, so that it does not correlate
    with the agent's fake speech the way two constant signals would)."""
    noise = np.random.default_rng(seed).uniform(-1, 1, int(seconds * rate)) * SPEECH_LEVEL
    noise[np.abs(noise) < 1] = SPEECH_LEVEL  # every frame stays loud
    return noise.astype(np.int16).tobytes()


WAKE_LEVEL = 12000


def wake_word(seconds: float = 0.5, rate: int = 16000) -> bytes:
    """Fake 'wake word': a tone louder than `speech`, which `FakeWakeWord` hears (and the fake
    VAD takes for speech)."""
    t = np.arange(int(seconds * rate)) / rate
    return (np.sign(np.sin(2 * np.pi * 700 * t)) * WAKE_LEVEL).astype(np.int16).tobytes()


class FakeWakeWord:
    """Hears the `wake_word` tone: fires on the first frame after at least `word_s` of it."""

    sample_rate = 16000
    phrase = "Okay Fake"

    def __init__(self, word_s: float = 0.3, late_s: float = 0.0) -> None:
        """`late_s`: it fires this long after the tone ended (a model hears a word's end and a
        few windows more)."""
        self._word_samples = int(word_s * self.sample_rate)
        self._late_samples = int(late_s * self.sample_rate)
        self._run = 0
        self._since: int | None = None
        self.heard_samples = 0
        """Every sample it was given."""

    def heard(self, pcm: bytes) -> bool:
        samples = np.frombuffer(pcm, dtype=np.int16)
        self.heard_samples += len(samples)
        if np.abs(samples).min() >= WAKE_LEVEL:
            self._run += len(samples)
            return False
        if self._run >= self._word_samples:
            self._since = 0
        self._run = 0
        if self._since is None:
            return False
        self._since += len(samples)
        if self._since > self._late_samples:
            self._since = None
            return True
        return False

    def reset(self) -> None:
        self._run = 0
        self._since = None


class FakeVad:
    """Speech wherever the frame is loud."""

    sample_rate = 16000
    frame_samples = 512

    def speech_probability(self, frame: bytes) -> float:
        return 1.0 if np.abs(np.frombuffer(frame, dtype=np.int16)).max() > 1000 else 0.0

    def reset(self) -> None:
        pass


class PiecesGate:
    """The talker gate (`edge_agent.audio.talker_gate.TalkerGate`): inside an utterance it lets
    one frame in `every` through and mutes the rest, as a level gate does to a voice near its
    threshold (the agent's echo left by a canceller); outside utterances everything passes."""

    def __init__(self, every: int) -> None:
        self._every = every
        self._frames = 0

    def admit(self, frame: bytes, speaking: bool) -> bytes:
        if not speaking:
            self._frames = 0
            return frame
        self._frames += 1
        return frame if self._frames % self._every == 1 else bytes(len(frame))

    def forget(self) -> None:
        pass

    def took_over(self) -> bool:
        return False


class FakeRecognizer:
    """Returns the scripted transcripts in order, one per utterance; while an utterance is fed,
    `partial` reveals its words one per `word_seconds` of audio (or, with `partials`, says the
    utterance's scripted partial)."""

    sample_rate = 16000

    def __init__(self, transcripts: Sequence[str], word_seconds: float = 0.15,
                 partials: Sequence[str] | None = None) -> None:
        self._transcripts = list(transcripts)
        self._partials = list(partials) if partials is not None else None
        self._word_samples = int(word_seconds * self.sample_rate)
        self.fed_samples = 0
        self.heard_samples = 0
        """Every sample fed, in all utterances."""

    def begin(self) -> None:
        self.fed_samples = 0

    def feed(self, pcm: bytes) -> None:
        self.fed_samples += len(pcm) // 2
        self.heard_samples += len(pcm) // 2

    def partial(self) -> str:
        if self._partials is not None:
            return self._partials[0] if self._partials else ""
        upcoming = self._transcripts[0].split() if self._transcripts else []
        return " ".join(upcoming[: self.fed_samples // self._word_samples])

    def end(self) -> Transcript:
        if self._partials:
            self._partials.pop(0)
        text = self._transcripts.pop(0) if self._transcripts else ""
        words = tuple(RecognizedWord(w, 0.0, 0.0) for w in text.split())
        return Transcript(text, words)


class FakeTurnEnd:
    """The end-of-turn model: says the scripted probabilities in order, one per question (the
    last again once they run out; an exception is raised); keeps how much audio each question
    carried."""

    sample_rate = 16000
    window_s = 8.0

    def __init__(self, probabilities: Sequence[float | Exception]) -> None:
        self._probabilities = list(probabilities)
        self.asked_samples: list[int] = []

    def complete_probability(self, pcm: bytes) -> float:
        self.asked_samples.append(len(pcm) // 2)
        said = self._probabilities.pop(0) if len(self._probabilities) > 1 else self._probabilities[0]
        if isinstance(said, Exception):
            raise said
        return said


Reply = str | Sequence[str | ToolCall]
"""A scripted reply: text, or text pieces and tool calls in the order the model emits them."""


class FakeLanguageModel:
    """Replies (one per request) from a list; records every request, the tools offered and
    every prewarm.

    `fail_after(n)` says how many pieces the n-th request (1 = the first; speculative requests,
    withdrawn or not, count) yields before it raises `RuntimeError`; None: it does not fail.
    A failed request used up its reply (withdrawing it puts the reply back).
    `prewarm_hold_s` (real seconds) makes a prewarm work that long, watching its stop event;
    `prewarms_stopped` counts those it stopped."""

    def __init__(self, replies: Sequence[Reply],
                 on_request: Callable[[list[ChatMessage]], None] | None = None,
                 fail_after: Callable[[int], int | None] | None = None,
                 prewarm_hold_s: float = 0.0) -> None:
        self._prewarm_hold_s = prewarm_hold_s
        self.prewarms_stopped = 0
        self._replies = list(replies)
        self._on_request = on_request
        self._fail_after = fail_after
        self._streams = 0
        self.requests: list[list[ChatMessage]] = []
        self.tools_offered: list[list[ToolSpec]] = []
        self.prewarmed: list[list[ChatMessage]] = []
        self.withdrawn: list[list[ChatMessage]] = []
        self._answered: list[Reply] = []

    def prewarm(self, messages: list[ChatMessage], tools: Sequence[ToolSpec] = (),
                stop: threading.Event | None = None) -> None:
        self.prewarmed.append([dict(m) for m in messages])
        if self._prewarm_hold_s and stop is not None and stop.wait(self._prewarm_hold_s):
            self.prewarms_stopped += 1

    def withdraw(self) -> None:
        """The latest request was speculative and thrown away: its reply comes again."""
        self.withdrawn.append(self.requests.pop())
        self._replies.insert(0, self._answered.pop())

    def stream(self, messages: list[ChatMessage], tools: Sequence[ToolSpec] = ()
               ) -> Iterator[str | ToolCall]:
        self.requests.append([dict(m) for m in messages])
        self.tools_offered.append(list(tools))
        if self._on_request is not None:
            self._on_request(messages)
        reply = self._replies.pop(0) if self._replies else ""
        self._answered.append(reply)
        self._streams += 1
        fail_after = self._fail_after(self._streams) if self._fail_after is not None else None
        pieces = [piece for part in ([reply] if isinstance(reply, str) else reply)
                  for piece in ([part] if isinstance(part, ToolCall)
                                else re.findall(r"\S+\s*", part))]
        for count, piece in enumerate(pieces):
            if count == fail_after:
                break
            yield piece
        if fail_after is not None:
            raise RuntimeError(f"the model failed on request {self._streams}")


class ScriptedMeter:
    """Other programs' load on the CPU (`cpu_share.LoadMeter`), as the test sets it."""

    def __init__(self, others: float = 0.0) -> None:
        self.others = others

    def others_cores(self) -> float:
        return self.others


class FakeSpeech:
    """Every token takes `word_ms` of audio (a constant tone), followed by `gap_ms` of silence.

    Synthesizing a text for which `fail_when` is true raises `RuntimeError` (the text goes to
    `failed`, not to `synthesized`); `fail_when` may be changed between calls. With `share`,
    `listener_waited` notes for each text synthesized whether a listener waited for it there
    (the model held)."""

    def __init__(self, sample_rate: int = 16000, word_ms: int = 300, gap_ms: int = 100,
                 fail_when: Callable[[str], bool] | None = None,
                 share: CpuShare | None = None) -> None:
        self.sample_rate = sample_rate
        self._word = sample_rate * word_ms // 1000
        self._gap = sample_rate * gap_ms // 1000
        self.synthesized: list[str] = []
        self.failed: list[str] = []
        self.fail_when = fail_when
        self._share = share
        self.listener_waited: list[bool] = []

    def synthesize(self, text: str) -> SpeechAudio:
        if self.fail_when is not None and self.fail_when(text):
            self.failed.append(text)
            raise RuntimeError(f"the voice failed on {text!r}")
        self.synthesized.append(text)
        if self._share is not None:
            self.listener_waited.append(self._share.hold_while_listener_waits(at_most_s=0.0))
        words = []
        position = 0
        for start, end in tokenize(text):
            words.append(WordTiming(text[start:end], start, end, position, position + self._word))
            position += self._word + self._gap
        pcm = (np.random.default_rng(len(text)).uniform(-1, 1, position) * 1000).astype(np.int16)
        return SpeechAudio(pcm.tobytes(), self.sample_rate, tuple(words))


class FakeSummarizer:
    """Records what it was given; each summary names how many it made. `fail` raises that many
    times first; `hold_s` (real seconds) makes it work that long, watching its stop event."""

    def __init__(self, fail: int = 0, hold_s: float = 0.0) -> None:
        self.inputs: list[tuple[str, list[tuple[str, str]]]] = []
        self._fail = fail
        self._hold_s = hold_s

    def summarize(self, previous: str, lines: Sequence[tuple[str, str]],
                  stop: threading.Event) -> Summary:
        if self._fail:
            self._fail -= 1
            raise RuntimeError("the summarizer broke")
        if self._hold_s and stop.wait(self._hold_s):
            raise SummaryPreempted
        self.inputs.append((previous, list(lines)))
        return Summary(f"summary {len(self.inputs)}", ())


class FakeRoomCalls:
    """Runs `bench rooms`' calls without engines: the agent hears every caller line as
    `heard` maps it (else word for word); a line said over a reply pauses it `stop_ms` after its
    onset and barges in 100 ms later, except the lines in `missed` (dropped as the agent's own
    voice); every reply plays whole, but the first `self_barge_ins` of a call with nobody
    speaking over it are cut by a barge-in. The calls it ran are in `calls`."""

    def __init__(self, stop_ms: float = 200.0, missed: Sequence[str] = (),
                 heard: dict[str, str] | None = None, self_barge_ins: int = 0) -> None:
        self.stop_ms = stop_ms
        self.missed = set(missed)
        self.heard = heard or {}
        self.self_barge_ins = self_barge_ins
        self.calls: list[tuple[Config, CallScript]] = []

    def __call__(self, config: Config, call: CallScript) -> SessionRecord:
        self.calls.append((config, call))
        logged: list[LoggedEvent] = [LoggedEvent(0.0, SessionStarted(1, "start-up"))]
        units: list[Any] = []
        cut_left = 0 if any(line.barge_in_after for line in call.lines) else self.self_barge_ins
        for number, line in enumerate(call.lines):
            onset = 10.0 * number + 0.55
            logged.append(LoggedEvent(onset - 0.05, CallerSpoke(line.say, 0.05)))
            if line.say in self.missed:
                logged.append(LoggedEvent(onset + 1.0, EchoIgnored(line.say, "")))
                continue
            if line.barge_in_after is not None:
                paused = onset + self.stop_ms / 1000
                logged += [LoggedEvent(paused, PlaybackPaused("u")),
                           LoggedEvent(paused + 0.1, BargeIn("u"))]
            logged += [LoggedEvent(onset + 2.0, UserTurn(self.heard.get(line.say, line.say), ())),
                       LoggedEvent(onset + 2.1, LlmRequest(number + 1, 1, ())),
                       LoggedEvent(onset + 2.5, PlaybackStarted("u"))]
            reply = str(call.replies[number]) if call.replies else ""
            if cut_left:
                cut_left -= 1
                logged.append(LoggedEvent(onset + 4.0, BargeIn("u")))
                units.append({"generated": reply, "heard": reply[:5]})
            else:
                units.append({"generated": reply, "heard": reply})
        events = [entry.to_json() for entry in logged]
        return cast(SessionRecord, {"events": events, "units": units,
                                    "engines": {"echo_cancel": "webrtc-aec3"}})
