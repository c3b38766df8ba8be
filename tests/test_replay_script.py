"""`sessions replay`: the recorded session read back as a script (no models): the timeline and
its frame grid, where each caller segment goes (placement rules), what the agent says again,
the recorded tools, the recorded voice timings, and the devices that keep the frames."""

from __future__ import annotations

import asyncio

import pytest

from edge_agent.audio.pcm import silence
from edge_agent.clock import VirtualClock
from edge_agent.engines.base import ToolCall
from edge_agent.engines.llm.scripted import ScriptedToolReply
from edge_agent.events import (
    BargeIn,
    CommandAnswered,
    Event,
    EventLog,
    KnowledgeUsed,
    LoggedEvent,
    PlaybackPaused,
    PlaybackStarted,
    SessionStarted,
    TimerChanged,
    ToolUsed,
    UnitFinalized,
    UserSpeechEnded,
    UserSpeechStarted,
    UserTurn,
)
from edge_agent.memory.record import LlmRequestRecord
from edge_agent.replay.agent_script import ToolResult, agent_script, recorded_toolbox
from edge_agent.replay.devices import AlignedSpeaker, ReplayCaller, UnitStart, unit_starts
from edge_agent.replay.placement import (
    CallerSegment,
    Cue,
    ReplayLine,
    line_record,
    place_lines,
)
from edge_agent.replay.timeline import FRAME_SECONDS as F
from edge_agent.replay.timeline import build_timeline
from edge_agent.replay.voice import RecordedSpeech, RecordedUnit, RecordedWord
from tests.fakes import FakeSpeech
from tests.logged import finalized, shifted


def ev(event: Event, at: float, run: str = "r1") -> LoggedEvent:
    return LoggedEvent(at, event, run)


def final(unit_id: str, generated: str, heard: str | None = None, at: float = 0.0,
          run: str = "r1") -> LoggedEvent:
    return ev(finalized(unit_id, generated, heard), at, run)


def _cue(event: str, count: int, after: float, unit: str) -> tuple[object, ...]:
    return (event, count, pytest.approx(after), unit)


def cue_of(line: ReplayLine) -> tuple[object, ...] | None:
    cue = line.cue
    return None if cue is None else (cue.event, cue.count, cue.after, cue.unit)


def segment(start: float, onset: float | None = None, frames: int = 10,
            text: str = "hi") -> CallerSegment:
    return CallerSegment(text, silence(512 * frames), 16000, start,
                         start + 0.1 if onset is None else onset, "call line")


# -- the timeline ------------------------------------------------------------------------------

def test_the_microphone_start_is_read_off_the_speech_events_and_runs_follow_each_other() -> None:
    events = [
        ev(SessionStarted(session=1, how="start-up"), 0.02),
        ev(UserSpeechStarted(audio_time=0.576), 0.6935),     # 96 ms (3 frames) later
        ev(UserSpeechEnded(audio_time=2.0), 2.0209),         # the loop 0.6 ms late
        ev(UserSpeechEnded(audio_time=5.024), 5.0450),       # 1.0 ms late
        ev(UserSpeechStarted(audio_time=0.384), 0.5, run="r2"),
        ev(UserSpeechEnded(audio_time=1.28), 1.3, run="r2"),
    ]
    timeline = build_timeline(events, onset_frames=9)
    first, second = timeline.runs
    assert first.mic_start == pytest.approx(0.0209) and first.pinned
    assert timeline.onset_frames == 3  # as the record shows, not as configured
    # On the replay's timeline the microphone starts at 0: frames end at multiples of F.
    assert timeline.events[2].t == pytest.approx(2.0)
    assert timeline.events[1].t == pytest.approx(0.576 + 3 * F, abs=1e-3)
    # The second run (a restart) follows the first after a gap, on a frame boundary.
    assert second.base > 5.0 and (second.base / F) == pytest.approx(round(second.base / F))
    assert second.to_replay(1.3) == pytest.approx(second.base + 1.28)


def test_a_run_whose_session_opened_days_after_its_start_replays_from_just_before_it() -> None:
    days = 3 * 24 * 3600  # a service that ran three days before someone came
    near = [ev(SessionStarted(session=1, how="speech"), 0.02),
            ev(UserSpeechStarted(audio_time=0.576), 0.6935),
            ev(UserSpeechEnded(audio_time=2.0), 2.0209)]
    far = [LoggedEvent(entry.at + days, shifted(entry.event, days), entry.run_id)
           for entry in near]
    timeline = build_timeline(far, onset_frames=3)
    run = timeline.runs[0]
    assert run.skipped > days - 3 and (run.skipped / F) == pytest.approx(round(run.skipped / F))
    assert timeline.end < 5  # not three days of frames to step through
    # Every moment keeps its place in its frame, as in the run that started just before.
    same = build_timeline(near, onset_frames=3)
    for moved, kept in zip(timeline.events, same.events, strict=True):
        assert ((moved.t - kept.t) / F) == pytest.approx(round((moved.t - kept.t) / F), abs=1e-6)
    onset = run.audio_to_replay(days + 0.576)
    assert onset == pytest.approx(timeline.events[1].t - 3 * F, abs=1e-3)


def test_a_run_without_speech_is_not_pinned() -> None:
    timeline = build_timeline([ev(SessionStarted(session=1, how="start-up"), 0.02),
                               ev(PlaybackStarted(unit_id="u1"), 0.1)], onset_frames=3)
    assert not timeline.runs[0].pinned and timeline.runs[0].mic_start == 0.0


# -- placement ---------------------------------------------------------------------------------

def _call_events() -> list[LoggedEvent]:
    return [
        ev(UserSpeechEnded(audio_time=0.0), 0.0),  # pins the microphone at 0
        ev(PlaybackStarted(unit_id="u1"), 1.0), final("u1", "Hello.", at=3.0),
        ev(PlaybackStarted(unit_id="u2"), 4.0), final("u2", "We open at nine.", at=6.0),
        final("u3", "", at=7.0),  # an empty unit: nobody waits for it
        ev(PlaybackStarted(unit_id="u4"), 8.0), final("u4", "Bye.", at=8.5),
        ev(PlaybackStarted(unit_id="u5"), 8.6), final("u5", "Really bye.", at=9.5),
    ]


def test_each_segment_is_placed_relative_to_what_the_agent_did() -> None:
    timeline = build_timeline(_call_events(), 3)
    before = segment(0.2, frames=5)             # nothing happened yet: at its time
    answer = segment(3.2, frames=20)            # u1 finished since: after it, 0.2 s later
    cut_in = segment(4.512, frames=5)           # over u2: 0.512 s after u2 started
    again = segment(5.024, frames=5)            # over u2 again: u2 started before `cut_in`
    late = segment(7.5, frames=5)               # u3 said nothing, u2 is the cue
    after_two = segment(9.7, frames=5)          # u4 and u5 finished since: the 2nd
    lines = place_lines([after_two, late, again, cut_in, answer, before], timeline)
    assert [line.segment for line in lines] == [before, answer, cut_in, again, late, after_two]
    cues = [cue_of(line) for line in lines]
    assert cues[0] is None
    assert cues[1] == _cue(UnitFinalized, 1, 0.2, "u1")
    assert cues[2] == _cue(PlaybackStarted, 1, 0.512, "u2")
    assert cues[3] == _cue(PlaybackStarted, 0, 1.024, "u2")
    assert cues[4] == _cue(UnitFinalized, 1, 1.5, "u2")
    assert cues[5] == _cue(UnitFinalized, 2, 0.2, "u5")
    shown = line_record(lines[2])
    assert shown["barge_in_after"] == pytest.approx(0.512) and not shown["after_agent_done"]
    assert shown["at"] is None and shown["cue_unit"] == "u2" and shown["cue_count"] == 1
    assert line_record(lines[0])["at"] == pytest.approx(0.2)


def test_a_segment_counts_cues_from_the_start_of_the_previous_one() -> None:
    # The previous segment's turn ended late in the recording (its recognizer was slow): the
    # reply began before the segment's audio was over. It still counts as the next cue.
    events = [ev(UserSpeechEnded(audio_time=0.0), 0.0),
              ev(PlaybackStarted(unit_id="u1"), 2.0), final("u1", "Yes, at nine.", at=4.0)]
    question = segment(0.5, frames=50)          # ends at 2.1 s, after u1 started
    overlap = segment(2.5, frames=5)
    lines = place_lines([question, overlap], build_timeline(events, 3))
    assert cue_of(lines[1]) == _cue(PlaybackStarted, 1, 0.5, "u1")


def test_a_restart_is_never_a_cue() -> None:
    events = [ev(UserSpeechEnded(audio_time=0.0), 0.0),
              ev(PlaybackStarted(unit_id="u1"), 1.0), final("u1", "Hello.", at=2.0),
              ev(UserSpeechEnded(audio_time=1.0), 1.0, run="r2")]
    timeline = build_timeline(events, 3)
    base = timeline.runs[1].base
    lines = place_lines([segment(base + 0.5)], timeline)
    assert lines[0].cue is None  # not "after u1 finished", which was before the restart


# -- what the agent says again ---------------------------------------------------------------

def _requests(*turns: tuple[int, int]) -> list[LlmRequestRecord]:
    return [{"turn": turn, "hop": hop, "messages": []} for turn, hop in turns]


BOOKED = "booked: B1"


def _booking_events(say_before_tool: bool) -> list[LoggedEvent]:
    units = ([ev(PlaybackStarted(unit_id="u2"), 3.0), final("u2", "Let me book that.", at=4)]
             if say_before_tool else [])
    last = "u3" if say_before_tool else "u2"
    return [
        ev(SessionStarted(session=1, how="start-up"), 0.0),
        ev(PlaybackStarted(unit_id="u1"), 0.1), final("u1", "Hi, Luigi's.", at=1.0),
        ev(UserTurn(text="A table for four at seven.", words=()), 2.0),
        *units,
        ev(ToolUsed(turn=1, call=ToolCall("c1", "book_table", '{"people": 4}'), result=BOOKED),
           3.5),
        ev(PlaybackStarted(unit_id=last), 4.1), final(last, "Done, see you at seven.", at=6),
        ev(UserTurn(text="Thanks.", words=()), 7.0),
        # stopped by the next user turn before it played: still the reply to "Thanks."
        ev(UserTurn(text="Bye.", words=()), 7.5), final("u9", "You're welcome and", heard="", at=7.5),
        ev(PlaybackStarted(unit_id="u10"), 8.0), final("u10", "Goodbye!", at=9.0),
    ]


@pytest.mark.parametrize("say_before_tool", [True, False])
def test_each_request_gets_what_the_recorded_model_generated(say_before_tool: bool) -> None:
    timeline = build_timeline(_booking_events(say_before_tool), 3)
    script = agent_script(_requests((1, 1), (1, 2), (2, 1), (3, 1)), timeline)
    assert script.session_start == "immediate" and script.greeting == "Hi, Luigi's."
    said = "Let me book that." if say_before_tool else ""
    assert script.replies == (ScriptedToolReply("book_table", '{"people": 4}', said),
                              "Done, see you at seven.", "You're welcome and", "Goodbye!")
    assert script.tool_results == (ToolResult("book_table", '{"people": 4}', BOOKED),)
    assert script.notes == ()


def test_a_session_opened_by_speech_has_no_greeting_and_runs_number_turns_anew() -> None:
    events = [
        ev(UserTurn(text="Hello?", words=()), 1.0), ev(SessionStarted(session=1, how="speech"), 1.0),
        ev(PlaybackStarted(unit_id="u1"), 1.5), final("u1", "Hi there.", at=2.0),
        ev(SessionStarted(session=1, how="resumed"), 0.1, run="r2"),
        ev(UserTurn(text="Still there?", words=()), 1.0, run="r2"),
        ev(PlaybackStarted(unit_id="u2"), 1.5, run="r2"), final("u2", "Yes.", at=2.0, run="r2"),
    ]
    script = agent_script(_requests((1, 1), (1, 1)), build_timeline(events, 3))
    assert script.session_start == "speech" and script.greeting == ""
    assert script.replies == ("Hi there.", "Yes.")


@pytest.mark.parametrize(("greeted", "start"), [(True, "immediate"), (False, "speech")])
def test_a_session_the_wake_word_model_opened_replays_from_its_start(greeted: bool,
                                                                     start: str) -> None:
    greeting = [ev(PlaybackStarted(unit_id="u0"), 1.1), final("u0", "Yes?", at=1.5)]
    events = [ev(SessionStarted(session=1, how="wake"), 1.0), *(greeting if greeted else []),
              ev(UserTurn(text="What time is it?", words=()), 3.0),
              ev(PlaybackStarted(unit_id="u1"), 3.5), final("u1", "Ten past nine.", at=4.0)]
    script = agent_script(_requests((1, 1)), build_timeline(events, 3))
    assert script.session_start == start
    assert script.greeting == ("Yes?" if greeted else "")
    assert script.replies == ("Ten past nine.",)
    assert "opened by the wake word model" in script.notes[-1]


def test_a_session_a_wake_phrase_opened_stays_a_wake_session() -> None:
    events = [ev(UserTurn(text="Hello kiosk", words=()), 1.0),
              ev(SessionStarted(session=1, how="wake"), 1.0),
              ev(PlaybackStarted(unit_id="u0"), 1.1), final("u0", "Yes?", at=1.5)]
    script = agent_script([], build_timeline(events, 3))
    assert script.session_start == "wake" and script.notes == ()


def test_units_without_a_request_are_reported() -> None:
    events = [ev(SessionStarted(session=1, how="start-up"), 0.0), ev(UserTurn(text="Hi.", words=()), 1.0),
              ev(PlaybackStarted(unit_id="u1"), 1.5), final("u1", "Hello.", at=2.0)]
    script = agent_script([], build_timeline(events, 3))
    assert script.replies == () and "turn 1: 1 unit(s)" in script.notes[0]


def test_a_turn_the_knowledge_answered_is_said_again_by_the_script() -> None:
    events = [ev(SessionStarted(session=1, how="speech"), 0.0),
              ev(UserTurn(text="How much is a ticket?", words=()), 1.0),
              ev(KnowledgeUsed(1, "direct", ("venue.toml:10",), 0.9, 0.3), 1.0),
              ev(PlaybackStarted(unit_id="u1"), 1.5), final("u1", "14 euros.", at=2.0),
              ev(UserTurn(text="Thanks.", words=()), 3.0),
              ev(KnowledgeUsed(2, "chat"), 3.0),
              ev(PlaybackStarted(unit_id="u2"), 3.5), final("u2", "You're welcome.", at=4.0)]
    script = agent_script(_requests((2, 1)), build_timeline(events, 3))
    assert script.replies == ("14 euros.", "You're welcome.") and script.notes == ()


def test_turns_the_timers_rules_answered_keep_the_replies_after_them_in_place() -> None:
    events = [ev(SessionStarted(session=1, how="speech"), 0.0),
              ev(UserTurn(text="Set a pasta timer for 5 seconds.", words=()), 1.0),
              ev(CommandAnswered(1), 1.0),
              ev(PlaybackStarted(unit_id="u1"), 1.2), final("u1", "Pasta timer set.", at=2.0),
              ev(TimerChanged(1, "timer", "ringing", "2026-12-06T15:05:00+01:00"), 6.0),
              ev(PlaybackStarted(unit_id="u2"), 6.1),
              ev(BargeIn("u2", "Stop."), 6.8), final("u2", "Your pasta timer is done.",
                                                    heard="Your pasta", at=6.8),
              ev(UserTurn(text="Stop.", words=()), 7.0), ev(CommandAnswered(2), 7.0),
              ev(UserTurn(text="What is the capital of France?", words=()), 9.0),
              ev(PlaybackStarted(unit_id="u3"), 9.5), final("u3", "Paris.", at=10.0)]
    script = agent_script(_requests((3, 1)), build_timeline(events, 3))
    # "Stop." is answered with silence: its empty reply keeps "Paris." for the third turn.
    assert script.replies == ("Pasta timer set.", "", "Paris.")
    assert any("answered by the timers' rules" in note for note in script.notes), script.notes


def test_recorded_tools_return_the_recorded_results_in_order_and_run_nothing() -> None:
    toolbox = recorded_toolbox([ToolResult("book_table", '{"people": 4, "time": "7 PM"}', "B1"),
                                ToolResult("book_table", '{"people": 2}', "B2")])
    assert toolbox.names == {"book_table"}
    call = ToolCall("c1", "book_table", '{"people": 4, "time": "7 PM"}')
    assert toolbox.run(call) == "B1"
    assert toolbox.run(ToolCall("c2", "book_table", '{"people": 2}')) == "B2"
    assert toolbox.run(call).startswith("error: the recording has no further result")
    # An argument the recording never used is refused as unknown (not merely out of results).
    assert toolbox.run(ToolCall("c3", "book_table", '{"colour": "red"}')).startswith(
        "error: unknown argument 'colour'")


# -- the recorded voice ------------------------------------------------------------------------

UNIT = RecordedUnit("u1", "Hello there, how are you?", (
    RecordedWord("Hello", 10, 300, True), RecordedWord("there,", 350, 700, True),
    RecordedWord("how", 900, 1000, True), RecordedWord("are", 1050, 1200, True),
    RecordedWord("you?", 1250, 1500, False)), length_ms=1700)


def test_clauses_get_the_recorded_timings_whatever_the_voice_says() -> None:
    voice = FakeSpeech(sample_rate=16000)
    speech = RecordedSpeech([UNIT], voice)
    first = speech.synthesize("Hello there, ")
    assert first.samples == 700 * 16  # to the end of its last word
    assert [(w.text, w.char_start, w.start_sample, w.end_sample) for w in first.words] == [
        ("Hello", 0, 160, 4800), ("there,", 6, 5600, 11200)]
    # A speculation thrown away: the first clause again, the same audio.
    assert speech.synthesize("Hello there, ").samples == first.samples
    rest = speech.synthesize("how are you?")
    assert rest.samples == (1700 - 700) * 16  # to the unit's recorded end
    assert [(w.text, w.char_start, w.start_sample, w.exact) for w in rest.words] == [
        ("how", 0, 200 * 16, True), ("are", 4, 350 * 16, True), ("you?", 8, 550 * 16, False)]
    assert speech.untimed == []
    # Text the recording never said is spoken by the voice as it speaks now.
    other = speech.synthesize("Something else.")
    assert speech.untimed == ["Something else."] and other.samples == voice.synthesize(
        "Something else.").samples


def test_kept_audio_is_played_as_it_was() -> None:
    kept = bytes(range(256)) * 50  # 12800 bytes: 6400 samples, up to 400 ms
    unit = RecordedUnit(UNIT.unit_id, UNIT.generated, UNIT.words, None, played=kept)
    first = RecordedSpeech([unit], FakeSpeech(sample_rate=16000)).synthesize("Hello there, ")
    assert first.pcm[:len(kept)] == kept and first.samples == 700 * 16  # the voice after it
    whole = RecordedUnit(UNIT.unit_id, UNIT.generated, UNIT.words, None, played=kept * 2)
    again = RecordedSpeech([whole], FakeSpeech(sample_rate=16000)).synthesize("Hello there, ")
    assert again.pcm == (kept * 2)[:2 * 700 * 16]


# -- the replay's devices ----------------------------------------------------------------------

def fields_of(start: UnitStart) -> tuple[object, ...]:
    return (start.line, start.after, start.phase)


async def test_a_unit_starts_as_long_after_its_line_as_recorded_at_the_recorded_phase() -> None:
    events = [ev(UserSpeechEnded(audio_time=0.0), 0.0),
              ev(PlaybackStarted(unit_id="u1"), 1.0 + 0.0100), final("u1", "One.", at=2.0),
              ev(PlaybackStarted(unit_id="u2"), 3.0 + 0.0050),
              ev(PlaybackPaused(unit_id="u2"), 3.5 + 0.0200), final("u2", "Two.", at=4.0)]
    # The second line's pre-roll began before u2 did, but it waits for u2: no anchor for it.
    lines = [ReplayLine(segment(2.048), None),
             ReplayLine(segment(2.976), Cue(PlaybackStarted, 1, -0.029, "u2"))]
    wake = 1 / 16000
    first, second = unit_starts(build_timeline(events, 3), lines, 16000)
    # u1 before any line, at its recorded time; u2 0.957 s after the line, at the phase that
    # puts its first pause (which the replay takes at a frame's end) 0.515 s into it.
    assert fields_of(first) == (None, pytest.approx(1.01 - wake), pytest.approx((1.01 - wake) % F))
    assert fields_of(second) == (0, pytest.approx(3.005 - wake - 2.048),
                                 pytest.approx((-0.515 - wake) % F))
    clock = VirtualClock()
    log = EventLog(clock)
    line_starts: list[float] = []
    speaker = AlignedSpeaker(clock, 16000, log, [UnitStart(None, 0.5, 0.5 % F),
                                                 UnitStart(0, 0.2, 0.005)], line_starts)
    await clock.advance(0.01)
    start = speaker.write(silence(1600))
    assert start == round(0.49 * 16000)  # silence first: the unit starts at 0.5 s
    assert speaker.write(silence(1600)) == start + 1600  # while it plays: no gap
    log.publish(PlaybackStarted("u1"))
    await clock.advance(1.0)  # 1.01 s: played out
    line_starts.append(0.96)  # the line said from 0.96 s: the unit 0.2 s later, at 0.005 s
    at = 0.96 + 0.2 + ((0.005 - 1.16 + F / 2) % F - F / 2)  # of a frame: 1.157 s
    assert speaker.write(silence(160)) == start + 3200 + round((at - 1.01) * 16000)
    log.publish(PlaybackStarted("u2"))
    await clock.advance(1.0)  # a unit the recording never started: at once, at no phase
    assert speaker.write(silence(160)) == start + 3200 + round((at - 1.01) * 16000) + 160


class VoiceLog:
    """A caller's voice that notes when each part was said."""

    sample_rate = 16000

    def __init__(self, clock: VirtualClock) -> None:
        self.clock = clock
        self.said: list[tuple[float, int]] = []

    def say(self, pcm: bytes) -> None:
        self.said.append((self.clock.now(), len(pcm) // 2))

    async def wait_said(self) -> None:
        pass


async def test_the_caller_says_each_line_a_frame_at_a_time_from_its_frame() -> None:
    clock = VirtualClock()
    log = EventLog(clock)
    voice = VoiceLog(clock)
    lines = [ReplayLine(segment(0.064, frames=3), None),
             ReplayLine(segment(0.0, frames=4), Cue(PlaybackStarted, 1, 0.1, "u1"))]
    caller = ReplayCaller(clock, voice, log, lines)
    calling = asyncio.create_task(caller.run())
    await clock.advance(1.0)
    assert [round(t, 3) for t, _ in voice.said] == [0.08, 0.112, 0.144]
    assert caller.said == 1 and caller.unsaid == lines[1:]
    log.publish(PlaybackStarted("u1"))   # at 1.0 s: the line goes into the frame from 1.088
    await clock.advance(1.0)
    assert [(round(t, 3), n) for t, n in voice.said[3:]] == [
        (1.104, 512), (1.136, 512), (1.168, 512), (1.2, 512)]
    assert calling.done() and caller.unsaid == []
