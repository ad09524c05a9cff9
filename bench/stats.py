"""Summaries and scaling statements shared by every benchmark suite."""

from __future__ import annotations

import statistics


def summary(samples: list[float]) -> dict[str, float]:
    """median, p90, p99 and max of raw samples (same unit as the samples), and their count.
    Percentiles are nearest-rank; the median of an even count is the mean of the middle two."""
    ordered = sorted(samples)

    def pct(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    return {"median": statistics.median(ordered), "p90": pct(0.9), "p99": pct(0.99), "max": ordered[-1],
            "n": len(ordered)}


def cell(stats: dict[str, float], digits: int = 1, scale: float = 1.0) -> str:
    """``median / p90 / p99 / max`` of a :func:`summary`, for a table cell."""
    return " / ".join(f"{stats[key] * scale:,.{digits}f}" for key in ("median", "p90", "p99", "max"))


def growth(first: float, last: float, factor: float, what: str = "the entities") -> str:
    """How a figure grew when N grew by ``factor``, in words, from the two numbers."""
    ratio = last / first
    if ratio < 1.5:
        shape = "flat"
    elif ratio < factor ** 0.5:
        shape = "sublinear"
    elif ratio < factor * 1.5:
        shape = "about linear" if ratio > factor / 1.5 else "grows with N, less than linearly"
    else:
        shape = "superlinear"
    return f"{shape} ({ratio:.2f}x for {factor:.3g}x {what})"


def command_rows(raw_ms: dict[str, list[float]], labels: dict[str, str], bases: list[str]) -> list[str]:
    """Markdown rows of fresh-process timings: each command's minimum and median (ms), and its
    minimum as a multiple of each of ``bases``' minimums (commands measured in the same rounds)."""
    floors = [min(raw_ms[base]) for base in bases]
    return [f"| {label} | {min(raw_ms[key]):.1f} | {statistics.median(raw_ms[key]):.1f} | "
            + " | ".join(f"{min(raw_ms[key]) / floor:.2f}" for floor in floors) + " |"
            for key, label in labels.items()]
