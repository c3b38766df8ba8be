"""Piper TTS with phoneme alignments, turned into word timings."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from edge_agent.engines.base import SpeechAudio
from edge_agent.errors import ModelFileError
from edge_agent.heard.timings import PhonemeWord, align_words, split_phoneme_words


class PiperSpeech:
    """Piper (piper-tts >= 1.5) voice loaded with alignments; synthesizes one clause at a time."""

    def __init__(self, model_path: Path, config_path: Path | None = None,
                 length_scale: float | None = None) -> None:
        from piper import PiperVoice, SynthesisConfig

        try:
            self._voice: Any = PiperVoice.load(model_path, config_path, include_alignments=True)
        except Exception as exc:
            raise ModelFileError(model_path, f"Piper cannot load it as a voice ({exc})") from None
        self._syn_config = SynthesisConfig(length_scale=length_scale)
        self.sample_rate: int = int(self._voice.config.sample_rate)

    def synthesize(self, text: str, length_scale: float | None = None) -> SpeechAudio:
        """`text` as speech with word timings; `length_scale` overrides the voice's rate."""
        from piper import SynthesisConfig

        config = (self._syn_config if length_scale is None
                  else SynthesisConfig(length_scale=length_scale))
        pcm = bytearray()
        phoneme_words: list[PhonemeWord] = []
        aligned = True
        for chunk in self._voice.synthesize(text, config, include_alignments=True):
            offset = len(pcm) // 2
            if chunk.phoneme_alignments:
                pairs = [(a.phoneme, int(a.num_samples)) for a in chunk.phoneme_alignments]
                phoneme_words.extend(split_phoneme_words(pairs, offset))
            else:
                aligned = False
            pcm.extend(chunk.audio_int16_bytes)
        samples = len(pcm) // 2
        words = (
            align_words(text, phoneme_words, self.count_phoneme_words, samples)
            if aligned and phoneme_words
            else []
        )
        return SpeechAudio(bytes(pcm), self.sample_rate, tuple(words))

    @functools.lru_cache(maxsize=4096)  # noqa: B019 - one voice per process; bounded
    def count_phoneme_words(self, token: str) -> int:
        """How many spoken words espeak makes of `token` on its own ("7:30" -> 2, "—" -> 0)."""
        count = 0
        for sentence in self._voice.phonemize(token):
            count += len(split_phoneme_words([(p, 1) for p in sentence]))
        return count
