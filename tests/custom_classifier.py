"""Classifiers loaded by dotted path in tests/test_backchannel.py (`load_classifier`)."""

from __future__ import annotations

from edge_agent.conversation.backchannel import Verdict
from edge_agent.conversation.voice_shape import VoiceShape


class AlwaysInterrupt:
    """A user's own classifier: every word interrupts."""

    def classify(self, text: str, speech_ms: float, language: str) -> Verdict:
        return Verdict.INTERRUPTION


class HumsAreBackchannels:
    """A classifier that listens to the sound: any short voiced burst is "go on"."""

    def classify(self, text: str, speech_ms: float, language: str,
                 sound: VoiceShape | None = None) -> Verdict:
        if sound is not None and sound.is_short_voiced_burst():
            return Verdict.BACKCHANNEL
        return Verdict.INTERRUPTION


class Namespace:
    class Nested(AlwaysInterrupt):
        """Reached as "tests.custom_classifier:Namespace.Nested"."""


ready_made = AlwaysInterrupt()
"""An instance, used as it is."""


class NoClassify:
    """Has no classify method."""

    def judge(self, text: str) -> str:
        return text


class NeedsArguments:
    def __init__(self, threshold: float) -> None:
        self.threshold = threshold

    def classify(self, text: str, speech_ms: float, language: str) -> Verdict:
        return Verdict.BACKCHANNEL
