"""The echo canceller's far end: what the speaker played, laid out in time as the microphone
captured it.

A microphone frame's reference is the speaker's output while that frame was captured, sample
for sample, silence where nothing played. Taking "whatever played since the last frame" instead
goes wrong exactly when it matters: the loop takes frames late and in bursts (it was busy
transcribing the words that interrupted the last reply), and a reply that starts meanwhile was
cut into ~10 ms pieces of audio between ~22 ms of silence, one per frame of the burst; at a
reply's start the pieces were also short of a frame and padded. Measured in the simulated room
(echo 1.0, delay 40 ms, reverberation 150 ms): the echo of the first half second of replies
after a barge-in came through WebRTC's canceller at up to -17 dBFS (elsewhere under -75), and
the agent paused on it.

So both sides are put on the clock: `CaptureClock` tells when the microphone captured each
frame (frames are delivered as captured; the least late of the recent ones gives the capture
clock), and the played audio is laid out at the times the speaker's cursor says it played (as
one continuous stream with silence between, resampled to the microphone's rate without seams).
Measured over the first 1.5 s of the replies after a barge-in (calls of 2-5 interruptions at
echo 1.0; 100 ms windows): before, 19 of 196 windows over -50 dBFS in 4 calls (worst -17), the
agent paused on its own echo in one call of four; after, none of 266 in 5 calls (worst -53),
no pause.

Playback is not one stretch either: when the next piece of a reply is synthesized late (the
machine busy), the speaker runs dry and the cursor stands still until it comes. The speaker
says when each stretch of back-to-back audio began to play (`Speaker.played_when`), and each
is placed there. Inferring it from the cursor alone ("it played until now") put the audio
after such a gap early by the gap whenever the loop took the next frame late too. Measured
offline (simulated room, echo 1.0, a reply's second piece written 95 or 300 ms after the first
ran out, the loop 0.2 s late; 50 ms windows of the 1.5 s after it): the echo came through at
up to -37 / -24 dBFS before (3 / 4 windows over -50 dBFS), at most -56 / -78 dBFS now (none);
with the loop on time, -55 / -75 either way. The simulated calls' pauses on their own echo
under load came ~1.3 s into a reply: at its second clause.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from edge_agent.audio.device import Speaker
from edge_agent.audio.pcm import StreamResampler, to_pcm
from edge_agent.clock import Clock

MAX_LATE_S = 0.5
"""Every frame of RESTART_S taken this much later than the capture clock says: the microphone
stopped and started again (its samples count on from where they were), and the capture clock
starts again from them."""
RESTART_S = 2.0
"""How long every frame must be late for a restart. A loop stuck for a moment is not one: its
frames come late and bunched, then on time again (measured: 0.6 s stuck while it transcribed
an interruption; taking that for a restart shifted the reference, and the next reply's echo
came through at -28 dBFS)."""
CAPTURE_WINDOW_S = 30.0
"""The capture clock is the least late frame of this long: long enough to hold frames taken on
time, short enough to follow the drift between the microphone's clock and the system's."""
RESYNC_S = 0.002
"""The capture clock holds still until the least late frame departs from it by more than this.
WebRTC's canceller takes a shift of the reference by a fraction of a millisecond as a new echo
path (measured on a recorded call in the room above: shifted by 2, 4 or 8 samples at 16 kHz
between two replies, the next one's echo came through at -54, -49 and -37 dBFS, unshifted -83;
in a call, a 0.4 ms shift let it through at -33). The least late frame moves by that much (the
loop's wake-ups): followed step by step, the reference shifted between replies. The price: a
microphone whose clock drifts against the system's (not measured here; 50 ppm is 2 ms in 40 s)
moves the reference in 2 ms steps."""
REFERENCE_LAG_S = 0.004
"""The reference is laid out this much behind the capture clock: audio played until the moment
a frame is taken must be through the resampler (its look-ahead, 0.7 ms from 22050 Hz), may run
a little behind the clock (up to REALIGN_S), and the capture clock may be up to RESYNC_S ahead
of the least late frame. WebRTC's canceller misses an echo less than ~3 ms after its reference
(measured on a recorded reply, echo at -22 dBFS: shifted to 2 ms after its reference, it came
through at -33 dBFS; at 3 ms and more, -93), so the echo must come 7 ms or more after the
speaker's cursor: a real device's input buffering alone is 10 ms and more; the simulator's
rooms are 10 ms by default (the built-in echo call: 8 ms found between the reference and its
echo, all of it cancelled)."""
REALIGN_S = 0.001
"""While one stretch of playback plays on, its audio follows on without a gap (the device's
times jitter by more than WebRTC forgives); once it is this much behind the time the speaker
says it played (the speaker's clock slower than the system's), it is placed there again."""


def played_stretches(speaker: Speaker, start: int, end: int
                     ) -> list[tuple[int, int, tuple[int, float] | None]]:
    """Played frames [start, end) split where playback stalled, oldest first: (first frame,
    end, `speaker.played_when` of them: the stretch's first frame and when it began to play,
    None where the speaker cannot say)."""
    pieces: list[tuple[int, int, tuple[int, float] | None]] = []
    while end > start:
        when = speaker.played_when(end - 1)
        first = start if when is None else max(when[0], start)
        pieces.append((first, end, when))
        end = first
    return pieces[::-1]


class CaptureClock:
    """When the microphone captured its frames, on the clock. A frame is delivered when its
    last sample is captured, and taken then or later (the loop busy): of the recent frames,
    the least late gives the capture clock (held steady within RESYNC_S)."""

    def __init__(self, sample_rate: int) -> None:
        self._rate = sample_rate
        self._samples = 0
        self._offset: float | None = None
        """Clock time the microphone's first sample began to be captured, as used."""
        self._window = _LeastLate(CAPTURE_WINDOW_S)
        self._recent = _LeastLate(RESTART_S)

    def frame_end(self, samples: int, now: float) -> float:
        """The clock time the microphone captured the last of its next `samples`, taken at
        `now`."""
        self._samples += samples
        offset = now - self._samples / self._rate
        least_late = self._window.add(now, offset)
        recent = self._recent.add(now, offset)
        if self._offset is not None and recent - self._offset > MAX_LATE_S:
            self._window = self._recent.copy(CAPTURE_WINDOW_S)
            least_late = recent
        if self._offset is None or abs(least_late - self._offset) > RESYNC_S:
            self._offset = least_late
        return self._offset + self._samples / self._rate


class _LeastLate:
    """The least of the values added over the last `seconds` (a rising queue: the least in
    front)."""

    def __init__(self, seconds: float) -> None:
        self._seconds = seconds
        self._lows: deque[tuple[float, float]] = deque()

    def add(self, now: float, value: float) -> float:
        while self._lows and self._lows[-1][1] >= value:
            self._lows.pop()
        self._lows.append((now, value))
        while self._lows[0][0] < now - self._seconds:
            self._lows.popleft()
        return self._lows[0][1]

    def copy(self, seconds: float) -> _LeastLate:
        """The same values, kept for `seconds`."""
        other = _LeastLate(seconds)
        other._lows = deque(self._lows)
        return other


class PlayedReference:
    """What the speaker played, as the far end of each microphone frame: the samples that
    played while the frame was captured (resampled to the microphone's rate), silence where
    nothing played. Call `take` once per microphone frame, as the frame is taken."""

    def __init__(self, speaker: Speaker, mic_rate: int, clock: Clock) -> None:
        self._speaker = speaker
        self._clock = clock
        self._rate = speaker.sample_rate
        self._mic_rate = mic_rate
        self._capture = CaptureClock(mic_rate)
        self._resampler = StreamResampler(speaker.sample_rate, mic_rate)
        self._origin = clock.now()
        """Clock time of the stream's first sample."""
        self._cursor = speaker.played_frames()
        self._fed = 0
        """Speaker-rate samples of the stream so far (played audio and silence between)."""
        self._stretch: int | None = None
        """The first frame of the stretch of playback fed last, while it may play on."""
        self._stream = np.zeros(0)
        self._stream_at = 0
        """Microphone-rate sample of the stream (from `_origin`) that `_stream` starts at."""
        self._lag = round(REFERENCE_LAG_S * mic_rate)

    def take(self, samples: int) -> bytes:
        """The far end of the microphone's next `samples` (int16 at its rate)."""
        now = self._clock.now()
        frame_end = self._capture.frame_end(samples, now)
        self._follow_speaker(now)
        end = round((frame_end - self._origin) * self._mic_rate) - self._lag
        return self._window(end - samples, end)

    def _follow_speaker(self, now: float) -> None:
        played = self._speaker.played_frames()
        if played < self._cursor:  # an interrupt dropped frames; later audio reuses them
            self._cursor = played
        clock_end = round((now - self._origin) * self._rate)
        if played <= self._cursor:
            self._stretch = None
            self._feed_silence(clock_end - self._fed)  # nothing plays: silence up to now
            return
        for start, end, stretch, began in self._stretches(played, clock_end):
            if stretch is None or stretch != self._stretch:
                self._feed_silence(began - self._fed)  # a new stretch: at the time it played
            elif began - self._fed > REALIGN_S * self._rate:
                # The same stretch, but its audio has fallen behind the clock (the speaker's
                # clock slower than the system's): placed at the time it plays again.
                self._feed_silence(began - self._fed)
            self._stretch = stretch
            self._feed(np.frombuffer(self._speaker.played_audio(start, end),
                                     dtype=np.int16).astype(np.float64))
        self._cursor = played

    def _stretches(self, played: int, clock_end: int) -> list[tuple[int, int, int | None, int]]:
        """The frames played since the last take, [cursor, played), by stretch, oldest first:
        (first frame, end, the stretch's first frame, where `first frame` began in the
        stream). A stretch the speaker cannot place (not recent) is taken to have played
        until now."""
        pieces: list[tuple[int, int, int | None, int]] = []
        for start, end, when in played_stretches(self._speaker, self._cursor, played):
            if when is None:
                pieces.append((start, end, None, clock_end - (played - start)))
            else:
                stretch, since = when
                began = round((since - self._origin) * self._rate) + start - stretch
                pieces.append((start, end, stretch, began))
        return pieces

    def _feed_silence(self, samples: int) -> None:
        if samples > 0:
            self._feed(np.zeros(samples))

    def _feed(self, samples: np.ndarray) -> None:
        self._fed += len(samples)
        self._stream = np.concatenate([self._stream, self._resampler.push_samples(samples)])

    def _window(self, start: int, end: int) -> bytes:
        """The stream's samples [start, end) at the microphone's rate; silence where the
        stream does not reach (before what is kept, past what played)."""
        out = np.zeros(end - start)
        lo, hi = max(start, self._stream_at), min(end, self._stream_at + len(self._stream))
        if hi > lo:
            out[lo - start:hi - start] = self._stream[lo - self._stream_at:hi - self._stream_at]
        # Nothing before this frame is asked for again.
        drop = min(max(0, end - self._stream_at), len(self._stream))
        self._stream, self._stream_at = self._stream[drop:], self._stream_at + drop
        return to_pcm(out)
