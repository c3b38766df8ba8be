"""Background talkers in the simulator: `[[talker]]` in a call file, their speech looped from
their start at their level against the caller's, through the room, heard by the virtual
microphone among the steady noise; and the gate that keeps them out of turns."""

from __future__ import annotations

import asyncio
import dataclasses

import numpy as np
import pytest

from edge_agent.audio.beamformer import Look
from edge_agent.audio.room import RoomTalk
from edge_agent.audio.talker_gate import GateSettings, LevelGate, frame_power, level_db
from edge_agent.audio.virtual import VirtualMicrophone
from edge_agent.clock import VirtualClock
from edge_agent.config import AudioConfig
from edge_agent.demo.callfile import parse_call
from edge_agent.demo.talkers import Talker, active_level, room_talk
from edge_agent.errors import ConfigError
from tests.fakes import FakeSpeech

RATE = 16000
FRAME = 512
CALLER = '[[caller]]\nsay = "Hello there."\nat = 0.5\n'
SETTINGS = GateSettings(floor_db=AudioConfig().talker_floor_db,
                        margin_db=AudioConfig().talker_margin_db)
"""The gate as the config's defaults make it."""


def _tone(seconds: float, dbfs: float, hz: float = 220.0) -> np.ndarray:
    t = np.arange(round(seconds * RATE)) / RATE
    return np.sin(2 * np.pi * hz * t) * 32768 * 10 ** (dbfs / 20) * np.sqrt(2)


def _db(level: float) -> float:
    return 20 * float(np.log10(level / 32768))


def test_a_call_file_names_its_talkers() -> None:
    call = parse_call(CALLER + '[[talker]]\nsay = ["One.", "Two."]\nlevel_db = -12\n'
                      'voice = "espeak-us-f3"\nstart = 1.5\npause = 0.5\nreverb_ms = 300\n'
                      '[[talker]]\nsay = "Three."\n', "c.toml")
    assert call.talkers == (
        Talker(("One.", "Two."), "espeak-us-f3", -12.0, 1.5, 0.5, 300.0),
        Talker(("Three.",)))


@pytest.mark.parametrize(("table", "where", "says"), [
    ('say = "Hi."\nvoice = "bob"\n', "talker[1].voice", "must be one of 'agent'"),
    ('say = []\n', "talker[1].say", "write what the talker says"),
    ('say = ["Hi.", ""]\n', "talker[1].say[1]", ""),
    ('say = "Hi."\nlevel_db = 3\n', "talker[1].level_db", "between -40 and 0"),
    ('say = "Hi."\nloud = true\n', "talker[1].loud", "unknown key"),
])
def test_a_bad_talker_is_named(table: str, where: str, says: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_call(CALLER + "[[talker]]\n" + table, "c.toml")
    assert f"c.toml: {where}:" in str(caught.value) and says in str(caught.value)


def test_a_crowd_is_bounded() -> None:
    with pytest.raises(ConfigError, match="at most 8 background talkers"):
        parse_call(CALLER + '[[talker]]\nsay = "Hi."\n' * 9, "c.toml")


def test_talk_loops_from_its_start_the_same_however_it_is_taken() -> None:
    track = np.arange(1.0, 1001.0)
    whole = RoomTalk([(track, 300)]).take(2600)
    assert not whole[:300].any() and whole[300] == 1.0
    assert np.array_equal(whole[1300:2300], track)  # again from its first sample
    pieces = RoomTalk([(track, 300)])
    assert np.array_equal(np.concatenate([pieces.take(n) for n in (7, 512, 1, 2080)]), whole)


def test_talkers_are_their_level_below_the_caller() -> None:
    caller = (_tone(2.0, -18.0)).astype(np.int16).tobytes()
    for below in (-10.0, -20.0):
        talk = room_talk((Talker(("Did you see the game last night?",), level_db=below,
                                 start=1.0),), FakeSpeech(), [caller], RATE, seed=1)
        assert talk is not None
        assert not talk.take(RATE).any()  # before their start
        assert abs(_db(active_level(talk.take(RATE * 20))) - (-18.0 + below)) <= 0.5


def test_the_agents_own_voice_can_be_a_talker() -> None:
    voice = FakeSpeech()
    room_talk((Talker(("Me again.",), voice="agent"),), voice, [], RATE, seed=0)
    assert voice.synthesized == ["Me again."]


def test_the_microphone_hears_the_talkers() -> None:
    talk = RoomTalk([(_tone(1.0, -30.0), RATE // 2)])

    async def hear() -> np.ndarray:
        clock = VirtualClock()
        mic = VirtualMicrophone(clock, talk=talk)
        frames: list[bytes] = []

        async def read() -> None:
            async for frame in mic.frames():
                frames.append(frame)
                if len(frames) == 62:
                    return
        reading = asyncio.create_task(read())
        while not reading.done():
            await clock.advance(FRAME / RATE)
        return np.frombuffer(b"".join(frames), dtype=np.int16).astype(np.float64)

    heard = asyncio.run(hear())
    assert not heard[:RATE // 2].any()
    assert abs(_db(float(np.sqrt(np.mean(heard[RATE:] ** 2)))) - (-30.0)) <= 0.5


def _through(gate: LevelGate, signal: np.ndarray, speaking: bool) -> list[bool]:
    """Frame by frame: whether the gate passed each frame as it came."""
    passed = []
    for start in range(0, len(signal) - FRAME + 1, FRAME):
        frame = np.round(signal[start:start + FRAME]).astype(np.int16).tobytes()
        passed.append(gate.admit(frame, speaking) == frame)
    return passed


def test_the_gate_learns_the_near_talker_and_keeps_quieter_ones_out() -> None:
    gate = LevelGate(SETTINGS, RATE)
    assert all(_through(gate, _tone(1.0, -30.0), speaking=False))  # nobody known: all pass
    assert gate.near_level_db is None
    assert gate.room_level_db is not None and abs(gate.room_level_db - (-30.0)) < 0.5
    assert all(_through(gate, _tone(1.0, -15.0), speaking=True))
    assert gate.near_level_db is not None and abs(gate.near_level_db - (-15.0)) < 0.5
    # 6 dB under the near talker, or 6 dB over the room: whichever is lower.
    assert abs(gate.threshold_db - (-24.0)) < 0.5
    behind = _through(gate, _tone(2.0, -25.0), speaking=False)
    # The smoothed level takes ~0.5 s to fall to the threshold, then the gate holds 0.15 s.
    shut = behind.index(False)
    assert 0.5 <= shut * FRAME / RATE <= 0.8 and not any(behind[shut:])
    gate.forget()  # the next session's caller may be quieter
    assert all(_through(gate, _tone(1.0, -25.0), speaking=False))


def test_in_a_quiet_room_the_callers_quiet_words_pass() -> None:
    gate = LevelGate(SETTINGS, RATE)
    _through(gate, _tone(1.0, -70.0), speaking=False)  # a quiet room
    _through(gate, _tone(1.0, -15.0), speaking=True)  # the caller's stressed syllables
    quiet_words = _through(gate, _tone(1.0, -30.0), speaking=True)  # 15 dB under them
    assert all(quiet_words)


def test_a_nearer_talker_taking_over_an_utterance_is_told_once() -> None:
    gate = LevelGate(SETTINGS, RATE)
    _through(gate, _tone(1.0, -27.0), speaking=True)  # a bystander opened the utterance
    assert not gate.took_over()
    taken = []
    for start in range(0, RATE, FRAME):  # the caller, 12 dB louder, in the same utterance
        frame = np.round(_tone(1.0, -15.0)[start:start + FRAME]).astype(np.int16).tobytes()
        gate.admit(frame, True)
        taken.append(gate.took_over())
    assert taken.count(True) == 1 and taken.index(True) * FRAME / RATE < 0.5
    # Whoever opened the utterance is the room: once the caller stops, they are kept out at
    # once (learning the room from nothing took seconds, and let them in meanwhile).
    assert gate.room_level_db is not None and gate.room_level_db >= -28.0
    behind = _through(gate, _tone(2.0, -27.0), speaking=False)
    assert not any(behind[round(0.8 * RATE / FRAME):])


def test_a_burst_does_not_open_the_gate_but_a_vowel_does() -> None:
    gate = LevelGate(SETTINGS, RATE)
    _through(gate, _tone(1.0, -15.0), speaking=True)
    _through(gate, _tone(2.0, -30.0), speaking=False)  # shut
    burst = np.concatenate([_tone(FRAME / RATE, -15.0), _tone(0.5, -30.0)])
    assert not any(_through(gate, burst, speaking=False))
    vowel = _through(gate, _tone(0.16, -15.0), speaking=False)
    assert not vowel[0] and vowel[-1]


def test_the_floor_keeps_quiet_speech_out_before_anyone_spoke() -> None:
    gate = LevelGate(dataclasses.replace(SETTINGS, floor_db=-24.0), RATE)
    assert not any(_through(gate, _tone(1.0, -30.0), speaking=False))
    closed = np.round(_tone(FRAME / RATE, -30.0)).astype(np.int16).tobytes()
    assert level_db(frame_power(gate.admit(closed, False))) < -30.0 - 39.0


def test_after_a_pause_a_bystanders_loud_syllable_does_not_reopen_the_gate() -> None:
    gate = LevelGate(SETTINGS, RATE)
    _through(gate, _tone(1.0, -15.0), speaking=True)  # the caller
    behind = _through(gate, _tone(3.0, -25.0), speaking=False)  # bystanders, 10 dB down
    assert not behind[-1] and gate.room_level_db is not None and gate.room_level_db < -22.0
    # 5 dB under the caller: within the margin (6 dB), but not within half of it.
    assert not any(_through(gate, _tone(0.5, -20.0), speaking=False))
    # The caller going on, 2 dB under their loudest: reopened.
    assert _through(gate, _tone(0.5, -17.0), speaking=False)[-1]


def test_in_a_quiet_room_a_pause_does_not_raise_what_reopens_the_gate() -> None:
    gate = LevelGate(SETTINGS, RATE)
    _through(gate, _tone(1.0, -70.0), speaking=False)  # a quiet room
    _through(gate, _tone(1.0, -15.0), speaking=True)
    _through(gate, _tone(1.0, -70.0), speaking=False)  # a pause
    assert all(_through(gate, _tone(1.0, -30.0), speaking=True)[4:])  # a quiet word after it


def test_a_phrases_falling_last_words_stay_in_but_do_not_reopen_the_gate() -> None:
    gate = LevelGate(SETTINGS, RATE)
    _through(gate, _tone(3.0, -28.0), speaking=False)  # two bystanders, before anyone spoke
    _through(gate, _tone(1.0, -16.0), speaking=True)  # the caller
    assert abs(gate.threshold_db - (-22.0)) < 0.5
    # Their last words fall under the threshold (the gate alone shut 0.7 s into them), yet
    # stay well over the room: the open gate holds them.
    assert all(_through(gate, _tone(1.0, -23.0), speaking=True))
    assert not any(_through(gate, _tone(1.0, -28.0), speaking=True)[-10:])  # a pause: shut
    # Shut, the same level does not open it again: only the threshold does.
    assert not any(_through(gate, _tone(0.5, -23.0), speaking=True))


def test_people_who_begin_as_the_caller_speaks_are_shut_out_and_never_become_the_caller() -> None:
    """The café's worst start: nothing was heard before the caller (digital silence), and two
    people nearby begin as the caller's question ends, so the VAD hears the utterance go on.
    Before, the room's level climbed from the silence (in dB, from -120) and its cap held the
    threshold at the floor for ~6.5 s, and the near level learned the bystanders' level from
    the frames it let through (-15 -> -20 dB): the first turn ran on with their sentences."""
    gate = LevelGate(SETTINGS, RATE)
    _through(gate, np.zeros(RATE // 2), speaking=False)
    assert gate.room_level_db == SETTINGS.floor_db - SETTINGS.margin_db
    _through(gate, _tone(1.0, -15.0), speaking=True)  # the caller's question
    behind = _through(gate, _tone(8.0, -27.0), speaking=True)  # the people nearby
    shut = behind.index(False) * FRAME / RATE
    assert shut <= 5.5 and not any(behind[behind.index(False):])
    # Let through while the room's level caught up, they did not teach the gate their level.
    assert gate.near_level_db is not None and abs(gate.near_level_db - (-15.0)) < 1.0


def test_with_an_array_sound_from_elsewhere_is_the_rooms_from_its_first_frame() -> None:
    """The same worst start heard through a microphone array that tells where each frame
    came from: the people nearby are shut out from the frame the array stops hearing the
    caller's place, not ~5 s later; the caller's place keeps the gate as it was. Inside an
    utterance and over the agent's voice, a frame from elsewhere is shut out only under the
    caller's level (the caller drowned by them, or an interruption's first syllables over the
    agent, may be placed elsewhere)."""
    told: list[Look | None] = [Look.CALLER]
    gate = LevelGate(SETTINGS, RATE, from_the_look=lambda: told[0])
    _through(gate, np.zeros(RATE // 2), speaking=False)
    assert all(_through(gate, _tone(1.0, -15.0), speaking=True))  # the caller, in front
    told[0] = Look.ELSEWHERE
    behind = _through(gate, _tone(2.0, -27.0), speaking=True)  # the people nearby
    assert not any(behind[12:])  # once the smoothed level is under the caller's (~0.3 s)
    # They are the room: its level climbs toward theirs (a 2 s average, from the floor), and
    # they never taught the gate the near talker's level.
    assert gate.room_level_db is not None and gate.room_level_db > -45.0
    assert gate.near_level_db is not None and abs(gate.near_level_db - (-15.0)) < 1.0
    # Inside an utterance, at the caller's level, it may be the caller drowned by them: in
    # (the level decides); between utterances, out.
    assert all(_through(gate, _tone(0.5, -16.0), speaking=True)[3:])
    assert not any(_through(gate, _tone(1.0, -16.0), speaking=False))
    told[0] = Look.CALLER  # the caller again, a little softer than before: in at once
    assert all(_through(gate, _tone(1.0, -18.0), speaking=True))
    told[0] = None  # the array cannot tell: the level decides, as with one microphone
    assert all(_through(gate, _tone(1.0, -18.0), speaking=True))
    # Over the agent's voice, in a room not yet learned (the level alone lets them in):
    over = LevelGate(SETTINGS, RATE, from_the_look=lambda: told[0])
    told[0] = Look.CALLER
    _through(over, np.zeros(RATE // 2), speaking=False)
    _through(over, _tone(1.0, -15.0), speaking=True)
    told[0] = Look.ELSEWHERE_OVER_THE_AGENT
    assert not any(_through(over, _tone(2.0, -27.0), speaking=True)[16:])  # them: out
    assert all(_through(over, _tone(1.0, -15.0), speaking=True)[8:])  # the caller's level: in
