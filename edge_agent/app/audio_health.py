"""The live devices' health in the event log: the callback threads' scheduling and the
device's misses (`edge_agent.audio.realtime`), and the devices' losses."""

from __future__ import annotations

from collections.abc import Callable

from edge_agent.audio.realtime import AudioThreads
from edge_agent.events import AudioHealth, EventLog

CHECK_S = 1.0
"""How often the counts are looked at: a reading is a few attribute reads."""


async def report_audio_health(threads: AudioThreads, losses: Callable[[], int],
                              log: EventLog) -> None:
    """Publish `AudioHealth` once the threads' scheduling is known, then whenever a count
    grows, and once more when cancelled if one grew since (the run's last word on it)."""
    last: AudioHealth | None = None

    def report() -> AudioHealth | None:
        state = threads.state()
        scheduling = f"{state.scheduling}; {state.fix}" if state.fix else state.scheduling
        health = AudioHealth(scheduling, state.input_overflows, state.output_underflows,
                             losses())
        if not state.scheduling or health == last:
            return last
        log.publish(health)
        return health

    try:
        while True:
            last = report()
            await log.clock.sleep(CHECK_S)
    finally:
        report()
