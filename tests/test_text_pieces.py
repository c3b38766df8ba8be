"""Clause splitting and VAD segmentation."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from edge_agent.conversation.clauses import ClauseSplitter, MarkerFilter
from edge_agent.conversation.segmenter import Boundary, SegmenterSettings, SpeechSegmenter


def _split(pieces: list[str]) -> list[str]:
    splitter = ClauseSplitter()
    clauses = [c for p in pieces for c in splitter.push(p)]
    return [*clauses, splitter.flush()]


def test_sentences_split_as_they_stream_and_abbreviations_do_not() -> None:
    text = "Dr. Smith is in. We open at 7.30 tomorrow! Want e.g. a table? Sure"
    clauses = _split([text[i : i + 3] for i in range(0, len(text), 3)])
    assert clauses == ["Dr. Smith is in. ", "We open at 7.30 tomorrow! ", "Want e.g. a table? ", "Sure"]


def test_long_clauses_break_at_commas() -> None:
    text = "We have three tables free tonight at the restaurant, one at seven, one at eight"
    clauses = _split([text])
    assert clauses[0] == "We have three tables free tonight at the restaurant, "
    assert "".join(clauses) == text


@given(st.lists(st.text(alphabet="ab .,!?\n", max_size=12), max_size=20))
def test_every_character_comes_out_once_in_order(pieces: list[str]) -> None:
    assert "".join(_split(pieces)) == "".join(pieces)


def test_segmenter_onset_and_end_of_turn() -> None:
    segmenter = SpeechSegmenter(SegmenterSettings(0.5, min_speech_ms=96, end_silence_ms=320), 32)
    probabilities = [0.9, 0.1] + [0.9] * 10 + [0.2] * 9 + [0.0] * 2
    boundaries = [(i, b) for i, p in enumerate(probabilities) if (b := segmenter.push(p))]
    # Onset needs 3 consecutive speech frames (96 ms); the end needs 10 quiet ones (320 ms).
    assert boundaries == [(4, Boundary.START), (21, Boundary.END)]


@given(st.lists(st.text(alphabet="ab [].,iterupd\n", max_size=8), max_size=12))
def test_marker_filter_passes_text_without_the_marker_unchanged(pieces: list[str]) -> None:
    text = "".join(pieces)
    marker_filter = MarkerFilter(" [interrupted]")
    out = "".join(marker_filter.push(p) for p in pieces) + marker_filter.flush()
    if "[interrupted]" not in text:
        assert out == text
    else:
        assert "[interrupted]" not in out


def test_marker_filter_cuts_the_marker_even_in_pieces() -> None:
    marker_filter = MarkerFilter(" [interrupted]")
    pieces = ["No dogs", ", sorry.", " [", "inter", "rupted", "]", " Anything else?"]
    out = "".join(marker_filter.push(p) for p in pieces) + marker_filter.flush()
    assert out == "No dogs, sorry. Anything else?"
    off = MarkerFilter("")
    assert off.push("kept [interrupted]") + off.flush() == "kept [interrupted]"
