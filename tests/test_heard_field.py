"""The field examples of the heard-truth issue, with real Piper timings (joe-medium)."""

from __future__ import annotations

import re

import pytest

from edge_agent.conversation.clauses import ClauseSplitter
from edge_agent.engines.base import SpeechAudio
from edge_agent.engines.tts import PiperSpeech
from edge_agent.events import BargeIn, LlmRequest, PlaybackStarted, UnitFinalized
from edge_agent.heard.ledger import Unit, UnitLedger
from edge_agent.heard.truncation import HeardPolicy
from tests.fakes import speech
from tests.timeline import Harness, stop

pytestmark = pytest.mark.models

TABLES = ("We have three tables free tonight. One at 7 PM, one at 8 PM, and one at 9 PM. "
          "Which one would you like?")
TOTAL = "Your total is 500 rupees. Shall I confirm the order?"


def _unit_as_the_loop_builds_it(piper: PiperSpeech, text: str) -> Unit:
    """Clauses synthesized one by one, as the loop does; offsets accumulate in the unit."""
    ledger = UnitLedger()
    unit = ledger.open(piper.sample_rate)
    splitter = ClauseSplitter()
    clauses = [*splitter.push(text), splitter.flush()]
    assert len([c for c in clauses if c.strip()]) >= 3, clauses
    for clause in clauses:
        start = unit.audio_text_end
        audio = piper.synthesize(clause) if clause.strip() else SpeechAudio(b"", 0, ())
        unit.add_text(clause)
        unit.add_audio(audio.samples, audio.words, start, start + len(clause))
    return unit


def _heard(unit: Unit, played: int, policy: HeardPolicy = HeardPolicy.COMPLETED) -> str:
    ledger = UnitLedger(policy)
    copy = ledger.open(unit.sample_rate)
    copy.text, copy.words = unit.text, list(unit.words)
    copy.audio_samples, copy.audio_text_end = unit.audio_samples, unit.audio_text_end
    [finalize] = ledger.finalize(copy, played)
    return finalize.heard


def test_cut_just_after_the_first_pm(piper: PiperSpeech) -> None:
    unit = _unit_as_the_loop_builds_it(piper, TABLES)
    assert all(w.exact for w in unit.words), [w.text for w in unit.words if not w.exact]
    assert [w.text for w in unit.words][:9] == [
        "We", "have", "three", "tables", "free", "tonight.", "One", "at", "7"]
    first_pm = next(w for w in unit.words if w.text == "PM,")
    assert TABLES[first_pm.char_start:first_pm.char_end] == "PM,"
    # Timings run on across the separately synthesized clauses.
    starts = [w.start_sample for w in unit.words]
    assert starts == sorted(starts) and unit.words[-1].end_sample <= unit.audio_samples
    ms = piper.sample_rate // 1000

    just_after = _heard(unit, first_pm.end_sample + 5 * ms)
    assert just_after.endswith("One at 7 PM,"), just_after
    assert just_after == "We have three tables free tonight. One at 7 PM,"
    # One sample short of the word's end: `completed` does not count it, `started` does.
    assert _heard(unit, first_pm.end_sample - 1) == "We have three tables free tonight. One at 7"
    assert _heard(unit, first_pm.start_sample + 1, HeardPolicy.STARTED).endswith("One at 7 PM,")
    assert _heard(unit, unit.audio_samples) == TABLES


class RecordingSpeech:
    """Real Piper; keeps what it returned so the test knows where each word really is."""

    def __init__(self, piper: PiperSpeech) -> None:
        self._piper = piper
        self.sample_rate = piper.sample_rate
        self.made: list[tuple[str, SpeechAudio]] = []

    def synthesize(self, text: str) -> SpeechAudio:
        audio = self._piper.synthesize(text)
        self.made.append((text, audio))
        return audio


async def test_cut_inside_shall_then_yes_reaches_the_model_without_the_question(
        piper: PiperSpeech) -> None:
    tts = RecordingSpeech(piper)
    h = Harness(transcripts=["two masala dosas", "hold on", "yes"],
                replies=[TOTAL, "Sure.", "Confirmed."], greeting="", tts=tts)
    task = await h.start()
    h.mic.say(speech(0.6))
    await h.run_until(lambda: len(h.events(PlaybackStarted)) == 1)
    started = h.at(PlaybackStarted)[0]
    await h.run_until(lambda: len(tts.made) == 2)  # both sentences synthesized
    (first_text, first), (second_text, second) = tts.made
    assert (first_text, second_text) == ("Your total is 500 rupees. ", "Shall I confirm the order?")
    shall = second.words[0]
    assert shall.text == "Shall"
    rate = tts.sample_rate
    middle = started + (first.samples + (shall.start_sample + shall.end_sample) / 2) / rate
    # The barge-in fires ~200 ms (barge_in_min_ms) plus a frame after the user starts.
    await h.clock.advance(middle - 0.215 - h.clock.now())
    h.mic.say(speech(0.6))
    await h.run_until(lambda: len(h.events(UnitFinalized)) == 1)
    barge = h.at(BargeIn)[0]
    cut = h.events(UnitFinalized)[0].finalize  # type: ignore[attr-defined]
    played_in_second = cut.played_samples - first.samples
    assert shall.start_sample < played_in_second < shall.end_sample, (
        f"barge-in at {barge - started:.3f} s did not land inside 'Shall'")
    assert cut.heard == "Your total is 500 rupees."
    assert cut.generated == TOTAL

    await h.run_until(lambda: len(h.events(UnitFinalized)) == 2)  # "Sure." played out
    h.mic.say(speech(0.5))
    await h.run_until(lambda: len(h.events(LlmRequest)) == 3)  # sent (ahead, as the silence ran)
    await stop(task)
    prompt = h.llm.requests[2]
    assert prompt[-4:] == [
        {"role": "assistant", "content": "Your total is 500 rupees. [interrupted]"},
        {"role": "user", "content": "hold on"},
        {"role": "assistant", "content": "Sure."},
        {"role": "user", "content": "yes"},
    ]
    assert not any(re.search(r"confirm", str(m["content"]), re.I) for m in prompt)
    # The session's record of requests holds exactly what the model was sent.
    logged = [e for e in h.events(LlmRequest)]
    assert [list(r.messages) for r in logged] == h.llm.requests  # type: ignore[attr-defined]
    assert [t.text for t in h.conversation.history.turns] == [
        "two masala dosas", "Your total is 500 rupees.", "hold on", "Sure.", "yes"]
