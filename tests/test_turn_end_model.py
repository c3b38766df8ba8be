"""End of turn by sound on the real models: Smart Turn v3.2 judging Piper's speech, and the loop
(Silero VAD, Moonshine, Smart Turn; a scripted reply) ending turns by words and sound on the
virtual clock, where the engines' compute takes no time, so the silences are exact."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from edge_agent.audio.pcm import resample, silence
from edge_agent.bench.recording import audible_part
from edge_agent.config import VadConfig
from edge_agent.conversation.settings import Engines
from edge_agent.engines.moonshine import MoonshineRecognizer
from edge_agent.engines.tts import PiperSpeech, make_voice_repeatable
from edge_agent.engines.turn_end import SmartTurn, last_window, log_mel
from edge_agent.engines.vad import SileroVad
from edge_agent.errors import ModelFileError
from edge_agent.events import UserSpeechEnded, UserTurn
from tests.fakes import FakeLanguageModel, FakeSpeech
from tests.timeline import Harness, stop

pytestmark = pytest.mark.models

RATE = 16000


@pytest.fixture(scope="module")
def smart_turn(model_path: Callable[[str], Path]) -> SmartTurn:
    return SmartTurn(model_path("smart-turn-v3.2"))


@pytest.fixture(scope="module")
def moonshine(model_path: Callable[[str], Path]) -> MoonshineRecognizer:
    return MoonshineRecognizer(model_path("moonshine-base-en"))


PHRASES = ("What time do you open tomorrow?", "Six people,", "Thank you.",
           "It was the best of times,", "it was the worst of times.", "So I was thinking that",
           "Two adults and", "I'd like a table for", "four.")


@pytest.fixture(scope="module")
def spoken(model_path: Callable[[str], Path]) -> dict[str, bytes]:
    """Every phrase of this module in the agent's voice at 16 kHz, the silence around it cut
    (the tests add their own). Piper draws its prosody at random; seeded, and said in one fixed
    order, the phrases are the same audio in every run, whichever tests run."""
    make_voice_repeatable()
    voice = model_path("joe-medium")
    piper = PiperSpeech.load(voice, voice.with_name(voice.name + ".json"))
    return {text: _trimmed(piper, text) for text in PHRASES}


def _trimmed(piper: PiperSpeech, text: str) -> bytes:
    audio = piper.synthesize(text)
    samples = np.frombuffer(resample(audio.pcm, audio.sample_rate, RATE), dtype=np.int16)
    return audible_part(samples).tobytes()


def test_the_features_are_whispers_log_mel_of_the_last_eight_seconds() -> None:
    tone = (np.sin(2 * np.pi * 1000 * np.arange(RATE) / RATE) * 8000).astype(np.int16)
    window = last_window(tone.tobytes())
    assert window.shape == (8 * RATE,) and not window[:7 * RATE].any()  # silence in front
    features = log_mel(window)
    assert features.shape == (80, 800) and features.dtype == np.float32
    # The tone's second is the last 100 frames, in the band around 1 kHz (Slaney's mel scale:
    # 1 kHz is mel 15 of 45.2 at 8 kHz, filter ~25 of 80); the silence sits at the floor, 8
    # (log10) under the loudest, i.e. 2 under it after (x + 4) / 4.
    assert 23 <= features[:, -50].argmax() <= 27
    assert features[:, :690].max() == pytest.approx(features.max() - 2.0, abs=1e-6)


def test_the_features_match_the_reference_extractor_shipped_beside_the_model(
        model_path: Callable[[str], Path], spoken: dict[str, bytes]) -> None:
    """pipecat's wheel ships, next to the model, the numpy copy of transformers' Whisper
    feature extractor the model was trained with: loaded from its file (pipecat itself is never
    imported), it must give the same features to the last bit."""
    reference = model_path("smart-turn-v3.2").parent.parent / "_whisper_features.py"
    if not reference.exists():
        pytest.skip("the model was fetched on its own: no reference extractor beside it")
    spec = importlib.util.spec_from_file_location("whisper_features_reference", reference)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    window = last_window(spoken["What time do you open tomorrow?"])
    expected = module.compute_whisper_log_mel_features(window, do_normalize=True)
    np.testing.assert_array_equal(log_mel(window), expected)


def test_a_file_that_is_not_smart_turn_is_refused_with_the_fix(
        model_path: Callable[[str], Path], tmp_path: Path) -> None:
    with pytest.raises(ModelFileError) as caught:
        SmartTurn(model_path("silero-vad"))
    assert "not a Smart Turn v3 model: it takes input" in str(caught.value)
    assert "point vad.end_model at a Smart Turn v3 .onnx file" in str(caught.value)
    cut = tmp_path / "smart-turn.onnx"
    cut.write_bytes(model_path("smart-turn-v3.2").read_bytes()[:100_000])
    with pytest.raises(ModelFileError, match="onnxruntime cannot load it as Smart Turn"):
        SmartTurn(cut)


@pytest.mark.parametrize(("text", "finished"), [
    # Piper draws its prosody at random: these stayed on their side in 12 syntheses of 12
    # (lowest / highest probability seen), "Okay," or "Hold on," did not (0.10-0.79, 0.42-0.89).
    ("What time do you open tomorrow?", True),  # 0.89
    ("Six people,", True),  # 0.92
    ("Thank you.", True),  # 0.92
    ("It was the best of times,", False),  # 0.30
    ("So I was thinking that", False),  # 0.03
    ("Two adults and", False),  # 0.01
])
def test_smart_turn_hears_whether_piper_finished(smart_turn: SmartTurn, spoken: dict[str, bytes],
                                                 text: str, finished: bool) -> None:
    pcm = spoken[text] + silence(int(0.128 * RATE))
    probability = smart_turn.complete_probability(pcm)
    assert (probability >= 0.5) is finished, probability


async def _turns(spoken: dict[str, bytes], moonshine: MoonshineRecognizer,
                 model_path: Callable[[str], Path], turn_end: SmartTurn | None,
                 *parts: str | float) -> Harness:
    """The caller says `parts` (text, or a pause in seconds) then stays silent for 2 s."""
    engines = Engines(SileroVad(model_path("silero-vad")), moonshine, FakeLanguageModel([]),
                      FakeSpeech(), turn_end)
    # The config's silences (the harness shortens the plain one for its fake-engine tests).
    h = Harness(transcripts=[], replies=["Okay."] * 4, greeting="", real=engines,
                overrides={"unknown_ms": VadConfig().end_silence_ms})
    audio = silence(int(0.5 * RATE)) + b"".join(
        silence(int(part * RATE)) if isinstance(part, float) else spoken[part]
        for part in parts) + silence(2 * RATE)
    task = await h.start()
    h.mic.say(audio)
    end = h.clock.now() + len(audio) / 2 / RATE
    await h.run_until(lambda: h.clock.now() >= end, limit=60)
    await stop(task)
    return h


def _texts(h: Harness) -> list[str]:
    return [e.text for e in h.events(UserTurn)]  # type: ignore[attr-defined]


def _silences(h: Harness) -> list[int]:
    return [e.silence_ms for e in h.events(UserSpeechEnded)]  # type: ignore[attr-defined]


async def test_a_finished_turn_is_answered_after_a_short_silence_by_its_sound(
        spoken: dict[str, bytes], moonshine: MoonshineRecognizer,
        model_path: Callable[[str], Path], smart_turn: SmartTurn) -> None:
    """Two words ending on a comma, said as a finished answer (Piper's falling "Six people,"):
    the words tell nothing (they would wait the plain 500 ms); the sound ends the turn after
    250 ms, or, sure of it (Piper's scored >= 0.92 in 8-12 syntheses), as soon as the words
    are known. (In 8
    syntheses Moonshine wrote "Six people,", "6 people", "Sex people,": two words each time.)"""
    with_sound = await _turns(spoken, moonshine, model_path, smart_turn, "Six people,")
    words_only = await _turns(spoken, moonshine, model_path, None, "Six people,")
    assert [len(t.split()) for t in _texts(with_sound)] == [2], _texts(with_sound)
    assert "people" in _texts(with_sound)[0].lower()
    assert _silences(words_only) == [512]
    (ended,) = with_sound.events(UserSpeechEnded)
    assert ended.sounded_finished is not None and ended.sounded_finished >= 0.5  # type: ignore[attr-defined]
    # The first 32 ms frame at or past the config's end_silence_sure_ms (96: the words are
    # known by then, speculated at 32 ms), else at or past its end_silence_sound_ms (250).
    vad = VadConfig()
    sure = ended.sounded_finished >= vad.end_model_sure_above  # type: ignore[attr-defined]
    assert _silences(with_sound) == ([96] if sure else [256])


async def test_a_paused_phrase_is_waited_for(spoken: dict[str, bytes], moonshine: MoonshineRecognizer,
                                             model_path: Callable[[str], Path],
                                             smart_turn: SmartTurn) -> None:
    """A pause after a phrase that sounds unfinished ("It was the best of times," rising) or
    whose words lead on ("a table for") is not the end of the turn: one turn each."""
    paused = await _turns(spoken, moonshine, model_path, smart_turn,
                          "It was the best of times,", 0.7, "it was the worst of times.")
    assert len(_texts(paused)) == 1, _texts(paused)
    assert "best" in _texts(paused)[0].lower() and "worst" in _texts(paused)[0].lower()
    # Without the sound, the words ("times,") end the turn after 500 ms: two turns.
    words_only = await _turns(spoken, moonshine, model_path, None,
                              "It was the best of times,", 0.7, "it was the worst of times.")
    assert len(_texts(words_only)) == 2, _texts(words_only)
    table = await _turns(spoken, moonshine, model_path, smart_turn,
                         "I'd like a table for", 0.7, "four.")
    assert len(_texts(table)) == 1 and "four" in _texts(table)[0].lower(), _texts(table)
