"""Asking the end-of-turn model, off the loop: does the turn so far sound finished?

The loop asks when it asks for the speculative transcript (`vad.speculate_after_ms` into the
silence), on a thread of its own, so the verdict comes back on the other core while the
recognizer works. `conversation.endpoint.silence_needed` combines it with the words.

Pipecat asks Smart Turn after ~200 ms of silence; here it is asked after 64 ms (the default),
and on Piper's speech the verdicts hardly depend on it: "What time do you open tomorrow?"
0.94-0.98 after 64 ms of silence and 0.94-0.99 after 256 ms, "Can we sit outside," 0.01-0.08
and 0.03-0.16, six syntheses each.
"""

from __future__ import annotations

import asyncio

from edge_agent.engines.base import TurnEndModel
from edge_agent.events import EventLog, Notice
from edge_agent.owner import Owner


class SoundVerdicts:
    def __init__(self, model: TurnEndModel, owner: Owner, log: EventLog) -> None:
        self._model = model
        self._owner = owner
        self._log = log
        self._failed = False
        self.audio_bytes = 2 * round(model.window_s * model.sample_rate)
        """How much of a turn's audio the model hears (int16): what the loop keeps for it."""

    def ask(self, audio: bytes) -> asyncio.Task[float | None]:
        """The probability that the turn whose audio is `audio` sounds finished, on its way.
        Cancelling the task leaves the thread to finish the call; nobody waits for it."""
        return asyncio.create_task(self._ask(audio[-self.audio_bytes:]), name="turn-end")

    async def _ask(self, audio: bytes) -> float | None:
        try:
            return await self._owner.call(self._model.complete_probability, audio)
        except Exception as exc:  # an engine failure must not end the conversation
            if not self._failed:
                self._failed = True
                self._log.publish(Notice(f"the end-of-turn model failed ({exc}); the words "
                                         "alone decide when a turn ends"))
            return None

    def close(self) -> None:
        self._owner.close()


def verdict(sound: asyncio.Task[float | None] | None) -> float | None:
    """The model's probability, if it has answered (None: not asked, not back, failed)."""
    if sound is None or not sound.done() or sound.cancelled():
        return None
    return sound.result()
