"""Number formats the console's pages share: thousands separators, one way to show a rate."""

from __future__ import annotations

from typing import Any

from django import template

register = template.Library()


@register.filter
def thousands(value: Any, decimals: int = 0) -> str:
    """Return a number with thousands separators (27,073,149), and `decimals` decimals."""
    if value is None or value == "":
        return "–"
    try:
        number = float(value)
    except (TypeError, ValueError):
        return str(value)
    if number != number:  # NaN
        return "–"
    return f"{number:,.{int(decimals)}f}"


@register.filter
def percent(value: Any, decimals: int = 1) -> str:
    """Return a share (0.95) as a percentage (95.0%): the one format for rates on every page."""
    if value is None or value == "":
        return "–"
    try:
        return f"{float(value):.{int(decimals)}%}"
    except (TypeError, ValueError):
        return str(value)
