"""`[session] start = "wake"`: a session opens when an utterance holds the wake phrase."""

from __future__ import annotations

import re


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
