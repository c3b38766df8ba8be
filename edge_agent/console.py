"""What each event says to a person: the one labeller of events, for the console (a line as
it happens) and for `inspect`'s page (the markers on its axis)."""

from __future__ import annotations

from dataclasses import dataclass

from edge_agent.events import (
    AudioHealth,
    Backchannel,
    BargeIn,
    CallerSpoke,
    EchoIgnored,
    Event,
    KnowledgeUsed,
    LoggedEvent,
    Notice,
    ReplyFailed,
    SessionEnded,
    SessionStarted,
    SpeculationCancelled,
    TimerChanged,
    ToolUsed,
    TurnDropped,
    UnitFinalized,
    UserTurn,
)
from edge_agent.printable import clip, escape_controls

SPEECH_KINDS = frozenset({"caller", "heard", "said"})
"""Kinds of what was said (the page draws it as speech, not as a marker)."""
CONSOLE_LINE_MAX = 2000
"""A console line, at most, in characters (a reply is bounded by `[llm] max_tokens`; a line is
bounded whatever wrote it, so that the journal never holds a megabyte line)."""
CONSOLE_QUIET = frozenset({"cancelled"})
"""Kinds the console leaves out: a speculation thrown away is the agent's own business, the
caller never meets it (the page shows it)."""


@dataclass(frozen=True)
class Label:
    """What an event says to a person."""

    kind: str
    """"caller", "heard", "said" (speech); "barge-in", "backchannel", "echo", "dropped",
    "tool", "failed", "session", "cancelled", "knowledge", "notice" (the page's markers)."""
    text: str
    """One line; caller and model text as given (the console escapes control characters, the
    page escapes HTML)."""


def describe(entry: LoggedEvent, transcripts: bool = True) -> str | None:
    """One console line for `entry` (None: not shown). Caller and model text is shown with its
    control characters escaped: a transcript never drives the operator's terminal. Without
    `transcripts`, what was said is shown only as a number of words (a public kiosk's log).
    At most `CONSOLE_LINE_MAX` characters, marked as cut past that."""
    found = label(entry.event, transcripts)
    if found is None or found.kind in CONSOLE_QUIET:
        return None
    return clip(escape_controls(f"[{entry.at:6.2f}] {found.text}"), CONSOLE_LINE_MAX)


class _Words:
    """What was said, as itself or as a count of words."""

    def __init__(self, transcripts: bool) -> None:
        self.transcripts = transcripts

    def __call__(self, text: str, quoted: bool = False) -> str:
        if self.transcripts:
            return repr(text) if quoted else text
        return f"({len(text.split())} words)"


def label(event: Event, transcripts: bool = True) -> Label | None:
    """What `event` says (None: nothing worth a line). Without `transcripts`, what was said
    is a number of words."""
    said = _Words(transcripts)
    if isinstance(event, CallerSpoke):
        return Label("caller", f"caller says   : {said(event.text)}")
    if isinstance(event, UserTurn):
        return Label("heard", f"agent heard   : {said(event.text)}")
    if isinstance(event, UnitFinalized):
        f = event.finalize
        if not f.generated:
            return None
        inexact = f" [{f.inexact_words} word(s) timed by safe bounds]" if f.inexact_words else ""
        if not f.interrupted:
            return Label("said", f"agent said    : {said(f.heard)}{inexact}")
        return Label("said", f"agent was cut : {said(f.heard, quoted=True)} heard of "
                             f"{said(f.generated, quoted=True)} ({f.played_ms} ms played)"
                             f"{inexact}")
    return _happening(event, said)


def _happening(event: Event, said: _Words) -> Label | None:
    if isinstance(event, BargeIn):
        on = f" on {said(event.words, quoted=True)}" if event.words else ""
        by = {"touch": " by touch (the screen's stop button)",
              "wake": " by the wake word"}.get(event.by, "")
        return Label("barge-in", f"barge-in{by}{on}: playback stopped")
    if isinstance(event, Backchannel):
        return Label("backchannel", f"backchannel {said(event.text, quoted=True)} "
                                    f"({event.speech_ms} ms): not an interruption, playback "
                                    "goes on")
    if isinstance(event, EchoIgnored):
        return Label("echo", f"own voice heard back as {said(event.text, quoted=True)}: "
                             "ignored")
    if isinstance(event, TurnDropped):
        return Label("dropped", "speech with no words recognized: not answered")
    if isinstance(event, ToolUsed):
        if not said.transcripts:  # arguments and results hold names, phones, times
            return Label("tool", f"tool {event.call.name} called")
        return Label("tool", f"tool {event.call.name}({event.call.arguments}) -> {event.result}")
    if isinstance(event, ReplyFailed):
        # The message may quote the reply or the caller: without transcripts, its type only.
        error = event.error if said.transcripts else event.error.split(":", 1)[0]
        return Label("failed", f"turn {event.turn}: the {event.stage} failed ({error}); "
                               f"{_RECOVERY.get(event.recovery, event.recovery)}")
    if isinstance(event, SessionStarted):
        return Label("session", f"session {event.session} starts ({event.how})")
    if isinstance(event, SessionEnded):
        return Label("session", f"session {event.session} ends (idle)")
    if isinstance(event, SpeculationCancelled):
        return Label("cancelled", f"speculation for turn {event.turn} dropped: {event.reason}")
    if isinstance(event, KnowledgeUsed):
        return _knowledge(event)
    if isinstance(event, TimerChanged):
        late = " (came due while the agent was off)" if event.late else ""
        return Label("timer", f"{event.kind} {event.timer} {event.change}, due {event.due}{late}")
    if isinstance(event, AudioHealth):
        return Label("notice", f"audio: callback threads at {event.scheduling}; so far "
                               f"{event.input_overflows} microphone overflow(s), "
                               f"{event.output_underflows} speaker underrun(s), "
                               f"{event.losses} device loss(es)")
    if isinstance(event, Notice):
        return Label("notice", f"note: {event.text}")
    return None


def _knowledge(event: KnowledgeUsed) -> Label | None:
    """What the venue's knowledge decided (nothing for small talk: the model answers it as
    without knowledge). Entries are named by file and line, never by what they say."""
    entries = ", ".join(event.entries)
    said = {
        "direct": f"said {entries} from the venue's knowledge (score {event.score:.2f}), no model",
        "hours": "said the opening hours, on the clock, no model",
        "fallback": "not in the venue's knowledge: said the fallback line, no model",
        "model": f"the model answers with {entries} from the venue's knowledge",
    }.get(event.how)
    if said is None:
        return None
    return Label("knowledge", f"turn {event.turn}: {said} ({event.lookup_ms:.1f} ms lookup)")


_RECOVERY = {"fallback": "said the fallback line", "retry": "answering again",
             "silent": "nothing more said this turn"}
