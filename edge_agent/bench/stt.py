"""`edge-agent bench stt`: word error rate and speed of each recognizer on the clip set.

Every clip of `clipset` (espeak-ng and Piper voices; clean, noise, babble, a room) is fed to
each recognizer in 100 ms pieces, as the live loop feeds it, and the transcript compared with
what was said (`wer`). Speed: the real-time factor of the whole transcription, and the wait
after the last piece (`end()`), which is what a caller waits for at the end of a turn.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from edge_agent.bench.clipset import Clip, clip_set
from edge_agent.bench.stats import summarize
from edge_agent.bench.wer import word_errors
from edge_agent.engines.base import SpeechRecognizer
from edge_agent.engines.tts import PiperSpeech

_PIECE_MS = 100


def transcribe_clip(stt: SpeechRecognizer, clip: Clip) -> tuple[str, float, float]:
    """(transcript, seconds spent in all, seconds spent in `end()`)."""
    return transcribe(stt, clip.pcm)


def transcribe(stt: SpeechRecognizer, pcm: bytes) -> tuple[str, float, float]:
    """`pcm` (int16 at the recognizer's rate) fed in 100 ms pieces: (transcript, seconds spent
    in all, seconds spent in `end()`)."""
    piece = stt.sample_rate * _PIECE_MS // 1000 * 2
    started = time.perf_counter()
    stt.begin()
    for at in range(0, len(pcm), piece):
        stt.feed(pcm[at:at + piece])
    ending = time.perf_counter()
    text = stt.end().text
    done = time.perf_counter()
    return text, done - started, done - ending


def run_stt(piper: PiperSpeech, recognizers: Mapping[str, SpeechRecognizer], every: int = 1,
            progress: Callable[[str, Clip, str, int], None] | None = None) -> dict[str, Any]:
    """Every recognizer on every `every`-th clip (`clipset.clip_count`); the figures per
    engine, voice and condition."""
    rows: list[dict[str, Any]] = []
    for clip in clip_set(piper, every=every):
        for engine, stt in recognizers.items():
            text, spent, ending = transcribe_clip(stt, clip)
            errors, words = word_errors(clip.text, text)
            rows.append({"engine": engine, "voice": clip.voice.name,
                         "condition": clip.condition, "said": clip.text, "heard": text,
                         "errors": errors, "words": words, "seconds": round(clip.seconds, 3),
                         "rtf": round(spent / clip.seconds, 4),
                         "end_ms": round(1000 * ending, 1)})
            if progress is not None:
                progress(engine, clip, text, errors)
    engines = {}
    for engine in recognizers:
        mine = [r for r in rows if r["engine"] == engine]
        engines[engine] = {
            "wer_percent": _wer(mine),
            "by_condition": {c: _wer([r for r in mine if r["condition"] == c])
                             for c in dict.fromkeys(r["condition"] for r in mine)},
            "by_voice": {v: _wer([r for r in mine if r["voice"] == v])
                         for v in dict.fromkeys(r["voice"] for r in mine)},
            "rtf": summarize([r["rtf"] for r in mine], digits=3),
            "end_ms": summarize([r["end_ms"] for r in mine]),
        }
    return {"benchmark": "stt", "clips": len(rows) // max(1, len(recognizers)),
            "clip_every": every,
            "engines": engines, "rows": rows}


def _wer(rows: list[dict[str, Any]]) -> float:
    errors = sum(r["errors"] for r in rows)
    words = sum(r["words"] for r in rows)
    return round(100 * errors / words, 1) if words else 0.0


def table(result: dict[str, Any]) -> str:
    engines = result["engines"]
    names = list(engines)
    lines = [f"speech recognition on {result['clips']} clips (WER %, lower is better)",
             f"{'':26}" + "".join(f"{n:>14}" for n in names),
             f"{'all':26}" + "".join(f"{engines[n]['wer_percent']:>13.1f}%" for n in names)]
    first = engines[names[0]]
    for group in ("by_condition", "by_voice"):
        for key in first[group]:
            lines.append(f"  {key:24}" + "".join(f"{engines[n][group][key]:>13.1f}%"
                                                 for n in names))
    lines.append(f"{'real-time factor p50':26}" + "".join(
        f"{engines[n]['rtf']['p50']:>14.3f}" for n in names))
    lines.append(f"{'wait after the last audio':26}" + "".join(
        f"{engines[n]['end_ms']['p50']:>11.0f} ms" for n in names))
    lines.append(f"{'  p95':26}" + "".join(
        f"{engines[n]['end_ms']['p95']:>11.0f} ms" for n in names))
    return "\n".join(lines)

