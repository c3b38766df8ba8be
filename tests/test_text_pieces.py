"""Clause splitting and VAD segmentation."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from edge_agent.conversation.clauses import ClauseSplitter, MarkerFilter
from edge_agent.conversation.segmenter import SegmenterSettings, SpeechSegmenter


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


def test_a_reply_without_punctuation_comes_in_clauses_of_bounded_words() -> None:
    words = [f"word{i}" for i in range(600)]
    words[40] = "because"  # a phrase start in the second half of a run: cut before it
    text = " ".join(words)
    clauses = _split([text[i : i + 7] for i in range(0, len(text), 7)])
    assert "".join(clauses) == text
    assert max(len(clause.split()) for clause in clauses) <= 16
    assert len(clauses) >= 600 // 16
    assert any(clause.startswith("because ") for clause in clauses)


@given(st.lists(st.text(alphabet="ab .,!?\n", max_size=12), max_size=20))
def test_every_character_comes_out_once_in_order(pieces: list[str]) -> None:
    clauses = _split(pieces)
    assert "".join(clauses) == "".join(pieces)
    assert all(len(clause.split()) <= 16 for clause in clauses)


def test_segmenter_onset_and_trailing_silence() -> None:
    segmenter = SpeechSegmenter(SegmenterSettings(0.5, min_speech_ms=96), 32)
    probabilities = [0.9, 0.1] + [0.9] * 10 + [0.2] * 9 + [0.4, 0.0, 0.0]
    silences = []
    onsets = []
    for i, p in enumerate(probabilities):
        if segmenter.push(p):
            onsets.append(i)
        silences.append(segmenter.silence_ms)
    # Onset needs 3 consecutive speech frames (96 ms). Inside speech a frame is silence below
    # threshold - 0.15: 0.2 counts, 0.4 (a soft syllable) restarts the count.
    assert onsets == [4]
    assert silences[11] == 0 and silences[20] == 9 * 32 and silences[21] == 0
    assert silences[23] == 2 * 32 and segmenter.in_speech
    segmenter.end()
    assert not segmenter.in_speech and segmenter.silence_ms == 0 and segmenter.speech_ms == 0


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
