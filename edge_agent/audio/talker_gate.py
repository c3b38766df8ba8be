"""Keeping other people's voices out: the person at the kiosk is the near talker, and speech
well below their level is someone else in the room.

A kiosk's caller stands within arm's length of the microphone; people talking nearby are a
few metres away, so their voices arrive 10 dB or more lower (and more reverberant). Without a
gate the voice activity detector opens turns on them and the recognizer writes their words
into the caller's transcript: with two talkers 10 dB down, Moonshine's transcripts of a
caller had most of the talkers' sentences in them, and a turn never ended while they talked.

`LevelGate` works frame by frame on what the microphone heard (after echo cancellation),
before the VAD, the recognizer, the backchannel classifier and the kept audio:

- It judges a smoothed level (the frames' power averaged over `smoothing_ms`): a phrase's
  level varies far less than a 32 ms frame's.
- It follows the near talker's level: the upper envelope of that level over the frames it let
  through while the VAD heard speech (a fast rise, a slow fall: one bystander who slips
  through does not teach it their level); and the room's level: a slow average of what is not
  theirs (bystanders, a fan, the canceller's leftovers).
- A level at or above the threshold keeps the gate open, and for `hold_ms` after; a frame with
  the gate closed is attenuated by `depth_db`. The threshold is `margin_db` under the near
  talker but never more than `margin_db` over the room: in a quiet room it mutes nothing of a
  caller's quietest words; with people talking nearby it sits between them and the caller.
  Once the gate was closed `reopen_after_ms`, reopening takes half the margin: between the
  caller's sentences and after their last, the caller speaking on reopens it, a bystander's
  loudest syllable does not. Inside an utterance an open gate closes only a little under the
  threshold (`stay_under_db`, never under `stay_over_room_db` over the room): a phrase's
  falling last words stay in.
- Until a near talker is heard in a session, only `floor_db` applies: the first person to
  speak sets the level. When a nearer talker begins inside an utterance (the near level rises
  by the margin), the loop hears the utterance again from just before them: what came first
  was someone else's. When the session ends the level is forgotten: the next caller may
  speak up or softly.

Measured with the simulator (`[[talker]]` in a call file: two espeak-ng voices each 10 dB
below the caller, together ~7 dB below, through a reverberant room; the agent's Piper voice as
the caller; five questions, 44 words; words wrong, runs differ by a few words with timing):

| `[audio] talker_gate` | quiet room | two talkers 10 dB down |
|---|---|---|
| "off" | 0-1 / 44 | the first turn never ends: 700+ of their words in it |
| "level" | 0 / 44 | 8-11 / 44 (the caller's quieter words: "four people at") |

`bench rooms`' café (the same two talkers, talking before the caller's first question; six
questions a run): 10.6 % WER over six runs (8-14 %); 15.0 % over five (8-22 %) before the open
gate's hysteresis (`stay_under_db`); 78-92 % before the two fixes below, the first turn full of
their sentences.

Two fixes of this round. (1) The room's level was learned from nothing: when the bystanders
opened the session's first utterance, it took ~6 s to climb to theirs, and the room's cap let
them in meanwhile. Now whoever a nearer talker takes an utterance over from sets the room's
level at once (the first utterance's opener is judged `OPENER_S` into it, so the caller's own
rising onset is not taken for someone else); the first turn also ends ~1.7 s sooner. (2) A
bystander's loudest syllable after the caller's last word reopened the gate and ended the
turn with their words (2 runs of 5): after `reopen_after_ms` closed it takes half the margin.
What is left are the caller's own quieter words: masked where the bystanders talk over them
(Moonshine's error rate under 10 dB babble alone is ~25 %), or under the threshold when the
room is within 12 dB of the caller and their phrase dips more than the margin below its peaks.
A gate cannot give those back. (Before both fixes the demo call had 5-9 / 44 wrong; the
first turn then ended late and kept the talkers' words out by luck.)

Round three (7 Dec 2026): when the people nearby begin while the caller's first question is
under way, nothing was heard before them but the silence. The room's level, a dB average, then
climbed from -120 dBFS (digital silence) for ~6.5 s before its cap let the threshold rise off
the floor, and the frames it let through meanwhile taught the near level theirs (-15.5 ->
-21.9 dBFS in `bench rooms`' café, traced), so the first turn ran on with their sentences
(WER over 100 % at some starts). Now the room's level is never taken under the floor less the
margin (under it the cap changes nothing), and only frames within the margin of the near talker
teach its level. `bench rooms`' café, 8 questions, four talker starts, before -> after: 4-mic
adaptive beam, two talkers 10 dB down 14.6 -> 5.7 %, 5 dB down 52.6 -> 24.5 %; one microphone
10 dB down 93.2 -> 41.7 %; quiet room unchanged (0.0 % 4-mic, 2.1 % one microphone). Still
slow: they are kept out ~5 s after they begin (tests/test_talkers.py); one microphone's runs
that go wrong are those.

On the way: without the room's cap the threshold (6 dB under the caller's stressed syllables)
cut their unstressed words in a quiet room (5-8 / 44); at 8 dB it let the talkers' loudest
moments through (20 / 44, turns of their own); per-frame levels let 3 % of their frames
through; handing the recognizer ungated frames until 500 ms of quiet added their words after
the caller's (20-25 / 44).

Off by default for now ([audio] talker_gate = "level" turns it on). An interruption over a
loudspeaker (the PulseAudio rig, echo 6 dB down) had failed with it on twice in two full test
runs; one cause found on 7 Dec 2026 was the agent's own echo split into pieces by the gate
(it is a quieter talker than the caller) while the loop ran seconds behind the microphone: each
undecided overlap asked the recognizer for its words every 96 ms of speech, each answer taking
100-270 ms and holding the loop's next frame (`turn_taking.KEEP_UP` now spaces an echo's asks
by what they cost), so the next piece was compared with words played seconds later and taken for a
barge-in. Measured with the gate on and off (`bench rooms`' café, no one else talking, 8
questions; 8 interruptions at echo 1.0 on each of three seeds, plus traced runs): quiet-room WER
2.1 % either way with one microphone, 0.0 % with the 4-mic beam; every interruption taken either
way (40 of 40 on, 32 of 32 off, one microphone; 24 of 24 each, 4-mic), stop p50 ~210 ms either
way with one microphone, 4-mic +~8 ms (175 vs 167); what the gate costs is the first word of an
interruption a little more often over the agent's voice, where the canceller's double-talk
suppression already takes it (one microphone: stops over 0.7 s 7 of 40 on, 4 of 32 off; words
wrong over the agent 21 vs 18 %). Without it, a turn never ends while people talk nearby.
Turned on by default after that fix, the same PulseAudio test then failed once in four full
runs: the agent cut its reply on its own echo, which came through the canceller ("barge-in on
'I'm fine.'" 2.4 s into the reply). The overlap's echo score had been computed on the gated
frames: the gate cuts a voice near its threshold (the canceller's leftovers) into pieces, and
pieces correlate with what played far less than the whole (one frame in five: ~0.45 of it,
under the 0.5 that tells an echo). It is now computed on the frames as they came
(`conversation.overlap`). Whether that was the failure could not be shown: it did not recur
here in 26 runs of that test with the gate on (10 idle, 10 beside a busy process, 6 with the
echo at full level).

With a microphone array (`BeamformedMicrophone`, the adaptive beam) the gate also hears where
each frame came from: a frame the beam finds did not come from the caller's place (see
`adaptive_beamformer.LOOK_HOLD_S`) is the room's — muted, and its level the room's — except
at the caller's level where the caller may be the one drowned (inside an utterance, and over
the agent's voice): there the level decides. A level gate learns people who begin while the
caller speaks only over seconds; the array knows at once. `bench rooms`' café, 4-mic board,
two people 5 dB down, four starts a series: 26.4 % WER over three series with the level alone,
14.1 % over two with the array's verdict (docs/arrays.md).
`floor_db` is the installer's knob for a kiosk whose callers are always far
louder than its room: between the two (-21 dBFS for the simulator's two talkers), background
speech alone opens no turn at all.

Two voices at one level stay indistinguishable by level (at 5 dB down the gate fails: turns
never end). Tried and not kept, a voiceprint veto: Resemblyzer 0.1.4's GE2E encoder (its
weights read without torch, run in numpy: ~18 ms per 1 s window on one core), a model of the
near talker from windows of frames within 3 dB of their level and one of the room from frames
4-25 dB under it, each window scored by cosine to the first less cosine to the second. In the
café at 5 dB down the scores separated (caller's windows +0.03..+0.20, the room's
-0.26..-0.01), but a veto on frames under the near talker's level cut WER only from ~200 % to
72-89 %, and vetoing every frame while the room was talking cut the caller's onsets (the
verdict comes 0.25-1 s late): 94-108 %. At 10 dB down it gained nothing. A verdict that ends
turns (rather than gating frames) is the next thing to try.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from edge_agent.audio.beamformer import Look

FULL_SCALE = 32768.0
SILENT_DB = -120.0
"""The level of a frame of digital silence (log of zero)."""
RISE = 0.25
"""Share of the way the near level moves toward a louder speech frame (a few frames reach it)."""
FALL = 0.003
"""Share of the way it moves toward a quieter speech frame that passed (~10 % a second): it
follows the near talker's loud syllables, not the valleys between them, and a bystander who
slips through once does not teach the gate their level (at 0.02, two seconds of them did, and
the gate let them in from then on)."""
OPENER_S = 0.3
"""When the first utterance of a session began with nobody known, its opener's level is the
near level this far into it: before, the rise is the levels catching up with the first
syllables (0.3 s leaves the near level within 1 dB of a steady talker's)."""
ROOM_AVERAGE_S = 2.0
"""Time constant of the room's level: the average over the last seconds of what was not the
near talker's (bystanders' talk, a fan, the agent's echo left by the canceller)."""


class TalkerGate(Protocol):
    """Lets the near talker through and keeps quieter talkers out."""

    def admit(self, frame: bytes, speaking: bool) -> bytes:
        """`frame` (int16) as the VAD, the recognizer, the backchannel judgement and the kept
        audio should hear it. `speaking`: whether the VAD currently hears an utterance (its
        frames teach the gate the talker's level)."""
        ...

    def forget(self) -> None:
        """The session ended: the next person at the kiosk may speak at another level."""
        ...

    def took_over(self) -> bool:
        """True once, at the frame where a nearer talker began in the current utterance: what
        it held before was someone else's (the loop hears the utterance again from there)."""
        ...


@dataclass(frozen=True)
class GateSettings:
    floor_db: float
    """Levels under this (dBFS) never open the gate: the quietest a person at the kiosk
    speaks ([audio] talker_floor_db)."""
    margin_db: float
    """How far under the near talker's level (and over the room's, at most) speech still
    opens the gate ([audio] talker_margin_db)."""
    smoothing_ms: float = 190.0
    """Time constant of the level the gate judges (an average of the frames' power): a
    phrase's level varies far less than a frame's. Measured with two talkers 10 dB down
    (together ~7 dB under the caller): against the near talker's level minus 6 dB, 3.2 % of
    their 32 ms frames reach it frame by frame, none smoothed over 190 ms; and 52 % of the
    caller's speech frames fall below it frame by frame, 16 % smoothed."""
    hold_ms: float = 150.0
    """How long the gate stays open after a frame opened it: a phrase's quiet sounds and
    short pauses pass whole."""
    depth_db: float = 40.0
    """How much a frame with the gate closed is attenuated."""
    reopen_after_ms: float = 400.0
    """After the gate was closed this long (the near talker paused or finished), speech must
    come within `reopen_margin_share` of the margin of the near talker to open it again."""
    reopen_margin_share: float = 0.5
    """The share of `margin_db` that reopens the gate after `reopen_after_ms` closed (3 dB of
    the default 6): a bystander's loudest syllable between two of the caller's sentences, or
    after the caller's last, no longer passes (at 10 dB down it added their words to the end
    of the caller's turn in 2 runs of 5; 0 of 12 with it), while a caller who goes on speaks at
    their own level. Capped by the room like the margin, so a quiet room is unaffected."""
    stay_under_db: float = 2.0
    """Inside an utterance the open gate closes only this far under the threshold..."""
    stay_over_room_db: float = 4.0
    """...and never lower than this over the room's level. A phrase's last words fall: "for
    two tonight" came 8 dB under the caller's stressed syllables, 4 dB over the room of two
    talkers 10 dB down, and the gate cut it off ("…a table for." in 3 runs of 5). `bench
    rooms`' café, six questions a run: 15.0 % WER over five runs without this hysteresis, 10.6 %
    over six with it (the phrase's end reached the recognizer in all six, though "tonight" is
    still misheard under the talkers). Closing at 3 dB over the room let the talkers' syllables
    in between the caller's words (14-19 %)."""


def frame_power(frame: bytes) -> float:
    """Mean square of int16 `frame`'s samples (0.0 for an empty frame)."""
    samples = np.frombuffer(frame, dtype=np.int16).astype(np.float64)
    return float(np.mean(samples * samples)) if len(samples) else 0.0


def level_db(power: float) -> float:
    """`power` (int16 scale squared) in dBFS."""
    return 10 * math.log10(power / FULL_SCALE ** 2) if power > 0 else SILENT_DB


class LevelGate:
    """The near talker by level: see the module's docstring."""

    def __init__(self, settings: GateSettings, sample_rate: int,
                 from_the_look: Callable[[], Look | None] | None = None) -> None:
        """`from_the_look`: where a microphone array tells it, whether the frame just heard
        came from the caller's place (`BeamformedMicrophone.from_the_look`; None: not known)."""
        self._settings = settings
        self._from_the_look = from_the_look
        self._hold_samples = round(settings.hold_ms * sample_rate / 1000)
        self._sample_rate = sample_rate
        self._power: float | None = None
        """The smoothed power, int16 scale squared; None before the first frame."""
        self._attenuation = 10 ** (-settings.depth_db / 20)
        self.near_level_db: float | None = None
        """The near talker's level (dBFS); None until someone spoke in this session."""
        self._quiet_for = self._hold_samples + 1
        """Samples since the last frame at or above the threshold."""
        self._reopen_samples = round(settings.reopen_after_ms * sample_rate / 1000)
        self._utterance_samples = 0
        """Samples since the VAD's current utterance (or pause) began."""
        self._opener_samples = round(OPENER_S * sample_rate)
        self._started_at_db: float | None = None
        """The near level when the current utterance began (None: not in one, or nobody
        known yet when it began)."""
        self._speaking = False
        self._taken_over = False
        self.room_level_db: float | None = None
        """The room's level without the near talker (a slow average of the smoothed level of
        what is not theirs); None before it was heard."""
        self._room_share = 1 - math.exp(-1 / (ROOM_AVERAGE_S * sample_rate))
        """Per sample: how far the room's level moves toward the level heard."""
        self._lowest_room_db = settings.floor_db - settings.margin_db
        """The room's level is never taken lower: under it, its cap (the room + the margin)
        would be under the floor, which holds anyway. Learned from digital silence (a muted
        input, a device that starts with zeros, the simulator) it began at -120 dBFS, 60 dB
        under any room, and took ~6.5 s to climb (a dB average) to people who began talking
        as the caller spoke; from here ~5 s (tests/test_talkers.py)."""

    @property
    def threshold_db(self) -> float:
        """The level a frame needs to open the gate now: `margin_db` under the near talker,
        but never more than `margin_db` over the room (a quiet room mutes nothing of the
        caller's quietest words), and never under the floor."""
        return self._threshold_db(self._settings.margin_db)

    def _needed_db(self, speaking: bool) -> float:
        """The level this frame needs to keep or open the gate: the threshold; with the near
        talker's part at `reopen_margin_share` of the margin once the gate was closed
        `reopen_after_ms` (the room's cap stays the same); and, while open inside an
        utterance, down to `stay_under_db` under the threshold yet `stay_over_room_db` over the
        room (hysteresis: once closed, the threshold opens it again)."""
        settings = self._settings
        if self._quiet_for > self._reopen_samples:
            return self._threshold_db(settings.margin_db * settings.reopen_margin_share)
        threshold = self.threshold_db
        if not speaking or self._quiet_for > 0 or self.near_level_db is None:
            return threshold
        staying = threshold - settings.stay_under_db
        if self.room_level_db is not None:
            staying = max(staying, self.room_level_db + settings.stay_over_room_db)
        return min(threshold, max(staying, settings.floor_db))

    def _threshold_db(self, under_near_db: float) -> float:
        """`under_near_db` under the near talker, at most `margin_db` over the room, at least
        the floor (only the floor while nobody is known)."""
        floor = self._settings.floor_db
        if self.near_level_db is None:
            return floor
        threshold = self.near_level_db - under_near_db
        if self.room_level_db is not None:
            threshold = min(threshold, self.room_level_db + self._settings.margin_db)
        return max(floor, threshold)

    def admit(self, frame: bytes, speaking: bool) -> bytes:
        if speaking != self._speaking:
            self._speaking = speaking
            self._started_at_db = self.near_level_db if speaking else None
            self._utterance_samples = 0
        self._utterance_samples += len(frame) // 2
        level = self._smoothed_level(frame)
        if self._from_elsewhere(level, speaking):
            # The array heard it come from elsewhere: the room's. Through the beam people
            # nearby are only 5-10 dB under the caller, and the room's level learns that over
            # seconds, while their sentences ran on into the caller's turn.
            self._hear_room(level, len(frame) // 2)
            self._quiet_for += len(frame) // 2
            return self._muted(frame)
        of_the_room = self._of_the_room(level, speaking)
        if of_the_room:
            self._hear_room(level, len(frame) // 2)
        if level >= self._needed_db(speaking):
            self._quiet_for = 0
            if speaking:
                # A frame of the room that passed (by the room's cap: a quiet word in a quiet
                # room; or the open gate's hysteresis) is not the near talker's level: people
                # nearby let through while the room's level caught up with them taught it
                # theirs (-15.5 -> -21.9 dBFS in 7 s in `bench rooms`' café) and so kept
                # themselves in.
                if not of_the_room:
                    self._learn(level)
                self._note_takeover()
        else:
            self._quiet_for += len(frame) // 2
        if self._quiet_for <= self._hold_samples:
            return frame
        return self._muted(frame)

    def _muted(self, frame: bytes) -> bytes:
        quieter = np.frombuffer(frame, dtype=np.int16) * self._attenuation
        return bytes(np.round(quieter).astype(np.int16).tobytes())

    def _from_elsewhere(self, level: float, speaking: bool) -> bool:
        """Whether the array places this frame away from the caller and it is not at the
        caller's level (within the margin of the near talker) where the caller may be
        drowned: inside an utterance (people nearby talking over the caller's words placed
        "Is there parking | near the restaurant" elsewhere for longer than a turn's end, and
        the question came as two turns) and over the agent's voice (an interruption's first
        syllables: muting every frame placed elsewhere there lost them, stops of 0.8 s)."""
        look = self._from_the_look() if self._from_the_look is not None else None
        if look not in (Look.ELSEWHERE, Look.ELSEWHERE_OVER_THE_AGENT):
            return False
        may_be_drowned = speaking or look is Look.ELSEWHERE_OVER_THE_AGENT
        return not (may_be_drowned and self.near_level_db is not None
                    and level >= self.near_level_db - self._settings.margin_db)

    def forget(self) -> None:
        self.near_level_db = None

    def took_over(self) -> bool:
        taken, self._taken_over = self._taken_over, False
        return taken

    def _of_the_room(self, level: float, speaking: bool) -> bool:
        """Whether a frame is the room's: outside utterances while nobody is known, else
        anything well under the near talker (their quietest words count too, briefly: a dB
        average over seconds barely moves for them). Only frames that are not the room's teach
        the near talker's level."""
        if self.near_level_db is None:
            return not speaking
        return level < self.near_level_db - self._settings.margin_db

    def _hear_room(self, level: float, samples: int) -> None:
        room = self.room_level_db
        if room is not None:
            level = room + (1 - (1 - self._room_share) ** samples) * (level - room)
        self.room_level_db = max(level, self._lowest_room_db)

    def _note_takeover(self) -> None:
        """A nearer talker: the near level rose by the margin within one utterance (the first
        one of a session starts from its level `OPENER_S` into it)."""
        assert self.near_level_db is not None
        if self._started_at_db is None:
            if self._utterance_samples >= self._opener_samples:
                self._started_at_db = self.near_level_db
        elif self.near_level_db - self._started_at_db >= self._settings.margin_db:
            self._taken_over = True
            # Someone else opened the utterance: the room is at least as loud as they were
            # (learned from nothing, it takes seconds, and lets them in meanwhile).
            room = SILENT_DB if self.room_level_db is None else self.room_level_db
            self.room_level_db = max(room, self._started_at_db)
            self._started_at_db = self.near_level_db

    def _smoothed_level(self, frame: bytes) -> float:
        power = frame_power(frame)
        if self._power is None:
            self._power = power
        else:
            seconds = len(frame) / 2 / self._sample_rate
            share = 1 - math.exp(-seconds * 1000 / self._settings.smoothing_ms)
            self._power += share * (power - self._power)
        return level_db(self._power)

    def _learn(self, level: float) -> None:
        near = self.near_level_db
        if near is None:
            self.near_level_db = level
            return
        step = RISE if level > near else FALL
        self.near_level_db = near + step * (level - near)
