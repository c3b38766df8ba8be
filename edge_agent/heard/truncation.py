"""Played position + word timings + policy -> the heard prefix of a unit's text."""

from __future__ import annotations

import enum
from collections.abc import Sequence

from edge_agent.heard.timings import WordTiming


class HeardPolicy(enum.StrEnum):
    COMPLETED = "completed"
    """A word counts once its last sample has played (errs toward "heard less")."""
    STARTED = "started"
    """A word counts as soon as its first sample has played."""


def heard_prefix(
    text: str,
    words: Sequence[WordTiming],
    played: int,
    audio_samples: int,
    policy: HeardPolicy = HeardPolicy.COMPLETED,
    audio_text_end: int | None = None,
) -> str:
    """The verbatim prefix of `text` the listener heard after `played` samples of the unit.

    `audio_samples` is how much audio the unit has; `audio_text_end` is how far into `text`
    that audio reaches (text generated but never synthesized cannot have been heard). With no
    word timings, the played fraction of the audio maps to the same fraction of the spoken
    characters, cut back to a word boundary.
    """
    spoken_end = len(text) if audio_text_end is None else min(audio_text_end, len(text))
    if played <= 0 or audio_samples <= 0 or spoken_end <= 0:
        return ""
    if played >= audio_samples:
        return text[:spoken_end].rstrip() if spoken_end < len(text) else text
    if not words:
        return _fraction_prefix(text[:spoken_end], played / audio_samples)
    heard_end = 0
    for word in words:
        if word.char_end > spoken_end:
            break
        reached = word.end_sample <= played if policy is HeardPolicy.COMPLETED else (
            word.start_sample < played or word.start_sample == word.end_sample <= played
        )
        if not reached:
            break
        heard_end = word.char_end
    return text[:heard_end]


def _fraction_prefix(text: str, fraction: float) -> str:
    cut = int(len(text) * fraction)
    if cut >= len(text):
        return text
    if cut > 0 and not text[cut].isspace():
        # Inside a word: step back to where that word starts.
        while cut > 0 and not text[cut - 1].isspace():
            cut -= 1
    return text[:cut].rstrip()
