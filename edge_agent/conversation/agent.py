"""The loop: microphone -> VAD -> STT -> turns; replies are spoken by the Responder.

One asyncio task listens. User speech while the agent is silent becomes a user turn once the
silence after it is long enough for its words (`conversation.recognition`, with the rules of
`conversation.endpoint`); the answer is prepared while that silence runs
(`conversation.prepared`). User speech over the agent is an overlap, judged by
`conversation.turn_taking` and carried out by `conversation.interruptions`: pause at its onset,
barge in, or resume after a backchannel, a cough or the agent's own echo.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from datetime import datetime

from edge_agent.audio.device import Microphone, Speaker
from edge_agent.audio.pacing import paced_frames
from edge_agent.audio.played_reference import CaptureClock
from edge_agent.audio.talker_gate import TalkerGate
from edge_agent.audio.unit_audio import CallerAudioSink, UnitAudioSink
from edge_agent.conversation.backchannel import BackchannelClassifier, LexiconClassifier
from edge_agent.conversation.background import Background
from edge_agent.conversation.echo import EchoFilter
from edge_agent.conversation.interruptions import Interruptions
from edge_agent.conversation.playback import NowPlaying
from edge_agent.conversation.prepared import PreparedReply
from edge_agent.conversation.push_to_talk import TalkButton
from edge_agent.conversation.recognition import Recognition
from edge_agent.conversation.replies import Responder
from edge_agent.conversation.segmenter import SpeechSegmenter
from edge_agent.conversation.settings import ConversationSettings, Engines
from edge_agent.conversation.sound_verdict import SoundVerdicts, verdict
from edge_agent.conversation.tools import Toolbox
from edge_agent.conversation.turn_taking import TurnTaking
from edge_agent.conversation.utterance import Utterance
from edge_agent.conversation.wake import after_wake_phrase, after_wake_word
from edge_agent.engines.base import Transcript
from edge_agent.events import (
    EventLog,
    Notice,
    SessionEnded,
    SessionStarted,
    TurnDropped,
    TurnStage,
    UserSpeechEnded,
    UserSpeechStarted,
    UserTurn,
)
from edge_agent.knowledge.live import Grounder
from edge_agent.memory.conversation_memory import ConversationMemory, utc_now
from edge_agent.memory.history import History
from edge_agent.owner import Owner, OwnerThread
from edge_agent.timers.desk import TimerDesk

__all__ = ["Conversation", "ConversationSettings", "Engines"]


TAKEOVER_LOOKBACK_MS = 640
"""How far back the recognizer hears again when the talker gate finds a nearer talker inside
an utterance: the gate learns their level over a few hundred ms (a 190 ms smoothed level), so
their first word began about that long before."""


class Conversation:
    def __init__(
        self,
        *,
        mic: Microphone,
        speaker: Speaker,
        engines: Engines,
        settings: ConversationSettings,
        log: EventLog,
        memory: ConversationMemory | None = None,
        owner: Callable[[str], Owner] = OwnerThread,
        unit_audio: UnitAudioSink | None = None,
        caller_audio: CallerAudioSink | None = None,
        tools: Toolbox | None = None,
        classifier: BackchannelClassifier | None = None,
        echo: EchoFilter | None = None,
        gate: TalkerGate | None = None,
        knowledge: Grounder | None = None,
        timers: TimerDesk | None = None,
        wall: Callable[[], datetime] = utc_now,
    ) -> None:
        self._mic = mic
        self._speaker = speaker
        self._engines = engines
        self._settings = settings
        self._log = log
        self.memory = memory or ConversationMemory(settings.memory, log)
        self._clock = log.clock
        self._stt_thread = owner("stt")
        self._sound = (SoundVerdicts(engines.turn_end, owner("turn-end"), log)
                       if engines.turn_end is not None else None)
        self._caller_audio = caller_audio
        self._gate = gate
        self._responder = Responder(speaker=speaker, engines=engines, settings=settings, log=log,
                                    memory=self.memory, owner=owner, unit_audio=unit_audio,
                                    tools=tools or Toolbox(), knowledge=knowledge)
        self._interruptions = Interruptions(
            speaker=speaker, mic_rate=mic.sample_rate,
            turn_taking=TurnTaking(settings.turns, classifier or LexiconClassifier(),
                                   echo or EchoFilter()),
            responder=self._responder, log=log, stt_thread=self._stt_thread,
            partial=engines.stt.partial, clock=self._clock)
        self._talk = TalkButton() if settings.push_to_talk else None
        self._recognition = Recognition(
            stt=engines.stt, stt_thread=self._stt_thread, endpoint=settings.endpoint,
            words_every_ms=settings.words_every_ms, mic_rate=mic.sample_rate,
            responder=self._responder, log=log, sound=self._sound, caller_audio=caller_audio,
            talk=self._talk)
        self._utterance: Utterance | None = None
        self._hearing = False
        self._user_turns = 0
        self._session = 0
        self._background = Background(
            settings=settings, log=log, responder=self._responder, memory=self.memory,
            knowledge=knowledge is not None, timers=timers, owner=owner, wall=wall,
            open_if_none=self._open_if_none, voice_rate=engines.tts.sample_rate)
        self._responder.commands = self._background.timekeeper
        self.started = asyncio.Event()
        """Set once start-up is done: a session resumed or opened, its greeting begun if it
        has one, and the loop about to listen."""

    @property
    def replying(self) -> bool:
        """True while a reply is being generated, synthesized or played."""
        return self._responder.replying

    @property
    def history(self) -> History:
        """The open session's heard history."""
        return self.memory.history

    @property
    def histories(self) -> list[History]:
        """Every session's history, in order (the open one last)."""
        return self.memory.histories

    @property
    def busy(self) -> bool:
        """True while the user is talking or the agent is answering or speaking."""
        return self._hearing or self.replying

    async def run(self) -> None:
        """Greet (if configured) and converse until cancelled; then finalize what is open."""
        try:
            resumed = await self.memory.start()
            if resumed is not None:
                self._session = len(self.memory.session_ids)
                self._responder.number_units_after(resumed.units)
                self._log.publish(SessionStarted(self._session, "resumed"))
            self._responder.prewarm()
            if resumed is None and self._settings.session_start == "immediate":
                self._open_session("start-up", greet=True)
            self._background.start(lambda: self.busy, self._failed)
            self.started.set()
            await self._listen()
        finally:
            await self._background.stop()
            await self._responder.stop()
            self._stt_thread.close()
            if self._sound is not None:
                self._sound.close()
            self._responder.close()

    async def _listen(self) -> None:
        mic, stt = self._mic, self._engines.stt
        frame_ms = 1000 * mic.frame_samples / mic.sample_rate
        segmenter = SpeechSegmenter(self._settings.segmenter, frame_ms)
        preroll_frames = max(1, round(self._settings.preroll_ms / frame_ms))
        # The last frames as they came: the pre-roll of an onset, and the start of a nearer
        # talker's words when the gate finds them under someone else's.
        recent: deque[bytes] = deque(maxlen=max(preroll_frames,
                                                round(TAKEOVER_LOOKBACK_MS / frame_ms)))
        frames_seen = 0
        # When each frame was captured: one taken late was heard while the speaker played
        # audio already that far back (the onset's echo is compared with that).
        capture = CaptureClock(mic.sample_rate)
        last_activity = 0.0
        utterance: Utterance | None = None
        idle_end = self._settings.idle_end_s
        wake = self._engines.wake
        # Asked on the audio thread: `busy` and `idle` only read flags (and a task's done()).
        async for frame in paced_frames(mic, lambda: self.busy or not segmenter.idle):
            if self._responder.failure is not None:
                # Never an engine failure (a reply says the fallback line over those and the
                # loop goes on): something the reply could not recover from.
                raise self._responder.failure
            if self._talk is not None:
                frame = self._talk.admit(frame)
            let_go = self._talk is not None and self._talk.let_go()
            frames_seen += 1
            # The onset's run-up is heard as it came: a phrase's first sounds are quieter
            # than the syllable that opens the gate.
            recent.append(frame)
            as_it_came = frame
            captured_at = capture.frame_end(len(frame) // 2, self._clock.now())
            # On the loop, like the VAD: ~0.1 ms a frame (TensorFlow Lite, a 50-80 kB model).
            woke = wake is not None and wake.heard(frame)
            if self._gate is not None:  # before anything hears it: VAD, recognizer, kept audio
                frame = self._gate.admit(frame, segmenter.in_speech)
            started = segmenter.push(self._engines.vad.speech_probability(frame))
            audio_time = frames_seen * frame_ms / 1000
            if self.busy or started:
                last_activity = audio_time
            elif self._session and idle_end and audio_time - last_activity >= idle_end:
                await self._end_session()
            if woke:
                utterance = await self._wake_word(utterance, after_wake_word(recent, frame_ms),
                                                  segmenter.in_speech, audio_time)
                continue
            if started and wake is not None and not self._session:
                continue  # waiting for the wake word: nothing is transcribed
            if started:
                self._hearing = True
                self.memory.stop_background.set()  # a summary in progress yields the model
                onset = audio_time - segmenter.speech_ms / 1000
                self._log.publish(UserSpeechStarted(onset))
                heard = b"".join(list(recent)[-preroll_frames:])
                if self._caller_audio is not None:
                    self._caller_audio.caller_begins(heard)
                await self._stt_thread.call(stt.begin)
                await self._stt_thread.call(stt.feed, heard)
                overlap = None
                if self.replying:
                    overlap = self._interruptions.begins(
                        heard, segmenter.speech_ms + self._settings.preroll_ms,
                        self._clock.now() - captured_at)
                utterance = self._utterance = Utterance(
                    overlap, keep_bytes=self._sound.audio_bytes if self._sound else 0)
                utterance.keep(heard)
                continue
            if utterance is None:
                if wake is not None and segmenter.silence_ms >= self._settings.endpoint.unknown_ms:
                    segmenter.end()  # while waiting for the wake word, speech is only segmented
                continue
            await self._recognition.hear(utterance, frame, segmenter.silence_ms,
                                           self._user_turns + 1, bool(self._session), as_it_came)
            if (self._gate is not None and self._gate.took_over()
                    and utterance.overlap is None and utterance.words is None):
                # What came before the nearer talker was someone else in the room.
                await self._stt_thread.call(stt.begin)
                await self._stt_thread.call(stt.feed, b"".join(recent))
                utterance.audio.clear()
                utterance.keep(b"".join(recent))
            overlap = utterance.overlap
            if (overlap is not None and not overlap.decided and self.replying
                    and await self._interruptions.interrupts(overlap, segmenter.speech_ms)):
                overlap.decided = True
                await self._interruptions.barge_in(overlap.words)
            if let_go or segmenter.silence_ms >= self._recognition.silence_needed(utterance):
                spoken_ms = segmenter.speech_ms - segmenter.silence_ms
                self._log.publish(UserSpeechEnded(audio_time, round(segmenter.silence_ms),
                                                  verdict(utterance.sound)))
                if self._caller_audio is not None and not utterance.woke:
                    self._caller_audio.caller_ends()
                segmenter.end()
                ended, utterance, self._utterance = utterance, None, None
                await self._utterance_ends(ended, spoken_ms, audio_time)

    async def _utterance_ends(self, utterance: Utterance, spoken_ms: float,
                              audio_time: float) -> None:
        stt = self._engines.stt
        if utterance.overlap is not None and utterance.overlap.asking is not None:
            await utterance.overlap.asking  # the recognizer is done with it before it ends
        if utterance.reading is not None:
            await utterance.reading  # so is it with the screen's reading
        if utterance.sound is not None:
            utterance.sound.cancel()  # done with (a verdict still on its way is not used)
        speculated = ""
        if utterance.words is not None:
            speculated = await utterance.words
        transcript = await self._stt_thread.call(stt.end)
        if self._caller_audio is not None and utterance.woke:
            # After the wake word said alone, only its silence was heard: nothing to keep.
            self._caller_audio.caller_ends(keep=bool(transcript.text.strip()))
        self._hearing = False
        prepared = utterance.prepared
        if prepared is not None and transcript.text.strip() != speculated:
            await self._responder.discard(prepared, "words changed")
            prepared = None
        overlap = utterance.overlap
        if (overlap is not None and not overlap.decided
                and not await self._interruptions.ends(overlap, transcript, spoken_ms,
                                                       audio_time)):
            return
        await self._user_turn(transcript, audio_time, prepared,
                              speculated=utterance.words is not None, woke=utterance.woke)

    async def _user_turn(self, transcript: Transcript, audio_time: float,
                         prepared: PreparedReply | None, speculated: bool,
                         woke: bool = False) -> None:
        text = transcript.text.strip()
        if not text and woke and self._settings.greeting and not self.replying:
            self._responder.start(turn=0)  # the wake word alone: the greeting answers it
            return
        if not text:
            self._log.publish(TurnDropped(audio_time))
            return
        self._log.publish(UserTurn(
            transcript.text, tuple((w.text, w.start, w.end) for w in transcript.words)))
        if not self._session:
            rest = (after_wake_phrase(text, self._settings.wake_phrase)
                    if self._settings.session_start == "wake" else text)
            if rest is None:
                self._log.publish(Notice(
                    f"no session open: {text!r} is not the wake phrase; not answered"))
                return
            waking = self._settings.session_start == "wake"
            self._open_session("wake" if waking else "speech", greet=waking and not rest)
            if not rest:
                return  # the wake phrase alone: the greeting answers it
            text = rest
        self.memory.add_user(text)
        await self._responder.stop()
        self._user_turns += 1
        if not speculated:
            self._log.publish(TurnStage(self._user_turns, "transcript", speculative=False))
        self._responder.start(self._user_turns, prepared, asked=text)

    async def _wake_word(self, utterance: Utterance | None, after: bytes, in_speech: bool,
                         audio_time: float) -> Utterance | None:
        """The wake word ended in this frame (`after`: the audio since it ended). Waiting, it
        opens a session: what the caller says next is their first turn (if nothing, the
        greeting answers the word). Over the agent's voice it is a barge-in. Either way, an
        utterance's words start after it: the recognizer hears only `after` from here on."""
        stt = self._engines.stt
        if not self._session:
            self._open_session("wake", greet=not in_speech)
            if not in_speech:
                return None
            self._hearing = True
            self.memory.stop_background.set()
            self._log.publish(UserSpeechStarted(audio_time))
            utterance = self._utterance = Utterance(
                None, keep_bytes=self._sound.audio_bytes if self._sound else 0, woke=True)
        elif self.replying:
            await self._interruptions.barge_in("", by="wake")
        if utterance is None:
            return None
        if utterance.words is not None:  # worked out at the pause before the word ended
            await self._recognition.drop_speculation(utterance, "the wake word",
                                                     self._user_turns + 1)
            utterance.held.clear()
        if utterance.overlap is not None:
            utterance.overlap.decided = True
        await self._stt_thread.call(stt.begin)
        await self._stt_thread.call(stt.feed, after)
        if self._caller_audio is not None:
            self._caller_audio.caller_begins(after)  # what is kept starts there too
        utterance.audio.clear()
        utterance.keep(after)
        return utterance

    def announce(self, words: str) -> str | None:
        """Say `words` (the house's announcement) when nobody is talking and no timer rings,
        as a unit of its own after the chime: None, or why they will not be said."""
        return self._background.announcer.announce(words)

    def _open_if_none(self, how: str) -> None:
        """A timer rings or the house announces: with no session open, one opens (so "stop"
        or an answer is heard without the wake word), with no greeting."""
        if not self._session:
            self._open_session(how, greet=False)

    def _failed(self, error: BaseException) -> None:
        self._responder.failure = error  # the loop raises it

    def _open_session(self, how: str, greet: bool) -> None:
        self.memory.open_session(how)
        self._session = len(self.memory.session_ids)  # sessions this run opened or resumed
        self._log.publish(SessionStarted(self._session, how))
        if greet and self._settings.greeting:
            self._responder.start(turn=0)

    async def _end_session(self) -> None:
        await self._responder.stop()
        self._log.publish(SessionEnded(self._session))
        self.memory.end_session()
        self._session = 0
        if self._gate is not None:
            self._gate.forget()

    def now_playing(self) -> NowPlaying | None:
        """The unit at the speaker and what of it the listener heard so far."""
        return self._responder.now_playing()

    def caller_words(self) -> str | None:
        """What the caller is saying, as the recognizer last read it (for the screen): "" until
        a first reading; None while nobody speaks to the agent (speech over it that is not yet
        judged a barge-in may be its own echo or a hum: not the caller's words yet)."""
        utterance = self._utterance
        return utterance.said_so_far if utterance is not None and utterance.callers else None

    async def talk(self, held: bool) -> bool:
        """The screen's Talk button pressed (`held`) or let go, with `[screen] push_to_talk`;
        pressed while the agent speaks, it stops the agent as the Stop button does. False if
        push-to-talk is off."""
        if self._talk is None:
            return False
        if not held:
            self._talk.release()
            return True
        self._talk.press()
        if self.replying:
            await self._interruptions.barge_in("", by="touch")
        return True

    async def stop_by_touch(self) -> bool:
        """The screen's stop button: a barge-in with no words (recorded `by="touch"`), the
        reply cut where the device's played position is. False if nothing was being said."""
        if not self.replying:
            return False
        await self._interruptions.barge_in("", by="touch")
        return True

