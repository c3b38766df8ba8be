"""Listening toward the caller and away from the people nearby: an adaptive beamformer.

The fixed designs (`edge_agent.audio.beamformer`) assume the noise is the same from every
direction. In a café it is not: two or three people talk at their tables, each from one
direction. The adaptive beamformer measures where the sound that is *not* the caller comes
from (the spatial covariance of the microphones, per frequency) and redesigns the filters
every 0.1 s as the minimum-variance distortionless (MVDR) beam against it: unchanged toward the
look direction, as little as possible of everything else. With four microphones it can put a
deep notch toward up to three people; their reverberation still comes from everywhere, so in
a real room it gains a few dB over the fixed design, not tens.

What counts as "not the caller": 16 ms frames whose sound does not come from the look
direction. For each frame, the share of its 2-7 kHz energy that a plane wave from the look
direction explains (the microphones' spectra projected on the steering vector; 0 dB for the
caller 0.5 m in front, -5 dB and lower for people 3 m away in a reverberant room), averaged
over 5 frames; frames above `CALLER_MATCH_DB`, and `HOLD_S` on either side of them (the
caller's quiet syllables and reverberant tail), are left out. Low frequencies say nothing
here: at 40 mm across, the board hears a voice from any direction nearly in phase below 1 kHz.
The covariance forgets with a time constant of `MEMORY_S`; until it has seen
`MIN_EVIDENCE_S` of noise, the fixed superdirective design is used. A floor of the diffuse
field (`DIFFUSE_FLOOR`) keeps the design near the superdirective one in a quiet room, and the
diagonal loading (`LOADING`) bounds how much a microphone's own hiss may be amplified.

The echo canceller works on the beamformer's output: the echo path it learns is the
loudspeaker through the current filters. So the filters only change while the agent is
silent (its speaker's cursor has not moved for `ECHO_TAIL_S`), and frames with the agent's
voice in them are not counted as noise: during a reply the path stays put under the
canceller, and the next reply starts with filters that at most changed between replies (the
canceller re-learns that in the first few hundred ms, as at start-up).

Measured offline (`bench rooms`' café: 8 x 6 x 3 m, RT60 400 ms, caller 0.5 m in front of a
ReSpeaker 4-mic HAT, 8 questions; Moonshine on the beamformer's output): with two people 5 dB
down the caller's signal-to-interference ratio went from 5.3 dB (fixed superdirective) to
7.2 dB (adaptive), with the frames told apart by the caller's own timing (an oracle) 7.4-8.2;
10 dB down 10.4 -> 12.1 dB; four people 5 dB down 2.6 -> 3.4 dB; a quiet room unchanged.
Whole calls through the loop (`edge-agent bench rooms`' café, the people nearby beginning at
four different moments): two people 10 dB down, WER 38.0 % with the fixed beam (2.1 to 79.2 %:
their sentences ran on into the first turn) against 15.6 % adaptive; so it is the default
(docs/arrays.md has the whole table).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

import numpy as np

from edge_agent.audio.array import MicArray
from edge_agent.audio.beamformer import (
    FILTER_TAPS,
    FIXED_DESIGNS,
    ArrayBeamformer,
    Beamformer,
    Look,
    design_filters,
    diffuse_coherence,
    distortionless,
    filters_from_weights,
    steering_vectors,
)
from edge_agent.audio.pcm import to_pcm

MATCH_BAND_HZ = (2000.0, 7000.0)
"""Where the look direction's share of a frame is measured: high enough that the board's
microphones hear different phases from different directions."""
MATCH_FRAMES = 5
"""Frames the share is averaged over (40 ms): one frame's share scatters with its syllable."""
CALLER_MATCH_DB = -3.0
"""A frame whose look-direction share is above this is the caller's (measured in the café:
the caller alone -1.2 dB median, the people nearby alone -5.4 dB, frames where they drown the
caller -3.8 dB at the 90th percentile)."""
HOLD_S = 0.2
"""Time on either side of a caller frame that is not counted as noise either."""
LOOK_HOLD_S = 0.4
"""How long after the look direction last explained a frame's sound a piece still counts as
the caller's (`AdaptiveBeamformer.from_the_look`): a phrase's quiet syllables, short pauses and
its reverberant tail come from everywhere. Measured in `bench rooms`' café (4-mic board, two
people 5 dB down, four starts a series, every frame from elsewhere muted): 0.2 s cut the
caller's quiet syllables; 0.4 s 19.3-23.4 % WER over three series; 0.6 s 21.9 % over one."""
MEMORY_S = 1.6
"""Time constant of the noise covariance: long enough for a steady estimate of three people,
short enough to follow one who starts or stops talking."""
MIN_EVIDENCE_S = 0.3
"""Noise heard (in the covariance's memory) before the filters adapt at all."""
UPDATE_S = 0.1
"""How often the filters are redesigned."""
LOADING = 0.001
"""Diagonal loading, relative to the noise's mean power per microphone."""
DIFFUSE_FLOOR = 0.01
"""The diffuse field added to the measured covariance, relative to its power: keeps the
design superdirective where the measured noise is thin."""
ECHO_TAIL_S = 0.5
"""After the speaker's cursor last moved, the room still rings with the agent's voice."""

ADAPTIVE = "adaptive"
BEAMFORMERS = (ADAPTIVE, *FIXED_DESIGNS)
"""What `[audio] beamformer` may be."""

PlayedFrames = Callable[[], int]
"""The speaker's played-frame cursor (`Speaker.played_frames`): when it moves, the agent is
audible."""


def build_beamformer(array: MicArray, rate: int, azimuth_deg: float, elevation_deg: float,
                     kind: str, played_frames: PlayedFrames | None = None) -> ArrayBeamformer:
    """The beamformer `kind` (one of `BEAMFORMERS`) toward (azimuth, elevation).
    `played_frames`: the agent's speaker, which the adaptive one keeps out of its noise (None:
    nothing plays)."""
    if kind == ADAPTIVE:
        return AdaptiveBeamformer(array, rate, azimuth_deg, elevation_deg,
                                  played_frames or (lambda: 0))
    return Beamformer(array, design_filters(array, rate, azimuth_deg, elevation_deg, kind))


class AdaptiveBeamformer:
    """A `Beamformer` whose filters follow the noise field (see the module's docstring): the
    same `process`/`steer` and latency, the filters redesigned as the frames go through."""

    def __init__(self, array: MicArray, rate: int, azimuth_deg: float, elevation_deg: float,
                 played_frames: PlayedFrames) -> None:
        self.array = array
        self._rate = rate
        self._steered = Beamformer(array, design_filters(array, rate, azimuth_deg,
                                                         elevation_deg, "superdirective"))
        self.delay_samples = self._steered.delay_samples
        self._played_frames = played_frames
        self._hop = FILTER_TAPS // 2
        self._window = np.hanning(FILTER_TAPS + 1)[:FILTER_TAPS]
        frequencies = np.fft.rfftfreq(FILTER_TAPS, 1.0 / rate)
        self._steering = steering_vectors(array, frequencies, azimuth_deg, elevation_deg)
        self._band = (frequencies > MATCH_BAND_HZ[0]) & (frequencies < MATCH_BAND_HZ[1])
        self._diffuse = diffuse_coherence(array, frequencies)
        self._pending = np.zeros((0, array.size))
        self._shares: deque[tuple[float, float]] = deque(maxlen=MATCH_FRAMES)
        self._hold = round(HOLD_S * rate / self._hop)
        # The frames of the last 2 x hold + 1, each with "the caller's or the agent's": the
        # middle one is noise when none of them is.
        self._window_frames: deque[tuple[np.ndarray, bool]] = deque()
        self._flagged = 0
        self._covariance = np.zeros((len(frequencies), array.size, array.size), complex)
        self._evidence = 0.0
        self._fresh = 0  # frames of noise since the filters were last designed
        self._forget = self._hop / (MEMORY_S * rate)
        self._needed = 1.0 - (1.0 - self._forget) ** (MIN_EVIDENCE_S * rate / self._hop)
        self._last_played = played_frames()
        self._echo_tail = round(ECHO_TAIL_S * rate)
        self._quiet_samples = self._echo_tail  # nothing has played: the room is its own
        self._since_update = 0
        self._designed: np.ndarray | None = None
        self.adapted = False
        """Whether the filters have left the fixed design."""
        self._look_hold = round(LOOK_HOLD_S * rate)
        self._since_look = self._look_hold + 1
        """Samples since a frame whose sound the look direction explained."""
        self._look: Look | None = None

    @property
    def filters(self) -> np.ndarray:
        """The filters the next piece is steered with."""
        return self._steered.filters

    def from_the_look(self) -> Look | None:
        """Where the last piece steered came from: the caller's (within `LOOK_HOLD_S` of a
        frame the look direction explained), or elsewhere, with or without the agent's voice
        in the room (over it, the caller's share of a frame says less); None before the
        first piece."""
        return self._look

    def process(self, interleaved: bytes) -> bytes:
        """One channel (int16) from a frame of the array's `input_channels`, interleaved."""
        return to_pcm(self.steer(self._steered.microphones(interleaved)))

    def steer(self, mics: np.ndarray) -> np.ndarray:
        """The beamformer's output for the next `mics` (samples x microphones); the frames
        are then weighed as noise and the filters redesigned where it is time. Filters
        designed after the last piece take over only if the agent is still silent now."""
        echo = self._agent_audible(len(mics))
        if self._designed is not None and not echo:
            self._steered.retune(self._designed)
            self.adapted = True
        self._designed = None
        out = self._steered.steer(mics)
        self._analyse(mics, echo)
        self._since_update += len(mics)
        if not echo and self._since_update >= UPDATE_S * self._rate:
            self._since_update = 0
            if self._fresh and self._evidence >= self._needed:
                self._fresh = 0
                self._designed = self._design()
        return out

    def _agent_audible(self, samples: int) -> bool:
        """Whether the agent's voice is in the room: its speaker played within the echo's
        tail (read once per piece, before the piece is steered)."""
        played = self._played_frames()
        if played != self._last_played:
            self._last_played = played
            self._quiet_samples = 0
        else:
            self._quiet_samples += samples
        return self._quiet_samples < self._echo_tail

    def _analyse(self, mics: np.ndarray, echo: bool) -> None:
        """Each new 16 ms frame: is it the caller's (its look-direction share), and the frame
        `HOLD_S` before it into the covariance if nothing within `HOLD_S` of that one was the
        caller's or the agent's voice."""
        self._pending = np.concatenate([self._pending, mics])
        look_heard = self._since_look <= self._look_hold
        while len(self._pending) >= FILTER_TAPS:
            frame = np.fft.rfft(self._pending[:FILTER_TAPS] * self._window[:, None], axis=0)
            self._pending = self._pending[self._hop:]
            self._shares.append(self._look_share(frame))
            along = sum(a for a, _ in self._shares)
            energy = sum(e for _, e in self._shares)
            caller = along > energy * 10 ** (CALLER_MATCH_DB / 10) and energy > 0
            self._since_look = 0 if caller else self._since_look + self._hop
            look_heard = look_heard or self._since_look <= self._look_hold
            flagged = caller or echo
            self._window_frames.append((frame, flagged))
            self._flagged += flagged
            if len(self._window_frames) > 2 * self._hold + 1:
                self._flagged -= self._window_frames.popleft()[1]
            if len(self._window_frames) == 2 * self._hold + 1 and not self._flagged:
                self._add(self._window_frames[self._hold][0])
        self._look = (Look.CALLER if look_heard else
                      Look.ELSEWHERE_OVER_THE_AGENT if echo else Look.ELSEWHERE)

    def _look_share(self, frame: np.ndarray) -> tuple[float, float]:
        """(energy a plane wave from the look direction explains, all energy), in the band."""
        band = frame[self._band]
        along = np.abs(np.sum(band * np.conj(self._steering[self._band]), axis=1)) ** 2
        return float(np.sum(along)) / self.array.size, float(np.sum(np.abs(band) ** 2))

    def _add(self, frame: np.ndarray) -> None:
        outer = frame[:, :, None] * np.conj(frame[:, None, :])
        self._covariance = (1.0 - self._forget) * self._covariance + self._forget * outer
        self._evidence = (1.0 - self._forget) * self._evidence + self._forget
        self._fresh += 1

    def _design(self) -> np.ndarray:
        """MVDR filters against the measured noise, with the diffuse floor and loading."""
        noise = self._covariance / self._evidence
        size = self.array.size
        power = np.maximum(np.real(np.trace(noise, axis1=1, axis2=2)) / size, 1e-9)[:, None, None]
        total = noise + DIFFUSE_FLOOR * power * self._diffuse + LOADING * power * np.eye(size)
        return filters_from_weights(distortionless(total, self._steering))
