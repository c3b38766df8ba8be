"""Acoustic echo cancellation: the agent's own voice taken out of the microphone with the exact
samples it played.

A kiosk's loudspeaker and microphone share one box: without this, the microphone hears the
agent as loud as (or louder than) the caller, an interruption over the reply is judged to be the
agent's own voice and the caller's words are lost with it. The agent knows what reached the
device, sample for sample (the speaker's played cursor, the same one heard truth reads): that
stream, laid out at the times it played (`edge_agent.audio.played_reference`), is the
canceller's reference. Everything downstream of the microphone (VAD, recognizer,
backchannel classifier, kept audio) gets the cleaned signal; telling echo by words and by sound
stays as the safety net behind it.

The canceller is WebRTC's audio processing module (AEC3) through `livekit` (Apache-2.0, a wheel
for x86_64 and aarch64): it estimates and tracks the delay between reference and echo itself
(device latency, a restart that moves it, the room's reverberation), in 10 ms frames. Measured
on a 2-core x86 VM with a simulated room (40 ms delay, a decaying random impulse response, soft
clipping): 36-40 dB of echo removed within the first second, 43-54 dB after two, at ~1.5 % of
one core. The microphone's audio comes out 18 ms later than it went in (10 ms of framing, the
rest WebRTC's band-splitting filters).

Where the microphone does not hear the speaker at all (a headset), AEC3 would swallow a caller
who speaks over the agent: `edge_agent.audio.echo_path` finds out whether there is an echo path,
and until there is, the microphone passes through (the same processing with no far end; the
two cost 2-3 % of one core more).

The same module suppresses steady noise (`[audio] noise_suppression`), with or without the echo
canceller; off by default, as measured it does not lower the recognizer's WER (see
`edge_agent.config.NOISE_SUPPRESSION_AUTO`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Protocol

import numpy as np

from edge_agent.audio.device import Microphone, Speaker
from edge_agent.audio.echo_path import EchoPath, EchoPathDetector
from edge_agent.audio.played_reference import PlayedReference
from edge_agent.clock import Clock
from edge_agent.errors import EngineError
from edge_agent.owner import Owner

APM_FRAME_SECONDS = 0.01
"""WebRTC's processing frame: 10 ms."""


class MicrophoneProcessing(Protocol):
    """Cleans what the microphone heard: takes the far end (what played) out of the near end,
    and/or the room's steady noise."""

    engines: dict[str, str]
    """What runs, as a session records it among its engines (e.g. {"echo_cancel":
    "webrtc-aec3"})."""

    def process(self, near: bytes, far: bytes) -> bytes:
        """`near` cleaned (of the echo of `far`, of steady noise; int16 at the microphone's
        rate, `far` the same length); the output lags the input by a fixed few milliseconds."""
        ...


class WebRtcProcessing:
    """WebRTC's audio processing module (livekit's): AEC3 and/or noise suppression, in its
    10 ms frames, with a fixed 10 ms lag: a microphone frame of any size comes out whole, the
    same size, every time. Without echo cancellation the far end is not used.

    With echo cancellation a twin module runs beside the canceller, the same processing fed
    silence as its far end: what the canceller gives when there is nothing to cancel, sample
    for sample at the same lag. Its output is used while the `EchoPathDetector` finds that
    the microphone does not hear the speaker (see edge_agent.audio.echo_path); the switch
    between the two is a crossfade over one frame."""

    def __init__(self, sample_rate: int, echo_cancellation: bool = True,
                 noise_suppression: bool = False) -> None:
        if not (echo_cancellation or noise_suppression):
            raise ValueError("nothing to do: neither echo cancellation nor noise suppression")
        try:
            from livekit.rtc import AudioFrame, AudioProcessingModule
        except ImportError as exc:
            raise EngineError(f"the microphone's processing needs the livekit package ({exc}): "
                              "`pip install livekit` (a wheel for x86_64 and aarch64 Linux), "
                              'or set [audio] echo_cancel = "off" (a headset) and '
                              'noise_suppression = "off"') from None

        def module() -> Any:
            return AudioProcessingModule(echo_cancellation=echo_cancellation,
                                         high_pass_filter=True,
                                         noise_suppression=noise_suppression)

        self._frame_type: Any = AudioFrame
        self._apm = module()
        self._echo_cancellation = echo_cancellation
        self._twin: Any = module() if echo_cancellation else None
        self.echo_path = EchoPathDetector(sample_rate) if echo_cancellation else None
        self.engines = {**({"echo_cancel": "webrtc-aec3"} if echo_cancellation else {}),
                        **({"noise_suppression": "webrtc-ns"} if noise_suppression else {})}
        self.sample_rate = sample_rate
        self._step = int(sample_rate * APM_FRAME_SECONDS)
        self._silence = bytes(2 * self._step)
        self._passing = False  # the twin's output is used
        self._fade_in = np.linspace(0.0, 1.0, self._step, endpoint=False)
        self._near = bytearray()
        self._far = bytearray()
        self._out = bytearray(2 * self._step)  # the fixed lag: one frame of silence first

    def process(self, near: bytes, far: bytes) -> bytes:
        if len(far) != len(near):
            raise ValueError(f"near and far must be the same length, got {len(near)} and "
                             f"{len(far)} bytes")
        self._near.extend(near)
        if self._echo_cancellation:
            self._far.extend(far)
        size = 2 * self._step
        while len(self._near) >= size:
            near_frame = bytes(self._near[:size])
            del self._near[:size]
            if self._echo_cancellation:
                far_frame = bytes(self._far[:size])
                del self._far[:size]
                self._out.extend(self._cancel(near_frame, far_frame))
            else:
                self._out.extend(self._run(self._apm, near_frame))
        out = bytes(self._out[:len(near)])
        del self._out[:len(near)]
        return out

    def _run(self, apm: Any, near: bytes, far: bytes | None = None) -> bytes:
        if far is not None:
            apm.process_reverse_stream(self._frame_type(far, self.sample_rate, 1, self._step))
        stream = self._frame_type(near, self.sample_rate, 1, self._step)
        apm.process_stream(stream)
        return bytes(stream.data)

    def _cancel(self, near: bytes, far: bytes) -> bytes:
        assert self.echo_path is not None
        cleaned = self._run(self._apm, near, far)
        passed = self._run(self._twin, near, self._silence)
        self.echo_path.push(near, far)
        passing = self.echo_path.state is EchoPath.NONE
        if passing == self._passing:
            return passed if passing else cleaned
        self._passing = passing
        old, new = (cleaned, passed) if passing else (passed, cleaned)
        old_samples = np.frombuffer(old, dtype=np.int16).astype(np.float64)
        new_samples = np.frombuffer(new, dtype=np.int16).astype(np.float64)
        mixed = old_samples + (new_samples - old_samples) * self._fade_in
        return bytes(np.round(mixed).astype(np.int16).tobytes())


class ProcessedMicrophone:
    """A microphone whose frames are cleaned: the speaker's echo taken out (with what it
    played as the reference), steady noise suppressed. The cleaning (WebRTC's modules, the
    echo-path detector's spectra) runs on `owner`'s thread, off the loop; the reference is
    taken on the loop, as each frame arrives (when it is taken places it on the clock)."""

    def __init__(self, mic: Microphone, speaker: Speaker, processing: MicrophoneProcessing,
                 clock: Clock, owner: Owner) -> None:
        self._mic = mic
        self.sample_rate = mic.sample_rate
        self.frame_samples = mic.frame_samples
        self._reference = PlayedReference(speaker, mic.sample_rate, clock)
        self._processing = processing
        self._owner = owner

    async def frames(self) -> AsyncIterator[bytes]:
        try:
            async for frame in self._mic.frames():
                far = self._reference.take(len(frame) // 2)
                yield await self._owner.call(self._processing.process, frame, far)
        finally:
            self._owner.close()
