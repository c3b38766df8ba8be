"""Prints a conversation as it happens."""

from __future__ import annotations

from edge_agent.events import (
    Backchannel,
    BargeIn,
    CallerSpoke,
    EchoIgnored,
    LoggedEvent,
    Notice,
    SessionEnded,
    SessionStarted,
    ToolUsed,
    TurnDropped,
    UnitFinalized,
    UserTurn,
)
from edge_agent.printable import escape_controls


def describe(entry: LoggedEvent) -> str | None:
    """One console line for `entry` (None: not shown). Caller and model text is shown with its
    control characters escaped: a transcript never drives the operator's terminal."""
    line = _line(entry)
    return None if line is None else escape_controls(line)


def _line(entry: LoggedEvent) -> str | None:
    event = entry.event
    stamp = f"[{entry.at:6.2f}]"
    if isinstance(event, CallerSpoke):
        return f"{stamp} caller says   : {event.text}"
    if isinstance(event, UserTurn):
        return f"{stamp} agent heard   : {event.text}"
    if isinstance(event, TurnDropped):
        return f"{stamp} (speech with no words recognized; not answered)"
    if isinstance(event, BargeIn):
        return f"{stamp} -- barge-in: playback stopped --"
    if isinstance(event, UnitFinalized):
        f = event.finalize
        if not f.generated:
            return None
        inexact = f" [{f.inexact_words} word(s) timed by safe bounds]" if f.inexact_words else ""
        if not f.interrupted:
            return f"{stamp} agent said    : {f.heard}{inexact}"
        return (f"{stamp} agent was cut : {f.heard!r} heard of {f.generated!r} "
                f"({f.played_ms} ms played){inexact}")
    if isinstance(event, SessionStarted):
        return f"{stamp} -- session {event.session} starts ({event.how}) --"
    if isinstance(event, SessionEnded):
        return f"{stamp} -- session {event.session} ends (idle) --"
    if isinstance(event, Backchannel):
        return f"{stamp} (backchannel {event.text!r}: not an interruption, playback goes on)"
    if isinstance(event, EchoIgnored):
        return f"{stamp} (own voice heard back as {event.text!r}: ignored)"
    if isinstance(event, ToolUsed):
        return f"{stamp} tool          : {event.call.name}({event.call.arguments}) -> {event.result}"
    if isinstance(event, Notice):
        return f"{stamp} note: {event.text}"
    return None
