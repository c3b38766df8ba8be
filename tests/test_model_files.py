"""Model files that load but are not what their key says: one clear error naming the file and
the fix at start-up, never a traceback at the first frame or word.

- a VAD model that is not Silero (small ONNX files built here with `onnx`);
- a Piper voice whose config gives a sample rate of 0 (or none, or a string);
- a Moonshine directory with the encoder and the decoder swapped (the real files, copied).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import onnx
import pytest
from onnx import TensorProto, helper

from edge_agent.engines.moonshine import MODEL_FILES, MoonshineRecognizer
from edge_agent.engines.tts import PiperSpeech, read_voice_config
from edge_agent.engines.vad import SileroVad
from edge_agent.errors import ModelFileError
from tests.cli import edge_agent, write_config

MODEL_ERROR = 3  # ModelFileError.exit_code


def _onnx_file(path: Path, inputs: list[onnx.ValueInfoProto], outputs: list[onnx.ValueInfoProto],
               nodes: list[onnx.NodeProto]) -> Path:
    graph = helper.make_graph(nodes, "not-silero", inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def _float(name: str, shape: list[Any]) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def _classifier(path: Path) -> Path:
    """An image-classifier-like model: one input `pixels`, one output."""
    return _onnx_file(path, [_float("pixels", [1, 3])], [_float("label", [1, 3])],
                      [helper.make_node("Relu", ["pixels"], ["label"])])


def _silero_names_wrong_shapes(path: Path) -> Path:
    """Silero's input and output names, but a state of another shape: fails on a frame."""
    inputs = [_float("input", [1, None]), _float("state", [3, 1, 64]),
              helper.make_tensor_value_info("sr", TensorProto.INT64, [])]
    outputs = [_float("output", [1, 1]), _float("stateN", [3, 1, 64])]
    nodes = [helper.make_node("ReduceMean", ["input"], ["output"], axes=[1], keepdims=1),
             helper.make_node("Identity", ["state"], ["stateN"])]
    return _onnx_file(path, inputs, outputs, nodes)


@pytest.mark.parametrize(("build", "reason"), [
    pytest.param(_classifier, "not a Silero VAD model: it takes pixels and gives label; "
                 "Silero VAD takes input, state, sr", id="other-inputs"),
    pytest.param(_silero_names_wrong_shapes, "not a Silero VAD v5/v6 model: a frame of silence "
                 "fails", id="silero-names-other-shapes"),
])
def test_a_vad_model_that_is_not_silero_is_refused_at_load(tmp_path: Path, build: Any,
                                                           reason: str) -> None:
    path = build(tmp_path / "vad.onnx")
    with pytest.raises(ModelFileError) as caught:
        SileroVad(path)
    message = str(caught.value)
    assert f"cannot use model file {path}: {reason}" in message, message
    assert "point vad.model at a Silero VAD" in message


# --------------------------------------------------------------------------- the voice's rate


def _voice(tmp_path: Path, audio: Any) -> Path:
    """A voice .onnx (not a real one: the config is checked before the model is read) and its
    .onnx.json holding `audio`."""
    voice = tmp_path / "voice.onnx"
    voice.write_bytes(b"not read")
    config = {"audio": audio, "espeak": {"voice": "en-us"}, "num_symbols": 1, "num_speakers": 1,
              "phoneme_id_map": {}}
    voice.with_name("voice.onnx.json").write_text(json.dumps(config), encoding="utf-8")
    return voice


@pytest.mark.parametrize("audio", [
    {"sample_rate": 0}, {"sample_rate": -22050}, {"sample_rate": "22050"},
    {"sample_rate": True}, {"sample_rate": 10**9}, {}, "22050",
], ids=["zero", "negative", "string", "bool", "huge", "missing", "not-a-table"])
def test_a_voice_config_without_a_usable_sample_rate_is_refused(tmp_path: Path,
                                                                audio: Any) -> None:
    voice = _voice(tmp_path, audio)
    with pytest.raises(ModelFileError) as caught:
        PiperSpeech.load(voice)
    message = str(caught.value)
    assert f"cannot use model file {voice}.json: audio.sample_rate is" in message, message
    assert "8000..96000 Hz" in message and "restore the voice's .onnx.json" in message


def test_a_voice_config_that_is_not_json_or_missing_names_the_file(tmp_path: Path) -> None:
    voice = _voice(tmp_path, {"sample_rate": 22050})
    assert read_voice_config(Path(f"{voice}.json"))["audio"]["sample_rate"] == 22050
    Path(f"{voice}.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(ModelFileError, match=r"voice\.onnx\.json: cannot read the voice's config"):
        PiperSpeech.load(voice)
    Path(f"{voice}.json").unlink()
    with pytest.raises(ModelFileError, match=r"voice\.onnx\.json: missing"):
        PiperSpeech.load(voice)


def test_a_voice_rate_of_zero_is_one_clear_error_from_the_cli(tmp_path: Path) -> None:
    """Through `edge-agent demo`: exit 3, one line, no traceback (the voice loads first)."""
    voice = _voice(tmp_path, {"sample_rate": 0})
    vad = tmp_path / "vad.onnx"
    vad.write_bytes(b"never loaded: the voice fails first")
    config = write_config(tmp_path, f'[vad]\nmodel = "{vad.as_posix()}"\n'
                          f'[stt]\nengine = "vosk"\nvosk_model = "{tmp_path.as_posix()}"\n'
                          f'[tts]\nvoice = "{voice.as_posix()}"\n')
    result = edge_agent("demo", config=config, timeout=120)
    assert result.returncode == MODEL_ERROR, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("edge-agent: error: "), result.stderr
    assert f"{voice}.json: audio.sample_rate is 0" in lines[0]
    assert "tts.voice" in lines[0]  # how to fix it


# --------------------------------------------------------------------------- Moonshine


@pytest.mark.models
def test_moonshine_files_swapped_name_the_file_and_the_swap(tmp_path: Path,
                                                            model_path: Any) -> None:
    model_dir = Path(model_path("moonshine-base-en"))
    swapped = tmp_path / "base-en"
    swapped.mkdir()
    encoder, decoder, tokenizer = MODEL_FILES
    shutil.copyfile(model_dir / encoder, swapped / decoder)
    shutil.copyfile(model_dir / decoder, swapped / encoder)
    shutil.copyfile(model_dir / tokenizer, swapped / tokenizer)
    with pytest.raises(ModelFileError) as caught:
        MoonshineRecognizer(swapped)
    message = str(caught.value)
    assert f"cannot use model file {swapped / encoder}: not Moonshine's encoder" in message
    assert f"it is Moonshine's decoder: are {encoder} and {decoder} swapped?" in message

    (swapped / encoder).unlink()  # the encoder given twice: now the decoder's file is wrong
    shutil.copyfile(model_dir / encoder, swapped / encoder)
    with pytest.raises(ModelFileError) as caught:
        MoonshineRecognizer(swapped)
    message = str(caught.value)
    assert f"cannot use model file {swapped / decoder}: not Moonshine's decoder" in message
    assert "swapped?" in message


@pytest.mark.models
def test_a_vad_that_is_not_silero_is_one_clear_error_from_the_cli(tmp_path: Path) -> None:
    vad = _classifier(tmp_path / "classifier.onnx")
    config = write_config(tmp_path, f'[vad]\nmodel = "{vad.as_posix()}"\n'
                          '[stt]\nengine = "pocketsphinx"\n')
    result = edge_agent("demo", config=config, timeout=300)
    assert result.returncode == MODEL_ERROR, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines[-1].startswith("edge-agent: error: "), result.stderr
    assert f"{vad}: not a Silero VAD model" in lines[-1]
