"""Looking a turn up in the venue's knowledge: what is said directly, what the model is shown,
what gets the fallback line, and the index kept in step with the files."""

from __future__ import annotations

import dataclasses
import os
import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlite_utils import Database

from edge_agent.app import grounding_settings
from edge_agent.config import Config
from edge_agent.knowledge.check import findings
from edge_agent.knowledge.ground import NOTE_HEADER, Context
from edge_agent.knowledge.index import KnowledgeIndex
from edge_agent.knowledge.live import VenueKnowledge
from edge_agent.memory.store import MemoryStore

TOML = """
[venue]
names = ["Harbour Museum", "the museum"]

[hours]
daily = "10:00-17:00"
monday = "closed"

[facts."ticket prices"]
"adult ticket" = "An adult ticket costs 14 euros."
"child ticket" = "Children under 12 go free."
"student ticket" = "Students pay 9 euros."

[facts]
"phone number" = "The museum's phone number is 020 555 0143."

[[faq]]
questions = ["Can I pay by card?", "Do you take cash?"]
answer = "We take cards, not cash."

[synonyms]
dog = ["dogs", "pet", "pets"]
locker = ["bag", "backpack"]
"""
MARKDOWN = """# Harbour Museum

## Parking
There is no car park at the museum. The Harbour Garage, 300 metres away, costs 3 euros an hour.

## Dogs
Dogs are not allowed inside, except assistance dogs.

## Guided tours
Guided tours start at 11 AM and 2 PM and cost 5 euros on top of your ticket. A tour lasts one
hour. Tours are in English. Book at the front desk on the day. A tour takes at most 20 people.
The guides are volunteers from the harbour's old shipyard, and many of them worked there for
forty years or more before it closed, so ask them anything about the ships.
"""
CSV = """question,answer
Where can I leave my bag?|Are there lockers?,"Lockers are in the basement; they take a 1 euro coin."
Where is the cloakroom?,"The cloakroom is free, by the entrance."
"""
THURSDAY = datetime(2026, 12, 3, 14, 0, tzinfo=UTC)
FALLBACK = "I'm not sure about that. Please ask at the front desk."


def _venue(tmp_path: Path) -> list[Path]:
    files = []
    for name, text in (("venue.toml", TOML), ("venue.md", MARKDOWN), ("faq.csv", CSV)):
        (tmp_path / name).write_text(text, encoding="utf-8")
        files.append(tmp_path / name)
    return files


def _knowledge(files: list[Path], index: KnowledgeIndex | None = None,
               tools: tuple[str, ...] = (), **settings: object) -> VenueKnowledge:
    base = dataclasses.replace(grounding_settings(Config(), tools), timezone="UTC")
    knowledge = VenueKnowledge(files, index or KnowledgeIndex.in_memory(),
                               dataclasses.replace(base, **settings), lambda: THURSDAY)
    knowledge.load()
    return knowledge


@pytest.fixture
def museum(tmp_path: Path) -> Iterator[VenueKnowledge]:
    knowledge = _knowledge(_venue(tmp_path))
    yield knowledge
    knowledge.close()


@pytest.mark.parametrize(("asked", "said"), [
    ("How much is an adult ticket?", "An adult ticket costs 14 euros."),
    ("Do you take credit cards?", "We take cards, not cash."),
    ("what's the museum's phone number", "The museum's phone number is 020 555 0143."),
    ("Are pets allowed inside?", "Dogs are not allowed inside, except assistance dogs."),
    ("wear can I park", "There is no car park at the museum. The Harbour Garage, 300 metres "
                        "away, costs 3 euros an hour."),
    ("Where can I put my backpack?", "Lockers are in the basement; they take a 1 euro coin."),
    # a long section: the sentences holding the question's words
    ("How much is a guided tour?", "Guided tours start at 11 AM and 2 PM and cost 5 euros on "
                                   "top of your ticket. A tour lasts one hour."),
    # several facts of one group match equally: all of them, in the file's order
    ("How much are tickets?", "An adult ticket costs 14 euros. Children under 12 go free. "
                              "Students pay 9 euros."),
])
def test_an_entry_that_surely_answers_is_said_as_written(museum: VenueKnowledge, asked: str,
                                                         said: str) -> None:
    grounding = museum.ground(asked)
    assert (grounding.how, grounding.say) == ("direct", said)
    assert grounding.ms > 0


def test_the_opening_hours_are_answered_on_the_clock(museum: VenueKnowledge) -> None:
    assert museum.ground("Is the museum open now?").say == "Yes, we're open now, until 5 PM."
    assert museum.ground("Are you open on Monday?").say == "No, on Monday we're closed."
    follow = museum.ground("and on sunday?", Context(previous_question="Are you open on Monday?"))
    assert (follow.how, follow.say) == ("hours", "Yes, on Sunday we're open from 10 AM to 5 PM.")


@pytest.mark.parametrize("asked", [
    "What is the wifi password?", "Can I pay with bitcoin?", "Who is the director?",
    "Is there a cinema nearby?", "I can rent a bike here",
])
def test_what_the_knowledge_does_not_cover_gets_the_fallback_line(museum: VenueKnowledge,
                                                                   asked: str) -> None:
    grounding = museum.ground(asked)
    assert (grounding.how, grounding.say) == ("fallback", FALLBACK)


@pytest.mark.parametrize(("asked", "context"), [
    ("Hello!", Context()), ("Thank you very much.", Context()), ("How are you today?", Context()),
    ("Can you repeat that?", Context()), ("My name is Anna.", Context()),
    ("What is it?", Context()),
    # an answer to the agent's own question is the model's
    ("Four people, at seven.", Context(agent_asked=True)),
])
def test_small_talk_and_answers_to_the_agent_go_to_the_model(
        museum: VenueKnowledge, asked: str, context: Context) -> None:
    assert museum.ground(asked, context).how == "chat"


def test_a_question_about_what_a_tool_does_is_the_models(tmp_path: Path) -> None:
    knowledge = _knowledge(_venue(tmp_path), tools=("book_table",))
    try:
        assert knowledge.ground("Can I book a table?").how == "chat"
        assert knowledge.ground("Can I book a guided tour?").how == "direct"
    finally:
        knowledge.close()


def test_a_lesser_match_goes_to_the_model_with_the_entries_in_its_budget(tmp_path: Path) -> None:
    knowledge = _knowledge(_venue(tmp_path), direct="off", prompt_tokens=16)
    try:
        grounding = knowledge.ground("Where can I park?")
        assert grounding.how == "model" and grounding.say == ""
        lines = grounding.note.splitlines()
        assert lines[0] == NOTE_HEADER
        assert len(lines) == 2 and lines[1].startswith("- Parking: There is no car park")
        assert len(lines[1]) <= 16 * 4 + 2 and lines[1].endswith(" …")  # cut to the budget
    finally:
        knowledge.close()


def test_two_entries_that_say_different_things_equally_are_not_said_directly(
        tmp_path: Path) -> None:
    files = _venue(tmp_path)
    with files[2].open("a", encoding="utf-8") as csv:
        csv.write('Is there a cloakroom?,"No cloakroom, sorry: use the lockers."\n')
    knowledge = _knowledge(files)
    try:
        grounding = knowledge.ground("Is there a cloakroom?")
        assert grounding.how == "model"
        assert {m.entry.ref for m in grounding.matches} >= {"faq.csv:3", "faq.csv:4"}
        found = {f.kind for f in findings(knowledge)}
        assert "ambiguous" in found
    finally:
        knowledge.close()


def test_check_flags_a_question_written_twice(tmp_path: Path) -> None:
    files = _venue(tmp_path)
    with files[2].open("a", encoding="utf-8") as csv:
        csv.write('Do you take cash?,"Cash is fine."\n')
    knowledge = _knowledge(files)
    try:
        (same,) = [f for f in findings(knowledge) if f.kind == "same question"]
        assert same.entries == ("venue.toml:17", "faq.csv:4")
        assert "'do you take cash'" in same.text
    finally:
        knowledge.close()


def _touch(path: Path, text: str) -> None:
    before = path.stat().st_mtime_ns
    path.write_text(text, encoding="utf-8")
    os.utime(path, ns=(before + 10**9, before + 10**9))  # a distinct time, whatever the clock


def test_an_edited_file_is_indexed_again_and_a_broken_edit_keeps_what_was_there(
        tmp_path: Path) -> None:
    files = _venue(tmp_path)
    database = tmp_path / "memory.db"
    MemoryStore.open(database).close()
    knowledge = _knowledge(files, KnowledgeIndex.open(database))
    try:
        assert knowledge.refresh().indexed == ()  # nothing changed
        _touch(files[1], MARKDOWN.replace("3 euros an hour", "4 euros an hour"))
        assert knowledge.refresh().indexed == (str(files[1]),)
        assert "4 euros an hour" in knowledge.ground("Where can I park?").say

        _touch(files[0], TOML.replace('daily = "10:00-17:00"', 'daily = "ten to five"'))
        refreshed = knowledge.refresh()
        assert refreshed.indexed == ()
        (error,) = refreshed.errors
        assert error.startswith(f"{files[0]}: line 6: 'ten to five' is not a span of hours")
        assert error.endswith("answering from what it held before")
        assert knowledge.ground("How much is an adult ticket?").say == (
            "An adult ticket costs 14 euros.")
        assert knowledge.ground("Are you open now?").say == "Yes, we're open now, until 5 PM."
        assert knowledge.refresh().errors == ()  # said once per change
    finally:
        knowledge.close()


def test_a_restart_with_the_same_files_indexes_nothing_and_other_synonyms_index_all(
        tmp_path: Path) -> None:
    files = _venue(tmp_path)
    database = tmp_path / "memory.db"
    MemoryStore.open(database).close()
    first = _knowledge(files, KnowledgeIndex.open(database))
    first.close()
    again = VenueKnowledge(files, KnowledgeIndex.open(database), first.settings, lambda: THURSDAY)
    try:
        assert again.load().indexed == ()
        assert again.ground("Where can I park?").how == "direct"
        _touch(files[0], TOML.replace('locker = ["bag", "backpack"]',
                                      'locker = ["bag", "backpack", "rucksack"]'))
        assert set(again.refresh().indexed) == {str(f) for f in files}
        assert again.ground("Where can I leave my rucksack?").how == "direct"
    finally:
        again.close()
    dropped = VenueKnowledge(files[:1], KnowledgeIndex.open(database), first.settings,
                             lambda: THURSDAY)
    try:
        dropped.load()
        assert dropped.ground("Where can I park?").how == "fallback"  # its file is not named
    finally:
        dropped.close()


def test_the_index_finds_the_answer_among_ten_thousand_passages(tmp_path: Path) -> None:
    files = _venue(tmp_path)
    many = tmp_path / "catalogue.md"
    many.write_text("\n".join(f"## Exhibit {n}\nA ship model, number {n}, from the harbour's "
                              f"tour collection, room {n % 40}.\n" for n in range(10_000)),
                    encoding="utf-8")
    knowledge = _knowledge([*files, many])
    try:
        assert knowledge.ground("Are pets allowed inside?").say.startswith("Dogs are not")
        assert knowledge.ground("How much is a guided tour?").how == "direct"
    finally:
        knowledge.close()


def test_an_index_that_cannot_be_written_now_is_tried_again(tmp_path: Path) -> None:
    files = _venue(tmp_path)
    database = tmp_path / "memory.db"
    MemoryStore.open(database).close()
    connection = sqlite3.connect(database, timeout=0.1, isolation_level=None,
                                 check_same_thread=False)
    knowledge = _knowledge(files, KnowledgeIndex(Database(connection)))
    other = sqlite3.connect(database, isolation_level=None)
    try:
        _touch(files[1], MARKDOWN.replace("3 euros an hour", "4 euros an hour"))
        other.execute("BEGIN EXCLUSIVE")  # another writer holds the database
        (error,) = knowledge.refresh().errors
        assert error.startswith("the knowledge index could not be updated (OperationalError")
        assert "3 euros an hour" in knowledge.ground("Where can I park?").say
        other.execute("COMMIT")
        assert knowledge.refresh().indexed == (str(files[1]),)
        assert "4 euros an hour" in knowledge.ground("Where can I park?").say
    finally:
        other.close()
        knowledge.close()
