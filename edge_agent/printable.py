"""Text from outside (transcripts, model replies, file contents, TOML keys) made safe to print,
and to store.

An escape sequence in a caller's line or a reply (``\\x1b[2J`` clears the terminal) must never
drive the operator's console, and a 1 MB key name must not become a 1 MB error line.
"""

from __future__ import annotations

import re
import unicodedata

_LINE_BREAKS = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def escape_controls(text: str) -> str:
    """`text` with every control, format or unpaired-surrogate character shown as an escape
    ("\\x1b", "\\n"); everything printable is kept as it is."""
    if text.isprintable():
        return text
    return "".join(_escape(c) for c in text)


def _escape(char: str) -> str:
    if char.isprintable() or char == " ":
        return char
    if char in _LINE_BREAKS:
        return _LINE_BREAKS[char]
    if unicodedata.category(char) == "Zs":  # a non-breaking space is still a space
        return char
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def clip(text: str, limit: int) -> str:
    """`text` cut to at most `limit` characters, marked as cut ("…(1048576 characters)")."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}…({len(text)} characters)"


def shown(text: str, limit: int = 200) -> str:
    """Outside text as it may appear in a message: escaped, then clipped."""
    return clip(escape_controls(text), limit)


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def storable(text: str) -> str:
    """`text` as UTF-8 can hold it: a lone surrogate (which a JSON escape like "\\ud800"
    makes, and which no database or file can store) replaced with U+FFFD. A pair of surrogates
    in JSON decodes to the one character it stands for, so any left in a str are lone."""
    return _LONE_SURROGATE.sub("\ufffd", text)
