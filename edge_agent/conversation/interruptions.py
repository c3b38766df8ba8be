"""Speech over the agent, from its onset to its verdict: the pause at the onset, the barge-in
while it goes on, and what it was at its end (an answer, a backchannel, the agent's echo, or
nothing) — the loop's side of `conversation.turn_taking`, which decides from the evidence this
gathers (`conversation.overlap`). A barge-in, spoken or touched, stops the reply where the
device's played position is."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from edge_agent.audio.device import Speaker
from edge_agent.clock import Clock
from edge_agent.conversation.overlap import OverlapAudio
from edge_agent.conversation.replies import Responder
from edge_agent.conversation.turn_taking import Judgement, Onset, Outcome, TurnTaking
from edge_agent.engines.base import Transcript
from edge_agent.events import (
    Backchannel,
    BargeIn,
    EchoIgnored,
    EventLog,
    PlaybackPaused,
    PlaybackResumed,
    TurnDropped,
)
from edge_agent.owner import Owner


class Interruptions:
    """Judges each overlap as it goes (`begins`, `interrupts`, `ends`) and carries out what
    `TurnTaking` decides on the speaker and the responder."""

    def __init__(self, *, speaker: Speaker, mic_rate: int, turn_taking: TurnTaking,
                 responder: Responder, log: EventLog, stt_thread: Owner,
                 partial: Callable[[], str], clock: Clock) -> None:
        """`partial`: the recognizer's words so far (run on `stt_thread`); `clock` times its
        answers (`TurnTaking.wants_words`)."""
        self._clock = clock
        self._speaker = speaker
        self._mic_rate = mic_rate
        self._turn_taking = turn_taking
        self._responder = responder
        self._log = log
        self._stt_thread = stt_thread
        self._partial = partial

    def begins(self, heard: bytes, heard_ms: float, behind_s: float) -> OverlapAudio:
        """Speech began over the agent (`heard`: its pre-roll and onset, `heard_ms` long,
        taken `behind_s` after it was captured)."""
        overlap = OverlapAudio(self._speaker, self._mic_rate, heard, heard_ms, behind_s)
        # The onset's own sound decides the pause: the agent's echo does not pause it (no
        # stutter on a kiosk without an echo canceller), anything else does.
        if self._turn_taking.at_onset(overlap.echo_score()) is Onset.PAUSE:
            overlap.paused = True
            self._speaker.pause()
            self._log.publish(PlaybackPaused(self._responder.playing_unit))
        return overlap

    async def interrupts(self, overlap: OverlapAudio, speech_ms: float) -> bool:
        """While the user speaks over the agent: is this already a real interruption?

        The recognizer is asked for the words in the background (a whole-segment recognizer
        takes tens of milliseconds), so the loop keeps taking frames in real time; the overlap
        is judged each time new words arrive (when to ask again: `TurnTaking.wants_words`, timed
        by how long the last answer took to come)."""
        asking = overlap.asking
        if asking is None:
            if self._turn_taking.wants_words(speech_ms, overlap.words_at_ms, overlap.took_ms):
                overlap.words_at_ms = speech_ms
                overlap.asked_at = self._clock.now()
                overlap.asking = asyncio.ensure_future(self._stt_thread.call(self._partial))
            return False
        if not asking.done():
            return False
        overlap.took_ms = 1000 * (self._clock.now() - overlap.asked_at)
        overlap.words, overlap.asking = asking.result(), None
        evidence = overlap.evidence(speech_ms, overlap.words, self._responder.recent_units())
        return self._turn_taking.during(evidence) is Judgement.BARGE_IN

    async def ends(self, overlap: OverlapAudio, transcript: Transcript, spoken_ms: float,
                   audio_time: float) -> bool:
        """An overlap ended before it was judged: True if it is a turn to answer (a barge-in
        now); otherwise playback resumes where it paused and nothing is truncated."""
        evidence = overlap.evidence(spoken_ms, transcript.text.strip(),
                                    self._responder.recent_units())
        outcome = self._turn_taking.at_end(evidence)
        if outcome is Outcome.ANSWER:
            if self._responder.replying:
                await self.barge_in(evidence.words)
            return True
        if outcome is Outcome.DROP:
            self._log.publish(TurnDropped(audio_time))
        elif outcome is Outcome.ECHO:
            self._log.publish(EchoIgnored(evidence.words, evidence.playing))
        else:
            self._log.publish(Backchannel(evidence.words, round(spoken_ms)))
        if overlap.paused:
            self._speaker.resume()
            self._log.publish(PlaybackResumed(self._responder.playing_unit))
        return False

    async def barge_in(self, words: str, by: str = "voice") -> None:
        """The reply stops where the device's played position is, recorded as cut `by` voice
        (on `words`) or touch."""
        self._log.publish(BargeIn(self._responder.playing_unit, words, by))
        await self._responder.stop()
