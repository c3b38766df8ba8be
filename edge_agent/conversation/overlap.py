"""User speech over the agent, as heard: the microphone audio, and the measurements that turn
it into `OverlapEvidence` — its echo score against what the speaker played, the agent's words
played meanwhile, and its sound shape."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import numpy as np

from edge_agent.audio.device import Speaker
from edge_agent.conversation.echo import words_played
from edge_agent.conversation.echo_audio import RATE, echo_coherence, to_compare_rate
from edge_agent.conversation.turn_taking import OverlapEvidence
from edge_agent.conversation.voice_shape import voice_shape
from edge_agent.heard.ledger import Unit

ECHO_DELAY_S = 0.3
"""How far the microphone may lag or lead the played-frame cursor (device buffers, the room)."""
ECHO_WINDOW_S = 3.0
"""How much of the latest microphone audio is compared with the playback."""


class OverlapAudio:
    """One stretch of user speech that began while the agent was speaking."""

    def __init__(self, speaker: Speaker, mic_rate: int, heard: bytes, heard_ms: float,
                 behind_s: float = 0.0) -> None:
        """`heard`: the microphone audio so far (pre-roll and the onset), `heard_ms` long,
        taken `behind_s` after it was captured (the loop was held: by a long utterance's
        transcript, say; `audio.played_reference.CaptureClock` tells when it was)."""
        self._speaker = speaker
        self._mic_rate = mic_rate
        self.echo_from = speaker.played_frames() - int(
            (heard_ms / 1000 + behind_s) * speaker.sample_rate)
        """Speaker frame from which the agent's audio may come back in this speech."""
        self.mic = bytearray(heard)
        """The microphone audio of this speech so far, as it came (its echo score's)."""
        self._sound_bytes = 2 * int(ECHO_WINDOW_S * mic_rate)
        self.gated = bytearray(heard[-self._sound_bytes:])
        """The latest `ECHO_WINDOW_S` of it after the talker gate (its sound shape's: what the
        VAD and the recognizer heard; the pre-roll is as it came)."""
        self.mic_at_pause = len(heard)
        """Bytes of `mic` captured when playback paused at the onset."""
        self.paused = False
        """Playback was paused at the onset."""
        self.decided = False
        """It became a barge-in."""
        self.words = ""
        """The recognizer's words for it, as last asked."""
        self.words_at_ms: float | None = None
        """Speech length when the recognizer was last asked (None: never)."""
        self.asking: asyncio.Future[str] | None = None
        """The recognizer's answer, while it is being worked out."""
        self.asked_at = 0.0
        """Clock time of the last ask."""
        self.took_ms = 0.0
        """How long the last answer took to come (ms, from the ask to the loop taking it)."""

    def add(self, frame: bytes, gated: bytes) -> None:
        """One more frame of the speech: as the microphone heard it and after the talker gate
        (the same without one). The echo is told on the frames as they came: the gate cuts
        a voice quieter than the caller's (the agent's echo the canceller left, too) into
        pieces, and the pieces correlate less with what was played than the whole."""
        self.mic.extend(frame)
        self.gated.extend(gated)
        del self.gated[:-self._sound_bytes]  # only the latest seconds' sound is measured

    def evidence(self, speech_ms: float, words: str, units: Sequence[Unit]) -> OverlapEvidence:
        # The sound of the latest few seconds only: longer than that, it is no hum anyway, and
        # the measurement (on the loop's thread) stays a few milliseconds.
        return OverlapEvidence(speech_ms=speech_ms, words=words, echo_score=self.echo_score(),
                               playing=self.playing_text(units),
                               sound=voice_shape(bytes(self.gated), self._mic_rate))

    def echo_score(self) -> float:
        """Correlation (0..1) of the microphone audio with what the agent played meanwhile."""
        mic_rate = self._mic_rate
        heard = memoryview(self.mic)
        if self.paused:
            # Playback stopped at the onset: only what was captured until then (plus the room's
            # delay) can hold echo; the rest is the user or silence.
            heard = heard[: self.mic_at_pause + 2 * int(ECHO_DELAY_S * mic_rate)]
        # Only the latest few seconds are compared (they tell, and a long overlap stays cheap).
        skip = max(0, len(heard) - 2 * int(ECHO_WINDOW_S * mic_rate))
        mic = to_compare_rate(bytes(heard[skip:]), mic_rate)
        # The playback over the same span, starting `delay` earlier (the room lags), from the
        # frame the microphone audio began at; silence past the cursor (paused, finished).
        speaker = self._speaker
        rate = speaker.sample_rate
        start = self.echo_from + int((skip / 2 / mic_rate - ECHO_DELAY_S) * rate)
        played = to_compare_rate(speaker.played_audio(start, speaker.played_frames()), rate)
        span = len(mic) + 2 * int(ECHO_DELAY_S * RATE)
        played = np.concatenate([played, np.zeros(max(0, span - len(played)))])[:span]
        return echo_coherence(mic, played)

    def playing_text(self, units: Sequence[Unit]) -> str:
        """What the agent played from this speech's start until now, across units."""
        now = self._speaker.played_frames()
        parts = []
        for unit in units:
            start, end = unit.played_at(self.echo_from), unit.played_at(now)
            if end > start:
                parts.append(words_played(unit.text, unit.words, start, end))
        return " ".join(p for p in parts if p)
