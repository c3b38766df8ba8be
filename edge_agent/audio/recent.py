"""The audio a speaker was given lately, by device frame: what the agent's own voice sounded
like, for telling its echo from a person."""

from __future__ import annotations

from collections import deque


class RecentAudio:
    """Keeps the last `seconds` of written audio as (first frame, samples) runs."""

    def __init__(self, sample_rate: int, seconds: float = 10.0) -> None:
        self._keep = int(seconds * sample_rate)
        self._runs: deque[tuple[int, bytes]] = deque()

    def add(self, frame: int, pcm: bytes) -> None:
        """`pcm` (int16 samples) was written to start at device frame `frame`."""
        self._runs.append((frame, pcm))
        horizon = frame + len(pcm) // 2 - self._keep
        while self._runs and self._runs[0][0] + len(self._runs[0][1]) // 2 < horizon:
            self._runs.popleft()

    def drop_from(self, frame: int) -> None:
        """Frames from `frame` on were never played (dropped at an interrupt); later audio
        reuses their numbers."""
        self._runs = deque((start, pcm[: 2 * max(0, frame - start)])
                           for start, pcm in self._runs if start < frame)

    def get(self, start: int, end: int) -> bytes:
        """The samples of frames [start, end) as far as they are kept; silence elsewhere."""
        out = bytearray(2 * max(0, end - start))
        for frame, pcm in self._runs:
            first, last = max(start, frame), min(end, frame + len(pcm) // 2)
            if first < last:
                out[2 * (first - start):2 * (last - start)] = pcm[2 * (first - frame):
                                                                  2 * (last - frame)]
        return bytes(out)
