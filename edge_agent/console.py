"""Prints a conversation as it happens."""

from __future__ import annotations

from edge_agent.events import (
    Backchannel,
    BargeIn,
    CallerSpoke,
    EchoIgnored,
    LoggedEvent,
    Notice,
    ReplyFailed,
    SessionEnded,
    SessionStarted,
    ToolUsed,
    TurnDropped,
    UnitFinalized,
    UserTurn,
)
from edge_agent.printable import escape_controls


def describe(entry: LoggedEvent, transcripts: bool = True) -> str | None:
    """One console line for `entry` (None: not shown). Caller and model text is shown with its
    control characters escaped: a transcript never drives the operator's terminal. Without
    `transcripts`, what was said is shown only as a number of words (a public kiosk's log)."""
    line = _line(entry, _Words(transcripts))
    return None if line is None else escape_controls(line)


class _Words:
    """What was said, as itself or as a count of words."""

    def __init__(self, transcripts: bool) -> None:
        self.transcripts = transcripts

    def __call__(self, text: str, quoted: bool = False) -> str:
        if self.transcripts:
            return repr(text) if quoted else text
        return f"({len(text.split())} words)"


def _line(entry: LoggedEvent, said: _Words) -> str | None:
    event = entry.event
    stamp = f"[{entry.at:6.2f}]"
    if isinstance(event, CallerSpoke):
        return f"{stamp} caller says   : {said(event.text)}"
    if isinstance(event, UserTurn):
        return f"{stamp} agent heard   : {said(event.text)}"
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
            return f"{stamp} agent said    : {said(f.heard)}{inexact}"
        return (f"{stamp} agent was cut : {said(f.heard, quoted=True)} heard of "
                f"{said(f.generated, quoted=True)} ({f.played_ms} ms played){inexact}")
    if isinstance(event, SessionStarted):
        return f"{stamp} -- session {event.session} starts ({event.how}) --"
    if isinstance(event, SessionEnded):
        return f"{stamp} -- session {event.session} ends (idle) --"
    if isinstance(event, Backchannel):
        return (f"{stamp} (backchannel {said(event.text, quoted=True)}: not an interruption, "
                "playback goes on)")
    if isinstance(event, EchoIgnored):
        return f"{stamp} (own voice heard back as {said(event.text, quoted=True)}: ignored)"
    if isinstance(event, ToolUsed):
        if not said.transcripts:  # arguments and results hold names, phones, times
            return f"{stamp} tool          : {event.call.name} called"
        return f"{stamp} tool          : {event.call.name}({event.call.arguments}) -> {event.result}"
    if isinstance(event, ReplyFailed):
        # The message may quote the reply or the caller: without transcripts, its type only.
        error = event.error if said.transcripts else event.error.split(":", 1)[0]
        return (f"{stamp} note: turn {event.turn}: the {event.stage} failed ({error}); "
                f"{_RECOVERY.get(event.recovery, event.recovery)}")
    if isinstance(event, Notice):
        return f"{stamp} note: {event.text}"
    return None


_RECOVERY = {"fallback": "said the fallback line", "retry": "answering again",
             "silent": "nothing more said this turn"}
