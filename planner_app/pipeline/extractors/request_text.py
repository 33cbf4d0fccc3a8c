"""The extractors' shared text reading: the Extraction result, quoted text, English words."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Extraction:
    """A tool's arguments read from a request, or why the LLM must read them."""

    arguments: dict[str, Any]
    reason: str
    needs_llm: bool


def found_arguments(arguments: dict[str, Any], reason: str) -> Extraction:
    """Return the arguments read, with what they were read from."""
    return Extraction(arguments, reason, needs_llm=False)


def needs_llm(reason: str) -> Extraction:
    """Return no arguments, with why the LLM must read them."""
    return Extraction({}, f"{reason}; needs the LLM", needs_llm=True)


def english_words(alternatives: str) -> str:
    """Return a regex for English words between ASCII word boundaries.

    `\\b` sees no boundary between "的" and "sha256": both are word characters to Python.
    """
    return rf"(?<![A-Za-z])(?:{alternatives})(?![A-Za-z])"


def ignoring_case(pattern: str) -> re.Pattern[str]:
    """Return the pattern compiled to match regardless of case."""
    return re.compile(pattern, re.IGNORECASE)


QUOTED = (
    r"(?<![A-Za-z0-9])'[^'\n]*'(?![A-Za-z0-9])|\"[^\"\n]*\"|“[^”]*”|‘[^’]*’|「[^」]*」"
    r"|『[^』]*』|`[^`\n]*`"
)
QUOTED_TEXT = re.compile(QUOTED)
_QUOTE_PAIRS = {"'": "'", '"': '"', "“": "”", "‘": "’", "「": "」", "『": "』", "`": "`"}


def unquote(text: str) -> str:
    """Return text without one pair of surrounding quotes, if it has them."""
    if len(text) >= 2 and _QUOTE_PAIRS.get(text[0]) == text[-1]:
        return text[1:-1]
    return text


def quoted_texts(request: str) -> list[str]:
    """Return the quoted strings of the request, in order, without their quotes."""
    return [unquote(match[0]) for match in QUOTED_TEXT.finditer(request)]


def without_quotes(request: str) -> str:
    """Return the request with quoted strings blanked, so words inside them are not keywords."""
    return QUOTED_TEXT.sub(" ", request)


_TRAILING_PUNCTUATION = re.compile(r"[\s?？。!！.,，;；]+$")
_LEADING_NOISE = re.compile(r"^[\s:：,，]+")
_TRAILING_FILLER = ignoring_case(
    r"(?:\s+(?:please|for\s+me|in\s+hex(?:adecimal)?|thanks|thank\s+you))+$|(?:是多少|是什么|等于多少)$"
)


def clean_text(text: str) -> str:
    """Return unquoted text without the sentence's own punctuation and politeness around it."""
    text = _TRAILING_PUNCTUATION.sub("", _LEADING_NOISE.sub("", text))
    return _TRAILING_PUNCTUATION.sub("", _TRAILING_FILLER.sub("", text))


def first_text(
    request: str, patterns: tuple[tuple[str, re.Pattern[str]], ...]
) -> tuple[str, str] | None:
    """Return (text, how it was found): quoted text first, then the first pattern that reads."""
    quoted = quoted_texts(request)
    if quoted:
        return quoted[0], "quoted text"
    for name, pattern in patterns:
        match = pattern.search(request)
        if match:
            text = clean_text(match["text"])
            if text:
                return text, name
    return None
