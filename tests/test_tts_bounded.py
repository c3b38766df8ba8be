"""The voice takes text of any length and any characters: bounded pieces, sanitized input."""

from __future__ import annotations

import itertools
import json
import re
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from edge_agent.engines.speech_text import (
    MAX_PIECE_CHARS,
    MAX_PIECE_WORDS,
    sanitize_for_speech,
    split_speech_text,
)
from edge_agent.engines.tts import MAX_SENTENCE_PHONEMES, PiperSpeech
from edge_agent.heard.timings import WordTiming, align_words

# Runs of characters that a terminal would show: what the timed words must be.
_VISIBLE_WORD = re.compile(r"[^\s\x00-\x1f\x7f\ud800-\udfff]+")


def _pieces(text: str, **bounds: int) -> list[str]:
    return [text[start:end] for start, end in split_speech_text(text, **bounds)]


# -- splitting (pure) ---------------------------------------------------------------------

@pytest.mark.parametrize(("text", "bounds", "expected"), [
    # Within the bounds: one piece, untouched.
    ("We have a table for four at seven.", {}, ["We have a table for four at seven."]),
    ("", {}, []),
    # Sentence ends come first, as late as the bound allows (two sentences share a piece).
    ("One two. Three four. Five six seven eight.", {"max_chars": 22},
     ["One two. Three four. ", "Five six seven eight."]),
    ("Is it? Yes! Fine… Then go.", {"max_chars": 12}, ["Is it? Yes! ", "Fine… ", "Then go."]),
    # A sentence end is preferred to a later comma.
    ("Hi. We open at nine, close at ten", {"max_chars": 24}, ["Hi. ", "We open at nine, ", "close at ten"]),
    # Then clause breaks: , ; : and dashes.
    ("one two, three four; five six: seven", {"max_chars": 16},
     ["one two, ", "three four; ", "five six: seven"]),
    ("We open—at nine", {"max_chars": 10}, ["We open—", "at nine"]),
    ("We open – at nine", {"max_chars": 10}, ["We open – ", "at nine"]),
    ("wait - we open at nine", {"max_chars": 10}, ["wait - ", "we open at", " nine"]),
    # Then word boundaries; the word bound holds as well as the character bound.
    ("one two three four five six seven", {"max_words": 3},
     ["one two three ", "four five six ", "seven"]),
    ("alpha beta gamma delta", {"max_chars": 12}, ["alpha beta ", "gamma delta"]),
    # Whitespace after a cut stays with the piece before it, within its bound.
    ("one.     two", {"max_chars": 6}, ["one.  ", "   two"]),
    # A word longer than the bound is cut inside.
    ("x" * 25, {"max_chars": 10}, ["x" * 10, "x" * 10, "x" * 5]),
    ("ab " + "y" * 12, {"max_chars": 10}, ["ab ", "y" * 10, "yy"]),
    # Not between a letter and its combining mark.
    ("abcde\u0301fgh", {"max_chars": 5}, ["abcd", "e\u0301fgh"]),
])
def test_split_prefers_sentence_then_clause_then_word_boundaries(
        text: str, bounds: dict[str, int], expected: list[str]) -> None:
    assert _pieces(text, **bounds) == expected


def test_a_500_character_word_is_still_split() -> None:
    word = "".join("abcdefghij"[i % 10] for i in range(500))
    pieces = _pieces(f"Say {word} now.")
    assert "".join(pieces) == f"Say {word} now."
    assert len(pieces) >= 3
    assert all(len(piece) <= MAX_PIECE_CHARS for piece in pieces)


def test_a_normal_clause_is_one_piece() -> None:
    clause = "Great, I have booked a table for four people tonight at seven thirty in the garden. "
    assert split_speech_text(clause) == [(0, len(clause))]
    thirty = " ".join(["word"] * MAX_PIECE_WORDS)
    assert split_speech_text(thirty) == [(0, len(thirty))]
    assert len(split_speech_text(thirty + " more")) == 2


_text = st.lists(
    st.one_of(st.sampled_from(["Hello", "we", "open", "at", "nine", "x" * 40, "7:30", "$25"]),
              st.text(alphabet="ab.,;:!?—- \n", max_size=6)),
    max_size=60).map("".join)


@given(_text, st.integers(1, 60), st.integers(1, 12))
def test_pieces_cover_the_text_within_the_bounds(text: str, max_chars: int, max_words: int) -> None:
    spans = split_speech_text(text, max_chars, max_words)
    assert "".join(text[s:e] for s, e in spans) == text
    assert all(s < e for s, e in spans)
    assert all(b[0] == a[1] for a, b in itertools.pairwise(spans))
    for start, end in spans:
        assert end - start <= max_chars
        assert len(text[start:end].split()) <= max_words


@given(_text)
def test_pieces_cut_inside_a_word_only_when_no_boundary_fits(text: str) -> None:
    spans = split_speech_text(text, 50, 8)
    for start, end in spans[:-1]:
        inside_word = not text[end - 1].isspace() and not text[end].isspace()
        if inside_word and text[end - 1] not in "—–":
            assert end - start == 50
            assert re.search(r"\S\s", text[start:end]) is None


# -- sanitizing (pure) --------------------------------------------------------------------

def test_sanitized_text_keeps_length_and_blanks_what_espeak_cannot_take() -> None:
    text = "Hi\x00 there \x1b[2Jfriend\x07 \x7fok\ud800 \x1b[1;31mred\x1b[0m\tnew\nline\r."
    clean = sanitize_for_speech(text)
    assert len(clean) == len(text)
    assert clean == "Hi  there     friend   ok         red    \tnew\nline\r."
    # Every kept character is where it was.
    assert all(c == o for c, o in zip(clean, text, strict=True) if c != " ")
    plain = "Plain text, with “quotes” — and 7:30 é."
    assert sanitize_for_speech(plain) is plain


# -- PiperSpeech around a fake voice: what reaches Piper, and the timeline built from it --------

class _FakeVoice:
    """Speaks each alphanumeric character as one 10-sample phoneme; words are separated by the
    " " phoneme, as Piper reports them. Records what it was asked to synthesize."""

    def __init__(self) -> None:
        self.config = SimpleNamespace(sample_rate=1000, length_scale=1.0)
        self.calls: list[str] = []

    def phonemize(self, text: str) -> list[list[str]]:
        assert "\x00" not in text and "\x1b" not in text
        words = [re.sub(r"\W", "", token) for token in text.split()]
        phonemes = list(" ".join(w for w in words if w))
        return [phonemes] if phonemes else []

    def synthesize(self, text: str, config: Any, include_alignments: bool) -> Iterator[Any]:
        self.calls.append(text)
        for sentence in self.phonemize(text):
            pairs = [("^", 10), *((p, 10) for p in sentence), ("$", 10)]
            yield SimpleNamespace(
                phoneme_alignments=[SimpleNamespace(phoneme=p, num_samples=n) for p, n in pairs],
                audio_int16_bytes=b"\x01\x00" * sum(n for _, n in pairs))


@pytest.fixture
def fake() -> tuple[PiperSpeech, _FakeVoice]:
    voice = _FakeVoice()
    return PiperSpeech(voice), voice


def _check_timeline(text: str, words: tuple[WordTiming, ...], samples: int) -> None:
    """Every visible word of `text`, in order, at its offsets, on a monotonic timeline."""
    assert [w.text for w in words] == _VISIBLE_WORD.findall(text)
    for word in words:
        assert text[word.char_start:word.char_end] == word.text
        assert 0 <= word.start_sample <= word.end_sample
    for before, after in itertools.pairwise(words):
        assert before.end_sample <= after.start_sample
    assert words[-1].end_sample <= samples


def test_a_short_text_goes_to_piper_whole_and_is_timed_as_before(
        fake: tuple[PiperSpeech, _FakeVoice]) -> None:
    speech, voice = fake
    text = "Sure, a table for four at 7:30 tonight."
    audio = speech.synthesize(text)
    assert voice.calls == [text]
    phoneme_words = speech._run(text, None)[1]
    assert audio.words == tuple(align_words(text, phoneme_words, speech.count_phoneme_words,
                                            audio.samples))


def test_a_long_text_goes_to_piper_in_bounded_pieces_on_one_timeline(
        fake: tuple[PiperSpeech, _FakeVoice]) -> None:
    speech, voice = fake
    text = " ".join(f"word{i}" + (". " if i % 17 == 16 else "") for i in range(150))
    audio = speech.synthesize(text)
    assert len(voice.calls) > 1
    assert "".join(voice.calls) == text
    assert all(len(c) <= MAX_PIECE_CHARS and len(c.split()) <= MAX_PIECE_WORDS for c in voice.calls)
    assert [w for c in voice.calls for w in c.split()] == text.split()
    _check_timeline(text, audio.words, audio.samples)
    # The fake speaks 10 samples per character: every word keeps its own duration, so no
    # piece's timings were shifted by the wrong amount.
    assert all(w.end_sample - w.start_sample == 10 * len(re.sub(r"\W", "", w.text))
               for w in audio.words)
    assert all(w.exact for w in audio.words)


def test_a_word_cut_between_pieces_is_timed_as_one_word(
        fake: tuple[PiperSpeech, _FakeVoice]) -> None:
    speech, voice = fake
    text = "Say " + "x" * 450 + " now."
    audio = speech.synthesize(text)
    assert voice.calls[0] == "Say " and len(voice.calls) == 4
    _check_timeline(text, audio.words, audio.samples)
    long_word = audio.words[1]
    assert (long_word.char_start, long_word.char_end) == (4, 454)
    assert long_word.start_sample < audio.words[2].start_sample


def test_pieces_with_too_many_phonemes_are_cut_further(
        fake: tuple[PiperSpeech, _FakeVoice]) -> None:
    speech, voice = fake
    text = " ".join(["abcdef"] * 28)  # 195 characters, 28 words: one piece by the text bounds
    slow = 3.0
    audio = speech.synthesize(text, length_scale=slow)
    bound = MAX_SENTENCE_PHONEMES / slow
    assert len(voice.calls) > 1
    assert all(len(s) <= bound for call in voice.calls for s in voice.phonemize(call))
    _check_timeline(text, audio.words, audio.samples)


def test_control_characters_never_reach_piper(fake: tuple[PiperSpeech, _FakeVoice]) -> None:
    speech, voice = fake
    text = "Hello\x00 there \x1b[2Jfriend\x07, all\ud800 good"
    audio = speech.synthesize(text)
    assert voice.calls == [sanitize_for_speech(text)]
    _check_timeline(text.replace("[2J", "   "), audio.words, audio.samples)
    assert [w.text for w in audio.words] == ["Hello", "there", "friend", ",", "all", "good"]


@pytest.mark.parametrize("text", ["", "   ", "\x00", "\x1b[2J\x07\x7f", "\n\t\x00 \ud800"])
def test_text_without_anything_to_say_is_empty_audio(
        fake: tuple[PiperSpeech, _FakeVoice], text: str) -> None:
    speech, voice = fake
    audio = speech.synthesize(text)
    assert (audio.pcm, audio.words) == (b"", ())
    assert voice.calls == []


# -- the real voice ------------------------------------------------------------------------

@pytest.mark.models
def test_real_voice_speaks_text_with_control_characters(piper: Any) -> None:
    text = "Hello\x00 there, \x1b[2Jwelcome\x07 to the \x7fcafe."
    audio = piper.synthesize(text)
    assert audio.samples > audio.sample_rate // 2
    assert [w.text for w in audio.words] == ["Hello", "there,", "welcome", "to", "the", "cafe."]
    for word in audio.words:
        assert text[word.char_start:word.char_end] == word.text
    assert all(w.exact for w in audio.words)
    assert piper.synthesize("\x00\x1b[2J \x07\ud800").samples == 0


@pytest.mark.models
@pytest.mark.parametrize("token", ["\x00", "a\x00b", "\x1b[2J", "\x07", "\x7f", "\ud800", "ok\ud800"])
def test_counting_phoneme_words_takes_any_token(piper: Any, token: str) -> None:
    count = piper.count_phoneme_words(token)
    assert count == len(_VISIBLE_WORD.findall(sanitize_for_speech(token)))


@pytest.mark.models
def test_real_voice_times_every_word_of_a_multi_piece_text(piper: Any) -> None:
    text = ("Thanks for calling the Harbor Cafe, where we serve breakfast from seven and lunch "
            "until three every day of the week including holidays and the long summer weekends "
            "when the terrace is open and the harbor is full of boats "
            "so we always suggest that you book a table a few days ahead. "
            "Dinner is on Fridays only, from six to ten; the kitchen closes at nine thirty.")
    spans = split_speech_text(text)
    assert len(spans) > 1
    audio = piper.synthesize(text)
    _check_timeline(text, audio.words, audio.samples)
    assert [w for s, e in spans for w in text[s:e].split()] == [w.text for w in audio.words]
    assert audio.words[0].start_sample < audio.sample_rate  # speech starts at once
    assert audio.samples - audio.words[-1].end_sample < audio.sample_rate


_MEMORY_SCRIPT = textwrap.dedent("""
    import json, resource, sys
    from pathlib import Path
    from edge_agent.engines.tts import PiperSpeech

    voice = Path(sys.argv[1])
    speech = PiperSpeech.load(voice, voice.with_name(voice.name + ".json"))
    speech.synthesize("Hello, how can I help you today?")
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    vocabulary = ("the caller said that the table by the window was booked for seven people "
                  "on friday night and asked whether the kitchen could make something special").split()
    line = " ".join(vocabulary[i % len(vocabulary)] for i in range(int(sys.argv[2])))
    audio = speech.synthesize(line)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"base_kb": base, "peak_kb": peak, "words": len(audio.words),
                      "seconds": audio.samples / audio.sample_rate}))
""")


@pytest.mark.models
def test_a_long_unpunctuated_line_is_synthesized_in_bounded_memory(model_path: Any) -> None:
    """Measured on joe-medium: the voice loaded and a short line peak at ~320 MB; a 400-word
    line without punctuation in one Piper call peaked at ~3.0 GB (150 words: ~1.0 GB), and in
    pieces at ~460 MB whatever the length. Each piece adds at most ~85 MB for ordinary words
    (~190 MB at the phoneme bound), so 300 MB over the baseline leaves room for allocator
    noise while a whole-line call would exceed it ~7 times."""
    words = 240
    result = subprocess.run(
        [sys.executable, "-c", _MEMORY_SCRIPT, str(model_path("joe-medium")), str(words)],
        capture_output=True, text=True, check=True, cwd=Path(__file__).resolve().parents[1])
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["words"] == words
    assert report["seconds"] > words * 0.2  # it was all spoken, not cut short
    grown_mb = (report["peak_kb"] - report["base_kb"]) / 1024
    assert grown_mb < 300, f"peak RSS grew {grown_mb:.0f} MB over the loaded voice"
