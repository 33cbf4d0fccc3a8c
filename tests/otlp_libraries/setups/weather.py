"""weather.py: the tools the setups' agent offers, wrapped in each framework's own way."""

from __future__ import annotations

REQUEST = "What is the weather in Paris, and what is 1 + 2?"
SESSION = "session-42"
AGENT = "weather-agent"


def get_weather(city: str) -> str:
    """Current weather for a city."""
    return f'It is 21°C and "sunny" in {city}'


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b
