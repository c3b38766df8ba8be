"""Real rooms: the agent's own voice in the microphone through a room (delay, reverberation, a
small speaker's clipping), cancelled with the samples it played. Interruptions over the
loudspeaker are taken and their words heard; the agent never interrupts itself. People talking
nearby neither keep the caller's turn open nor open turns of their own (the talker gate)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from edge_agent.bench.wer import normalize, word_errors
from edge_agent.config import Config
from edge_agent.config.file import parse_config
from edge_agent.events import (
    Backchannel,
    BargeIn,
    Event,
    LoggedEvent,
    PlaybackPaused,
    PlaybackResumed,
    PlaybackStarted,
)
from tests.logged import read_events

pytestmark = [pytest.mark.models, pytest.mark.realtime]

ROOM = """
[room]
delay_ms = 40
reverb_ms = 150
clip = 0.5
seed = 1
"""

LONG_REPLY = ("We have a family menu with two pizzas, a large salad, four drinks and a dessert "
              "for everyone, and on weekends the children eat for free until seven in the "
              "evening.")
SHORT_REPLY = "Sorry, let me keep it short. The family menu is forty euros."
FAMILY = "What do you have for a family of four?"


def _caller(say: str, when: str) -> str:
    """One [[caller]] line: what is said and when (`at = 0.5`, `after_agent_done = true`...)."""
    return f'[[caller]]\nsay = "{say}"\n{when}\n'


def _call_text(echo_gain: float, replies: list[str], callers: str, room: str = ROOM) -> str:
    """A call in `room`: an agent with no greeting answering `replies` in turn, and `callers`."""
    quoted = ", ".join(f'"{reply}"' for reply in replies)
    return (f'[agent]\ngreeting = ""\necho_gain = {echo_gain}\nreplies = [{quoted}]\n'
            f"{callers}{room}")


async def _call(tmp_path: Path, text: str, config: str = "") -> dict[str, Any]:
    from edge_agent.demo.callfile import parse_call
    from edge_agent.runner import run_demo

    settings = parse_config(f'data_dir = "{tmp_path}"\n{config}', "edge-agent.toml")
    printed: list[str] = []
    record = await run_demo(settings, parse_call(text, "call.toml"), printer=printed.append,
                            max_seconds=200)
    return {**record, "printed": printed}


def _types(record: dict[str, Any], kind: type[Event]) -> list[LoggedEvent]:
    return [e for e in read_events(record["events"]) if isinstance(e.event, kind)]


@pytest.mark.parametrize("gain", [0.3, 1.0])
async def test_an_interruption_over_the_loudspeaker_is_taken_and_its_words_heard(
        tmp_path: Path, gain: float) -> None:
    record = await _call(tmp_path, _call_text(
        gain, [LONG_REPLY, SHORT_REPLY],
        _caller(FAMILY, "at = 0.5") + _caller("Wait, that sounds like too much.", "barge_in_after = 2.6")))
    printed = "\n".join(record["printed"])
    assert record["engines"].get("echo_cancel") == "webrtc-aec3"
    assert len(_types(record, BargeIn)) == 1, printed  # before: none, the reply played on
    users = [" ".join(normalize(t["text"])) for t in record["turns"] if t["role"] == "user"]
    assert len(users) == 2 and "sounds like too much" in users[1], printed
    cut, answer = record["units"][:2]
    assert cut["interrupted"] and cut["heard"] and LONG_REPLY.startswith(cut["heard"])
    assert answer["heard"] == SHORT_REPLY, printed  # never cut by its own echo


def _paused_on_own_echo(record: dict[str, Any]) -> list[float]:
    """When playback paused and then resumed with no barge-in between: the agent stopped for
    its own echo (a stutter the caller hears)."""
    paused: float | None = None
    stutters = []
    for entry in read_events(record["events"]):
        if isinstance(entry.event, PlaybackPaused):
            paused = entry.at
        elif isinstance(entry.event, BargeIn):
            paused = None
        elif isinstance(entry.event, PlaybackResumed) and paused is not None:
            stutters.append(paused)
            paused = None
    return stutters


async def test_of_the_replies_after_barge_ins_in_a_loud_room_at_most_one_slips_on_its_echo(
        tmp_path: Path) -> None:
    # Before: after the first barge-in the loop was still catching up on the microphone when
    # the next reply started, the canceller's reference of it came in pieces, its echo came
    # through, and the reply paused on it ~0.3-0.6 s in (3 of 4 later replies in `bench
    # rooms`); the echo also ended up in what the agent heard ("We open it now. No, I said
    # two people.").
    # The words each interruption is checked by are those said after playback stopped: the
    # first ~0.8 s of each is said over the agent (the barge-in waits for two recognized words).
    interruptions = [("Wait, that sounds like too much.", 2.6, "sounds like too much"),
                     ("No, I said two people.", 1.8, "2 people"),
                     ("Hold on, is it open on Monday?", 2.3, "on monday")]
    lines = _caller(FAMILY, "at = 0.5") + "".join(
        _caller(say, f"barge_in_after = {cue}") for say, cue, _ in interruptions)
    record = await _call(tmp_path, _call_text(1.0, [LONG_REPLY] * 3 + [SHORT_REPLY] * 2, lines))
    printed = "\n".join(record["printed"])
    # At most one of the three replies after a barge-in slips (before the fix, 3 of 4 paused).
    # Under load, 2 runs in 12 (and about one CI run in five) had one: a reply paused on its own
    # echo ~0.7, ~1.3 or ~1.7 s in, where its next piece of speech began after the speaker had
    # run dry, because both the canceller's reference and this simulator's echo placed the
    # audio after such a gap early when the frame was taken late (fixed: each stretch of
    # playback where it played; tests/test_played_reference.py, tests/test_room.py). The one
    # slip still allowed: the first interruption meets a canceller still converging, and its
    # words were once taken as two turns.
    started = [(e.at, e.event.unit_id) for e in read_events(record["events"])
               if isinstance(e.event, PlaybackStarted)]
    paused_replies = {max((one for one in started if one[0] <= at), default=(0.0, ""))[1]
                      for at in _paused_on_own_echo(record)}
    slips = len(paused_replies)
    assert len(_types(record, BargeIn)) == 3, printed
    users = [" ".join(normalize(t["text"])) for t in record["turns"] if t["role"] == "user"]
    heard_lines = [next((u for u in users if words in u), "") for _, _, words in interruptions]
    slips += len(users) - 1 - sum(1 for u in users[1:] if u in heard_lines)
    assert slips <= 1 and len(users) >= 4, printed
    # The replies after a barge-in are what this is about: their interruptions are heard, and
    # none of the agent's echo in them (the first one meets a canceller still converging on its
    # first reply: its first word may be clipped, which `test_an_interruption_over_the_
    # loudspeaker_...` covers on its own). The words said over the agent's last syllables are
    # Moonshine's to get wrong in double talk ("Hold on, is it" came out "Pokemon is at" in 2
    # runs of 13; under CI's load the barge-in came 0.85 s into "Hold on, is it open on
    # Monday?", and "Hold on, is it open" came out "The quote-for-on is a token"); the words
    # after it stopped must be there.
    said = set(normalize(" ".join(say for say, _, _ in interruptions)))
    echo_words = {word for word in normalize(LONG_REPLY) if len(word) > 3} - said  # "pizzas"...
    for (_, _, words), heard in zip(interruptions[1:], heard_lines[1:], strict=True):
        assert words in heard and not echo_words & set(heard.split()), printed


async def test_twenty_replies_through_a_loud_room_never_interrupt_themselves(
        tmp_path: Path) -> None:
    replies = [f"Reply number {n} is here, and it keeps talking for a little while longer."
               for n in range(1, 21)]
    lines = "".join(_caller("Go on.", "at = 0.5" if n == 0 else "after_agent_done = true")
                    for n in range(20))
    record = await _call(tmp_path, _call_text(1.0, replies, lines))
    printed = "\n".join(record["printed"])
    assert not _types(record, BargeIn), printed
    assert not _types(record, PlaybackPaused), printed
    units = [u for u in record["units"] if u["generated"]]
    assert len(units) == 20 and all(u["heard"] == u["generated"] for u in units), printed


def test_a_config_can_turn_it_off_for_a_headset() -> None:
    assert parse_config('[audio]\necho_cancel = "off"\n', "c.toml").audio.echo_cancel == "off"
    assert Config().audio.echo_cancel == "auto"


@pytest.mark.parametrize("suppression", ["auto", "on"])
async def test_a_caller_in_a_noisy_room_is_heard(tmp_path: Path, suppression: str) -> None:
    lines = _caller(FAMILY, "at = 0.5") + _caller("Thank you very much.", "after_agent_done = true")
    record = await _call(tmp_path, _call_text(0.3, [SHORT_REPLY, "You're welcome."], lines,
                                              ROOM + "noise_db = -35\n"),
                         f'[audio]\nnoise_suppression = "{suppression}"\n')
    printed = "\n".join(record["printed"])
    engines = record["engines"]
    assert engines.get("echo_cancel") == "webrtc-aec3"
    assert engines.get("noise_suppression") == ("webrtc-ns" if suppression == "on" else None)
    users = [" ".join(normalize(t["text"])) for t in record["turns"] if t["role"] == "user"]
    # The noise opens no turn of its own: the caller's two lines, word for word.
    assert users == ["what do you have for a family of 4", "thank you very much"], printed


async def test_with_no_echo_path_the_canceller_leaves_a_short_line_over_the_reply_alone(
        tmp_path: Path) -> None:
    # A headset (the microphone never hears the speaker) with the canceller forced on: "Okay."
    # 1.5 s into the first reply, before the canceller had anything to learn from.
    record = await _call(tmp_path, f'''
[agent]
greeting = ""
echo_gain = 0
replies = ["{LONG_REPLY}", "{SHORT_REPLY}"]
[[caller]]
say = "What do you have for a family of four?"
at = 0.5
[[caller]]
say = "Okay."
barge_in_after = 1.5
''', '[audio]\necho_cancel = "on"\n')
    printed = "\n".join(record["printed"])
    assert record["engines"].get("echo_cancel") == "webrtc-aec3"
    # Before: WebRTC swallowed it, the reply played on as if nothing was said.
    heard = _types(record, Backchannel) + _types(record, BargeIn)
    assert len(heard) == 1, printed


TALKERS = """
[[talker]]
say = ["The weather was lovely all week and we walked by the river every morning.",
       "She said the train would be late again, so we took the bus instead."]
level_db = -14
[[talker]]
say = ["Another coffee please, and could we get the bill when you have a moment?",
       "Do you remember the little hotel by the harbour?"]
level_db = -14
start = 1.3
"""
"""Two people chatting nearby, each 14 dB under the caller, from the start of the call: without
the gate the caller's first turn never ends in this room. At 10 dB under, their voices mask
some of the caller's words (`bench rooms` reports that room's error rate, 8-25 %), and a
caller's line that is one word off here is no failure of the gate's."""


async def test_with_people_talking_nearby_each_line_of_the_caller_is_its_own_turn(
        tmp_path: Path) -> None:
    said = ["What time do you open tomorrow?", "Is there parking near the restaurant?"]
    record = await _call(tmp_path, _call_text(
        0.0, ["Sure.", "Yes.", "Okay."],
        _caller(said[0], "at = 1.0") + _caller(said[1], "after_agent_done = true\npause = 1.5"),
        room=TALKERS), '[audio]\ntalker_gate = "level"\n')
    printed = "\n".join(record["printed"])
    users = [t["text"] for t in record["turns"] if t["role"] == "user"]
    # Before: the first turn never ended while they talked, and held their sentences.
    assert len(users) == 2, printed
    for line, heard in zip(said, users, strict=True):
        assert len(normalize(heard)) <= len(normalize(line)) + 2, printed
        assert word_errors(line, heard)[0] <= 3, printed


async def test_people_talking_nearby_for_a_minute_open_no_turn(tmp_path: Path) -> None:
    """A kiosk whose callers are far louder than its room: `talker_floor_db` between the two."""
    record = await _call(tmp_path, _call_text(
        0.0, ["Hello, how can I help?", "Sure."], _caller("Hello, is anyone there?", "at = 60.0"),
        room=TALKERS), '[audio]\ntalker_gate = "level"\ntalker_floor_db = -21\n')
    printed = "\n".join(record["printed"])
    users = [" ".join(normalize(t["text"])) for t in record["turns"] if t["role"] == "user"]
    assert len(users) == 1 and "anyone" in users[0], printed
