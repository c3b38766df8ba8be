"""Turn-taking while the agent speaks, on a virtual clock with scripted fakes: backchannels,
real interruptions, noise, the agent's own echo (heard-truth guarantee 7: a backchannel
truncates nothing)."""

from __future__ import annotations

from edge_agent.audio.room import Room
from edge_agent.events import (
    Backchannel,
    BargeIn,
    EchoIgnored,
    PlaybackPaused,
    PlaybackResumed,
    PlaybackStarted,
    TurnDropped,
    UnitFinalized,
    UserTurn,
)
from tests.fakes import PiecesGate, speech
from tests.timeline import Harness, stop

REPLY = "We have three tables free tonight. One at 7 PM, one at 8 PM."
"""FakeSpeech: token k plays from 400k ms to 400k + 300 ms of the unit."""


async def _reply_playing(h: Harness) -> float:
    h.mic.say(speech(0.6))
    await h.run_until(lambda: len(h.events(PlaybackStarted)) == 1)
    return h.at(PlaybackStarted)[0]


async def test_backchannel_pauses_then_resumes_with_nothing_lost_or_repeated() -> None:
    h = Harness(transcripts=["what is free tonight", "mm-hmm"], replies=[REPLY], greeting="",
                pause_on_speech=True)
    task = await h.start()
    started = await _reply_playing(h)
    await h.clock.advance(1.0)
    h.mic.say(speech(0.4))
    await h.run_until(lambda: len(h.events(UnitFinalized)) == 1)
    finished = h.at(UnitFinalized)[0]
    await stop(task)

    paused, resumed = h.at(PlaybackPaused)[0], h.at(PlaybackResumed)[0]
    assert 1.0 < paused - started < 1.2  # at the onset (96 ms of speech)
    assert [e.text for e in h.events(Backchannel)] == ["mm-hmm"]  # type: ignore[attr-defined]
    assert h.events(BargeIn) == []
    (unit,) = [e.finalize for e in h.events(UnitFinalized)]  # type: ignore[attr-defined]
    assert unit.heard == unit.generated == REPLY and not unit.interrupted
    # Every sample played exactly once: playback took the audio's length plus the pause.
    audio_seconds = unit.played_samples / unit.sample_rate
    assert abs((finished - started) - (audio_seconds + resumed - paused)) < 0.02
    assert h.speaker.played_frames() == unit.played_samples == unit.words[-1].end_sample + 1600
    # Not answered, not a user turn.
    assert len(h.llm.requests) == 1
    assert [(t.role, t.text) for t in h.conversation.history.turns] == [
        ("user", "what is free tonight"), ("assistant", REPLY)]
    assert [e.text for e in h.events(UserTurn)] == ["what is free tonight"]  # type: ignore[attr-defined]


async def test_real_interruption_cuts_where_playback_paused_at_the_onset() -> None:
    h = Harness(transcripts=["what is free tonight", "wait, make it eight"],
                replies=[REPLY, "Eight it is."], greeting="", pause_on_speech=True)
    task = await h.start()
    started = await _reply_playing(h)
    await h.clock.advance(1.25)
    h.mic.say(speech(0.8))
    await h.run_until(lambda: len(h.events(UnitFinalized)) == 1)
    paused, barge = h.at(PlaybackPaused)[0], h.at(BargeIn)[0]
    cut = h.events(UnitFinalized)[0].finalize  # type: ignore[attr-defined]
    await h.run_until(lambda: len(h.events(UnitFinalized)) == 2)
    await stop(task)

    assert barge - paused >= 0.1  # judged on words, after barge_in_min_ms of speech
    assert abs(cut.played_ms - (paused - started) * 1000) <= 1  # nothing played after the pause
    assert cut.heard == "We have three"
    assert h.events(PlaybackResumed) == []
    assert h.llm.requests[1][-2:] == [
        {"role": "assistant", "content": "We have three [interrupted]"},
        {"role": "user", "content": "wait, make it eight"}]


async def test_cough_pauses_and_resumes_and_is_not_a_turn() -> None:
    h = Harness(transcripts=["what is free tonight", ""], replies=[REPLY], greeting="",
                pause_on_speech=True)
    task = await h.start()
    await _reply_playing(h)
    await h.clock.advance(0.9)
    h.mic.say(speech(0.3))
    await h.run_until(lambda: len(h.events(UnitFinalized)) == 1)
    await stop(task)
    assert len(h.events(TurnDropped)) == 1 and len(h.events(PlaybackResumed)) == 1
    assert h.events(BargeIn) == []
    assert h.events(UnitFinalized)[0].finalize.heard == REPLY  # type: ignore[attr-defined]


async def test_own_echo_does_not_interrupt_while_playing_on() -> None:
    # The microphone hears the agent: during 1.2-2.0 s of playback it says "three tables free".
    h = Harness(transcripts=["what is free tonight", "three tables free"], replies=[REPLY],
                greeting="", pause_on_speech=False)
    task = await h.start()
    await _reply_playing(h)
    await h.clock.advance(1.2)
    h.mic.say(speech(0.8))
    await h.run_until(lambda: len(h.events(UnitFinalized)) == 1)
    await stop(task)
    assert h.events(BargeIn) == []
    (echo,) = h.events(EchoIgnored)
    assert echo.text == "three tables free"  # type: ignore[attr-defined]
    assert "three tables free" in echo.playing  # type: ignore[attr-defined]
    assert h.events(UnitFinalized)[0].finalize.heard == REPLY  # type: ignore[attr-defined]
    assert len(h.llm.requests) == 1


async def test_own_echo_cut_into_pieces_by_the_talker_gate_is_told_by_its_sound() -> None:
    # The microphone hears the whole reply (the canceller's leftovers, loud enough to be speech)
    # and the gate lets one frame in five of it through: the pieces correlate with what played
    # far less than the echo does (about sqrt(1/5), 0.45 of it), and their words ("close the
    # door") are not the words playing. Told by the frames as they came, it is the agent's
    # own voice (told by the pieces, it was a barge-in).
    h = Harness(transcripts=["what is free tonight", "close the door"], replies=[REPLY],
                greeting="", pause_on_speech=False, room=Room(echo_gain=3.0),
                gate=PiecesGate(every=5))
    task = await h.start()
    await _reply_playing(h)
    # The echo is one stretch of speech over the whole reply: judged when it ends.
    await h.run_until(lambda: bool(h.events(EchoIgnored) or h.events(BargeIn)))
    await h.run_until(lambda: len(h.events(UnitFinalized)) == 1)
    await stop(task)
    assert h.events(BargeIn) == [], [e.event for e in h.log.entries]
    (echo,) = h.events(EchoIgnored)
    assert echo.text == "close the door"  # type: ignore[attr-defined]
    assert h.events(UnitFinalized)[0].finalize.heard == REPLY  # type: ignore[attr-defined]
    assert len(h.llm.requests) == 1


async def test_same_words_said_later_are_not_echo() -> None:
    # Words the agent said long before the user spoke are not coming back now.
    h = Harness(transcripts=["what is free tonight", "we have three"],
                replies=[REPLY, "Yes, three."], greeting="", pause_on_speech=False)
    task = await h.start()
    await _reply_playing(h)
    await h.clock.advance(3.0)
    h.mic.say(speech(0.8))
    await h.run_until(lambda: len(h.events(BargeIn)) == 1)
    await stop(task)
    assert h.events(EchoIgnored) == []


async def test_long_speech_without_words_forces_the_interruption() -> None:
    h = Harness(transcripts=["what is free tonight", ""], replies=[REPLY, ""], greeting="",
                pause_on_speech=False, overrides={"barge_in_force_ms": 1500})
    task = await h.start()
    await _reply_playing(h)
    await h.clock.advance(0.5)
    h.mic.say(speech(2.0))
    await h.run_until(lambda: len(h.events(BargeIn)) == 1)
    barge = h.at(BargeIn)[0]
    await stop(task)
    said = h.at(PlaybackStarted)[0] + 0.5
    assert 1.4 <= barge - said <= 1.7  # 1500 ms of speech, 32 ms frames


async def test_a_model_imitating_the_marker_is_not_made_to_say_it() -> None:
    h = Harness(transcripts=["can i bring my dog"], replies=["No dogs, sorry. [interrupted]"],
                greeting="")
    task = await h.start()
    h.mic.say(speech(0.6))
    await h.run_until(lambda: len(h.events(UnitFinalized)) == 1)
    await stop(task)
    unit = h.events(UnitFinalized)[0].finalize  # type: ignore[attr-defined]
    assert unit.generated == unit.heard == "No dogs, sorry."
