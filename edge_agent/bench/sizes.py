"""How much each benchmark part measures: the full run's sizes (each part's subcommand's
defaults) and `--quick`'s. One place: the plan (`workbench.Plan`, `MemoryPlan`, `RoomsPlan`)
and the command line's defaults and help read them from here, so `bench --quick` and a part's
`--quick` measure the same."""

from __future__ import annotations

from typing import NamedTuple


class Size(NamedTuple):
    """A part's size in the full run and in `--quick`."""

    full: int
    quick: int


HEARD_RUNS = Size(50, 3)
"""Random barge-ins played and recorded (`bench heard --runs`)."""
LATENCY_EXCHANGES = Size(9, 2)
"""Questions asked of the live agent (`bench latency --exchanges`)."""
LATENCY_INTERRUPT_EVERY = Size(3, 2)
"""Every n-th exchange the caller interrupts (else says a backchannel)."""
STT_CLIP_EVERY = Size(1, 8)
"""Every n-th clip of the 96 of the clip set (`--quick`: 12 of them)."""
BACKCHANNEL_CLIP_EVERY = Size(1, 4)
"""Every n-th clip of the backchannel corpus."""
ENGINE_SENTENCES = Size(12, 3)
"""Sentences through the voice and the recognizer alone (`bench engines --sentences`)."""
LLM_PROMPTS = Size(6, 2)
"""Questions to the LLM alone (`bench engines --prompts`)."""
LAN_QUESTIONS = Size(6, 2)
"""Questions asked each way in `bench lan` (the server, the device, refused, silent)."""
MEMORY_TURNS = Size(300, 20)
"""Turns of the synthetic session (`bench memory --turns`)."""
MEMORY_KILLS = Size(5, 0)
"""SIGKILLs of a real agent at random moments of a call (`bench memory --kills`)."""
ROOM_INTERRUPTIONS = Size(5, 2)
"""Interruptions per call at each echo gain (`bench rooms --interruptions`)."""
ROOM_REPLIES = Size(100, 5)
"""Replies of the self-interruption call (`bench rooms --replies`)."""
SCREEN_UNITS = Size(6, 2)
"""Piper units played with 0, 1 and 4 screen pages open (`bench screen --units`)."""
SERVICE_IDLE_S = Size(20, 4)
"""Seconds the idle agent is watched (`bench service --idle`)."""
KNOWLEDGE_VOICES = ("piper-joe", "espeak-us")
"""The callers' voices `bench knowledge` asks its questions in (besides as written)."""
WAKE_ROOM_MINUTES = Size(60, 6)
"""Minutes of room speech without a wake word (`bench wake --minutes`): false wakes per hour."""
