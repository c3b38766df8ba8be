"""Moonshine base-en on onnxruntime: real speech from the wheel, the model rewrite, the clip set
against PocketSphinx, broken model files, and `models fetch` of the wheel on a machine without
it (against a local HTTP server)."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime
import pytest

from edge_agent.audio.pcm import read_wav
from edge_agent.bench.clipset import clip_set
from edge_agent.bench.stt import transcribe_clip
from edge_agent.bench.wer import word_error_rate, word_errors
from edge_agent.conversation.backchannel import normalize
from edge_agent.demo.voices import espeak
from edge_agent.engines.moonshine import (
    MODEL_FILES,
    MoonshineRecognizer,
    _next_token,
    read_tokenizer,
)
from edge_agent.engines.ort_model import load_ort_as_onnx, quantized_weights_to_matmul_nbits
from edge_agent.engines.stt import PocketSphinxRecognizer
from edge_agent.errors import ModelFileError
from edge_agent.models.catalog import load_catalog
from tests.model_server import Server, archive_model, fetch, write_setup

pytestmark = pytest.mark.models

BECKETT = "Ever tried. Ever failed. No matter. Try again. Fail again. Fail better."
"""What `test-data/beckett.wav` in the moonshine-cpp wheel says (Samuel Beckett)."""


@pytest.fixture(scope="module")
def model_dir(model_path: Any) -> Path:
    return Path(model_path("moonshine-base-en"))


@pytest.fixture(scope="module")
def moonshine(model_dir: Path) -> MoonshineRecognizer:
    return MoonshineRecognizer(model_dir)


@pytest.fixture(scope="module")
def beckett(model_dir: Path) -> bytes:
    wav = model_dir.parent.parent / "test-data" / "beckett.wav"
    if not wav.is_file():
        pytest.skip("the moonshine-cpp wheel's test clip is not installed (fetched model only)")
    pcm, rate = read_wav(wav)
    assert rate == 16000
    return pcm


def test_transcribes_real_speech_from_the_wheel(moonshine: MoonshineRecognizer,
                                                beckett: bytes) -> None:
    moonshine.begin()
    for at in range(0, len(beckett), 3200):
        moonshine.feed(beckett[at:at + 3200])
    transcript = moonshine.end()
    errors, _ = word_errors(BECKETT, transcript.text)
    assert errors <= 1, transcript.text
    assert transcript.words and all(w.start is None for w in transcript.words)  # not timed


def test_a_short_interruption_is_not_read_as_nothing(moonshine: MoonshineRecognizer) -> None:
    # The decoder's first step puts the end token first (0.52) with "Hold" close behind (0.40):
    # read as "", a real "hold on" over the agent would be dropped as noise.
    assert normalize(moonshine.transcribe(espeak("hold on", "en-us+f3", 160, 50))) == ["hold", "on"]
    # ...while silence and noise still read as nothing (the end token at 0.9-1.0).
    assert moonshine.transcribe(bytes(32000)) == ""
    noise = np.random.default_rng(0).normal(0, 300, 16000).astype(np.int16).tobytes()
    assert moonshine.transcribe(noise) == ""


def test_the_first_step_ends_only_when_no_word_is_close() -> None:
    def logits(**probabilities: float) -> np.ndarray:
        values = np.full(40, 1e-6)
        for token, p in probabilities.items():
            values[int(token[1:])] = p
        return np.log(values)

    end = 2
    assert _next_token(logits(t2=0.52, t7=0.40), first_step=True) == 7
    assert _next_token(logits(t2=0.75, t7=0.2 + 1e-3), first_step=True) == 7
    assert _next_token(logits(t2=0.9, t7=0.05, t9=0.04), first_step=True) == end
    assert _next_token(logits(t2=0.3, t5=0.6), first_step=True) == 5
    # Later steps end where the end token is likeliest: a finished sentence stops there.
    assert _next_token(logits(t2=0.52, t7=0.40), first_step=False) == end


def test_the_rewritten_model_dequantizes_nothing_per_call_and_says_the_same(
        model_dir: Path, moonshine: MoonshineRecognizer, beckett: bytes) -> None:
    original = load_ort_as_onnx(model_dir / "decoder_model_merged.ort")
    casts = sum(n.op_type == "Cast" for n in original.graph.node)
    rewritten = quantized_weights_to_matmul_nbits(original)
    assert casts >= 80  # the .ort dequantizes every weight with Cast -> Mul -> Add, each call
    assert sum(n.op_type == "Cast" for n in rewritten.graph.node) == 0
    assert not any(t.data_type == 1 and len(t.raw_data) > 4_000_000
                   for t in rewritten.graph.initializer)  # no big float copies of int8 weights
    # The encoder as shipped and as rewritten (int8 arithmetic) hear the same thing.
    samples = np.frombuffer(beckett[: 3 * 32000], dtype=np.int16).astype(np.float32) / 32768
    shipped = onnxruntime.InferenceSession(str(model_dir / "encoder_model.ort"),
                                           providers=["CPUExecutionProvider"])
    fast = onnxruntime.InferenceSession(
        quantized_weights_to_matmul_nbits(load_ort_as_onnx(model_dir / "encoder_model.ort"))
        .SerializeToString(), providers=["CPUExecutionProvider"])
    a = shipped.run(None, {"input_values": samples[np.newaxis]})[0].ravel()
    b = fast.run(None, {"input_values": samples[np.newaxis]})[0].ravel()
    assert float(np.corrcoef(a, b)[0, 1]) > 0.99
    assert moonshine.transcribe(beckett[: 3 * 32000]).lower().startswith("ever tried")


def test_moonshine_hears_voices_nobody_tuned_for_far_better_than_pocketsphinx(
        piper: Any, moonshine: MoonshineRecognizer, model_path: Any) -> None:
    sphinx = PocketSphinxRecognizer(model_path("pocketsphinx-en-us"))
    heard: dict[str, list[tuple[str, str]]] = {"moonshine": [], "pocketsphinx": []}
    for clip in clip_set(piper, quick=True):
        heard["moonshine"].append((clip.text, transcribe_clip(moonshine, clip)[0]))
        heard["pocketsphinx"].append((clip.text, transcribe_clip(sphinx, clip)[0]))
    moon, sphinx_wer = (word_error_rate(heard[e]) for e in ("moonshine", "pocketsphinx"))
    # Measured on this quick set: Moonshine 24-35 %, PocketSphinx 70-80 % (README has the
    # full set). Bounds with room for Piper's run-to-run variation.
    assert moon <= 0.45, heard["moonshine"]
    assert moon < sphinx_wer / 1.5, (moon, sphinx_wer)


def test_a_damaged_model_is_a_model_error_naming_the_file(tmp_path: Path, model_dir: Path) -> None:
    broken = tmp_path / "base-en"
    broken.mkdir()
    for name in MODEL_FILES:
        (broken / name).write_bytes((model_dir / name).read_bytes())
    (broken / "encoder_model.ort").write_bytes((model_dir / "encoder_model.ort").read_bytes()[:5000])
    with pytest.raises(ModelFileError, match=r"encoder_model\.ort: cannot load it") as caught:
        MoonshineRecognizer(broken)
    assert caught.value.exit_code == 3
    (broken / "tokenizer.bin").unlink()
    with pytest.raises(ModelFileError, match=r"tokenizer\.bin: missing"):
        MoonshineRecognizer(broken)
    (broken / "tokenizer.bin").write_bytes(b"\x05ab")
    with pytest.raises(ModelFileError, match="runs past the end"):
        read_tokenizer(broken / "tokenizer.bin")


def test_models_fetch_takes_the_model_out_of_the_wheel(
        server: Server, tmp_path: Path, model_dir: Path) -> None:
    builtin = load_catalog(tmp_path).spec("moonshine-base-en")
    (download,) = builtin.downloads
    assert download.url.endswith("moonshine_cpp-0.1.4-py3-none-manylinux2014_x86_64.whl")
    # A wheel-shaped zip holding the installed model under the wheel's own member path.
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as wheel:
        for name in MODEL_FILES:
            wheel.write(model_dir / name, download.extract + name)
        wheel.writestr("moonshine_cpp/libmoonshine.so", b"not needed")
    body = buffer.getvalue()
    url = server.serve("/moonshine.whl", body)
    setup = write_setup(tmp_path, {"moonshine-base-en": archive_model(
        url, body, download.extract, download.save_as, entry=builtin.entry)})
    result = fetch(setup, "moonshine-base-en")
    assert result.returncode == 0, result.stderr
    fetched = setup.models_dir / "moonshine-base-en" / builtin.entry
    assert sorted(p.name for p in fetched.iterdir()) == sorted(MODEL_FILES)
    assert not list(setup.models_dir.rglob("*.whl*"))  # the wheel itself is not kept
    recognizer = MoonshineRecognizer(fetched)
    wav = model_dir.parent.parent / "test-data" / "beckett.wav"
    if wav.is_file():
        pcm, _ = read_wav(wav)
        assert recognizer.transcribe(pcm[: 3 * 32000]).lower().startswith("ever tried")


MONOLOGUE = (
    "I would like to tell you about our trip to the mountains last summer. We drove for six "
    "hours on a narrow road, and the children counted every cow they saw along the way. When "
    "we arrived the cabin was cold, so my brother made a fire while I cooked pasta for "
    "everyone. The next morning we walked to the lake, which was so clear that you could see "
    "the stones at the bottom. My daughter found a small green frog and wanted to take it "
    "home, but we told her it would miss its family. In the afternoon it started to rain, and "
    "we played cards until the evening. On the last day we climbed to the top of the hill and "
    "watched the sun go down behind the peaks. It was the best holiday we have had in years, "
    "and we already want to go back next summer with our friends from the city.")


def test_long_speech_is_transcribed_in_bounded_windows(
        piper: Any, moonshine: MoonshineRecognizer) -> None:
    from edge_agent.audio.pcm import resample
    from edge_agent.bench.wer import word_error_rate
    from edge_agent.engines.moonshine import WINDOW_SECONDS

    speech = piper.synthesize(MONOLOGUE)
    pcm = resample(speech.pcm, speech.sample_rate, 16000)
    assert len(pcm) / 32000 > 1.5 * WINDOW_SECONDS  # more than one window
    moonshine.begin()
    held = []
    for at in range(0, len(pcm), 3200):
        moonshine.feed(pcm[at:at + 3200])
        held.append(moonshine.held_seconds)
    assert max(held) <= WINDOW_SECONDS + 0.1
    text = moonshine.end().text
    # Cuts fall in pauses: the windows' texts join into the whole monologue.
    assert word_error_rate([(MONOLOGUE, text)]) <= 0.15, text
