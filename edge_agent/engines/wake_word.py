"""The wake word: microWakeWord models on TensorFlow Lite, from the `pymicro-wakeword` wheel.

An offline assistant should not transcribe the room all day to find its name. With
`[session] start = "wake"` and a `wake_word` model, only the VAD and this model hear the room
until the word is said: a streaming model of ~50-80 kB (TensorFlow Lite's micro frontend turns
each 10 ms of 16 kHz audio into 40 spectral features; the model scores every 30 ms, and the
word is heard when the mean of its last few scores passes the model's cutoff). On this 2-core
x86 machine that costs ~4 ms of one core per second of audio.

The `pymicro-wakeword` wheel (Apache-2.0, rhasspy/Michael Hansen; x86_64 and aarch64 Linux
wheels with TensorFlow Lite's C library inside) brings four models trained by Kevin Ahrendt for
ESPHome and Home Assistant (esphome/micro-wakeword-models, Apache-2.0): okay_nabu, hey_jarvis,
alexa and hey_mycroft. A model is a `.tflite` file and a JSON file beside it (the format ESPHome
publishes: `"type": "micro"`, `"wake_word"`, `"model"`, and `micro.probability_cutoff`,
`micro.sliding_window_size`); any such pair, e.g. one trained with microWakeWord, can be named by
path.

The word is reported once, on the frame whose score first passes the cutoff, and again only
after the score fell below it: one saying is one detection. The model hears a word to its end
and a few windows more, so it fires 0-150 ms after the word's last sound; what the caller says
next starts at or after that point (`WAKE_LOOKBACK_MS` covers a fluent speaker).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from edge_agent.errors import EngineError, ModelFileError
from edge_agent.printable import shown

SAMPLE_RATE = 16000
_TFLITE_ID = b"TFL3"
"""The FlatBuffers file identifier of every TensorFlow Lite model (bytes 4-8 of the file)."""
_NOT_A_WAKE_MODEL = ("point session.wake_word at a microWakeWord model (its .json or .tflite; "
                     "the built-in ones: okay-nabu, hey-jarvis, alexa, hey-mycroft)")


def _runtime() -> Any:
    try:
        import pymicro_wakeword
    except ImportError as exc:
        raise EngineError("the wake word needs the pymicro-wakeword package: "
                          "pip install 'edge-agent[models]' (or pip install "
                          "pymicro-wakeword)") from exc
    return pymicro_wakeword


def settings_file(path: Path) -> Path:
    """The JSON of the model `path` names (the JSON itself, or the .tflite beside it)."""
    return path if path.suffix == ".json" else path.with_suffix(".json")


class MicroWakeWordDetector:
    """One microWakeWord model listening to 16 kHz int16 audio (`WakeWordDetector`)."""

    sample_rate = SAMPLE_RATE

    def __init__(self, path: Path) -> None:
        """`path`: the model's JSON or .tflite (the other one beside it). Raises ModelFileError
        naming the file and what is wrong with it, EngineError if the runtime is missing."""
        runtime = _runtime()
        settings_path = settings_file(path)
        settings = _settings(settings_path)
        tflite = settings_path.parent / settings.model
        _check_tflite(tflite)
        self.phrase = settings.phrase
        """The words the model hears, as its JSON writes them ("Okay Nabu")."""
        self._cutoff = settings.cutoff
        library = _library(runtime)
        _check_loads(runtime, library, tflite)
        self._model = runtime.MicroWakeWord.from_config(settings_path, library)
        self._features = runtime.MicroWakeWordFeatures()
        self._above = False
        self._windows = 0

    def heard(self, pcm: bytes) -> bool:
        """Feed the next audio; True when the wake word ended in it (once per saying)."""
        heard = False
        for features in self._features.process_streaming(pcm):
            score = self._model.process_streaming_prob(features)
            self._windows += 1
            if score is None or self._windows % self._model.stride:
                continue  # the model runs on every `stride`-th window; between, it says 0
            above = score > self._cutoff
            heard = heard or (above and not self._above)
            self._above = above
        return heard

    def reset(self) -> None:
        """Forget what was heard (a new stream: the model's state is reloaded, ~1 ms)."""
        self._features.reset()
        self._model.reset()
        self._above = False
        self._windows = 0


def model_phrase(path: Path) -> str:
    """The words the model at `path` (its JSON or .tflite) hears, as its JSON writes them;
    ModelFileError as the detector's for a JSON that is not a model's."""
    return _settings(settings_file(path)).phrase


def _library(runtime: Any) -> Path:
    """TensorFlow Lite's C library inside the wheel."""
    found = sorted((Path(runtime.__file__).parent / "lib").glob("*tensorflowlite_c.*"))
    if not found:
        raise EngineError("the pymicro-wakeword package has no TensorFlow Lite library (a wheel "
                          "for another platform?): pip install --force-reinstall "
                          "pymicro-wakeword")
    return found[0]


def _check_loads(runtime: Any, library: Path, tflite: Path) -> None:
    """Load the model once by itself: pymicro-wakeword goes on to build an interpreter even when
    TensorFlow Lite refused the file, and that crashes the process."""
    lib = runtime.wakeword.TfLiteWakeWord(library).lib
    model = lib.TfLiteModelCreateFromFile(str(tflite.resolve()).encode())
    if not model:
        raise ModelFileError(tflite, "TensorFlow Lite could not load it (truncated or not a "
                             "model)", _NOT_A_WAKE_MODEL)
    lib.TfLiteModelDelete(model)


class _Settings(NamedTuple):
    model: str
    """The .tflite's file name, beside the JSON."""
    phrase: str
    cutoff: float


def _settings(path: Path) -> _Settings:
    """The model's JSON, checked: the keys the detector uses, with their types."""
    try:
        data = json.loads(path.read_bytes())
    except FileNotFoundError:
        raise ModelFileError(path, "there is no such file (a microWakeWord model is a .tflite "
                             "and a .json beside it)", _NOT_A_WAKE_MODEL) from None
    except OSError as exc:
        raise ModelFileError(path, f"cannot read it: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelFileError(path, f"not JSON ({shown(str(exc), 80)})",
                             _NOT_A_WAKE_MODEL) from None
    micro = data.get("micro") if isinstance(data, dict) else None
    if not isinstance(data, dict) or data.get("type") != "micro" or not isinstance(micro, dict):
        raise ModelFileError(path, 'not a microWakeWord model description (no "type": "micro" '
                             'and "micro" settings)', _NOT_A_WAKE_MODEL)
    model, phrase = data.get("model"), data.get("wake_word")
    cutoff, window = micro.get("probability_cutoff"), micro.get("sliding_window_size")
    wrong = [name for name, ok in (
        ("model (a file name beside it)", isinstance(model, str) and model
         and Path(model).name == model),
        ("wake_word (text)", isinstance(phrase, str) and phrase.strip()),
        ("micro.probability_cutoff (between 0 and 1)",
         isinstance(cutoff, (int, float)) and 0 < cutoff < 1),
        ("micro.sliding_window_size (a whole number from 1)",
         isinstance(window, int) and not isinstance(window, bool) and window >= 1)) if not ok]
    if wrong:
        raise ModelFileError(path, "missing or wrong: " + ", ".join(wrong), _NOT_A_WAKE_MODEL)
    assert isinstance(model, str) and isinstance(phrase, str) and isinstance(cutoff, int | float)
    return _Settings(model, phrase.strip(), float(cutoff))


def _check_tflite(path: Path) -> None:
    """Refuse a file that is not a TensorFlow Lite model before its C library opens it."""
    try:
        with path.open("rb") as file:
            head = file.read(8)
    except FileNotFoundError:
        raise ModelFileError(path, "there is no such file (the .json names it as its model)",
                             _NOT_A_WAKE_MODEL) from None
    except OSError as exc:
        raise ModelFileError(path, f"cannot read it: {exc.strerror or exc}") from None
    if len(head) < 8 or head[4:8] != _TFLITE_ID:
        raise ModelFileError(path, "not a TensorFlow Lite model (no TFL3 identifier)",
                             _NOT_A_WAKE_MODEL)


def silence_probe(detector: MicroWakeWordDetector, seconds: float = 1.0) -> bool:
    """Run the detector on `seconds` of silence (a health check): True if it woke on it."""
    pcm = np.zeros(int(seconds * detector.sample_rate), dtype=np.int16).tobytes()
    return detector.heard(pcm)

