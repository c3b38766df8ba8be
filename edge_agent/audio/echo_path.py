"""Whether the microphone hears the speaker at all: the echo canceller's output is used only
while it may have an echo to take out.

WebRTC's AEC3, until it has found an echo, suppresses the near end whenever the far end plays:
with no echo path (a headset, the PulseAudio test rig) it never finds one, and a caller who
speaks over the agent is swallowed. Measured on synthetic speech, the far end at -20 dBFS and no
echo: a 0.5 s line said 1.0, 1.5 or 5 s into the far end came out 70-74 dB down (41-43 dB with a
-60 dBFS noise floor), i.e. not at all; with no far end it passes at -0.8 dB.

So the canceller keeps running (it is ready the moment an echo path appears), and beside it this
detector looks for the far end in the raw microphone signal: their cross spectrum (the near end
in Hann-windowed 0.25 s blocks against the far end from 20 ms after to 1 s before, 150-3800 Hz)
summed over the last 2 s of far-end activity, each frequency weighed by both sides' power (SCOT:
the sum over it is their coherence), back to lags. A linear echo path, reverberant or softly
clipped, is one peak at its delay; unrelated signals spread over all lags. The statistic is the
peak over the lags' RMS. Measured (far end speech-like at -20 dBFS; rooms of 40 ms delay/150 ms
reverberation/clip 0.5 and 300 ms/600 ms/clip 0.3; two far-end signals):

- an echo (gain 0.1-1.0) alone: 23-36 once it has arrived, 11-32 under -60 dBFS noise; gain 0.3
  under -35 dBFS noise 6-15, the reverberant room the lowest (its tail spreads the peak);
- no echo: digital silence 0; noise at -60 or -35 dBFS 5.2-9.8; a caller as loud as the far end
  talking throughout 6-20, but at a different lag block after block.

Hence an echo path is found at ECHO_FOUND (12) and up with the peak at one delay (within 1 ms)
two blocks in a row, and, to be first found, still over NO_ECHO at that delay with the block
that carries most of it left out. Without that, a caller in the agent's own voice (the same
Piper voice, "Okay." then "Wait, stop." over a reply, no echo path) was taken for an echo at 26
of 240 placements: the likeness lies in the one or two blocks holding the caller's words, and a
block that dominates the sum keeps its peak "steady" for as long as it is summed; the canceller
then swallowed the "Wait, stop.". With it: 0 of 240; a real echo is found as soon as before
alone (0.5 s at 40 ms, 0.75 s at 300 ms), later (up to 2-3.5 s, cleaned meanwhile) while a
caller talks over a weak (gain 0.1) one. A block is evidence of none under NO_ECHO (9), and only
where the microphone is QUIET_NEAR (20 dB) under the far end: that bounds any echo passed
through to -20 dB under the agent whatever the statistic says, and keeps someone talking over
the agent (under whom an echo may hide) from counting as no echo. The state starts UNKNOWN,
where the cleaned signal is used (as it was from the first frame before this detector: the first
reply in a loud room is never heard raw); after NO_ECHO_AFTER_S (0.75 s) of such evidence it is
NONE and the microphone passes through (the same processing with no far end: WebRTC's high-pass
filter, and noise suppression if asked for, at the same lag). An echo found switches to the
cleaned signal at once; it is dropped only after ECHO_GONE_AFTER_S (15 s) of quiet far-end
blocks without it.

Measured through the canceller (tests/test_echo_path.py, the rooms above, 16 kHz):
- echo 0.3 and 1.0: found 0.5-1.0 s into the agent's speech (0 ms of it heard raw: undecided is
  cleaned), up to 2 s (or left undecided) under -35 dBFS noise; never taken for none, with or
  without a caller and noise (gain 0.1, -20 dB, under -45 dBFS noise or louder may be). The
  canceller's output, and so its echo removal (ERLE), is bit for bit what it was. In the demo's
  loud room (tests/test_echo_rooms.py, Piper's voice): found 0.5 s (echo 0.3) and 0.75 s (1.0)
  into the first reply; with echo_gain 0, none after 0.75 s.
- no echo path: none decided 0.75 s into the agent's speech with a silent microphone (the
  PulseAudio rig), 1.0-1.3 s with a -60 to -45 dBFS noise floor (a headset); from the next frame
  on the microphone is what it is with nothing played, bit for bit: a line 1.5 s into the first
  reply comes through at its level (before: 74 dB down). Not covered: noise louder than 20 dB
  under the agent's voice (-35 dBFS) leaves it undecided, as before this detector.
- an echo path that appears later (a headset taken off): cancelled after two blocks, 0.5 s.
- cost: the twin module and this detector (~1 % alone) make the microphone's processing about
  2.5 times as costly: from 1.2-2.1 % to 3.4-5 % of one core (a busy 2-core VM).
"""

from __future__ import annotations

import logging
from collections import deque
from enum import Enum

import numpy as np

log = logging.getLogger("edge_agent")

BLOCK_S = 0.25
"""The near end is compared with the far end in blocks this long."""
MAX_ECHO_DELAY_S = 1.0
"""Longest echo delay looked for: the room's and the devices' (up to 0.5 s) plus how far the
played reference may be off while the loop takes the microphone's frames late
(played_reference.MAX_LATE_S, 0.5 s; before the reference was laid out on the capture clock,
measured in the simulator on a loaded machine, the echo drifted to 500 ms behind it and a 0.5 s
search lost it)."""
EARLY_S = 0.02
"""An echo may arrive this much before its reference (the played cursor a little ahead)."""
BAND_HZ = (150.0, 3800.0)
"""The band compared: where speech has its energy on both sides."""
SUMMED_BLOCKS = 8
"""Far-end blocks summed into one statistic: 2 s."""
ECHO_FOUND = 12.0
"""Peak over RMS at and above which (steady) the microphone hears the speaker."""
STEADY_PEAK_MS = 1.0
"""An echo path is found where two blocks in a row peak this close together."""
NO_ECHO = 9.0
"""Peak over RMS under which a quiet block (QUIET_NEAR) is evidence of no echo path."""
NO_ECHO_AFTER_S = 0.75
"""Far-end activity with no echo found before the microphone passes through."""
ECHO_GONE_AFTER_S = 15.0
"""Far-end activity without the echo before a found echo path is taken as gone."""
HINGE_BLOCKS = 1
"""An echo path is first found only where its peak holds (over NO_ECHO, at the same delay)
with the block that carries most of it left out: a chance likeness must not hinge on it."""
QUIET_NEAR = 0.1
"""A block is evidence of no echo only where the microphone is this much under the far end
(-20 dB, RMS): louder, someone is talking over it (an echo 12 dB under a caller scored 4-7),
or an echo may be there."""
FAR_ACTIVE_RMS = 100.0
"""The far end plays (int16 RMS over a block; -50 dBFS): below, a block says nothing."""


class EchoPath(Enum):
    UNKNOWN = "unknown"
    """Not yet decided: the canceller's output is used."""
    HEARD = "heard"
    """The microphone hears the speaker: the canceller's output is used."""
    NONE = "none"
    """The microphone does not hear the speaker: it passes through."""


class EchoPathDetector:
    """Finds out, from the raw microphone and what played, whether the microphone hears the
    speaker. Fed the same near and far samples as the canceller (int16, equal lengths)."""

    def __init__(self, sample_rate: int) -> None:
        self.sample_rate = sample_rate
        self.state = EchoPath.UNKNOWN
        self.delay_ms: float | None = None
        """The echo's delay behind the reference, when one was found."""
        self._block = int(BLOCK_S * sample_rate)
        self._early = int(EARLY_S * sample_rate)
        self._late = int(MAX_ECHO_DELAY_S * sample_rate)
        far_span = self._block + self._late + self._early
        self._fft_size = 1 << (far_span + self._block).bit_length()
        freqs = np.fft.rfftfreq(self._fft_size, 1 / sample_rate)
        self._band = (freqs > BAND_HZ[0]) & (freqs < BAND_HZ[1])
        self._taper = np.hanning(self._block)
        self._near = np.zeros(self._block + self._early)
        self._far = np.zeros(far_span)
        self._fresh = 0
        self._all = _SummedBlocks()
        self._quiet = _SummedBlocks()  # blocks where the microphone is quieter than the far end
        self._quiet_s = 0.0  # far-end activity since an echo was last found
        self._last_peak_ms: float | None = None

    def push(self, near: bytes, far: bytes) -> None:
        near_samples = np.frombuffer(near, dtype=np.int16).astype(np.float64)
        far_samples = np.frombuffer(far, dtype=np.int16).astype(np.float64)
        at = 0
        while at < len(near_samples):
            take = min(self._block - self._fresh, len(near_samples) - at)
            self._near = np.concatenate([self._near[take:], near_samples[at:at + take]])
            self._far = np.concatenate([self._far[take:], far_samples[at:at + take]])
            self._fresh += take
            at += take
            if self._fresh == self._block:
                self._fresh = 0
                self._judge_block()

    def statistic(self) -> tuple[float, float]:
        """Peak over RMS of the phase transform summed over the last far-end blocks, and the
        peak's delay in ms."""
        return self._score(self._all)

    def _score(self, blocks: _SummedBlocks,
               without: frozenset[int] = frozenset()) -> tuple[float, float]:
        kept = [i for i in range(len(blocks.cross)) if i not in without]
        weights = self._weights(blocks, kept)
        if weights is None:
            return 0.0, 0.0
        summed = np.sum(np.stack([blocks.cross[i] for i in kept]), axis=0)
        correlation = np.fft.irfft(summed * weights, self._fft_size)
        # correlation[k]: near[j] against far[j - k] in the windows; echo delay d is
        # k = d - late (the near block ends `early` before the far window does).
        lags = correlation[np.arange(-self._late - self._early, 1) % self._fft_size]
        peak = int(np.argmax(np.abs(lags)))
        rms = float(np.sqrt(np.mean(lags ** 2)))
        delay_ms = (peak - self._early) * 1000 / self.sample_rate
        return float(np.abs(lags[peak])) / rms, delay_ms

    def _weights(self, blocks: _SummedBlocks, kept: list[int]) -> np.ndarray | None:
        """Each frequency weighed by both sides' power (SCOT): the summed cross spectrum over
        it is their coherence, so bins where the echo is buried in noise count for little.
        None where there is nothing to weigh (no block, or a digitally silent microphone)."""
        if not kept:
            return None
        magnitude = np.sqrt(np.sum(np.stack([blocks.near_power[i] for i in kept]), axis=0)
                            * np.sum(np.stack([blocks.far_power[i] for i in kept]), axis=0))
        floor = 1e-3 * float(np.mean(magnitude[self._band]))
        if floor <= 0:
            return None
        return np.where(self._band, 1.0 / np.maximum(magnitude, floor), 0.0)

    def _spread_over_blocks(self, blocks: _SummedBlocks, delay_ms: float) -> bool:
        """Whether the peak at `delay_ms` holds with the HINGE_BLOCKS block(s) that carry most
        of it left out. An echo is in every block the far end plays in; a chance likeness of a
        caller's voice to the agent's (measured with the same Piper voice on both sides: an
        "Okay." and a "Wait, stop." said over a reply) lies in the one or two blocks that
        hold the caller's words, and dominates the sum, so keeps its peak "steady", for as
        long as they are summed."""
        if len(blocks.cross) <= HINGE_BLOCKS:
            return False
        weights = self._weights(blocks, list(range(len(blocks.cross))))
        if weights is None:
            return False
        # Each block's share of the correlation at that lag: irfft's sum at one index.
        lag = (round(delay_ms * self.sample_rate / 1000) - self._late) % self._fft_size
        bins = np.arange(len(weights))
        basis = np.exp(2j * np.pi * bins * lag / self._fft_size)
        basis[1:-1] *= 2  # the bins an rfft leaves out, as conjugates
        shares = np.real(np.stack(list(blocks.cross)) @ (weights * basis))
        sign = np.sign(np.sum(shares))
        carriers = frozenset(int(i) for i in np.argsort(-sign * shares)[:HINGE_BLOCKS])
        score, delay = self._score(blocks, without=carriers)
        return score >= NO_ECHO and abs(delay - delay_ms) <= STEADY_PEAK_MS

    def _judge_block(self) -> None:
        near = self._near[:self._block]  # the last `early` samples wait for their far end
        aligned_far = self._far[-self._block - self._early:-self._early]
        far_rms = float(np.sqrt(np.mean(aligned_far ** 2)))
        if far_rms < FAR_ACTIVE_RMS:
            return
        near_spectrum = np.fft.rfft(near * self._taper, self._fft_size)
        far_spectrum = np.fft.rfft(self._far, self._fft_size)
        quiet = float(np.sqrt(np.mean(near ** 2))) < QUIET_NEAR * far_rms
        for blocks in (self._all, self._quiet) if quiet else (self._all,):
            blocks.add(near_spectrum, far_spectrum)
        score, delay_ms = self.statistic()
        evidence = self._all
        quiet_score, quiet_delay_ms = self._score(self._quiet)
        if quiet_score > score:
            score, delay_ms, evidence = quiet_score, quiet_delay_ms, self._quiet
        # An echo peaks at the same delay block after block; a chance peak wanders.
        steady = (self._last_peak_ms is not None
                  and abs(delay_ms - self._last_peak_ms) <= STEADY_PEAK_MS)
        self._last_peak_ms = delay_ms if score >= NO_ECHO else None
        if score >= ECHO_FOUND and steady and (self.state is EchoPath.HEARD
                                               or self._spread_over_blocks(evidence, delay_ms)):
            self._quiet_s = 0.0
            self.delay_ms = delay_ms
            if self.state is not EchoPath.HEARD:
                log.info("echo path: the microphone hears the speaker (%.0f ms late): "
                         "cancelling", delay_ms)
                self.state = EchoPath.HEARD
        elif quiet and quiet_score < NO_ECHO:
            self._quiet_s += BLOCK_S
            wait = ECHO_GONE_AFTER_S if self.state is EchoPath.HEARD else NO_ECHO_AFTER_S
            if self.state is not EchoPath.NONE and self._quiet_s >= wait - 1e-9:
                log.info("echo path: none (the microphone does not hear the speaker): "
                         "passing the microphone through")
                self.state = EchoPath.NONE


class _SummedBlocks:
    """The last SUMMED_BLOCKS blocks' cross spectra and both sides' power spectra."""

    def __init__(self) -> None:
        self.cross: deque[np.ndarray] = deque(maxlen=SUMMED_BLOCKS)
        self.near_power: deque[np.ndarray] = deque(maxlen=SUMMED_BLOCKS)
        self.far_power: deque[np.ndarray] = deque(maxlen=SUMMED_BLOCKS)

    def add(self, near: np.ndarray, far: np.ndarray) -> None:
        self.cross.append(near * np.conj(far))
        self.near_power.append(np.abs(near) ** 2)
        self.far_power.append(np.abs(far) ** 2)
