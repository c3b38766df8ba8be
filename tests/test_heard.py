"""Heard-truth logic: properties over random texts and positions, and the ledger's guarantees."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from edge_agent.heard import HeardPolicy, UnitLedger, WordTiming, heard_prefix
from edge_agent.heard.timings import PhonemeWord, align_words, split_phoneme_words, tokenize

_words = st.lists(
    st.text(alphabet="abcdefghij,.!?$7:'", min_size=1, max_size=8), min_size=1, max_size=12)
_spaces = st.sampled_from([" ", "  ", "\n", " \t"])


@st.composite
def _unit(draw: st.DrawFn) -> tuple[str, list[WordTiming], int]:
    tokens = draw(_words)
    text = draw(st.sampled_from(["", " "])) + draw(_spaces).join(tokens) + draw(
        st.sampled_from(["", " ", "\n"]))
    timings = []
    position = draw(st.integers(0, 500))
    for start, end in tokenize(text):
        length = draw(st.integers(0, 3000))
        timings.append(WordTiming(text[start:end], start, end, position, position + length))
        position += length + draw(st.integers(0, 800))
    total = position + draw(st.integers(0, 1000))
    return text, timings, total


@given(_unit(), st.integers(-10, 60000), st.sampled_from(list(HeardPolicy)))
def test_heard_is_a_verbatim_prefix(unit: tuple[str, list[WordTiming], int], played: int,
                                    policy: HeardPolicy) -> None:
    text, words, total = unit
    heard = heard_prefix(text, words, played, total, policy)
    assert text.startswith(heard)


@given(_unit(), st.integers(0, 60000), st.integers(0, 60000), st.sampled_from(list(HeardPolicy)))
def test_heard_grows_with_the_played_position(unit: tuple[str, list[WordTiming], int], a: int,
                                              b: int, policy: HeardPolicy) -> None:
    text, words, total = unit
    low, high = sorted((a, b))
    assert heard_prefix(text, words, high, total, policy).startswith(
        heard_prefix(text, words, low, total, policy))


@given(_unit(), st.integers(0, 1000))
def test_past_the_end_is_the_whole_text(unit: tuple[str, list[WordTiming], int],
                                        extra: int) -> None:
    text, words, total = unit
    assert heard_prefix(text, words, max(total, 1) + extra, max(total, 1)) == text


@given(_unit())
def test_nothing_is_heard_before_the_first_word_ends(
        unit: tuple[str, list[WordTiming], int]) -> None:
    text, words, total = unit
    first_end = words[0].end_sample
    if first_end > 0 and first_end < total:
        assert heard_prefix(text, words, first_end - 1, total, HeardPolicy.COMPLETED) == ""


@given(st.text(min_size=1, max_size=80), st.floats(0.0, 1.0))
def test_without_timings_the_fraction_cuts_back_to_a_word(text: str, fraction: float) -> None:
    total = 10000
    heard = heard_prefix(text, [], int(fraction * total), total)
    assert text.startswith(heard)
    assert not heard or heard == text or text[len(heard)].isspace()  # never inside a word


def test_completed_and_started_policies() -> None:
    text = "One at 7 PM, one at 8 PM."
    spans = tokenize(text)
    words = [WordTiming(text[s:e], s, e, i * 100, i * 100 + 80) for i, (s, e) in enumerate(spans)]
    assert heard_prefix(text, words, 379, 1000) == "One at 7"
    assert heard_prefix(text, words, 380, 1000) == "One at 7 PM,"  # punctuation kept
    assert heard_prefix(text, words, 301, 1000, HeardPolicy.STARTED) == "One at 7 PM,"
    assert heard_prefix(text, words, 300, 1000, HeardPolicy.STARTED) == "One at 7"


def test_text_generated_but_not_synthesized_is_never_heard() -> None:
    text = "First clause. Second clause not yet spoken."
    words = [WordTiming("First", 0, 5, 0, 50), WordTiming("clause.", 6, 13, 60, 100)]
    assert heard_prefix(text, words, 10_000, 120, audio_text_end=14) == "First clause."


def test_split_phoneme_words_excludes_pauses_and_markers() -> None:
    pairs = [("^", 100), ("h", 10), ("i", 10), (",", 300), (" ", 20), ("j", 10), ("o", 10),
             (".", 200), ("$", 50)]
    assert split_phoneme_words(pairs, offset=1000) == [
        PhonemeWord("hi", 1100, 1120), PhonemeWord("jo", 1440, 1460)]


def test_mismatched_counts_give_safe_bounds() -> None:
    # espeak would say "2024" as four words; pretend the sentence spoke it as three.
    spoken = [PhonemeWord(p, i * 100, i * 100 + 80) for i, p in enumerate(
        ["in", "two", "thousand", "twenty", "ok"])]
    counts = {"in": 1, "2024": 4, "ok": 1}
    words = align_words("in 2024 ok", spoken[:1] + spoken[2:], counts.__getitem__, 500)
    assert [w.exact for w in words] == [True, False, True]
    assert words[1].end_sample >= 380  # never earlier than the truth


def test_ledger_finalizes_each_unit_once_in_order() -> None:
    ledger = UnitLedger()
    first, second, third = ledger.open(16000), ledger.open(16000), ledger.open(16000)
    first.add_text("Hello there.")
    first.add_audio(1000, [WordTiming("Hello", 0, 5, 0, 400), WordTiming("there.", 6, 12, 500, 900)],
                    0, 12)
    second.add_text("Never played.")
    done = ledger.finalize(second, 0)
    assert [f.unit_id for f in done] == [first.unit_id, second.unit_id]
    assert done[0].heard == "Hello there." and not done[0].interrupted
    assert done[1].heard == "" and done[1].interrupted
    assert ledger.finalize(second, 0) == []  # never twice
    (empty,) = ledger.finalize_all(device_played=0)
    assert (empty.unit_id, empty.generated, empty.heard) == (third.unit_id, "", "")
    assert ledger.open_units == ()


def test_inexact_words_are_counted_in_the_record() -> None:
    from edge_agent.memory.record import unit_words

    ledger = UnitLedger()
    unit = ledger.open(1000)
    unit.add_text("in 2024 ok")
    unit.add_audio(500, [WordTiming("in", 0, 2, 0, 80), WordTiming("2024", 3, 7, 100, 400, False),
                         WordTiming("ok", 8, 10, 400, 480)], 0, 10)
    (finalize,) = ledger.finalize(unit, 450)
    assert finalize.inexact_words == 1
    words = unit_words(finalize)
    assert [w.get("exact", True) for w in words] == [True, False, True]
    assert finalize.heard == "in 2024" and finalize.played_ms == 450
