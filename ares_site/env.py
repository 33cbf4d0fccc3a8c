"""Typed readers for environment variables that fail loudly, naming the variable."""

import os

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env_str(name: str, default: str = "") -> str:
    """Return the variable as a stripped string, or the default when unset."""
    return os.environ.get(name, default).strip()


def env_bool(name: str, default: bool) -> bool:
    """Return the variable read as a boolean (1/0, true/false, yes/no, on/off)."""
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name}={raw!r} is not a boolean: use 1/0, true/false, yes/no")


def env_int(name: str, default: int, *, minimum: int | None = None) -> int:
    """Return the variable read as an integer, at least `minimum` when given."""
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} is not an integer") from None
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name}={value} is below the minimum of {minimum}")
    return value


def env_float(
    name: str,
    default: float | None,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
) -> float | None:
    """Return the variable read as a number, within [minimum, maximum] when given."""
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return default
    try:
        value = float(raw.strip())
    except ValueError:
        value = float("nan")
    if value != value or value in (float("inf"), float("-inf")):
        raise ImproperlyConfigured(f"{name}={raw!r} is not a number")
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name}={raw!r} is below the minimum of {minimum}")
    if maximum is not None and value > maximum:
        raise ImproperlyConfigured(f"{name}={raw!r} is above the maximum of {maximum}")
    return value


def env_choice(name: str, default: str, choices: tuple[str, ...]) -> str:
    """Return the variable, lower-cased, when it is one of the choices."""
    value = env_str(name, default).lower()
    if value not in choices:
        raise ImproperlyConfigured(f"{name}={value!r} is not one of {', '.join(choices)}")
    return value


def env_list(name: str, default: list[str]) -> list[str]:
    """Return the variable split on commas, blanks dropped."""
    raw = os.environ.get(name)
    if raw is None:
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]
