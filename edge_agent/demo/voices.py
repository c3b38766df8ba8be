"""Voices that are not the agent's: the people a simulation puts in front of the microphone or
behind it (a benchmark's callers, a room's background talkers).

espeak-ng's formant voices (accents, speeds, pitches; deterministic: the same text gives the
same samples on every run) and the agent's own Piper voice at two speeds. espeak-ng is a
program (`apt-get install espeak-ng`), called per sentence.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from edge_agent.audio.device import MIC_RATE
from edge_agent.audio.pcm import read_wav, resample
from edge_agent.engines.tts import PiperSpeech
from edge_agent.errors import EngineError

RATE = MIC_RATE
"""Speech comes out at 16 kHz mono int16, what the microphone and the recognizers take."""


@dataclass(frozen=True)
class Voice:
    """Who speaks."""

    name: str
    """A short label for tables."""
    engine: str
    """"espeak" (espeak-ng formant synthesis) or "piper"."""
    espeak_voice: str = ""
    """espeak-ng voice with variant, e.g. "en-us+f3"."""
    words_per_minute: int = 175
    """espeak-ng speed."""
    pitch: int = 50
    """espeak-ng pitch, 0..99."""
    length_scale: float = 1.0
    """Piper speaking rate (above 1 slower)."""


VOICES = (
    Voice("piper-joe", "piper"),
    Voice("piper-joe-slow", "piper", length_scale=1.25),
    Voice("espeak-us", "espeak", "en-us", 175, 50),
    Voice("espeak-us-f3", "espeak", "en-us+f3", 150, 60),
    Voice("espeak-rp-m3", "espeak", "en-gb-x-rp+m3", 190, 40),
    Voice("espeak-caribbean", "espeak", "en-029", 160, 50),
    Voice("espeak-scotland-f2", "espeak", "en-gb-scotland+f2", 170, 65),
    Voice("espeak-us-m7-fast", "espeak", "en-us+m7", 220, 35),
)



def speak(piper: PiperSpeech, voice: Voice, text: str) -> bytes:
    """`text` in `voice`, 16 kHz."""
    if voice.engine == "piper":
        audio = piper.synthesize(text, length_scale=voice.length_scale)
        return resample(audio.pcm, audio.sample_rate, RATE)
    return espeak(text, voice.espeak_voice, voice.words_per_minute, voice.pitch)


def espeak(text: str, voice: str, words_per_minute: int = 175, pitch: int = 50) -> bytes:
    """espeak-ng speech at 16 kHz (needs the `espeak-ng` program)."""
    program = shutil.which("espeak-ng")
    if program is None:
        raise EngineError("espeak-ng is not installed (apt-get install espeak-ng); the clip set "
                          "needs it for its voices")
    with tempfile.TemporaryDirectory(prefix="edge-agent-espeak-") as scratch:
        out = Path(scratch) / "speech.wav"
        result = subprocess.run(
            [program, "-v", voice, "-s", str(words_per_minute), "-p", str(pitch), "-w",
             str(out), text], capture_output=True, text=True, check=False)
        if result.returncode != 0 or not out.exists():
            raise EngineError(f"espeak-ng -v {voice} failed: {result.stderr.strip()}")
        pcm, rate = read_wav(out)
    return resample(pcm, rate, RATE)


