"""The caller's words as they come: every frame of an utterance to the recognizer, the
speculative transcript when the silence after it starts (and, in an open session, the answer
prepared from it; `conversation.prepared`), the screen's readings of the words so far, and the
silence that ends the utterance (`conversation.endpoint`)."""

from __future__ import annotations

import asyncio
import contextlib
import math

from edge_agent.audio.unit_audio import CallerAudioSink
from edge_agent.conversation.endpoint import EndpointRules, silence_needed
from edge_agent.conversation.push_to_talk import TalkButton
from edge_agent.conversation.replies import Responder
from edge_agent.conversation.sound_verdict import SoundVerdicts, verdict
from edge_agent.conversation.turn_taking import kept_up_ms
from edge_agent.conversation.utterance import Utterance
from edge_agent.engines.base import SpeechRecognizer
from edge_agent.events import EventLog, SpeculationCancelled, TurnStage
from edge_agent.owner import Owner


class Recognition:
    """Feeds the recognizer (on its owner thread) and works out ahead what each utterance
    will be when its silence is long enough."""

    def __init__(self, *, stt: SpeechRecognizer, stt_thread: Owner, endpoint: EndpointRules,
                 words_every_ms: int, mic_rate: int, responder: Responder, log: EventLog,
                 sound: SoundVerdicts | None, caller_audio: CallerAudioSink | None,
                 talk: TalkButton | None) -> None:
        self._stt = stt
        self._stt_thread = stt_thread
        self._endpoint = endpoint
        self._words_every_ms = words_every_ms
        self._mic_rate = mic_rate
        self._responder = responder
        self._log = log
        self._sound = sound
        self._caller_audio = caller_audio
        self._talk = talk

    async def hear(self, utterance: Utterance, frame: bytes, silence_ms: float, turn: int,
                   in_session: bool, as_it_came: bytes) -> None:
        """One frame of an utterance: to the recognizer (or held back during a speculative
        silence); speech that resumes throws away the speculation. `turn`: the number the
        utterance gets as a user turn; `in_session`: a session is open (its answer may be
        prepared ahead); `as_it_came`: the frame before the talker gate (`frame` without one)."""
        stt = self._stt
        if self._caller_audio is not None:
            self._caller_audio.caller_hears(frame)
        utterance.keep(frame)
        if utterance.overlap is not None:
            utterance.overlap.add(as_it_came, frame)
        if silence_ms == 0:
            if utterance.words is not None:
                await self.drop_speculation(utterance, "speech resumed", turn)
            if utterance.held:
                await self._stt_thread.call(stt.feed, b"".join(utterance.held))
                utterance.held.clear()
        if utterance.words is not None:
            utterance.held.append(frame)
            return
        await self._stt_thread.call(stt.feed, frame)
        if silence_ms == 0:
            self._read_words_now_and_then(utterance, len(frame) // 2)
        if silence_ms >= self._endpoint.speculate_ms and utterance.callers:
            utterance.words = asyncio.create_task(self._speculate(utterance, turn, in_session))
            if self._sound is not None:
                utterance.sound = self._sound.ask(bytes(utterance.audio))

    def _read_words_now_and_then(self, utterance: Utterance, samples: int) -> None:
        """For the screen, the caller's words so far, read every `words_every_ms` of speech
        (or `KEEP_UP` times what the last reading took, if longer: a long utterance's reading
        holds the loop's frames as an overlap's does) in the background (the loop takes the
        next frame meanwhile), one reading at a time."""
        if not self._words_every_ms or not utterance.callers:
            return
        utterance.samples_since_reading += samples
        every_ms = kept_up_ms(self._words_every_ms, utterance.reading_took_ms)
        if (utterance.samples_since_reading * 1000 < every_ms * self._mic_rate
                or (utterance.reading is not None and not utterance.reading.done())):
            return
        utterance.samples_since_reading = 0
        clock = self._log.clock

        async def read() -> None:
            asked_at = clock.now()
            words = await self._stt_thread.call(self._stt.partial)
            utterance.reading_took_ms = 1000 * (clock.now() - asked_at)
            utterance.said_so_far = words.strip()

        utterance.reading = asyncio.create_task(read(), name="caller-words")

    async def _speculate(self, utterance: Utterance, turn: int, in_session: bool) -> str:
        """The words so far; and, in an open session, the answer to them prepared."""
        words = (await self._stt_thread.call(self._stt.partial)).strip()
        utterance.said_so_far = words
        self._log.publish(TurnStage(turn, "transcript", speculative=True))
        if words and in_session:
            utterance.prepared = await self._responder.prepare(turn, words)
        return words

    async def drop_speculation(self, utterance: Utterance, reason: str, turn: int) -> None:
        """Forget the words worked out ahead (and the answer prepared from them): the
        utterance goes on, or its words start again."""
        sound, utterance.sound = utterance.sound, None
        if sound is not None:
            sound.cancel()  # its thread finishes the call; the answer is not waited for
        words, utterance.words = utterance.words, None
        if words is not None and not words.done():
            words.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await words
        prepared, utterance.prepared = utterance.prepared, None
        if prepared is not None:
            await self._responder.discard(prepared, reason)
        else:
            self._log.publish(SpeculationCancelled(turn, reason))

    def silence_needed(self, utterance: Utterance) -> float:
        """The silence that ends this utterance: by its words once they are known, and by its
        sound (`conversation.endpoint`); while the words are being transcribed, as long as any
        words could ask for."""
        rules = self._endpoint
        words, sound = utterance.words, utterance.sound
        if self._talk is not None and self._talk.held:
            return math.inf  # the turn ends when the button is let go
        if words is None:
            return rules.unknown_ms
        if not words.done():
            return max(rules.unknown_ms, rules.complete_ms, rules.incomplete_ms)
        return silence_needed(rules, words.result(), verdict(sound),
                              sound_pending=sound is not None and not sound.done(),
                              interrupting=utterance.overlap is not None)
