"""One stretch of user speech as the loop follows it: what was heard, and what is being
worked out from it while the silence after it runs (`conversation.agent`)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from edge_agent.conversation.overlap import OverlapAudio
from edge_agent.conversation.prepared import PreparedReply


@dataclass
class Utterance:
    """One stretch of user speech, from its onset until the loop ends it."""

    overlap: OverlapAudio | None
    """Set when it began over the agent and is still to be judged (or was a barge-in)."""
    keep_bytes: int = 0
    """How much of its audio the end-of-turn model hears (0: no model, nothing kept)."""
    held: list[bytes] = field(default_factory=list)
    """Silence frames not fed to the recognizer yet: once the words were taken for the
    speculative transcript, the recognizer keeps that audio, so its final transcript is the
    same (and free); held frames are fed if speech resumes."""
    words: asyncio.Task[str] | None = None
    """The speculative transcript, running or done."""
    sound: asyncio.Task[float | None] | None = None
    """The end-of-turn model's verdict, asked with the speculative transcript (beside it, on
    its own thread: it is back first, ~60 ms against the recognizer's ~120): the probability
    that the turn sounds finished (None: it failed)."""
    audio: bytearray = field(default_factory=bytearray)
    """The utterance as heard so far (at least its last `keep_bytes`), for the end-of-turn
    model."""
    prepared: PreparedReply | None = None
    """The answer being prepared from those words."""
    said_so_far: str = ""
    """The caller's words so far, as the recognizer last read them (for the screen)."""
    reading: asyncio.Task[None] | None = None
    """A reading of the words for the screen, running or done."""
    samples_since_reading: int = 0
    """Speech samples heard since that reading was asked."""
    reading_took_ms: float = 0.0
    """How long the last reading took to come (ms)."""
    woke: bool = False
    """It began with the wake word that opened the session: its words are what followed the
    word (nothing: the wake word alone, which the greeting answers)."""

    @property
    def callers(self) -> bool:
        """Whether it is the caller's speech: not speech over the agent still undecided (it may
        be a backchannel, a hum or the agent's own echo), so neither answered ahead nor
        shown."""
        return self.overlap is None or self.overlap.decided

    def keep(self, pcm: bytes) -> None:
        """Add `pcm` to `audio`, of which at least the last `keep_bytes` are kept."""
        if not self.keep_bytes:
            return
        self.audio.extend(pcm)
        if len(self.audio) > 2 * self.keep_bytes:  # trimmed now and then, not on every frame
            del self.audio[:-self.keep_bytes]
