"""The conversation's side of the kiosk's screen, on a virtual clock with scripted fakes: the
caller's words so far while they speak, and push-to-talk (the microphone counts only while the
Talk button is held; letting go ends the turn at once; a press over the agent stops it)."""

from __future__ import annotations

import itertools

from edge_agent.audio.pcm import silence
from edge_agent.events import BargeIn, UnitFinalized, UserSpeechStarted, UserTurn
from tests.fakes import speech
from tests.timeline import Harness, stop

ASKED = "is there a table for two tonight"


async def _for(h: Harness, seconds: float) -> None:
    """Let `seconds` of virtual time pass, the loop running."""
    until = h.clock.now() + seconds
    await h.run_until(lambda: h.clock.now() >= until)


async def _words_while_speaking(words_every_ms: int) -> list[str | None]:
    """Every distinct reading of the caller's words while they ask `ASKED`, from before they
    speak until their turn is committed, then the reading after it."""
    h = Harness(transcripts=[ASKED], replies=["Yes."], greeting="",
                overrides={"words_every_ms": words_every_ms})
    task = await h.start()
    h.mic.say(speech(1.2))
    seen: list[str | None] = []

    def look() -> bool:
        words = h.conversation.caller_words()
        if not seen or seen[-1] != words:
            seen.append(words)
        return bool(h.events(UserTurn))

    await h.run_until(look)
    look()
    await stop(task)
    return seen


async def test_with_a_recognizer_that_decodes_as_it_hears_the_words_grow_as_they_are_said() -> None:
    seen = await _words_while_speaking(words_every_ms=150)
    assert seen[0] is None and seen[-1] is None  # nobody speaking before, the turn after
    during = [words for words in seen if words]
    assert len(during) >= 4, seen  # read every 150 ms of speech (the fake: a word per 150 ms)
    assert all(later.startswith(earlier) for earlier, later in itertools.pairwise(during))
    assert during[-1] == ASKED


async def test_without_readings_the_words_show_at_the_pause_the_loop_reads_them_anyway() -> None:
    seen = await _words_while_speaking(words_every_ms=0)
    assert seen == [None, "", ASKED, None]  # the speculative transcript at the pause


async def test_push_to_talk_hears_only_while_held_and_letting_go_ends_the_turn() -> None:
    h = Harness(transcripts=["where is the exit"], replies=["To your left, past the shop."],
                greeting="", overrides={"push_to_talk": True})
    task = await h.start()
    h.mic.say(speech(0.8))  # the room, loud, with nobody holding the button
    await _for(h, 1.8)
    assert not h.events(UserSpeechStarted)

    assert await h.conversation.talk(True)
    h.mic.say(speech(0.8) + silence(int(1.5 * 16000)))  # a long pause while it is held
    await _for(h, 2.4)
    assert h.events(UserSpeechStarted) and not h.events(UserTurn)  # held: no end by silence
    assert await h.conversation.talk(False)
    let_go = h.clock.now()
    await h.run_until(lambda: bool(h.events(UserTurn)))
    assert h.clock.now() - let_go <= 0.05  # at once, not after an end-of-turn silence

    # Pressed while the agent speaks: it stops, as the Stop button does.
    await h.run_until(lambda: h.conversation.replying and h.speaker.played_frames() > 4000)
    assert await h.conversation.talk(True)
    await h.run_until(lambda: bool(h.events(UnitFinalized)))
    [barge_in] = h.events(BargeIn)
    assert isinstance(barge_in, BargeIn) and barge_in.by == "touch"
    [final] = h.events(UnitFinalized)
    assert isinstance(final, UnitFinalized) and final.finalize.interrupted
    await h.conversation.talk(False)
    await stop(task)


async def test_without_push_to_talk_the_button_does_nothing() -> None:
    h = Harness(transcripts=[], replies=[], greeting="")
    task = await h.start()
    assert not await h.conversation.talk(True)
    h.mic.say(speech(0.6))
    await h.run_until(lambda: bool(h.events(UserSpeechStarted)))  # the voice opens turns
    await stop(task)
