"""Small helpers the benchmark scripts share."""


def percentile(values: list[float], fraction: float) -> float:
    """Return the nearest-rank percentile of values (fraction 0.95 for p95)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]
