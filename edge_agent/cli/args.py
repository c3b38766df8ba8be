"""Argument types the commands share: a bad value is argparse's one-line usage error."""

from __future__ import annotations

import argparse
import math


def seconds(text: str) -> float:
    """A number of seconds above 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of seconds, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a number of seconds above 0, got {text!r}")
    return value


def _whole_number(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None


def positive_int(text: str) -> int:
    """A whole number of at least 1."""
    value = _whole_number(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def busy_count(text: str) -> int:
    """A number of busy processes beside the agent: 0 to 64."""
    value = _whole_number(text)
    if not 0 <= value <= 64:
        raise argparse.ArgumentTypeError(f"must be between 0 and 64, got {value}")
    return value
