"""Push-to-talk, for rooms too loud for a voice to open a turn: the microphone counts only while
the screen's Talk button is held, and letting go ends the turn at once (no end-of-turn silence
to wait for, no room noise to mistake for its end)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class TalkButton:
    """Whether the Talk button is held, and whether it was let go since the loop last looked."""

    held: bool = False
    _let_go: bool = False

    def press(self) -> None:
        self.held, self._let_go = True, False

    def release(self) -> None:
        if self.held:
            self.held, self._let_go = False, True

    def admit(self, frame: bytes) -> bytes:
        """`frame` while the button is held; silence of its length otherwise (the VAD, the
        recognizer and the kept audio hear nothing of the room)."""
        return frame if self.held else bytes(len(frame))

    def let_go(self) -> bool:
        """True once after each release: the turn being spoken ends now."""
        let_go, self._let_go = self._let_go, False
        return let_go
