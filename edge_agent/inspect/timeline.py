"""The session record (and its kept audio) turned into what the page draws: `build_timeline`.

Pure: no I/O, no clock. Each run of the session is read on its own, in event order:
- the caller's speech is each UserSpeechStarted..UserSpeechEnded, and what the events up to the
  next speech say became of it (a barge-in, a backchannel, echo, a dropped segment, a turn);
- each unit plays from its PlaybackStarted, held by PlaybackPaused..PlaybackResumed;
- a turn's latency is measured from where the caller's speech really ended (`silence_ms`
  before UserSpeechEnded) to each of its last TurnStage events (a cancelled speculation's
  stages are published again for the turn, and the last ones are what was answered).
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from edge_agent.console import SPEECH_KINDS, label
from edge_agent.events import (
    Backchannel,
    BargeIn,
    EchoIgnored,
    LoggedEvent,
    PlaybackPaused,
    PlaybackResumed,
    PlaybackStarted,
    ReplyFailed,
    ToolUsed,
    TurnDropped,
    TurnStage,
    UnitFinalized,
    UserSpeechEnded,
    UserSpeechStarted,
    UserTurn,
)
from edge_agent.inspect.envelope import envelope, placed
from edge_agent.inspect.model import (
    STAGES,
    CallerSpeech,
    Marker,
    Pause,
    RunView,
    Stage,
    Timeline,
    TurnRow,
    UnitView,
    Wave,
)
from edge_agent.inspect.placement import Playback, place_unit
from edge_agent.memory.kept_audio import AudioClip
from edge_agent.memory.record import SessionRecord, UnitRecord, record_events

_DECIDING: dict[type, str] = {BargeIn: "barge-in", Backchannel: "backchannel",
                              EchoIgnored: "echo", TurnDropped: "dropped"}
_OUTCOMES = (UserTurn, Backchannel, EchoIgnored, TurnDropped)


@dataclass
class _Episode:
    """One unit's playback as the events of a run tell it."""

    run: int
    anchor: int
    """Index of its PlaybackStarted (or, never played, its UnitFinalized) in the run."""
    started: float | None
    finalized: float | None = None
    pauses: list[Pause] = field(default_factory=list)
    paused_at: float | None = None


def build_timeline(record: SessionRecord, clips: Sequence[AudioClip] = ()) -> Timeline:
    runs = _runs(record_events(record))
    episodes = _episodes(runs)
    units: list[list[tuple[_Episode, UnitRecord]]] = [[] for _ in runs]
    orphans: list[UnitRecord] = []
    for unit in record["units"]:
        queue = episodes.get(unit["unit_id"])
        if queue:
            episode = queue.popleft()
            units[episode.run].append((episode, unit))
        else:
            orphans.append(unit)
    views = [_run_view(number, run_id, events, units[number - 1], clips)
             for number, (run_id, events) in enumerate(runs.items(), 1)]
    if orphans:  # events expired (retention) or never recorded: no clock to place them on
        views.append(_untimed_run(len(views) + 1, orphans))
    return Timeline(session_id=record["session_id"], sessions=tuple(record["sessions"]),
                    engines=dict(record["engines"]), runs=tuple(views),
                    audio_kept=any(v.waves for v in views))


def _runs(events: Sequence[LoggedEvent]) -> dict[str, list[LoggedEvent]]:
    """Events per run, runs in the order they first appear (events without a run id, from
    an older record, are one run)."""
    runs: dict[str, list[LoggedEvent]] = {}
    for entry in events:
        runs.setdefault(entry.run_id, []).append(entry)
    return runs


def _episodes(runs: dict[str, list[LoggedEvent]]) -> dict[str, deque[_Episode]]:
    """Every unit playback of every run, per unit id, in order."""
    found: dict[str, deque[_Episode]] = defaultdict(deque)
    for run, events in enumerate(runs.values()):
        open_: dict[str, _Episode] = {}
        for index, entry in enumerate(events):
            event, at = entry.event, entry.at
            if isinstance(event, PlaybackStarted):
                open_[event.unit_id] = episode = _Episode(run, index, at)
                found[event.unit_id].append(episode)
            elif isinstance(event, PlaybackPaused) and event.unit_id in open_:
                open_[event.unit_id].paused_at = at
            elif isinstance(event, PlaybackResumed) and event.unit_id in open_:
                episode = open_[event.unit_id]
                if episode.paused_at is not None:
                    episode.pauses.append(Pause(episode.paused_at, at, resumed=True))
                    episode.paused_at = None
            elif isinstance(event, UnitFinalized):
                unit_id = event.finalize.unit_id
                finished = open_.pop(unit_id, None)
                if finished is None:  # it never played: finalized before its first sample
                    finished = _Episode(run, index, None)
                    found[unit_id].append(finished)
                finished.finalized = at
                if finished.paused_at is not None:
                    finished.pauses.append(Pause(finished.paused_at, at, resumed=False))
        last = events[-1].at if events else 0.0
        for episode in open_.values():  # the run ended while it played (a crash)
            episode.finalized = last
    return found


def _run_view(number: int, run_id: str, events: list[LoggedEvent],
              units: list[tuple[_Episode, UnitRecord]], clips: Sequence[AudioClip]) -> RunView:
    unit_views = [place_unit(unit, episode.started, episode.pauses,
                             episode.finalized if episode.finalized is not None else 0.0)
                  for episode, unit in units]
    caller, turn_index = _caller_speech(events)
    markers = _markers(events)
    rows = _rows(number, events, caller, turn_index,
                 [(episode.anchor, view) for (episode, _), view in zip(units, unit_views,
                                                                        strict=True)],
                 markers)
    waves = _waves(run_id, clips, {v.unit_id: v for v in unit_views})
    times = [e.at for e in events] + [c.start for c in caller] + [
        t for v in unit_views for t in (v.end, *(w.end for w in v.words))]
    times += [p[0] for wave in waves for p in wave.points[-1:]]
    return RunView(number=number, run_id=run_id, start=min([0.0, *times]),
                   end=max([0.0, *times]), caller=tuple(caller), units=tuple(unit_views),
                   markers=tuple(markers), rows=tuple(rows), waves=tuple(waves))


def _caller_speech(events: list[LoggedEvent]) -> tuple[list[CallerSpeech], dict[int, int]]:
    """Each caller speech of the run, and the event index of each answered turn's UserTurn.

    A speech's events run from its UserSpeechStarted to what became of it (a UserTurn, a
    Backchannel, EchoIgnored or TurnDropped); a BargeIn among them is its doing."""
    starts = [i for i, e in enumerate(events) if isinstance(e.event, UserSpeechStarted)]
    said_at = [i for i, e in enumerate(events) if isinstance(e.event, UserTurn)]
    speech: list[CallerSpeech] = []
    turn_index: dict[int, int] = {}
    offset = 0.0  # microphone audio time -> events' clock, from the last end seen
    turns = 0
    ends = [*starts[1:], len(events)] if starts else []
    for number, (first, following) in enumerate(zip(starts, ends, strict=True), 1):
        window = events[first:following]
        outcome = next((i for i, e in enumerate(window) if isinstance(e.event, _OUTCOMES)), None)
        window = window if outcome is None else window[:outcome + 1]
        ended = next((e for e in window if isinstance(e.event, UserSpeechEnded)), None)
        if ended is not None and isinstance(ended.event, UserSpeechEnded):
            offset = ended.at - ended.event.audio_time
        started = window[0]
        audio_time = started.event.audio_time if isinstance(started.event, UserSpeechStarted) \
            else started.at
        onset = min(started.at, max(started.at - 5, audio_time + offset))
        detected = ended.at if ended is not None else window[-1].at
        end = (max(onset, detected - ended.event.silence_ms / 1000)
               if ended is not None and isinstance(ended.event, UserSpeechEnded) else detected)
        why = next((e.event for e in window if type(e.event) in _DECIDING), None)
        said = window[-1].event if isinstance(window[-1].event, UserTurn) else None
        turn = None
        if said is not None:
            index = first + len(window) - 1
            later = next((i for i in said_at if i > index), len(events))
            if _answers(events[first:later], turns + 1):
                turns = turn = turns + 1
                turn_index[turn] = index
        decision = (_DECIDING[type(why)] if why is not None else "answered" if turn is not None
                    else "not answered" if said is not None else "unfinished")
        text = said.text if said is not None else _heard(why)
        speech.append(CallerSpeech(index=number, start=onset, end=end, detected=detected,
                                   decision=decision, text=text, turn=turn, why=why))
    return speech, turn_index


def _heard(why: object) -> str:
    """What the recognizer made of speech that was not a turn."""
    if isinstance(why, Backchannel | EchoIgnored):
        return why.text
    return why.words if isinstance(why, BargeIn) else ""


def _answers(events: list[LoggedEvent], turn: int) -> bool:
    """Whether `events` (a speech, its UserTurn and what followed up to the next UserTurn)
    show turn `turn` answered. A recognized turn is numbered only when it is answered; one
    that only got a speculative transcript was not (no session was open)."""
    return any(
        (isinstance(e.event, ReplyFailed | ToolUsed) and e.event.turn == turn)
        or (isinstance(e.event, TurnStage) and e.event.turn == turn
            and (e.event.stage != "transcript" or not e.event.speculative))
        for e in events)


def _rows(run: int, events: list[LoggedEvent], caller: list[CallerSpeech], turn_index: dict[int, int],
          units: list[tuple[int, UnitView]], markers: list[Marker]) -> list[TurnRow]:
    answered = sorted((index, turn) for turn, index in turn_index.items())
    replies: dict[int, list[str]] = defaultdict(list)  # turn (0: before any) -> unit ids
    for anchor, unit in units:
        turn = next((t for index, t in reversed(answered) if index < anchor), 0)
        replies[turn].append(unit.unit_id)
    happened: dict[int, list[Marker]] = defaultdict(list)  # turn -> its tools and failures
    for marker in markers:
        if isinstance(marker.event, ToolUsed | ReplyFailed):
            happened[marker.event.turn].append(marker)
    rows: list[TurnRow] = []
    if replies.get(0) or happened.get(0):
        rows.append(TurnRow(f"r{run}-greeting", None, "greeting", tuple(replies[0]),
                            tuple(happened[0]), ()))
    for speech in caller:
        turn = speech.turn or 0
        rows.append(TurnRow(
            f"r{run}-c{speech.index}", speech, speech.decision,
            tuple(replies[turn]) if turn else (), tuple(happened[turn]) if turn else (),
            _stages(events, speech) if turn else ()))
    return rows


def _stages(events: list[LoggedEvent], speech: CallerSpeech) -> tuple[Stage, ...]:
    last: dict[str, tuple[float, TurnStage]] = {}
    for entry in events:
        if isinstance(entry.event, TurnStage) and entry.event.turn == speech.turn:
            last[entry.event.stage] = (entry.at, entry.event)
    found = [Stage("turn_end", speech.detected, round((speech.detected - speech.end) * 1000),
                   False)]
    found += [Stage(name, last[name][0], round((last[name][0] - speech.end) * 1000),
                    last[name][1].speculative) for name in STAGES if name in last]
    return tuple(found)


def _markers(events: list[LoggedEvent]) -> list[Marker]:
    found: list[Marker] = []
    for entry in events:
        shown = label(entry.event)
        if shown is not None and shown.kind not in SPEECH_KINDS:
            found.append(Marker(shown.kind, entry.at, shown.text, entry.event))
    return found


def _waves(run_id: str, clips: Sequence[AudioClip], units: dict[str, UnitView]) -> list[Wave]:
    waves: list[Wave] = []
    for clip in clips:
        if clip.run_id != run_id and run_id:
            continue
        points = envelope(clip.pcm, clip.sample_rate)
        unit = units.get(clip.ref) if clip.kind == "agent" else None
        if clip.kind == "agent" and unit is not None and unit.start is not None:
            playback = Playback(unit.start, unit.pauses)  # moved past resumed pauses only
            waves.append(Wave("agent", clip.ref, placed(points, playback.at)))
        elif clip.kind == "caller":
            waves.append(Wave("caller", clip.ref, placed(points, clip.at.__add__)))
    return waves


def _untimed_run(number: int, units: list[UnitRecord]) -> RunView:
    """Units whose events are gone, laid end to end one second apart."""
    views, moment = [], 0.0
    for unit in units:
        view = place_unit(unit, moment, (), moment)
        views.append(view)
        moment = max([view.end, *(w.end for w in view.words)]) + 1.0
    row = TurnRow(f"r{number}-untimed", None, "untimed", tuple(v.unit_id for v in views), (),
                  ())
    return RunView(number=number, run_id="", start=0.0, end=moment, caller=(),
                   units=tuple(views), markers=(), rows=(row,), waves=())
