"""The venue's knowledge files: what each format gives, and a clear error (file and line) for
what cannot be read."""

from __future__ import annotations

from pathlib import Path

import pytest

from edge_agent.errors import ConfigError
from edge_agent.knowledge.entries import MAX_ANSWER_CHARS, MAX_FILE_BYTES, MAX_PASSAGE_CHARS, Source
from edge_agent.knowledge.sources import combine, read_source


def _source(path: Path) -> Source:
    source, data = read_source(path)
    assert data == path.read_bytes()  # what was parsed is what is hashed
    return source


def _file(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_markdown_gives_a_section_per_heading_and_an_faq_entry_per_question(
        tmp_path: Path) -> None:
    source = _source(_file(tmp_path, "venue.md", """# The Museum

## Parking
There is **no** car park.
The [Harbour Garage](https://example.org) is 300 m away.

Keywords: car, garage
<!-- not said: internal note -->

## Can I bring my dog?
Only assistance dogs.

## Prices
- Adults: 14 euros
- Children under 12: free

| Ticket | Price |
|---|---|
| Student | 9 euros |

```
## not a heading
```
"""))
    entries = {e.topic: e for e in source.entries}
    assert set(entries) == {"Parking", "Can I bring my dog?", "Prices"}  # "# The Museum" has no text
    parking = entries["Parking"]
    assert parking.kind == "section" and parking.line == 3
    assert parking.answer == "There is no car park. The Harbour Garage is 300 m away."
    assert parking.keywords == ("car", "garage", "The Museum")  # and its parent heading
    assert entries["Can I bring my dog?"].kind == "faq"
    assert entries["Can I bring my dog?"].answer == "Only assistance dogs."
    assert entries["Prices"].answer == ("Adults: 14 euros. Children under 12: free. Ticket: "
                                        "Price. Student: 9 euros. ## not a heading")


def test_a_long_section_is_kept_as_passages_cut_between_sentences(tmp_path: Path) -> None:
    sentence = "The permanent collection shows ships, maps and paintings of the harbour. "
    source = _source(_file(tmp_path, "long.md", "## History\n" + sentence * 60))
    assert len(source.entries) > 1
    assert all(len(e.answer) <= MAX_PASSAGE_CHARS for e in source.entries)
    assert all(e.answer.endswith(".") and e.topic == "History" for e in source.entries)
    assert " ".join(e.answer for e in source.entries) == (sentence * 60).strip()


def test_csv_gives_faq_entries_with_every_phrasing(tmp_path: Path) -> None:
    source = _source(_file(tmp_path, "faq.csv", (
        'question,answer,keywords\n'
        '"Where can I park?|Is there parking?","Use the Harbour Garage, 300 m away.",car\n'
        'Can I park a bike?,,\n'
        '\n'
        'Do you take cash?,"No, cards only.",\n')))
    first, second = source.entries
    assert first.questions == ("Where can I park?", "Is there parking?", "Can I park a bike?")
    assert first.answer == "Use the Harbour Garage, 300 m away." and first.line == 2
    assert first.keywords == ("car",)
    assert second.questions == ("Do you take cash?",) and second.line == 5


def test_toml_gives_facts_faq_synonyms_hours_and_names(tmp_path: Path) -> None:
    source = _source(_file(tmp_path, "venue.toml", """
[venue]
names = ["Harbour Museum", "the museum"]

[hours]
daily = "10:00-17:00"
monday = "closed"

[hours.cafe]
names = ["coffee shop"]
daily = "9:30am-4:30pm"

[facts]
"phone number" = "Call us on 020 555 0143."

[facts."ticket prices"]
"adult ticket" = "14 euros"

[[faq]]
questions = ["Is there wifi?"]
answer = "Yes: HarbourGuest, no password."

[synonyms]
toilet = ["washroom"]
"""))
    facts = {e.topic: e for e in source.entries if e.kind == "fact"}
    assert facts["phone number"].answer == "Call us on 020 555 0143."
    assert facts["adult ticket"].answer == "Adult ticket: 14 euros."  # not a sentence: named
    assert facts["adult ticket"].group == "ticket prices" and facts["adult ticket"].line == 17
    (faq,) = [e for e in source.entries if e.kind == "faq"]
    assert faq.questions == ("Is there wifi?",) and faq.line == 19
    assert source.synonyms == (("toilet", "washroom"),)
    assert [s.place for s in source.schedules] == ["", "the cafe"]
    assert source.schedules[1].names == ("cafe", "coffee shop")
    assert source.names == ("Harbour Museum", "the museum")


@pytest.mark.parametrize(("name", "text", "where", "says"), [
    ("a.md", "## Parking\ntext\n##\n", "line 3", "a heading with no text"),
    ("a.md", f"## Is it free?\n{'x' * (MAX_ANSWER_CHARS + 5)}\n", "line 1", "said whole"),
    ("a.csv", "q,a\n", "line 1", "needs question and answer"),
    ("a.csv", "question,answer,price\n", "line 1", "unknown column 'price'"),
    ("a.csv", "question,answer\nWhere?,Here.\nWhy?,Because,extra\n", "line 3", "3 cells"),
    ("a.csv", "question,answer\nWhere?,\n", "line 2", "no answer"),
    ("a.csv", "question,answer\n,Here.\n", "line 2", "no question"),
    ("a.toml", "[venue]\nnames = [\"x\"]\n\n[wifi]\nssid = \"x\"\n", "line 4", "unknown table"),
    ("a.toml", "[hours]\ndaily = \"10-17\"\nmonday = \"ten to five\"\n", "line 3",
     "not a span of hours"),
    ("a.toml", "[hours]\nmonday = \"10:00-17:00\"\n", "line 1", "no hours for tuesday"),
    ("a.toml", "[hours]\ndaily = \"10:00-17:00\"\n[hours.dates]\n\"25 Dec\" = \"closed\"\n",
     "line 4", "not a date"),
    ("a.toml", "[facts]\nprice = 14\n", "line 2", "must be text"),
    ("a.toml", "[[faq]]\nanswer = \"x\"\n\n[[faq]]\nquestions = [\"y?\"]\n", "line 1",
     "needs questions"),
    ("a.toml", "[[faq]]\nquestions = [\"y?\"]\nanswer = \"y\"\n\n[[faq]]\nquestions = [\"z?\"]\n",
     "line 5",
     "needs answer"),
    ("a.toml", "[synonyms]\ntoilet = \"loo\"\n", "line 2", "lists the words"),
    ("a.toml", "[hours\n", "", "not valid TOML"),
    ("a.md", "## Parking\nThe garage \x1b[2J is free.\n", "line 1", "control character"),
    ("a.csv", "question,answer\nWhere?,\"Here\x07\"\n", "line 2", "control character"),
    ("a.toml", "[synonyms]\ntoilet = [\"loo\\u001b\"]\n", "", "control character"),
])
def test_what_cannot_be_read_is_named_with_its_file_and_line(
        tmp_path: Path, name: str, text: str, where: str, says: str) -> None:
    path = _file(tmp_path, name, text)
    with pytest.raises(ConfigError) as caught:
        _source(path)
    assert caught.value.path == str(path)
    assert caught.value.key == where
    assert says in caught.value.reason


def test_files_that_are_not_knowledge_are_refused_with_the_fix(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"must end in \.md"):
        _source(_file(tmp_path, "venue.txt", "hello"))
    with pytest.raises(ConfigError, match="knowledge file not found"):
        _source(tmp_path / "missing.md")
    binary = tmp_path / "venue.md"
    binary.write_bytes(b"## Parking\nok\n\xff\xfe\n")
    with pytest.raises(ConfigError) as caught:
        _source(binary)
    assert caught.value.key == "line 3" and "UTF-8" in caught.value.reason
    big = tmp_path / "big.md"
    big.write_bytes(b"x" * (MAX_FILE_BYTES + 1))
    with pytest.raises(ConfigError, match="split it into files"):
        _source(big)


def test_one_venue_has_one_set_of_hours(tmp_path: Path) -> None:
    hours = "[hours]\ndaily = \"10:00-17:00\"\n"
    sources = [_source(_file(tmp_path, "a.toml", hours)),
               _source(_file(tmp_path, "b.toml", hours))]
    with pytest.raises(ConfigError, match="given in two files"):
        combine(sources)
