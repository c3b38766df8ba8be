"""The figures every benchmark reports for a set of measurements."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any


def percentile(values: Sequence[float], percent: int) -> float:
    """Inclusive percentile (the value itself for a single measurement)."""
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[percent - 1]


def summarize(values: Sequence[float], digits: int = 1) -> dict[str, Any]:
    """{n, p50, p95, max, values}, or {n: 0} when nothing was measured."""
    if not values:
        return {"n": 0}
    return {"n": len(values), "p50": round(percentile(values, 50), digits),
            "p95": round(percentile(values, 95), digits), "max": round(max(values), digits),
            "values": [round(v, digits) for v in values]}
