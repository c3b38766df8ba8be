"""The lexicon backchannel classifier and `load_classifier`, on text (no models)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from edge_agent.bench.backchannel import CORPUS, ENGLISH_VOICES, load_corpus
from edge_agent.conversation.backchannel import (
    ACKNOWLEDGEMENTS,
    INTERRUPTING,
    LANGUAGES,
    BackchannelClassifier,
    LexiconClassifier,
    Verdict,
    lexicon_language,
    load_classifier,
    normalize,
)
from edge_agent.conversation.voice_shape import VoiceShape
from edge_agent.errors import ConfigError
from tests.custom_classifier import HumsAreBackchannels

BC, INT = Verdict.BACKCHANNEL, Verdict.INTERRUPTION
SHORT = 600.0
HUM = VoiceShape(speech_ms=480.0, voiced_ratio=0.9, high_ratio=0.12, syllables=2)
"""How a short voiced burst ("mm-hmm") measures."""
"""A typical duration for a short acknowledgement."""

BACKCHANNELS = {
    "en": ["mm", "mhm", "mm-hm", "mm-hmm", "uh-huh", "uh huh", "uhhuh", "yeah", "yep", "yes",
           "right", "okay", "ok", "O.K.", "sure", "I see", "got it", "alright", "all right",
           "cool", "great", "Yeah, yeah.", "Oh, I see.", "okay got it", "Right, right, right.",
           # PocketSphinx's spellings of hums, and of a hum taken for letters
           "hm", "hmm", "ah", "aha", "m h m", "m m"],
    "es": ["sí", "si", "claro", "sí claro", "si claro", "Sí, sí.", "vale", "ajá", "aja", "ya",
           "bueno", "entiendo", "de acuerdo", "ya veo", "claro que sí", "vale, vale", "Órale"],
    "hi": ["haan", "haan ji", "haanji", "ji", "ji haan", "achha", "accha", "acha", "theek hai",
           "thik hai", "hmm", "sahi", "sahi hai", "bilkul", "haan haan", "हाँ", "हाँ जी",
           "अच्छा", "ठीक है।"],
    "fr": ["oui", "ouais", "d'accord", "d’accord", "daccord", "ok", "bien sûr", "bien sur",
           "je vois", "voilà", "voila", "c'est ça", "tout à fait", "oui oui", "Ah oui, d'accord."],
    "de": ["ja", "genau", "stimmt", "okay", "alles klar", "ach so", "achso", "jawohl",
           "richtig", "natürlich", "ja genau", "Ja, ja.", "klar"],
}

INTERRUPTIONS = {
    "en": ["no", "nope", "wait", "stop", "hold on", "hang on", "what", "what?", "sorry?",
           "pardon", "excuse me", "wait, stop", "no, eight people", "actually", "huh",
           "yes but eight", "okay, and a table outside", "yeah I want to change it", "uh", "got"],
    "es": ["no", "espera", "para", "un momento", "perdón", "¿qué?", "no, ocho personas",
           "sí, pero mañana", "oye"],
    "hi": ["nahi", "nahin", "ruko", "ek minute", "kya", "suno", "haan lekin kal",
           "nahi, aath log", "नहीं", "रुको"],
    "fr": ["non", "attendez", "arrête", "pardon", "quoi", "comment", "oui mais demain",
           "non, huit personnes"],
    "de": ["nein", "warte", "moment", "halt", "stopp", "was", "wie bitte", "ja aber morgen",
           "nein, acht Personen"],
}


@pytest.fixture
def lexicon() -> LexiconClassifier:
    return LexiconClassifier()


@pytest.mark.parametrize(("language", "text"),
                         [(lang, t) for lang, texts in BACKCHANNELS.items() for t in texts])
def test_acknowledgements_of_each_language_are_backchannels(
        lexicon: LexiconClassifier, language: str, text: str) -> None:
    assert lexicon.classify(text, SHORT, language) is BC
    assert lexicon.classify(text, SHORT, "any") is BC


@pytest.mark.parametrize(("language", "text"),
                         [(lang, t) for lang, texts in INTERRUPTIONS.items() for t in texts])
def test_negations_requests_and_content_interrupt_however_short(
        lexicon: LexiconClassifier, language: str, text: str) -> None:
    assert lexicon.classify(text, 300.0, language) is INT
    assert lexicon.classify(text, 300.0, "any") is INT


def test_languages_cover_the_required_ones() -> None:
    assert set(LANGUAGES) >= {"en", "es", "hi", "fr", "de"}
    assert "any" not in LANGUAGES


def test_another_languages_acknowledgement_does_not_count() -> None:
    lexicon = LexiconClassifier()
    assert lexicon.classify("genau", SHORT, "en") is INT
    assert lexicon.classify("haan ji", SHORT, "es") is INT
    assert lexicon.classify("sí claro", SHORT, "de") is INT
    assert lexicon.classify("genau", SHORT, "any") is BC
    assert lexicon.classify("haan ji", SHORT, "any") is BC


def test_under_any_a_word_that_means_no_somewhere_interrupts() -> None:
    # German "na klar" (sure) begins with Hindi "na" (no): the cheap mistake wins.
    lexicon = LexiconClassifier()
    assert lexicon.classify("na klar", SHORT, "de") is BC
    assert lexicon.classify("na klar", SHORT, "any") is INT


def test_no_acknowledgement_contains_an_interrupting_word_of_its_language() -> None:
    for language, phrases in ACKNOWLEDGEMENTS.items():
        stops = {w for word in INTERRUPTING[language] for w in normalize(word)}
        for phrase in phrases:
            assert not stops & set(normalize(phrase)), (language, phrase)


@pytest.mark.parametrize(("text", "words"), [
    ("Mm-HMM!", ["mmhmm"]),
    ("Okaaay...", ["okaaay"]),
    ("uh-huh", ["uhhuh"]),
    ("Sí, claro.", ["si", "claro"]),
    ("d’accord", ["daccord"]),
    ("bien sûr !", ["bien", "sur"]),
    ("Natürlich", ["naturlich"]),
    ("e\u0301xito", ["exito"]),  # a decomposed accent
    ("ठीक है।", ["ठीक", "है"]),  # Devanagari keeps its vowel signs; the danda is punctuation
    ("  ... !? ", []),
])
def test_normalize(text: str, words: list[str]) -> None:
    assert normalize(text) == words


@pytest.mark.parametrize("text", ["mmmm", "mhmmm", "yeahhh", "okaaay", "yesss", "riiight",
                                  "uhhhh-huhhh", "Uh Huh", "UHHUH", "MM HMM", "all right"])
def test_drawn_out_and_differently_written_forms_match(lexicon: LexiconClassifier,
                                                       text: str) -> None:
    assert lexicon.classify(text, SHORT, "en") is BC


def test_letters_may_be_drawn_out_but_not_dropped(lexicon: LexiconClassifier) -> None:
    # PocketSphinx heard Piper's "Stop!" as "god": it must not pass for "good".
    assert lexicon.classify("good", SHORT, "en") is BC
    assert lexicon.classify("goood", SHORT, "en") is BC
    assert lexicon.classify("god", SHORT, "en") is INT
    assert lexicon.classify("col", SHORT, "en") is INT
    assert lexicon.classify("noooo", SHORT, "en") is INT
    assert lexicon.classify("waaait", SHORT, "en") is INT


def test_phrases_match_as_a_whole_not_word_by_word(lexicon: LexiconClassifier) -> None:
    assert lexicon.classify("i see", SHORT, "en") is BC
    assert lexicon.classify("i", SHORT, "en") is INT
    assert lexicon.classify("see", SHORT, "en") is INT
    assert lexicon.classify("got it", SHORT, "en") is BC
    assert lexicon.classify("it", SHORT, "en") is INT
    assert lexicon.classify("theek hai", SHORT, "hi") is BC
    assert lexicon.classify("hai", SHORT, "hi") is INT
    assert lexicon.classify("ach so", SHORT, "de") is BC
    assert lexicon.classify("so", SHORT, "de") is INT


@pytest.mark.parametrize("text", ["", "   ", "\n\t", "...", "?!"])
def test_nothing_recognized_is_not_an_interruption(lexicon: LexiconClassifier, text: str) -> None:
    assert lexicon.classify(text, SHORT, "en") is BC
    assert lexicon.classify(text, 5000.0, "en") is BC


def test_word_limit() -> None:
    lexicon = LexiconClassifier(max_words=4)
    assert lexicon.classify("yeah yeah yeah yeah", SHORT, "en") is BC
    assert lexicon.classify("yeah yeah yeah yeah yeah", SHORT, "en") is INT
    assert lexicon.classify("oh okay i see", SHORT, "en") is BC  # 4 words
    assert LexiconClassifier(max_words=1).classify("sí claro", SHORT, "es") is INT
    assert LexiconClassifier(max_words=2).classify("sí claro", SHORT, "es") is BC


def test_duration_limit() -> None:
    lexicon = LexiconClassifier(max_speech_ms=2000.0)
    assert lexicon.classify("yeah", 1999.0, "en") is BC
    assert lexicon.classify("yeah", 2000.0, "en") is INT
    assert LexiconClassifier(max_speech_ms=500.0).classify("okay", SHORT, "en") is INT


def test_bad_limits_are_refused() -> None:
    with pytest.raises(ValueError, match="max_words"):
        LexiconClassifier(max_words=0)
    with pytest.raises(ValueError, match="max_speech_ms"):
        LexiconClassifier(max_speech_ms=0)


def test_language_codes_use_their_primary_subtag_and_unknown_ones_use_all() -> None:
    assert lexicon_language("en-US") == "en"
    assert lexicon_language("ES") == "es"
    assert lexicon_language("de_AT") == "de"
    assert lexicon_language("any") == "any"
    assert lexicon_language("pt") == "any"
    assert LexiconClassifier().classify("sí claro", SHORT, "es-MX") is BC
    assert LexiconClassifier().classify("haan ji", SHORT, "pt") is BC


def test_the_corpus_labels_are_what_the_lexicon_says_of_the_text() -> None:
    # Text level: every wrong verdict in the audio benchmark is then down to the recognizer.
    lexicon = LexiconClassifier()
    clips = load_corpus()
    assert len(clips) >= 30
    for clip in clips:
        assert lexicon.classify(clip.say, SHORT, clip.language) is clip.label, clip


def test_corpus_errors_name_the_clip(tmp_path: Path) -> None:
    bad = tmp_path / "corpus.toml"
    bad.write_text('[[clip]]\nsay = "yeah"\nlabel = "backchannel"\nlanguage = "en"\n'
                   '[[clip]]\nsay = "no"\nlabel = "stop"\nlanguage = "en"\n')
    with pytest.raises(ConfigError, match=r"clip\[2\]\.label: must be one of backchannel"):
        load_corpus(bad)
    bad.write_text('[[clip]]\nsay = "yeah"\nlabel = "backchannel"\nlanguage = "it"\n')
    with pytest.raises(ConfigError, match=r"clip\[1\]\.language: must be one of en, es"):
        load_corpus(bad)
    bad.write_text('[[clip]]\nsay = "mhm"\nlabel = "backchannel"\nlanguage = "en"\npiper = ""\n')
    with pytest.raises(ConfigError, match=r"clip\[1\]\.piper: must be a non-empty string"):
        load_corpus(bad)
    bad.write_text('[[clip]]\nsay = "mhm"\nlabel = "backchannel"\nlanguage = "en"\nvoice = "x"\n')
    with pytest.raises(ConfigError, match=r"clip\[1\]\.voice: unknown key \(say, label"):
        load_corpus(bad)
    assert CORPUS.is_file()


def test_each_voice_is_given_its_own_spelling_of_a_hum() -> None:
    hum = next(clip for clip in load_corpus() if clip.say == "mhm")
    piper = next(v for v in ENGLISH_VOICES if v.engine == "piper")
    espeak = next(v for v in ENGLISH_VOICES if v.engine == "espeak")
    assert hum.spoken_by(piper).startswith("[[") and hum.spoken_by(piper) != hum.spoken_by(espeak)
    plain = next(clip for clip in load_corpus() if clip.say == "yeah")
    assert plain.spoken_by(piper) == plain.spoken_by(espeak) == "yeah"
    assert {v.engine for v in ENGLISH_VOICES} == {"piper", "espeak"} and len(ENGLISH_VOICES) == 4


# --- load_classifier ---------------------------------------------------------------------------

def test_lexicon_spec() -> None:
    classifier = load_classifier("lexicon", "edge-agent.toml")
    assert isinstance(classifier, LexiconClassifier)
    assert isinstance(classifier, BackchannelClassifier)


@pytest.mark.parametrize("spec", ["tests.custom_classifier:AlwaysInterrupt",
                                  "tests.custom_classifier.AlwaysInterrupt",
                                  "tests.custom_classifier:Namespace.Nested",
                                  " tests.custom_classifier:ready_made "])
def test_dotted_path_to_a_class_or_an_instance(spec: str) -> None:
    classifier = load_classifier(spec, "edge-agent.toml")
    # A words-only classifier (classify(text, speech_ms, language)) is not given the sound.
    assert classifier.classify("yeah", SHORT, "en", HUM) is INT


def test_a_classifier_that_takes_the_sound_is_given_it() -> None:
    classifier = load_classifier("tests.custom_classifier:HumsAreBackchannels", "cfg.toml")
    assert isinstance(classifier, HumsAreBackchannels)
    assert classifier.classify("enema", SHORT, "en", HUM) is BC
    assert classifier.classify("enema", SHORT, "en", None) is INT


@pytest.mark.parametrize(("spec", "reason"), [
    ("", "is empty: use \"lexicon\" or a dotted path"),
    ("lexicn", "unknown classifier 'lexicn': use \"lexicon\" or a dotted path"),
    ("nosuchpackage_xyz.mod:Cls", "module 'nosuchpackage_xyz.mod' .* not found: install"),
    ("tests.no_such_module:Cls", "module 'tests.no_such_module' .* not found"),
    ("tests.custom_classifier:Missing", "has no 'Missing' .*check the name after the module"),
    ("tests.custom_classifier.Namespace.Missing", "module 'tests.custom_classifier.Namespace' .*"
                                                  "not found"),
    ("tests.custom_classifier:NoClassify", "has no classify\\(text, speech_ms, language\\) method"),
    ("tests.custom_classifier:NeedsArguments", "NeedsArguments' cannot be called with \\(\\) "
                                               "as a classifier class is"),
])
def test_bad_specs_say_what_is_wrong_and_how_to_fix_it(spec: str, reason: str) -> None:
    with pytest.raises(ConfigError, match=reason) as caught:
        load_classifier(spec, "/etc/edge-agent.toml")
    assert caught.value.path == "/etc/edge-agent.toml"
    assert caught.value.key == "turns.backchannel_classifier"
    assert str(caught.value).startswith("/etc/edge-agent.toml: turns.backchannel_classifier: ")


def test_a_module_that_fails_to_import_is_reported_as_such(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "needs_dep_bc.py").write_text("import not_installed_dependency_xyz\n")
    (tmp_path / "raises_bc.py").write_text("raise RuntimeError('bad setup')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ConfigError, match=re.escape(
            "importing 'needs_dep_bc' failed: No module named 'not_installed_dependency_xyz'. "
            "Install what it needs")):
        load_classifier("needs_dep_bc:Cls", "cfg.toml")
    with pytest.raises(ConfigError, match="importing 'raises_bc' failed: RuntimeError: bad setup"):
        load_classifier("raises_bc:Cls", "cfg.toml")
    for name in ("needs_dep_bc", "raises_bc"):
        sys.modules.pop(name, None)


@pytest.mark.parametrize(("heard", "sound", "verdict"), [
    # Moonshine's spellings of a Piper "mm-hmm", "mhm", "uh-huh": hums by letters and sound.
    ("Mm, m, uh.", HUM, BC),
    ("M. H. N..", HUM, BC),
    ("Uh?", HUM, BC),
    # Without the sound, unknown words interrupt (the expensive mistake is the other one).
    ("M. H. N..", None, INT),
    # Letters no hum has: a word, even a garbled one.
    ("Them.", HUM, INT),
    ("And mamma.", HUM, BC),
    ("And mamma,", HUM, BC),  # Moonshine's lead-in "And" before a hum it cannot spell
    ("And now, and", HUM, INT),
    ("And on.", HUM, INT),  # Moonshine's "Hang on.": no hum without an m or an h
    ("Aemon", HUM, INT),  # ...and its "Hang on." again: an n among vowels is a word
    ("A memo,", HUM, BC),
    ("Emma.", HUM, BC),
    ("Emmela", HUM, INT),  # an l: a word (this "mm-hmm" interrupts: the cheaper mistake)
    # Words that mean something.
    ("Nine.", HUM, INT),
    ("Now.", HUM, INT),
    ("One.", HUM, INT),
    ("Man.", HUM, INT),
    ("Home.", HUM, INT),
    # Not a short voiced burst: too long, unvoiced (a cough), too many syllables.
    ("Mm, m, uh.", VoiceShape(1400.0, 0.9, 0.1, 3), INT),
    ("Mm, m, uh.", VoiceShape(400.0, 0.2, 0.3, 1), INT),
    ("Mm, m, uh.", VoiceShape(800.0, 0.9, 0.1, 5), INT),
    # A stop word interrupts whatever the sound.
    ("No.", HUM, INT),
])
def test_a_garbled_hum_is_a_backchannel_by_its_letters_and_its_sound(
        heard: str, sound: VoiceShape | None, verdict: Verdict) -> None:
    assert LexiconClassifier().classify(heard, SHORT, "en", sound) is verdict
