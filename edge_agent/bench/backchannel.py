"""`edge-agent bench backchannel`: the backchannel classifier on real speech.

Each corpus clip (`backchannel_corpus.toml`: what the listener says, the right verdict, the
language) is spoken by several voices — an English clip by the agent's Piper voice and three
espeak-ng voices (another accent, a woman's pitch, a fast British speaker), a clip in another
language by espeak-ng's voice for that language — resampled to the recognizer's rate,
transcribed by the recognizer in 100 ms pieces as the live loop streams it, and the transcript
classified with speech_ms = the clip's duration and the clip's sound shape (`voice_shape`).
The said text is classified as well, without audio, so a wrong verdict can be put down to the
recognizer (the text alone was right) or to the lexicon.

Hums are given to the voices as phonemes (`piper`, `espeak` in a clip): both read "mhm" as
letters ("em aitch em"), which no listener says. Neither voice hums with a closed mouth as a
person does (their hums have as much energy above 1 kHz as "no"), so the sound cannot tell a
hum from a short word here; the recognizer's guesses at the hums ("Man.", "Them.", "And
then?") are what the classifier is measured on.

The recognizers here are English (Moonshine base-en, PocketSphinx en-us): clips in other
languages come out as English words ("She, Claire." for "sí claro"), so their rows measure a
recognizer that does not know the language, not the classifier; the English rows are the
figure to read.

Missing a real interruption is the expensive mistake (the agent talks over the listener); a
false interruption only cuts the agent short. Both rates are reported, per clip language.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from edge_agent.audio.pcm import resample
from edge_agent.config.tomlfile import parse_toml, read_text
from edge_agent.conversation.backchannel import LANGUAGES, BackchannelClassifier, Verdict
from edge_agent.conversation.voice_shape import voice_shape
from edge_agent.demo.voices import RATE, VOICES, Voice, speak
from edge_agent.engines.base import SpeechRecognizer
from edge_agent.engines.tts import PiperSpeech
from edge_agent.errors import ConfigError

CORPUS = Path(__file__).with_name("backchannel_corpus.toml")
"""The built-in corpus."""

_CHUNK_MS = 100

ENGLISH_VOICES: tuple[Voice, ...] = tuple(
    v for v in VOICES if v.name in ("piper-joe", "espeak-us", "espeak-us-f3", "espeak-rp-m3"))
"""Who says each English clip."""
_SPELLINGS = ("piper", "espeak")
"""A clip's optional keys: what one kind of voice is given instead of `say`."""


@dataclass(frozen=True)
class CorpusClip:
    """One line of the corpus."""

    say: str
    """What the listener says (the text the voices speak, unless `piper` / `espeak` say
    otherwise)."""
    label: Verdict
    """The right verdict."""
    language: str
    """The language the line is in (one of `LANGUAGES`)."""
    piper: str | None = None
    """What Piper is given instead of `say` where it would read it wrong: IPA phonemes in
    [[ ]] for a hum ("[[mˈhm]]")."""
    espeak: str | None = None
    """What espeak-ng is given instead of `say`: its own phoneme codes in [[ ]] for a hum
    ("[[m'hm]]"), or the language's own script ("हाँ जी")."""

    def spoken_by(self, voice: Voice) -> str:
        """The text `voice` is given."""
        given = self.piper if voice.engine == "piper" else self.espeak
        return given or self.say


@dataclass(frozen=True)
class ClipResult:
    """One clip, spoken, recognized and classified."""

    say: str
    """The text spoken."""
    language: str
    """The clip's language."""
    voice: str
    """Who said it (a `Voice` name)."""
    classified_as: str
    """The language passed to the classifier."""
    speech_ms: float
    """Duration of the spoken clip."""
    transcript: str
    """What the recognizer made of it."""
    expected: Verdict
    """The corpus label."""
    got: Verdict
    """The classifier's verdict on the transcript."""
    got_from_text: Verdict
    """The classifier's verdict on the said text itself (no audio)."""

    @property
    def correct(self) -> bool:
        return self.got == self.expected


def voices_for(clip: CorpusClip) -> Sequence[Voice]:
    """Who says `clip`: `ENGLISH_VOICES` for an English one, else espeak-ng's voice for its
    language."""
    if clip.language == "en":
        return ENGLISH_VOICES
    return (Voice(f"espeak-{clip.language}", "espeak", clip.language, 160, 50),)


def load_corpus(path: Path | None = None) -> tuple[CorpusClip, ...]:
    """The clips of a corpus file (the built-in one by default); ConfigError if malformed."""
    path = path or CORPUS
    source = str(path)
    data = parse_toml(read_text(path, "backchannel corpus"), source)
    clips = data.get("clip")
    if set(data) != {"clip"} or not isinstance(clips, list) or not clips:
        raise ConfigError(source, "clip", "needs [[clip]] tables (say, label, language) and "
                          "nothing else at the top level")
    return tuple(_clip(entry, source, f"clip[{i + 1}]") for i, entry in enumerate(clips))


def _clip(entry: Any, source: str, key: str) -> CorpusClip:
    if not isinstance(entry, dict):
        raise ConfigError(source, key, "must be a table ([[clip]])")
    keys = ("say", "label", "language", *_SPELLINGS)
    extra = set(entry) - set(keys)
    if extra:
        raise ConfigError(source, f"{key}.{sorted(extra)[0]}",
                          f"unknown key ({', '.join(keys)})")
    spellings = {name: entry[name] for name in _SPELLINGS if name in entry}
    for name, text in {"say": entry.get("say"), **spellings}.items():
        if not isinstance(text, str) or not text.strip():
            raise ConfigError(source, f"{key}.{name}", "must be a non-empty string")
    say = entry["say"]
    labels = [v.value for v in Verdict]
    if entry.get("label") not in labels:
        raise ConfigError(source, f"{key}.label", f"must be one of {', '.join(labels)}, "
                          f"got {entry.get('label')!r}")
    language = entry.get("language")
    if language not in LANGUAGES:
        raise ConfigError(source, f"{key}.language", f"must be one of {', '.join(LANGUAGES)}, "
                          f"got {language!r}")
    return CorpusClip(say, Verdict(entry["label"]), str(language), **spellings)


def run_corpus(piper: PiperSpeech, stt: SpeechRecognizer, classifier: BackchannelClassifier,
               clips: Sequence[CorpusClip], language: str | None = None,
               progress: Callable[[ClipResult], None] | None = None) -> dict[str, Any]:
    """Speak every clip in each of its voices (`voices_for`), recognize and classify it.
    `language`: what the classifier is told (the configured conversation language); None tells
    it each clip's own language."""
    results = []
    for clip in clips:
        for voice in voices_for(clip):
            result = _one_clip(piper, voice, stt, classifier, clip, language or clip.language)
            results.append(result)
            if progress is not None:
                progress(result)

    def tallies(field: str) -> dict[str, dict[str, Any]]:
        names = dict.fromkeys(getattr(r, field) for r in results)
        return {name: _totals([r for r in results if getattr(r, field) == name])
                for name in names}

    return {
        "benchmark": "backchannel",
        "path": f"voices -> {stt.sample_rate} Hz -> {type(stt).__name__} -> "
                f"{type(classifier).__name__}",
        "language": language or "per clip",
        "summary": _totals(results),
        "by_language": tallies("language"),
        "by_voice": tallies("voice"),
        "text_summary": _totals(results, from_text=True),
        "clips": [{**asdict(r), "correct": r.correct} for r in results],
    }


def _one_clip(piper: PiperSpeech, voice: Voice, stt: SpeechRecognizer,
              classifier: BackchannelClassifier, clip: CorpusClip, language: str) -> ClipResult:
    pcm = resample(speak(piper, voice, clip.spoken_by(voice)), RATE, stt.sample_rate)
    chunk = stt.sample_rate * _CHUNK_MS // 1000 * 2
    stt.begin()
    for start in range(0, len(pcm), chunk):
        stt.feed(pcm[start:start + chunk])
    transcript = stt.end().text
    speech_ms = round(len(pcm) * 500 / stt.sample_rate, 1)
    sound = voice_shape(pcm, stt.sample_rate)
    return ClipResult(
        say=clip.say, language=clip.language, voice=voice.name, classified_as=language,
        speech_ms=speech_ms, transcript=transcript, expected=clip.label,
        got=Verdict(classifier.classify(transcript, speech_ms, language, sound)),
        got_from_text=Verdict(classifier.classify(clip.say, speech_ms, language)))


def _totals(results: Sequence[ClipResult], from_text: bool = False) -> dict[str, Any]:
    def verdict(r: ClipResult) -> Verdict:
        return r.got_from_text if from_text else r.got

    backchannels = [r for r in results if r.expected is Verdict.BACKCHANNEL]
    interruptions = [r for r in results if r.expected is Verdict.INTERRUPTION]
    correct = sum(verdict(r) == r.expected for r in results)
    false = sum(verdict(r) is Verdict.INTERRUPTION for r in backchannels)
    missed = sum(verdict(r) is Verdict.BACKCHANNEL for r in interruptions)
    return {
        "clips": len(results), "correct": correct, "accuracy_percent": _percent(correct, results),
        "backchannels": len(backchannels), "false_interruptions": false,
        "false_interruption_percent": _percent(false, backchannels),
        "interruptions": len(interruptions), "missed_interruptions": missed,
        "missed_interruption_percent": _percent(missed, interruptions),
    }


def _percent(count: int, of: Sequence[object]) -> float:
    return round(100 * count / len(of), 1) if of else 0.0


def table(result: dict[str, Any]) -> str:
    lines = [f"backchannel classifier: {result['path']}, language {result['language']}",
             f"{'clips':<20}{'n':>4}{'accuracy':>10}{'false int.':>16}{'missed int.':>16}"]
    for name, totals in [*result["by_language"].items(), *result["by_voice"].items(),
                         ("all", result["summary"]),
                         ("all, text only", result["text_summary"])]:
        lines.append(
            f"{name:<20}{totals['clips']:>4}{totals['accuracy_percent']:>9.1f}%"
            f"{totals['false_interruptions']:>5}/{totals['backchannels']:<3}"
            f"{totals['false_interruption_percent']:>6.1f}%"
            f"{totals['missed_interruptions']:>5}/{totals['interruptions']:<3}"
            f"{totals['missed_interruption_percent']:>6.1f}%")
    wrong = [c for c in result["clips"] if not c["correct"]]
    if wrong:
        lines.append("wrong (said -> transcript: expected, got):")
        lines.extend(f"  [{c['language']}, {c['voice']}] {c['say']!r} -> {c['transcript']!r}: "
                     f"{c['expected']}, got {c['got']}" for c in wrong)
    return "\n".join(lines)
