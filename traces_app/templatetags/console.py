"""Number formats the console's pages share: thousands separators, costs, one way to show a rate.

Every count, duration and cost the console shows goes through these filters (the admin's
costs too, through `usd`): Django prints a bare `{{ number }}` or `floatformat` without
separators, since USE_THOUSAND_SEPARATOR is off (it would also put commas into ids, URLs
and chart data).
"""

from __future__ import annotations

import math
from typing import Any

from django import template

register = template.Library()

COST_SIGNIFICANT_DIGITS = 6
COST_MAX_DECIMALS = 10  # below $0.0000000001 a cost shows as 0.00


def _number(value: Any) -> float | None:
    """Return a value as a finite float, or None when it is empty, not a number or NaN."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


@register.filter
def thousands(value: Any, decimals: int = 0) -> str:
    """Return a number with thousands separators (27,073,149), and `decimals` decimals.

    Negative `decimals` mean at most that many, trailing zeros dropped (floatformat's "-2").
    """
    if value is None or value == "":
        return "–"
    number = _number(value)
    if number is None:
        return "–" if isinstance(value, float) else str(value)  # NaN, or not a number
    places = int(decimals)
    text = f"{number:,.{abs(places)}f}"
    if places < 0 and "." in text:
        text = text.rstrip("0").rstrip(".")
    return text.removeprefix("-") if text.strip("-0.,") == "" else text  # no "-0.00"


@register.filter
def usd(value: Any) -> str:
    """Return a cost in US dollars to six significant digits, at least cents: 0.00867305, 1,234.57.

    Costs are sums of floats (0.008673050000000002); shown whole they are noise, rounded to
    cents a cheap call reads as free.
    """
    number = _number(value)
    if number is None:
        return "–"
    if number == 0:
        return "0.00"
    magnitude = math.floor(math.log10(abs(number))) + 1  # digits before the point
    decimals = min(max(2, COST_SIGNIFICANT_DIGITS - magnitude), COST_MAX_DECIMALS)
    text = f"{number:,.{decimals}f}"
    whole, _, fraction = text.partition(".")
    fraction = fraction.rstrip("0").ljust(2, "0")
    return f"{whole}.{fraction}"


@register.filter
def percent(value: Any, decimals: int = 1) -> str:
    """Return a share (0.95) as a percentage (95.0%): the one format for rates on every page."""
    if value is None or value == "":
        return "–"
    try:
        return f"{float(value):.{int(decimals)}%}"
    except (TypeError, ValueError):
        return str(value)
