"""Piper TTS with phoneme alignments, turned into word timings."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from pathlib import Path
from typing import Any

from edge_agent.engines.base import SpeechAudio
from edge_agent.engines.cpu_share import CpuShare, at_work
from edge_agent.engines.ort_session import open_session
from edge_agent.engines.speech_text import sanitize_for_speech, split_speech_text
from edge_agent.errors import ModelFileError
from edge_agent.files import TEXT_FILE_LIMIT, read_capped
from edge_agent.heard.timings import PhonemeWord, WordTiming, align_words, split_phoneme_words
from edge_agent.printable import shown

MAX_SENTENCE_PHONEMES = 260
"""Most phonemes Piper gets in one sentence (one ONNX run) at length scale 1. Its peak memory
follows the audio length of that run faster than linearly: measured on joe-medium over the
loaded voice, ~170 phonemes (30 ordinary words) +85 MB, 260 +~190 MB, 450 +340 MB, 1430 +1.3 GB.
Ordinary text reaches the bound only beyond the piece bounds of `split_speech_text`; tokens
that expand (long numbers, spelled-out letters: "WWWWW" is 50 phonemes) can reach it sooner,
and their pieces are then cut further. Slower speech makes longer audio per phoneme, so the
bound shrinks by the length scale."""


VOICE_RATES = (8000, 96000)
"""Sample rates a Piper voice's config may give, in Hz (Piper voices are 16000 or 22050)."""

REPEATABLE_SEED = 20261201
"""onnxruntime's random seed for runs that must repeat (a demo, a replay): Piper draws noise
for every synthesis, so the same sentence comes out differently each time unless the process
seeds it before the voice loads. A demo's caller lines are then the same audio in every run
and in a replay of it."""


def make_voice_repeatable() -> None:
    """Seed onnxruntime (before the voice loads): this process synthesizes the same sentences,
    in the same order, as the same audio every time."""
    import onnxruntime

    onnxruntime.set_seed(REPEATABLE_SEED)


class PiperSpeech:
    """Piper (piper-tts >= 1.5) voice loaded with alignments; synthesizes one clause at a time.

    Text of any length is synthesized in bounded pieces, so memory does not grow with it.
    """

    def __init__(self, voice: Any, length_scale: float | None = None, *, threads: int = 1,
                 share: CpuShare | None = None) -> None:
        """`voice`: a loaded `piper.PiperVoice` with alignments (see `load`), on `threads`;
        with `share`, it marks itself at work there while it synthesizes."""
        from piper import SynthesisConfig

        self._voice = voice
        self._length_scale = length_scale
        self._threads = threads
        self._share = share
        self._syn_config = SynthesisConfig(length_scale=length_scale)
        self.sample_rate: int = int(self._voice.config.sample_rate)

    @classmethod
    def load(cls, model_path: Path, config_path: Path | None = None,
             length_scale: float | None = None, threads: int = 1,
             share: CpuShare | None = None) -> PiperSpeech:
        """The voice at `model_path` (its config next to it unless given), on `threads`."""
        config = read_voice_config(config_path or voice_config_path(model_path))
        try:
            voice = _load_voice(model_path, config, threads)
        except Exception as exc:
            raise ModelFileError(model_path, f"Piper cannot load it as a voice ({exc})") from None
        return cls(voice, length_scale, threads=threads, share=share)

    def synthesize(self, text: str, length_scale: float | None = None) -> SpeechAudio:
        """`text` as speech with word timings; `length_scale` overrides the voice's rate.

        Characters the voice cannot take (see `sanitize_for_speech`) are spoken as spaces: the
        words timed are the text's runs of other non-space characters, with offsets into
        `text` as given. Text longer than one bounded piece (`split_speech_text`, then
        `MAX_SENTENCE_PHONEMES`) is synthesized piece by piece into one audio and one list of
        word timings; text that fits is synthesized in one call, as it always was.
        """
        from piper import SynthesisConfig

        config = (self._syn_config if length_scale is None
                  else SynthesisConfig(length_scale=length_scale))
        clean = sanitize_for_speech(text)
        if not clean.strip():
            return SpeechAudio(b"", self.sample_rate, ())
        spans = self._pieces(clean, self._phoneme_bound(length_scale))
        if len(spans) == 1:
            pcm, phoneme_words, aligned = self._run(clean, config)
            words = (
                align_words(clean, phoneme_words, self.count_phoneme_words, len(pcm) // 2)
                if aligned and phoneme_words
                else []
            )
            return SpeechAudio(pcm, self.sample_rate, tuple(words))
        return self._synthesize_pieces(clean, spans, config)

    def _synthesize_pieces(self, clean: str, spans: list[tuple[int, int]], config: Any
                           ) -> SpeechAudio:
        """The pieces `spans` of `clean` synthesized one after another, on one timeline."""
        pcm = bytearray()
        words: list[WordTiming] = []
        any_aligned = False
        for start, end in spans:
            piece = clean[start:end]
            if not piece.strip():
                continue  # only whitespace: no words, and Piper would make no audio
            piece_pcm, phoneme_words, aligned = self._run(piece, config)
            any_aligned = any_aligned or aligned
            # A piece without alignments gets the safe bounds align_words gives unmatched
            # tokens (the whole piece's audio, inexact) rather than dropping every timing.
            piece_words = align_words(piece, phoneme_words if aligned else [],
                                      self.count_phoneme_words, len(piece_pcm) // 2)
            offset = len(pcm) // 2
            for word in piece_words:
                moved = dataclasses.replace(
                    word, char_start=word.char_start + start, char_end=word.char_end + start,
                    start_sample=word.start_sample + offset, end_sample=word.end_sample + offset)
                if words and words[-1].char_end == moved.char_start:
                    # A word longer than a piece was cut between pieces: time it as one.
                    moved = _joined(clean, words.pop(), moved)
                words.append(moved)
            pcm.extend(piece_pcm)
        # A voice without alignments times nothing, as for text synthesized in one call.
        return SpeechAudio(bytes(pcm), self.sample_rate, tuple(words) if any_aligned else ())

    def _run(self, text: str, config: Any) -> tuple[bytes, list[PhonemeWord], bool]:
        """Piper's audio for `text`, its phoneme words, and whether every sentence had
        alignments."""
        pcm = bytearray()
        phoneme_words: list[PhonemeWord] = []
        aligned = True
        with at_work(self._share, self._threads):
            for chunk in self._voice.synthesize(text, config, include_alignments=True):
                offset = len(pcm) // 2
                if chunk.phoneme_alignments:
                    pairs = [(a.phoneme, int(a.num_samples)) for a in chunk.phoneme_alignments]
                    phoneme_words.extend(split_phoneme_words(pairs, offset))
                else:
                    aligned = False
                pcm.extend(chunk.audio_int16_bytes)
        return bytes(pcm), phoneme_words, aligned

    def _phoneme_bound(self, length_scale: float | None) -> int:
        scale = length_scale or self._length_scale or self._voice.config.length_scale or 1.0
        return max(16, int(MAX_SENTENCE_PHONEMES / max(1.0, float(scale))))

    def _pieces(self, clean: str, phoneme_bound: int) -> list[tuple[int, int]]:
        """Spans of `clean` to synthesize one at a time: the bounded pieces of
        `split_speech_text`, each cut further while one of its sentences has more than
        `phoneme_bound` phonemes (phonemizing is ~1 ms; synthesizing is what costs memory)."""
        spans: list[tuple[int, int]] = []
        pending = list(reversed(split_speech_text(clean)))
        while pending:
            start, end = pending.pop()
            piece = clean[start:end]
            if end - start > 1 and piece.strip() and self._longest_sentence(piece) > phoneme_bound:
                halves = split_speech_text(piece, max_chars=(end - start) // 2)
                pending.extend(reversed([(start + s, start + e) for s, e in halves]))
            else:
                spans.append((start, end))
        return spans

    def _longest_sentence(self, text: str) -> int:
        return max((len(sentence) for sentence in self._voice.phonemize(text)), default=0)

    @functools.lru_cache(maxsize=4096)  # noqa: B019 - one voice per process; bounded
    def count_phoneme_words(self, token: str) -> int:
        """How many spoken words espeak makes of `token` on its own ("7:30" -> 2, "—" -> 0);
        characters the voice cannot take count as spaces."""
        clean = sanitize_for_speech(token)
        if not clean.strip():
            return 0
        count = 0
        for sentence in self._voice.phonemize(clean):
            count += len(split_phoneme_words([(p, 1) for p in sentence]))
        return count


def _joined(text: str, first: WordTiming, second: WordTiming) -> WordTiming:
    """One timing for a word synthesized in two pieces: `first` then `second`."""
    return WordTiming(text[first.char_start:second.char_end], first.char_start, second.char_end,
                      first.start_sample, second.end_sample, first.exact and second.exact)


def voice_config_path(model_path: Path) -> Path:
    """Where a Piper voice keeps its config: `<voice>.onnx.json` next to the model."""
    return model_path.with_name(model_path.name + ".json")


def read_voice_config(path: Path) -> dict[str, Any]:
    """A Piper voice's JSON config, read capped, with the values edge-agent sizes audio by
    checked (a sample rate of 0 would otherwise divide by zero at the first word spoken)."""
    import json

    fix = ("Fix: restore the voice's .onnx.json (it comes with the voice), or point tts.voice "
           "at another voice")
    try:
        data = json.loads(read_capped(path, TEXT_FILE_LIMIT))
    except FileNotFoundError:
        raise ModelFileError(path, "missing: a Piper voice needs its config next to it", fix
                             ) from None
    except (OSError, ValueError, RecursionError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ModelFileError(path, f"cannot read the voice's config ({reason})", fix) from None
    audio = data.get("audio") if isinstance(data, dict) else None
    rate = audio.get("sample_rate") if isinstance(audio, dict) else None
    low, high = VOICE_RATES
    if isinstance(rate, bool) or not isinstance(rate, int) or not low <= rate <= high:
        raise ModelFileError(path, f"audio.sample_rate is {shown(repr(rate), 40)}: it must be the "
                             f"rate the voice was trained at, {low}..{high} Hz (22050 for most "
                             "Piper voices)", fix)
    return data  # type: ignore[no-any-return]


def _load_voice(model_path: Path, config_dict: dict[str, Any], threads: int) -> Any:
    """`PiperVoice.load(..., include_alignments=True)` with onnxruntime limited to `threads`
    (its default takes every core, which the recognizer and the language model need at the
    same moment): the model patched in memory to output phoneme alignments, as Piper does."""
    import onnx
    from piper import PiperConfig, PiperVoice
    from piper.patch_voice_with_alignment import add_alignment_output

    config = PiperConfig.from_dict(config_dict)
    model = onnx.load(str(model_path))
    with contextlib.suppress(ValueError):  # already patched on disk: use it as it is
        add_alignment_output(model)
    serialized = model.SerializeToString()
    del model  # the voice's weights, once is enough
    return PiperVoice(config=config, session=open_session(serialized, threads))
