"""The engines' own speed on this machine, one at a time: the voice's and the recognizer's
real-time factors (seconds spent per second of audio) on the benchmark's kiosk sentences, and
the LLM's first token and decoding speed (tokens per second); then the LLM again while the
voice, and then the voice and the recognizer, work beside it without a pause (in a live turn the
voice synthesizes a clause in a tenth of its playing time: this is its worst case).

The voice speaks each sentence (timed), the recognizer transcribes that audio as the live loop
feeds it (100 ms pieces, timed), and the LLM answers each question once, streamed (the first
token timed from the request; the decoding speed over the tokens after it, counted with the
model's own tokenizer). One untimed run of each first: a first call pays for allocations no
later call sees.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, TypedDict

from edge_agent.audio.pcm import resample
from edge_agent.bench.clipset import SENTENCES
from edge_agent.bench.stats import summarize
from edge_agent.bench.stt import transcribe
from edge_agent.engines.base import ChatMessage, SpeechRecognizer, TextToSpeech
from edge_agent.engines.llm.llama import LlamaLanguageModel

SYSTEM = "You are the voice of a restaurant's kiosk. Answer in one or two short sentences."


class AudioSample(TypedDict):
    """One sentence through the voice or the recognizer."""

    text: str
    """The sentence (said, for the recognizer)."""
    audio_s: float
    """Seconds of audio."""
    seconds: float
    """Seconds the engine spent on it."""
    rtf: float
    """`seconds` / `audio_s`: below 1 is faster than real time."""


class TokenSample(TypedDict):
    """One reply of the LLM."""

    prompt: str
    """The question asked."""
    reply: str
    """What the model wrote."""
    tokens: int
    """Tokens of the reply (the model's tokenizer)."""
    first_token_ms: float
    """From the request to the first piece of text."""
    decode_s: float
    """From the first piece to the last."""
    tokens_per_s: float
    """Tokens after the first over `decode_s` (0 for a reply of one token)."""


class Together(TypedDict):
    """The LLM answering while other engines work without a pause beside it."""

    beside: list[str]
    """The engines at work beside it ("voice", "recognizer")."""
    tokens_per_s: dict[str, Any]
    """The LLM's decoding speed meanwhile."""
    share_of_alone: float
    """Its median over the median alone (1.0: no slower)."""
    voice_rtf: dict[str, Any] | None
    """The voice's real-time factor meanwhile (None: not beside it)."""
    recognizer_rtf: dict[str, Any] | None
    """The recognizer's real-time factor meanwhile (None: not beside it)."""


def run_speeds(tts: TextToSpeech, stt: SpeechRecognizer, llm: LlamaLanguageModel | None,
               sentences: int, prompts: int, progress: Callable[[str], None],
               names: dict[str, str] | None = None) -> dict[str, Any]:
    """`sentences` sentences through the voice and the recognizer, `prompts` questions to the
    LLM (none when `llm` is None: a scripted config has no model to time). `names`: what to
    call each engine ("tts", "stt", "llm"; default: its class)."""
    names = names or {}
    texts = [SENTENCES[i % len(SENTENCES)] for i in range(sentences)]
    tts.synthesize(texts[0])  # untimed: the first call's allocations
    spoken: list[AudioSample] = []
    heard: list[AudioSample] = []
    for number, text in enumerate(texts, start=1):
        started = time.perf_counter()
        audio = tts.synthesize(text)
        spent = time.perf_counter() - started
        seconds = audio.samples / audio.sample_rate
        spoken.append(_sample(text, seconds, spent))
        pcm = resample(audio.pcm, audio.sample_rate, stt.sample_rate)
        if number == 1:
            transcribe(stt, pcm)  # untimed, as for the voice
        _, spent, _ = transcribe(stt, pcm)
        heard.append(_sample(text, seconds, spent))
        progress(f"sentence {number}/{sentences}: voice RTF {spoken[-1]['rtf']:.3f}, "
                 f"recognizer RTF {heard[-1]['rtf']:.3f}")
    replies: list[TokenSample] = []
    if llm is not None:
        _reply(llm, texts[0])  # untimed
        for number in range(prompts):
            question = SENTENCES[(number * 5 + 1) % len(SENTENCES)]
            replies.append(_reply(llm, question))
            progress(f"question {number + 1}/{prompts}: first token "
                     f"{replies[-1]['first_token_ms']:.0f} ms, "
                     f"{replies[-1]['tokens_per_s']:.1f} tokens/s")
    together: list[Together] = []
    if llm is not None:
        alone = summarize([r["tokens_per_s"] for r in replies])["p50"] or 0.0
        clips = [resample(tts.synthesize(text).pcm, tts.sample_rate, stt.sample_rate)
                 for text in texts[:3]]
        for beside in (["voice"], ["voice", "recognizer"]):
            together.append(_together(llm, tts, stt, texts, clips, prompts, beside, alone))
            progress(f"LLM beside {' + '.join(beside)}: "
                     f"{together[-1]['tokens_per_s']['p50']:.1f} tokens/s "
                     f"({together[-1]['share_of_alone']:.0%} of alone)")
    return {
        "benchmark": "engines",
        "together": together,
        "tts": {"engine": names.get("tts", type(tts).__name__), "samples": spoken,
                "rtf": summarize([s["rtf"] for s in spoken], digits=4)},
        "stt": {"engine": names.get("stt", type(stt).__name__), "samples": heard,
                "rtf": summarize([s["rtf"] for s in heard], digits=4)},
        "llm": None if llm is None else {
            "engine": names.get("llm", type(llm).__name__), "samples": replies,
            "first_token_ms": summarize([r["first_token_ms"] for r in replies]),
            "tokens_per_s": summarize([r["tokens_per_s"] for r in replies])},
    }


def _together(llm: LlamaLanguageModel, tts: TextToSpeech, stt: SpeechRecognizer,
              texts: list[str], audio: list[bytes], prompts: int, beside: list[str],
              alone_tokens_per_s: float) -> Together:
    """`prompts` questions to the LLM while the engines named in `beside` loop on their
    owner-like threads (the voice on `texts`, the recognizer on `audio`)."""
    stop = threading.Event()
    spoken: list[AudioSample] = []
    heard: list[AudioSample] = []

    def speak() -> None:
        number = 0
        while not stop.is_set():
            text = texts[number % len(texts)]
            number += 1
            started = time.perf_counter()
            out = tts.synthesize(text)
            spoken.append(_sample(text, out.samples / out.sample_rate,
                                  time.perf_counter() - started))

    def listen() -> None:
        number = 0
        while not stop.is_set():
            pcm, text = audio[number % len(audio)], texts[number % len(audio)]
            number += 1
            _, spent, _ = transcribe(stt, pcm)
            heard.append(_sample(text, len(pcm) / 2 / stt.sample_rate, spent))

    workers = [threading.Thread(target=work, name=f"bench-{name}", daemon=True)
               for name, work in (("voice", speak), ("recognizer", listen)) if name in beside]
    for worker in workers:
        worker.start()
    try:
        replies = [_reply(llm, SENTENCES[(number * 5 + 1) % len(SENTENCES)])
                   for number in range(prompts)]
    finally:
        stop.set()
        for worker in workers:
            worker.join()
    speed = summarize([r["tokens_per_s"] for r in replies])
    return {"beside": beside, "tokens_per_s": speed,
            "share_of_alone": round((speed["p50"] or 0.0) / alone_tokens_per_s, 3)
            if alone_tokens_per_s else 0.0,
            "voice_rtf": summarize([s["rtf"] for s in spoken], digits=4) if "voice" in beside
            else None,
            "recognizer_rtf": summarize([s["rtf"] for s in heard], digits=4)
            if "recognizer" in beside else None}


def _sample(text: str, audio_s: float, spent: float) -> AudioSample:
    return {"text": text, "audio_s": round(audio_s, 3), "seconds": round(spent, 4),
            "rtf": round(spent / audio_s, 4)}


def _reply(llm: LlamaLanguageModel, question: str) -> TokenSample:
    messages: list[ChatMessage] = [{"role": "system", "content": SYSTEM},
                                   {"role": "user", "content": question}]
    pieces: list[str] = []
    started = time.perf_counter()
    first = last = started
    for piece in llm.stream(messages):
        if not isinstance(piece, str) or not piece:
            continue
        last = time.perf_counter()
        if not pieces:
            first = last
        pieces.append(piece)
    reply = "".join(pieces)
    tokens = len(llm.llama.tokenize(reply.encode("utf-8"), add_bos=False)) if reply else 0
    decode = last - first
    return {"prompt": question, "reply": reply, "tokens": tokens,
            "first_token_ms": round((first - started) * 1000, 1), "decode_s": round(decode, 3),
            "tokens_per_s": round((tokens - 1) / decode, 1) if tokens > 1 and decode > 0
            else 0.0}


def table(result: dict[str, Any]) -> str:
    def row(name: str, stats: dict[str, Any], unit: str, digits: int) -> str:
        if not stats["n"]:
            return f"  {name:56}-"
        return (f"  {name:56}{stats['p50']:>10.{digits}f}{stats['p95']:>10.{digits}f}  {unit}"
                f" (n={stats['n']})")

    lines = [f"{'engine speeds on this machine':58}{'p50':>10}{'p95':>10}",
             row(f"voice real-time factor ({result['tts']['engine']})", result["tts"]["rtf"],
                 "", 3),
             row(f"recognizer real-time factor ({result['stt']['engine']})",
                 result["stt"]["rtf"], "", 3)]
    llm = result["llm"]
    if llm is None:
        lines.append("  LLM: scripted in this config, nothing to time")
    else:
        lines += [row("LLM first token", llm["first_token_ms"], "ms", 0),
                  row("LLM decoding", llm["tokens_per_s"], "tokens/s", 1)]
        for together in result["together"]:
            names = " + ".join(together["beside"])
            lines.append(row(f"LLM decoding beside {names} ({together['share_of_alone']:.0%})",
                             together["tokens_per_s"], "tokens/s", 1))
            for engine in ("voice", "recognizer"):
                if together[f"{engine}_rtf"] is not None:
                    lines.append(row(f"  {engine} real-time factor meanwhile",
                                     together[f"{engine}_rtf"], "", 3))
    if result.get("busy_processes"):
        lines.append(f"  (with {result['busy_processes']} busy processes beside the engines)")
    return "\n".join(lines)

