"""The loop: microphone -> VAD -> STT -> turn-taking; replies are spoken by the Responder.

One asyncio task listens. User speech while the agent is silent becomes a user turn at the end
of the segment. User speech over the agent is an *overlap*: playback may pause at its onset
(`pause_on_speech`), and it becomes a barge-in only when it is sustained, has words, is not the
agent's own echo and the backchannel classifier calls it an interruption. Anything else resumes
playback where it paused and is logged, not answered.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from edge_agent.audio.device import Microphone, Speaker
from edge_agent.audio.unit_audio import UnitAudioWriter
from edge_agent.conversation.backchannel import BackchannelClassifier, LexiconClassifier, Verdict
from edge_agent.conversation.echo import EchoFilter, words_played
from edge_agent.conversation.echo_audio import RATE, echo_coherence, to_compare_rate
from edge_agent.conversation.replies import Responder
from edge_agent.conversation.segmenter import Boundary, SpeechSegmenter
from edge_agent.conversation.settings import ConversationSettings, Engines
from edge_agent.conversation.tools import Toolbox
from edge_agent.engines.base import Transcript
from edge_agent.events import (
    Backchannel,
    BargeIn,
    EchoIgnored,
    EventLog,
    Notice,
    PlaybackPaused,
    PlaybackResumed,
    SessionEnded,
    SessionStarted,
    TurnDropped,
    UserSpeechEnded,
    UserSpeechStarted,
    UserTurn,
)
from edge_agent.memory.history import History
from edge_agent.owner import Owner, OwnerThread

__all__ = ["Conversation", "ConversationSettings", "Engines"]

_ECHO_DELAY_S = 0.3
"""How far the microphone may lag or lead the played-frame cursor (device buffers, the room)."""
_ECHO_WINDOW_S = 3.0
"""How much of the latest microphone audio is compared with the playback."""
_RECHECK_MS = 96
"""How often an undecided overlap asks the recognizer for its words so far."""


@dataclass
class _Overlap:
    """User speech that began while the agent was speaking: not a turn yet, maybe never."""

    echo_from: int
    """Speaker frame from which the agent's audio may come back in this speech."""
    mic: bytearray
    """The microphone audio of this speech so far (from the pre-roll on)."""
    mic_at_pause: int
    """Bytes of `mic` captured when playback paused at the onset."""
    paused: bool
    """Playback was paused at the onset."""
    decided: bool = False
    """It became a barge-in."""
    checked_ms: float = 0.0
    """Speech length at the last look at the recognizer's words."""


class Conversation:
    def __init__(
        self,
        *,
        mic: Microphone,
        speaker: Speaker,
        engines: Engines,
        settings: ConversationSettings,
        log: EventLog,
        history: History | None = None,
        owner: Callable[[str], Owner] = OwnerThread,
        unit_audio: UnitAudioWriter | None = None,
        tools: Toolbox | None = None,
        classifier: BackchannelClassifier | None = None,
        echo: EchoFilter | None = None,
    ) -> None:
        self._mic = mic
        self._speaker = speaker
        self._engines = engines
        self._settings = settings
        self._log = log
        self.history = history or History()
        self._stt_thread = owner("stt")
        self._classifier = classifier or LexiconClassifier()
        self._echo = echo or EchoFilter()
        self._responder = Responder(speaker=speaker, engines=engines, settings=settings, log=log,
                                    history=self.history, owner=owner, unit_audio=unit_audio,
                                    tools=tools or Toolbox())
        self._hearing = False
        self._user_turns = 0
        self._session = 0
        self._closed_sessions: list[History] = []

    @property
    def replying(self) -> bool:
        """True while a reply is being generated, synthesized or played."""
        return self._responder.replying

    @property
    def histories(self) -> list[History]:
        """Every session's history, in order (the open one last)."""
        return [*self._closed_sessions, self.history]

    @property
    def busy(self) -> bool:
        """True while the user is talking or the agent is answering or speaking."""
        return self._hearing or self.replying

    async def run(self) -> None:
        """Greet (if configured) and converse until cancelled; then finalize what is open."""
        try:
            if self._settings.session_start == "immediate":
                self._open_session("start-up", greet=True)
            await self._listen()
        finally:
            await self._responder.stop()
            self._stt_thread.close()
            self._responder.close()

    async def _listen(self) -> None:
        mic, stt = self._mic, self._engines.stt
        frame_ms = 1000 * mic.frame_samples / mic.sample_rate
        segmenter = SpeechSegmenter(self._settings.segmenter, frame_ms)
        preroll: deque[bytes] = deque(maxlen=max(1, round(self._settings.preroll_ms / frame_ms)))
        frames_seen = 0
        onset = last_activity = 0.0
        overlap: _Overlap | None = None
        idle_end = self._settings.idle_end_s
        async for frame in mic.frames():
            if self._responder.failure is not None:
                raise self._responder.failure
            frames_seen += 1
            boundary = segmenter.push(self._engines.vad.speech_probability(frame))
            preroll.append(frame)
            audio_time = frames_seen * frame_ms / 1000
            if self.busy or boundary is not None:
                last_activity = audio_time
            elif self._session and idle_end and audio_time - last_activity >= idle_end:
                await self._end_session()
            if boundary is Boundary.START:
                self._hearing = True
                onset = audio_time - segmenter.speech_ms / 1000
                self._log.publish(UserSpeechStarted(onset))
                await self._stt_thread.call(stt.begin)
                await self._stt_thread.call(stt.feed, b"".join(preroll))
                overlap = (self._overlap_begins(segmenter.speech_ms, b"".join(preroll))
                           if self.replying else None)
            elif segmenter.in_speech or boundary is Boundary.END:
                await self._stt_thread.call(stt.feed, frame)
                if overlap is not None:
                    overlap.mic.extend(frame)
            if (overlap is not None and not overlap.decided and segmenter.in_speech
                    and self.replying and await self._interrupts(overlap, segmenter.speech_ms)):
                overlap.decided = True
                await self._barge_in()
            if boundary is Boundary.END:
                self._log.publish(UserSpeechEnded(audio_time))
                transcript = await self._stt_thread.call(stt.end)
                self._hearing = False
                spoken_ms = 1000 * (audio_time - onset) - self._settings.segmenter.end_silence_ms
                ended, overlap = overlap, None
                if (ended is not None and not ended.decided
                        and not await self._overlap_ends(ended, transcript, spoken_ms, audio_time)):
                    continue
                await self._user_turn(transcript, audio_time)

    async def _user_turn(self, transcript: Transcript, audio_time: float) -> None:
        text = transcript.text.strip()
        if not text:
            self._log.publish(TurnDropped(audio_time))
            return
        self._log.publish(UserTurn(
            transcript.text, tuple((w.text, w.start, w.end) for w in transcript.words)))
        if not self._session:
            rest = self._opens_session(text)
            if rest is None:
                self._log.publish(Notice(
                    f"no session open: {text!r} is not the wake phrase; not answered"))
                return
            waking = self._settings.session_start == "wake"
            self._open_session("wake" if waking else "speech", greet=waking and not rest)
            if not rest:
                return  # the wake phrase alone: the greeting answers it
            text = rest
        self.history.add_user(text)
        await self._responder.stop()
        self._user_turns += 1
        self._responder.start(self._user_turns)

    def _opens_session(self, text: str) -> str | None:
        """What to answer if `text` opens a session ("" for nothing), or None if it does not."""
        if self._settings.session_start != "wake":
            return text
        words, phrase = _words(text), _words(self._settings.wake_phrase)
        for at in range(len(words) - len(phrase) + 1):
            if words[at:at + len(phrase)] == phrase:
                return " ".join(text.split()[at + len(phrase):])
        return None

    def _open_session(self, how: str, greet: bool) -> None:
        self._session = len(self._closed_sessions) + 1
        self._log.publish(SessionStarted(self._session, how))
        if greet and self._settings.greeting:
            self._responder.start(turn=0)

    async def _end_session(self) -> None:
        await self._responder.stop()
        self._log.publish(SessionEnded(self._session))
        self._closed_sessions.append(self.history)
        self.history = self._responder.history = History()
        self._session = 0

    def _overlap_begins(self, speech_ms: float, heard: bytes) -> _Overlap:
        heard_for = (speech_ms + self._settings.preroll_ms) / 1000
        echo_from = self._speaker.played_frames() - int(heard_for * self._speaker.sample_rate)
        overlap = _Overlap(echo_from=echo_from, mic=bytearray(heard), mic_at_pause=len(heard),
                           paused=False)
        # The onset's own sound decides the pause: the agent's echo does not pause it (no
        # stutter on a kiosk without an echo canceller), anything else does.
        if self._settings.pause_on_speech and not self._sounds_like_playback(overlap):
            overlap.paused = True
            self._speaker.pause()
            self._log.publish(PlaybackPaused(self._responder.playing_unit))
        return overlap

    async def _interrupts(self, overlap: _Overlap, speech_ms: float) -> bool:
        """While the user speaks over the agent: is this already a real interruption?"""
        settings = self._settings
        if speech_ms < settings.barge_in_min_ms:
            return False
        forced = speech_ms >= settings.barge_in_force_ms
        if speech_ms - overlap.checked_ms < _RECHECK_MS and not forced:
            return False
        overlap.checked_ms = speech_ms
        text = await self._stt_thread.call(self._engines.stt.partial)
        if self._is_echo(text, overlap):
            return False
        if forced:
            return True
        return (len(text.split()) >= settings.barge_in_min_words
                and self._classify(text, speech_ms) is Verdict.INTERRUPTION)

    async def _overlap_ends(self, overlap: _Overlap, transcript: Transcript, spoken_ms: float,
                            audio_time: float) -> bool:
        """An overlap ended before it was judged: True if it is a turn to answer (a barge-in
        now); otherwise playback resumes where it paused and nothing is truncated."""
        text = transcript.text.strip()
        echo = bool(text) and self._is_echo(text, overlap)
        if text and not echo and self._classify(text, spoken_ms) is Verdict.INTERRUPTION:
            if self.replying:
                await self._barge_in()
            return True
        if not text:
            self._log.publish(TurnDropped(audio_time))
        elif echo:
            self._log.publish(EchoIgnored(text, self._playing_text(overlap)))
        else:
            self._log.publish(Backchannel(text, round(spoken_ms)))
        if overlap.paused:
            self._speaker.resume()
            self._log.publish(PlaybackResumed(self._responder.playing_unit))
        return False

    def _classify(self, text: str, speech_ms: float) -> Verdict:
        return self._classifier.classify(text, speech_ms, self._settings.language)

    def _is_echo(self, text: str, overlap: _Overlap) -> bool:
        """The agent's own voice: by sound (it correlates with what was played) or by words
        (they match, in order, the words played meanwhile). Sound decides a garbled echo
        ("the last orders" heard as "blast or"); words back it up where sound cannot tell."""
        if self._sounds_like_playback(overlap):
            return True
        return bool(text.strip()) and self._echo.is_echo(text, self._playing_text(overlap))

    def _sounds_like_playback(self, overlap: _Overlap) -> bool:
        mic_rate = self._mic.sample_rate
        heard = memoryview(overlap.mic)
        if overlap.paused:
            # Playback stopped at the onset: only what was captured until then (plus the room's
            # delay) can hold echo; the rest is the user or silence.
            heard = heard[: overlap.mic_at_pause + 2 * int(_ECHO_DELAY_S * mic_rate)]
        # Only the latest few seconds are compared (they tell, and a long overlap stays cheap).
        skip = max(0, len(heard) - 2 * int(_ECHO_WINDOW_S * mic_rate))
        mic = to_compare_rate(bytes(heard[skip:]), mic_rate)
        # The playback over the same span, starting `delay` earlier (the room lags), from the
        # frame the microphone audio began at; silence past the cursor (paused, finished).
        rate = self._speaker.sample_rate
        start = overlap.echo_from + int((skip / 2 / mic_rate - _ECHO_DELAY_S) * rate)
        played = to_compare_rate(
            self._responder.played_audio(start, self._speaker.played_frames()), rate)
        span = len(mic) + 2 * int(_ECHO_DELAY_S * RATE)
        played = np.concatenate([played, np.zeros(max(0, span - len(played)))])[:span]
        return echo_coherence(mic, played) >= self._settings.echo_coherence

    def _playing_text(self, overlap: _Overlap) -> str:
        """What the agent played from the overlap's start until now, across units."""
        now = self._speaker.played_frames()
        parts = []
        for unit in self._responder.recent_units():
            start, end = unit.played_at(overlap.echo_from), unit.played_at(now)
            if end > start:
                parts.append(words_played(unit.text, unit.words, start, end))
        return " ".join(p for p in parts if p)

    async def _barge_in(self) -> None:
        self._log.publish(BargeIn(self._responder.playing_unit))
        await self._responder.stop()


def _words(text: str) -> list[str]:
    return re.findall(r"[\w']+", text.lower())
