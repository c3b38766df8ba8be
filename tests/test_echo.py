"""Echo rejection at the text level: normalization, in-order fuzzy matching, the played window."""

from __future__ import annotations

import pytest

from edge_agent.conversation.echo import EchoFilter, normalize_words, words_equal, words_played
from edge_agent.heard.timings import WordTiming


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("7", "seven"),
        ("7:30", "seven thirty"),
        ("7:05", "seven oh five"),
        ("2024", "twenty twenty four"),
        ("1905", "nineteen oh five"),
        ("2005", "two thousand five"),
        ("$25", "twenty five dollars"),
        ("$1", "one dollar"),
        ("$25.50", "twenty five dollars fifty cents"),
        ("PM", "p m"),
        ("7pm", "seven p m"),
        ("at 7 am", "at seven a m"),
        ("I am", "i am"),
        ("500", "five hundred"),
        ("1,500", "one thousand five hundred"),
        ("125", "one hundred twenty five"),
        ("3.5", "three point five"),
        ("50%", "fifty percent"),
        ("21st", "twenty first"),
        ("2nd", "second"),
        ("Dr. Smith", "doctor smith"),
        ("TV", "t v"),
        ("OK", "okay"),
        ("It's free, isn't it?", "its free isnt it"),
        ("twenty-five", "twenty five"),
        ("p.m.", "p m"),
        ("o'clock", "oclock"),
        ("Fish & chips", "fish and chips"),
        ("", ""),
    ],
)
def test_normalize_words_spells_out_what_is_spoken(text: str, words: str) -> None:
    assert normalize_words(text) == words.split()


def test_recognizer_and_tts_text_normalize_alike() -> None:
    # What Piper is given and what PocketSphinx writes for the same speech.
    assert normalize_words("We have a table at 7:30 PM tonight.") == normalize_words(
        "we have a table at seven thirty p.m. tonight")


def test_fuzzy_equality_tolerates_a_misheard_letter_but_not_numbers_or_negation() -> None:
    assert words_equal("costs", "cost")
    assert words_equal("tables", "table")
    assert words_equal("four", "for")  # homophones the recognizer swaps
    assert words_equal("to", "two")
    assert not words_equal("seven", "eleven")
    assert not words_equal("eight", "eighteen")
    assert not words_equal("seventy", "seventeen")
    assert not words_equal("fifth", "fifty")
    assert not words_equal("does", "doesnt")
    assert not words_equal("can", "cant")
    assert not words_equal("a", "i")


PLAYING = "We have a table for four at seven thirty tonight, by the window."


def test_exact_echo_of_the_played_words() -> None:
    assert EchoFilter().is_echo("we have a table for four at seven thirty tonight by the window", PLAYING)


def test_partial_echo_the_mic_caught_only_the_middle() -> None:
    assert EchoFilter().is_echo("four at seven thirty", PLAYING)


def test_misrecognized_word_is_still_echo() -> None:
    # PocketSphinx heard "table" as "favorite" and "tonight" as "five".
    assert EchoFilter().is_echo("we have a favorite for seven thirty five", PLAYING)


def test_numbers_written_as_digits_match_the_spoken_words() -> None:
    assert EchoFilter().is_echo("table for four at seven thirty", "a table for 4 at 7:30 tonight")
    assert EchoFilter().is_echo("it costs twenty five dollars", "It costs $25 per person.")


def test_espeak_readings_match_too() -> None:
    # Piper (espeak-ng) says "2024" as "two thousand twenty four" and "$25" as "dollar twenty five".
    assert EchoFilter().is_echo("in two thousand twenty four we opened", "In 2024 we opened")
    assert EchoFilter().is_echo("it costs dollar twenty five", "It costs $25.")


def test_same_words_in_another_order_are_not_echo() -> None:
    shuffled = "window the by tonight thirty seven at four for table a have we"
    assert not EchoFilter().is_echo(shuffled, PLAYING)


def test_different_sentence_sharing_function_words_is_not_echo() -> None:
    assert not EchoFilter().is_echo("I want the table at eight", "the table at seven is free")
    assert not EchoFilter().is_echo("is there a table for five", PLAYING)


def test_user_talking_over_the_echo_is_not_echo() -> None:
    # The recognizer mixed the user's words with a few echo words.
    assert not EchoFilter().is_echo("no i want to cancel at seven thirty", PLAYING)


def test_short_utterances_and_min_words() -> None:
    echo = EchoFilter()
    # One word, and the agent was saying exactly that word: echo.
    assert echo.is_echo("yes", "Yes, we are open.")
    # One word the agent was not saying: a real reply.
    assert not echo.is_echo("no", "Yes, we are open.")
    # Short words never match fuzzily.
    assert not echo.is_echo("yeah", "Yes, we are open.")
    # One matching word is not enough evidence when the user said more.
    assert not echo.is_echo("yes please", "Yes, we are open.")
    assert not echo.is_echo("", "Yes, we are open.")
    assert not echo.is_echo("yes", "")
    strict = EchoFilter(min_words=3)
    assert strict.is_echo("we are", "Yes, we are open.")  # fewer than min_words, all match
    assert not strict.is_echo("we are closed", "Yes, we are open.")  # 2 of 3 < min_words
    assert echo.is_echo("we are closed", "Yes, we are open.")  # 2 of 3 >= 0.6 and >= 2


def test_min_match_is_the_share_of_recognized_words() -> None:
    playing = "the chef recommends the mushroom risotto"
    recognized = "the chef for a month of mushrooms"  # 3 of 7 in order
    assert not EchoFilter().is_echo(recognized, playing)
    assert EchoFilter(min_match=0.4).is_echo(recognized, playing)


@pytest.mark.parametrize(("min_match", "min_words"), [(0.0, 2), (1.5, 2), (0.6, 0)])
def test_bad_settings_are_refused(min_match: float, min_words: int) -> None:
    with pytest.raises(ValueError, match="EchoFilter"):
        EchoFilter(min_match=min_match, min_words=min_words)


TEXT = "Hi there, — it's 7:30."
# Hand-made timings: "—" speaks as nothing (zero-length span where it stands).
WORDS = (
    WordTiming("Hi", 0, 2, 100, 300),
    WordTiming("there,", 3, 9, 300, 600),
    WordTiming("—", 10, 11, 700, 700),
    WordTiming("it's", 12, 16, 700, 900),
    WordTiming("7:30.", 17, 22, 900, 1400),
)


@pytest.mark.parametrize(
    ("start", "end", "expected"),
    [
        (0, 2000, "Hi there, — it's 7:30."),
        (0, 100, ""),  # silence before the first word
        (0, 101, "Hi"),  # one sample of overlap at the start edge
        (299, 301, "Hi there,"),  # the window straddles a boundary
        (300, 600, "there,"),  # end is exclusive: "Hi" ended at 300, "—" starts at 700
        (650, 701, "— it's"),
        (1399, 5000, "7:30."),
        (1400, 5000, ""),  # past the last sample
        (500, 500, ""),  # empty window
        (800, 400, ""),  # reversed window
    ],
)
def test_words_played_slices_the_overlapping_words(start: int, end: int, expected: str) -> None:
    assert words_played(TEXT, WORDS, start, end) == expected


def test_words_played_without_timings_is_empty() -> None:
    assert words_played(TEXT, (), 0, 10_000) == ""
