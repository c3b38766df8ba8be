"""Turn-taking while the agent speaks: every overlap decision, in one place.

User speech that starts while the agent is speaking is an *overlap*. Three moments decide it:

1. **Onset** (the VAD has heard `vad.min_speech_ms` of speech): pause playback, unless
   `pause_on_speech` is off or the onset surely *sounds like* the agent's own playback (its echo
   on a kiosk without an echo canceller), which is not paused for (no stutter).
2. **While it goes on**: it becomes a **barge-in** once it has lasted `barge_in_min_ms` and is
   not the agent's echo (by sound or by words), and either the recognizer's words open with one
   that always interrupts ("wait", "no", "sorry": decided at once), or it is no longer a short
   voiced burst that may still be a hum, has `barge_in_min_words` words and the backchannel
   classifier calls it an interruption; or, whatever the words, once it has lasted
   `barge_in_force_ms` (unless it is echo). While it may still be a backchannel, the agent
   stays paused and the end of the speech decides.
3. **At its end**, if it was not a barge-in yet: **answer** it (a barge-in now: the classifier
   calls the final words an interruption), or it was a **backchannel** ("mm-hm"), the agent's
   **echo**, or nothing recognizable (**drop**). All but "answer" resume playback where it
   paused: nothing truncated, nothing repeated.

The decisions take `OverlapEvidence` — numbers and words the loop measured — and return what
to do; they touch no audio, recognizer or clock, so they are tested as a table.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from edge_agent.conversation.backchannel import (
    BackchannelClassifier,
    Verdict,
    opens_with_interruption,
)
from edge_agent.conversation.echo import EchoFilter
from edge_agent.conversation.voice_shape import VoiceShape


class Onset(enum.StrEnum):
    PAUSE = "pause"
    KEEP_PLAYING = "keep playing"


class Judgement(enum.StrEnum):
    WAIT = "wait"
    BARGE_IN = "barge-in"


class Outcome(enum.StrEnum):
    ANSWER = "answer"
    BACKCHANNEL = "backchannel"
    ECHO = "echo"
    DROP = "drop"


@dataclass(frozen=True)
class OverlapEvidence:
    """What is known about user speech over the agent at one moment."""

    speech_ms: float
    """How long the user has been speaking over the agent."""
    words: str
    """What the recognizer made of it so far (the final transcript at the end); may be ""."""
    echo_score: float
    """How well its sound correlates with the audio the agent played meanwhile (0..1)."""
    playing: str
    """The agent's words played while it went on (for echo by words)."""
    sound: VoiceShape | None = None
    """The shape of its sound, for the backchannel classifier."""


@dataclass(frozen=True)
class TurnRules:
    """The knobs (config [turns]; built by the composition root)."""

    pause_on_speech: bool
    """Pause playback at an onset that is not the agent's echo."""
    barge_in_min_ms: int
    """Speech over the agent must last this long before it can interrupt..."""
    barge_in_min_words: int
    """...and have this many recognized words the classifier calls an interruption."""
    barge_in_force_ms: int
    """Speech over the agent this long interrupts whatever the words (unless it is echo)."""
    echo_coherence: float
    """An echo score at or above this is the agent's own voice."""
    language: str
    """For the backchannel classifier."""
    recheck_ms: int = 96
    """How often an undecided overlap asks the recognizer for its words so far (past
    `barge_in_force_ms`, at least: see `KEEP_UP`)."""


KEEP_UP = 2.0
"""Past `barge_in_force_ms`, the speech between two asks of an undecided overlap is at least
this many times what the recognizer took to answer the last one. The recognizer's thread also
takes the microphone's frames, so each ask holds the loop's next frame until it is answered:
over an echo the canceller does not take (a kiosk without one), it read the whole overlap
again every 96 ms of speech, each reading 100-270 ms as the overlap grew to 5 s, and the loop
fell 3.7 s behind the microphone; the overlap that began next was then compared with words
the agent played seconds after it (its echo taken for a barge-in). At twice the cost the loop
keeps half of its time for the frames. Before the force point the asks keep their pace: a
caller's interruption is decided there, on short readings, and spacing them by their cost
decided one 150 ms later under load (and made the decision depend on the machine's speed, so
a replay on the virtual clock, where engines take no time, decided otherwise)."""


def kept_up_ms(every_ms: float, took_ms: float) -> float:
    """Speech to wait for between two readings of the words that come every `every_ms` and
    took `took_ms` the last time: never less than `KEEP_UP` times what a reading costs."""
    return max(every_ms, KEEP_UP * took_ms)


class TurnTaking:
    def __init__(self, rules: TurnRules, classifier: BackchannelClassifier,
                 echo: EchoFilter) -> None:
        self.rules = rules
        self._classifier = classifier
        self._echo = echo

    def at_onset(self, echo_score: float) -> Onset:
        """Pause, unless the onset is surely the agent's echo. With only ~100 ms of speech to
        compare, a person's voice correlates by chance with a voice like the agent's (a Piper
        "Okay." over the same Piper voice: 0.41-0.55) while a clean echo scores 0.96-0.99, so
        the bar here is halfway between `echo_coherence` and 1 (a missed echo only pauses the
        agent until the longer comparison resumes it)."""
        onset_bar = (1.0 + self.rules.echo_coherence) / 2
        if self.rules.pause_on_speech and echo_score < onset_bar:
            return Onset.PAUSE
        return Onset.KEEP_PLAYING

    def wants_words(self, speech_ms: float, words_at_ms: float | None,
                    took_ms: float = 0.0) -> bool:
        """Whether to ask the recognizer for the words now (its last answer was for
        `words_at_ms` of speech, None if never asked, and took `took_ms` to come): not before
        `barge_in_min_ms`, then every `recheck_ms`, and at once when the speech becomes long
        enough to force a barge-in. Past that, every `recheck_ms` or `KEEP_UP` times `took_ms`
        of speech, whichever is longer: speech that long is only kept waiting by being the
        agent's echo, and each ask transcribes the whole overlap again (asked on every frame,
        or every 96 ms of a 5 s echo, the loop fell seconds behind the microphone)."""
        rules = self.rules
        if speech_ms < rules.barge_in_min_ms:
            return False
        if words_at_ms is None or (speech_ms >= rules.barge_in_force_ms > words_at_ms):
            return True
        if speech_ms < rules.barge_in_force_ms:
            return speech_ms - words_at_ms >= rules.recheck_ms
        return speech_ms - words_at_ms >= kept_up_ms(rules.recheck_ms, took_ms)

    def during(self, evidence: OverlapEvidence) -> Judgement:
        """The overlap goes on: barge in now, or wait for more."""
        rules = self.rules
        if evidence.speech_ms < rules.barge_in_min_ms or self.is_echo(evidence):
            return Judgement.WAIT
        if evidence.speech_ms >= rules.barge_in_force_ms:
            return Judgement.BARGE_IN
        if opens_with_interruption(evidence.words, rules.language):
            return Judgement.BARGE_IN
        if len(evidence.words.split()) < rules.barge_in_min_words:
            return Judgement.WAIT
        if evidence.sound is not None and evidence.sound.is_short_voiced_burst():
            return Judgement.WAIT  # still short enough to be a hum the recognizer garbles
        return (Judgement.BARGE_IN if self._verdict(evidence) is Verdict.INTERRUPTION
                else Judgement.WAIT)

    def at_end(self, evidence: OverlapEvidence) -> Outcome:
        """The overlap ended before it was a barge-in: what it was."""
        if not evidence.words.strip():
            return Outcome.DROP
        if self.is_echo(evidence):
            return Outcome.ECHO
        if self._verdict(evidence) is Verdict.INTERRUPTION:
            return Outcome.ANSWER
        return Outcome.BACKCHANNEL

    def is_echo(self, evidence: OverlapEvidence) -> bool:
        """The agent's own voice: by sound (it correlates with what was played) or by words
        (they match, in order, the words played meanwhile). Sound decides a garbled echo ("the
        last orders" heard as "blast or"); words back it up where sound cannot tell."""
        if evidence.echo_score >= self.rules.echo_coherence:
            return True
        return bool(evidence.words.strip()) and self._echo.is_echo(evidence.words,
                                                                    evidence.playing)

    def _verdict(self, evidence: OverlapEvidence) -> Verdict:
        return Verdict(self._classifier.classify(evidence.words, evidence.speech_ms,
                                                 self.rules.language, evidence.sound))
