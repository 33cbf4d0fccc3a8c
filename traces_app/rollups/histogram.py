"""Latency histograms for rollups: fixed log-spaced bins, merging and percentile estimates.

Plain Python, no Django: rollup rows store `counts`, one per bin, and pages merge rows
and read p50/p95 from them. Bin i holds latencies in [EDGES[i-1], EDGES[i]); bin 0 holds
those under EDGES[0] and the last bin those at or over EDGES[-1].
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Mapping, Sequence

# 1 ms to 1000 s, ten bins a decade (each 1.26x the last): p50/p95 within one bin.
LATENCY_EDGES_MS: tuple[float, ...] = tuple(round(10 ** (step / 10), 3) for step in range(61))
BIN_COUNT = len(LATENCY_EDGES_MS) + 1


def bucket_of(latency_ms: float) -> int:
    """Return the histogram bin of a latency."""
    return bisect_right(LATENCY_EDGES_MS, latency_ms)


def bin_bounds(index: int) -> tuple[float, float]:
    """Return a bin's lower and upper latency; the open-ended last bin is its lower edge."""
    low = 0.0 if index == 0 else LATENCY_EDGES_MS[index - 1]
    high = LATENCY_EDGES_MS[index] if index < len(LATENCY_EDGES_MS) else low
    return low, high


def empty_histogram() -> list[int]:
    """Return a histogram with every bin at zero."""
    return [0] * BIN_COUNT


def histogram_of(latencies: Sequence[float]) -> list[int]:
    """Return the histogram of some latencies."""
    counts = empty_histogram()
    for latency in latencies:
        counts[bucket_of(latency)] += 1
    return counts


def percentile_from_histogram(counts: Sequence[int], fraction: float) -> float:
    """Estimate a percentile (fraction 0..1) by interpolating within its bin; 0.0 if empty."""
    total = sum(counts)
    if total == 0:
        return 0.0
    rank = fraction * total
    seen = 0
    for index, count in enumerate(counts):
        if count and seen + count >= rank:
            low, high = bin_bounds(index)
            return low + (high - low) * max(rank - seen, 0) / count
        seen += count
    return bin_bounds(len(counts) - 1)[0]


def merge(*histograms: Sequence[int]) -> list[int]:
    """Return the bin-by-bin sum of histograms (rollup rows of several hours or tools)."""
    total = empty_histogram()
    for counts in histograms:
        for index, count in enumerate(counts):
            total[index] += count
    return total


def merge_counts(*tallies: Mapping[str, int]) -> dict[str, int]:
    """Return the key-by-key sum of tallies such as failures by kind."""
    total: dict[str, int] = {}
    for tally in tallies:
        for key, count in tally.items():
            total[key] = total.get(key, 0) + count
    return total


def percentile_cont(sorted_values: Sequence[float], fraction: float) -> float | None:
    """Return the interpolated percentile of sorted values, as PostgreSQL's percentile_cont."""
    if not sorted_values:
        return None
    position = fraction * (len(sorted_values) - 1)
    low = int(position)
    high = min(low + 1, len(sorted_values) - 1)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (position - low)
