"""`[session] start = "wake"`: a session opens on the wake word (a model hears it, while
nothing is transcribed) or, without a model, on an utterance holding the wake phrase."""

from __future__ import annotations

import re
from collections.abc import Sequence

WAKE_LOOKBACK_MS = 64
"""A wake word model fires 0-150 ms after the word's last sound: the caller's next words are
heard from this much before it fires (a fluent "Okay Nabu what time is it" keeps its "what";
Moonshine transcribes the wake word's last sliver, if any, as nothing)."""


def after_wake_word(recent: Sequence[bytes], frame_ms: float) -> bytes:
    """Of the last frames heard, those that are after the wake word (see WAKE_LOOKBACK_MS)."""
    frames = max(1, round(WAKE_LOOKBACK_MS / frame_ms))
    return b"".join(list(recent)[-frames:])


def after_wake_phrase(text: str, wake_phrase: str) -> str | None:
    """What follows the wake phrase in `text` ("" when nothing does: the phrase alone), or
    None when `text` does not hold it. Words are matched case-insensitively, punctuation
    ignored ("Hello, kiosk!" holds "hello kiosk")."""
    words, phrase = _words(text), _words(wake_phrase)
    for at in range(len(words) - len(phrase) + 1):
        if words[at:at + len(phrase)] == phrase:
            return " ".join(text.split()[at + len(phrase):])
    return None


def _words(text: str) -> list[str]:
    return re.findall(r"[\w']+", text.lower())
