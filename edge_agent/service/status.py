"""What the agent is doing, in the words systemd shows (`systemctl status edge-agent`: the
STATUS= line), derived from the conversation's events."""

from __future__ import annotations

from edge_agent.events import (
    BargeIn,
    Event,
    PlaybackStarted,
    SessionEnded,
    SessionStarted,
    TurnDropped,
    UnitFinalized,
    UserSpeechStarted,
    UserTurn,
)

LISTENING = "listening"


def status_after(event: Event) -> str | None:
    """The status `event` leads to; None when it changes nothing."""
    if isinstance(event, UserSpeechStarted):
        return "hearing a caller"
    if isinstance(event, UserTurn):
        return "answering"
    if isinstance(event, PlaybackStarted):
        return "speaking"
    if isinstance(event, UnitFinalized | TurnDropped | SessionStarted | BargeIn):
        return LISTENING
    if isinstance(event, SessionEnded):
        return "waiting for a caller"
    return None


def device_status(device: str, state: str) -> str:
    """The status while `device` ("microphone", "speaker") is in `state` ("lost", "waiting",
    "back")."""
    return LISTENING if state == "back" else f"waiting for the {device}"
