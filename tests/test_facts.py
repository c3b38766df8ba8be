"""Deterministic fact extraction for long-term memory (edge_agent.memory.facts)."""

from __future__ import annotations

import dataclasses
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from edge_agent.memory.fact_words import number, spoken_digits
from edge_agent.memory.facts import (
    FactCandidate,
    clean_transcript,
    confirmed_facts,
    extract_facts,
    is_affirmation,
)

Expected = list[tuple[str, str]]


def _pairs(text: str) -> Expected:
    return [(f.key, f.value) for f in extract_facts(text)]


NAMES: list[tuple[str, Expected]] = [
    ("My name is Maria Garcia.", [("name", "Maria Garcia")]),
    ("my name is maria garcia and I need a table", [("name", "Maria Garcia")]),
    ("my name's john", [("name", "John")]),
    ("I'm John.", [("name", "John")]),
    ("Yes, I am Maria.", [("name", "Maria")]),
    ("Hi, this is Ana.", [("name", "Ana")]),
    ("call me Bob", [("name", "Bob")]),
    ("It's under the name garcia.", [("name", "Garcia")]),
    ("The name is Garcia.", [("name", "Garcia")]),
    ("A booking for Garcia at 8, please.", [("name", "Garcia"), ("time", "8 o'clock")]),
    ("The reservation is under Mr. Smith.", [("name", "Smith")]),
    ("My name is Jean-Luc Picard.", [("name", "Jean-Luc Picard")]),
    ("my name is o'brien", [("name", "O'Brien")]),
    ("I'm John, do you have my booking?", [("name", "John")]),
    ("I'm Dr. Watson.", [("name", "Watson")]),
    ("My name is, my name is Bob", [("name", "Bob")]),
    # Negatives: common words, lowercase implicit forms, negations and questions.
    ("I'm Fine, thanks.", []),
    ("I'm looking for the station.", []),
    ("I'm Here for the conference.", []),
    ("I am Going to the airport.", []),
    ("i'm maria", []),
    ("I'm Italian and I'd like a table.", []),
    ("A table for Valentine's Day please", []),
    ("This is great.", []),
    ("This is my first time here.", []),
    ("Call me back later.", []),
    ("Call me when you are ready.", []),
    ("My name is on the list.", []),
    ("my name is not Bob", []),
    ("That's not my name, I'm not Bob.", []),
    ("Is my name Bob?", []),
    ("Could you book it under the name Garcia?", []),
    ("a table for Tonight please", [("date", "tonight")]),
    ("A reservation for Four", [("party_size", "4")]),
]

NUMBERS: list[tuple[str, Expected]] = [
    ("my number is 555-123-4567", [("phone", "5551234567")]),
    ("Call me at (555) 123 4567.", [("phone", "5551234567")]),
    ("It's +44 20 7946 0958.", [("phone", "+442079460958")]),
    ("five five five one two three four", [("phone", "5551234")]),
    ("my phone number is double five five oh one two three", [("phone", "5550123")]),
    ("call me at five five five, one two three, four five six seven", [("phone", "5551234567")]),
    ("maria at example dot com", [("email", "maria@example.com")]),
    ("My email is Maria.Garcia@Example.com.", [("email", "maria.garcia@example.com")]),
    ("maria dot garcia at gmail dot com", [("email", "maria.garcia@gmail.com")]),
    ("send it to bob underscore lee at example dot org", [("email", "bob_lee@example.org")]),
    ("My booking number is 4471.", [("booking_id", "4471")]),
    ("booking number four four seven one", [("booking_id", "4471")]),
    ("booking reference b12", [("booking_id", "B12")]),
    ("The reservation number is 88.", [("booking_id", "88")]),
    ("confirmation code AB12C", [("booking_id", "AB12C")]),
    ("Booked. Your booking reference is B7.", [("booking_id", "B7")]),
    ('{"status": "booked", "booking_reference": "B7"}', [("booking_id", "B7")]),
    ("account number 12345678", [("account_id", "12345678")]),
    ("customer id 556", [("account_id", "556")]),
    ("member number 9", [("account_id", "9")]),
    ("order number 5521", [("order_id", "5521")]),
    ("order #5521", [("order_id", "5521")]),
    ("my room number is 212", [("room_number", "212")]),
    ("my room number is two twelve", [("room_number", "212")]),
    ("the ticket number is 7781", [("ticket_number", "7781")]),
    ("the ticket number is seventy seven eighty one", [("ticket_number", "7781")]),
    ("flight number BA 123", [("flight_number", "BA 123")]),
    ("Table number 5 please", [("table_number", "5")]),
    # Negatives.
    ("the number of people doesn't matter", []),
    ("My lucky number is 7.", []),
    ("The number is wrong.", []),
    ("What's your phone number?", []),
    ("the booking number isn't 4471", []),
    ("That costs $1,250,000.", []),
    ("I was born in 1985 and I live at 221 Baker Street.", []),
    ("I'll be at home dot", []),
    ("The wifi password is 12345678", []),
    ("I have 2 kids and it costs 12.50", []),
]

TIMES_AND_DATES: list[tuple[str, Expected]] = [
    ("7 PM", [("time", "7 PM")]),
    ("7:30 pm", [("time", "7:30 PM")]),
    ("at 7 p.m. please", [("time", "7 PM")]),
    ("at 19:00", [("time", "19:00")]),
    ("at eight", [("time", "8 o'clock")]),
    ("eight o'clock", [("time", "8 o'clock")]),
    ("at eight thirty tonight", [("time", "8:30"), ("date", "tonight")]),
    ("at 8.30 tomorrow", [("time", "8:30"), ("date", "tomorrow")]),
    ("half past seven", [("time", "7:30")]),
    ("quarter to eight in the evening", [("time", "7:45 PM")]),
    ("seven thirty pm", [("time", "7:30 PM")]),
    ("noon", [("time", "12 PM")]),
    ("Can I book for 7 PM?", [("time", "7 PM")]),
    ("Do you have a table at 7?", [("time", "7 o'clock")]),
    ("today", [("date", "today")]),
    ("Tomorrow evening", [("date", "tomorrow evening")]),
    ("next Friday", [("date", "next Friday")]),
    ("on friday", [("date", "Friday")]),
    ("March 3rd", [("date", "March 3")]),
    ("the 3rd of March", [("date", "March 3")]),
    ("the twenty-first of June", [("date", "June 21")]),
    ("12/03", [("date", "12/03")]),
    ("May 5th works", [("date", "May 5")]),
    # Negatives: no time context, negated, alternatives, checking questions, past dates.
    ("eight is too late", []),
    ("7 PM is too late", []),
    ("Is it 7 PM?", []),
    ("Is my booking for Friday?", []),
    ("7 PM or 8 PM", []),
    ("We want to come at 7 or 8.", []),
    ("not at 7, at 8 PM", [("time", "8 PM")]),
    ("I said 8 PM, not 9 PM.", [("time", "8 PM")]),
    ("Friday doesn't work for me, Saturday does.", [("date", "Saturday")]),
    ("It doesn't have to be Friday.", []),
    ("I came last Friday.", []),
    ("Look at 10 options.", []),
    ("I'll wait for five minutes.", []),
    ("It takes about 20 minutes by train.", []),
    ("Let's say around eight", []),
    ("We are at one with nature.", []),
    ("What time do you close today?", []),
    ("What about 7 PM?", [("time", "7 PM")]),
    ("When I arrive at 8 PM, I will call you.", [("time", "8 PM")]),
    ("May I have the bill", []),
]

PARTY_AND_ORDINARY: list[tuple[str, Expected]] = [
    ("for four people", [("party_size", "4")]),
    ("table for 4", [("party_size", "4")]),
    ("party of six", [("party_size", "6")]),
    ("four of us", [("party_size", "4")]),
    ("4 guests", [("party_size", "4")]),
    ("a table for twenty two", [("party_size", "22")]),
    ("We're a family of five.", [("party_size", "5")]),
    ("Is there a table for two tonight?", [("party_size", "2"), ("date", "tonight")]),
    ("I'd like a table for four, not five", [("party_size", "4")]),
    ("not for four people", []),
    ("One of us is vegetarian.", []),
    ("I want to book for 2 nights.", []),
    ("I'd like a coffee", []),
    ("that's fine thanks", []),
    ("I'd like two coffees and one tea please.", []),
    ("Can you tell me where the toilets are?", []),
    ("How much is it? About 12 euros?", []),
    ("I have one question.", []),
    ("Number one is my favorite.", []),
    ("", []),
    (
        "I'd like to book a table for Saturday the 3rd of March at half past seven for six people "
        "under the name O'Brien.",
        [("date", "March 3"), ("time", "7:30"), ("party_size", "6"), ("name", "O'Brien")],
    ),
    (
        "Booking confirmed: reference B7, table for 2 at 19:00 on Friday under the name Garcia.",
        [
            ("booking_id", "B7"),
            ("party_size", "2"),
            ("time", "19:00"),
            ("date", "Friday"),
            ("name", "Garcia"),
        ],
    ),
]


@pytest.mark.parametrize(("utterance", "expected"), NAMES)
def test_names(utterance: str, expected: Expected) -> None:
    assert _pairs(utterance) == expected


@pytest.mark.parametrize(("utterance", "expected"), NUMBERS)
def test_numbers_phones_emails_and_ids(utterance: str, expected: Expected) -> None:
    assert _pairs(utterance) == expected


@pytest.mark.parametrize(("utterance", "expected"), TIMES_AND_DATES)
def test_times_and_dates(utterance: str, expected: Expected) -> None:
    assert _pairs(utterance) == expected


@pytest.mark.parametrize(("utterance", "expected"), PARTY_AND_ORDINARY)
def test_party_size_and_ordinary_sentences(utterance: str, expected: Expected) -> None:
    assert _pairs(utterance) == expected


def test_last_value_for_a_key_wins_in_order_of_appearance() -> None:
    facts = extract_facts("At 7 PM for two people, no wait, at 8 PM. My name is Ana.")
    assert [(f.key, f.value) for f in facts] == [("party_size", "2"), ("time", "8 PM"), ("name", "Ana")]


def test_text_is_the_verbatim_source_span_even_around_fillers() -> None:
    source = "Um, my name is, uh, Maria and my booking number is 4471."
    facts = extract_facts(source)
    assert facts == [
        FactCandidate("name", "Maria", "my name is, uh, Maria"),
        FactCandidate("booking_id", "4471", "booking number is 4471"),
    ]
    with pytest.raises(dataclasses.FrozenInstanceError):
        facts[0].value = "Bob"  # type: ignore[misc]


CLEANING: list[tuple[str, str]] = [
    ("I I want a table", "I want a table"),
    ("the the table", "the table"),
    ("I want I want a table", "I want a table"),
    ("I- I need a taxi", "I need a taxi"),
    ("I want, um, a table for, uh, four", "I want a table for four"),
    ("Um. My name is Bob.", "My name is Bob."),
    ("hmm... yes", "yes"),
    ("er, erm, ok", "ok"),
    ("uh-huh", "uh-huh"),
    ("five five five one two three four", "five five five one two three four"),
    ("double five five", "double five five"),
    ("call 555 555 1234", "call 555 555 1234"),
    ("It's B B 12", "It's B B 12"),
    ("  hello ,  world  ", "hello, world"),
    ("It costs 12.50, um, total.", "It costs 12.50 total."),
]


@pytest.mark.parametrize(("text", "expected"), CLEANING)
def test_clean_transcript(text: str, expected: str) -> None:
    assert clean_transcript(text) == expected


@given(st.lists(st.sampled_from(["um", "uh", "I", "the", "5", "55", "five", "-", ",", ".", "Bob", "at"])))
def test_cleaning_never_changes_digits_and_spans_stay_verbatim(parts: list[str]) -> None:
    text = " ".join(parts)
    assert re.sub(r"\D", "", clean_transcript(text)) == re.sub(r"\D", "", text)
    assert all(f.text in text for f in extract_facts(text))


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("yes", True),
        ("Yeah, thanks.", True),
        ("Yep.", True),
        ("correct", True),
        ("That's right.", True),
        ("exactly", True),
        ("sure", True),
        ("right", True),
        ("Perfect!", True),
        ("sounds good", True),
        ("ok", True),
        ("Okay, thank you.", True),
        ("um, yes", True),
        ("yes, no problem", True),
        ("no", False),
        ("No, nine.", False),
        ("that's wrong", False),
        ("not quite", False),
        ("yes but at nine", False),
        ("yes, actually make it nine", False),
        ("right?", False),
        ("I'm not sure", False),
        ("nope", False),
        ("", False),
    ],
)
def test_is_affirmation(reply: str, expected: bool) -> None:
    assert is_affirmation(reply) is expected


AGENT = "Your table for four is booked at 8 PM, reference B12."


@pytest.mark.parametrize(
    ("agent_heard", "reply", "expected"),
    [
        (AGENT, "yes, thanks", [("party_size", "4"), ("time", "8 PM"), ("booking_id", "B12")]),
        (AGENT, "Perfect.", [("party_size", "4"), ("time", "8 PM"), ("booking_id", "B12")]),
        (AGENT, "yes, at eight", [("party_size", "4"), ("time", "8 PM"), ("booking_id", "B12")]),
        (AGENT, "no, nine", []),
        (AGENT, "yes, at 9 PM", []),
        (AGENT, "yes, three people", []),
        (AGENT, "yes but for five", []),
        # Only what the listener heard counts: the reference was cut off.
        ("Your table for four is booked at 8 PM, refer", "yes", [("party_size", "4"), ("time", "8 PM")]),
        ("Shall I book a table for two at 7 PM tomorrow?", "yes", [("party_size", "2"), ("time", "7 PM"),
                                                                    ("date", "tomorrow")]),
        ("Is that 7 PM?", "yes", [("time", "7 PM")]),
        ("Your name is Bob, right?", "that's right", [("name", "Bob")]),
        ("Did you say your name is Bob?", "yes", [("name", "Bob")]),
        ("Would you like anything else?", "yes", []),
    ],
)
def test_confirmed_facts(agent_heard: str, reply: str, expected: Expected) -> None:
    assert [(f.key, f.value) for f in confirmed_facts(agent_heard, reply)] == expected


def test_spoken_number_helpers() -> None:
    assert spoken_digits("four four seven one") == "4471"
    assert spoken_digits("double five oh one") == "5501"
    assert spoken_digits("triple seven") == "777"
    assert spoken_digits("five hundred and twelve") == "512"
    assert spoken_digits("seventy seven eighty one") == "7781"
    assert number("twenty-two") == 22
    assert number("oh five") == 5
    assert number("banana") is None
