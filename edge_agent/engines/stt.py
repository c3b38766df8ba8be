"""Speech-to-text: PocketSphinx (embedded default, model in its wheel) and Vosk."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from edge_agent.engines.base import RecognizedWord, Transcript
from edge_agent.errors import ModelFileError

_FILLER = re.compile(r"^(<s>|</s>|<sil>|\[.*\]|\+.*\+)$")
_VARIANT = re.compile(r"\(\d+\)$")


class PocketSphinxRecognizer:
    """PocketSphinx 5, streaming `process_raw`, word segments at 100 frames per second."""

    sample_rate = 16000

    def __init__(self, model_dir: Path | None = None) -> None:
        from pocketsphinx import Config, Decoder

        try:
            config = Config(loglevel="FATAL")
            if model_dir is not None:
                config["hmm"] = str(model_dir / "en-us")
                config["lm"] = str(model_dir / "en-us.lm.bin")
                config["dict"] = str(model_dir / "cmudict-en-us.dict")
            self._decoder = Decoder(config)
        except Exception as exc:
            raise ModelFileError(model_dir or "(bundled)", f"PocketSphinx cannot load it ({exc})") from None

    def begin(self) -> None:
        self._decoder.start_utt()

    def feed(self, pcm: bytes) -> None:
        self._decoder.process_raw(pcm, False, False)

    def partial(self) -> str:
        hypothesis = self._decoder.hyp()
        if hypothesis is None:
            return ""
        words = (_VARIANT.sub("", w) for w in hypothesis.hypstr.split())
        return " ".join(w for w in words if not _FILLER.match(w))

    def end(self) -> Transcript:
        self._decoder.end_utt()
        words = []
        for segment in self._decoder.seg():
            if _FILLER.match(segment.word):
                continue
            text = _VARIANT.sub("", segment.word)
            words.append(RecognizedWord(text, segment.start_frame / 100.0, (segment.end_frame + 1) / 100.0))
        return Transcript(" ".join(w.text for w in words), tuple(words))


class VoskRecognizer:
    """Vosk (Kaldi) with per-word times; used when a Vosk model directory is configured."""

    sample_rate = 16000

    def __init__(self, model_dir: Path) -> None:
        import vosk

        vosk.SetLogLevel(-1)
        if not (model_dir / "am").is_dir() and not (model_dir / "conf").is_dir():
            raise ModelFileError(model_dir, "not a Vosk model (no am/ or conf/ directory inside)")
        try:
            self._model = vosk.Model(str(model_dir))
        except Exception as exc:
            raise ModelFileError(model_dir, f"Vosk cannot load it ({exc})") from None
        self._vosk = vosk
        self._recognizer: Any = None
        self._results: list[dict[str, Any]] = []

    def begin(self) -> None:
        self._recognizer = self._vosk.KaldiRecognizer(self._model, self.sample_rate)
        self._recognizer.SetWords(True)
        self._results = []

    def feed(self, pcm: bytes) -> None:
        if self._recognizer.AcceptWaveform(pcm):
            self._results.append(json.loads(self._recognizer.Result()))

    def partial(self) -> str:
        done = " ".join(r.get("text", "") for r in self._results).strip()
        pending = str(json.loads(self._recognizer.PartialResult()).get("partial", ""))
        return f"{done} {pending}".strip()

    def end(self) -> Transcript:
        self._results.append(json.loads(self._recognizer.FinalResult()))
        words = tuple(
            RecognizedWord(item["word"], float(item["start"]), float(item["end"]))
            for result in self._results
            for item in result.get("result", [])
        )
        return Transcript(" ".join(w.text for w in words), words)
