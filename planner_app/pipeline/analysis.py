"""Step 1, semantic analysis: which rules a request matches, and the capabilities they give."""

from __future__ import annotations

import re
from dataclasses import dataclass

from planner_app.pipeline.ruleset import RuleSet

MAX_REQUEST_CHARS = 4000
# A number is one word, separators and decimals included ("3,400", "1.5"), so no keyword
# matches a piece of it; "3, 4" (a comma and a space) is two.
_WORD = re.compile(r"[A-Za-z0-9_]+(?:[.,][0-9]+)*")
_DIGITS = frozenset("0123456789")


def _in_number(text: str, index: int) -> bool:
    """Return whether text[index] is part of a number: a digit, or a . or , between digits."""
    if not 0 <= index < len(text):
        return False
    if text[index] in _DIGITS:
        return True
    return (
        text[index] in ".,"
        and 0 < index < len(text) - 1
        and text[index - 1] in _DIGITS
        and text[index + 1] in _DIGITS
    )


def _cuts_a_number(text: str, start: int, end: int) -> bool:
    """Return whether text[start:end] begins or ends inside a number: "7%" in "17%"."""
    return (_in_number(text, start) and _in_number(text, start - 1)) or (
        _in_number(text, end - 1) and _in_number(text, end)
    )


def _whole_numbers(text: str, start: int, end: int) -> str:
    """Return text[start:end] widened to the whole numbers at its ends: "7%" -> "17%"."""
    while start > 0 and _in_number(text, start) and _in_number(text, start - 1):
        start -= 1
    while end < len(text) and _in_number(text, end - 1) and _in_number(text, end):
        end += 1
    return text[start:end]


def singulars(word: str) -> tuple[str, ...]:
    """Return what a plural word could be the plural of: sums -> sum, boxes -> box."""
    if word.endswith("es") and len(word) > 3:
        return (word[:-1], word[:-2])
    if word.endswith("s") and len(word) > 2:
        return (word[:-1],)
    return ()


def _unclaimed_substrings(text: str, ruleset: RuleSet) -> list[tuple[str, tuple[int, ...]]]:
    """Return the substring keywords found in the text, each where no longer keyword stands.

    Chinese has no spaces between words, so a one-character keyword would otherwise match
    inside a longer word that means something else: 乘 (multiply) inside 阶乘 (factorial).
    Keywords are tried longest first, and each occurrence claims its characters; a shorter
    keyword counts only where it stands outside every longer keyword found. No keyword
    counts inside a number ("5%" is not in "25%").
    """
    claimed = bytearray(len(text))
    found = []
    for keyword, positions in ruleset.substring_index:
        start = text.find(keyword)
        matched = False
        while start >= 0:
            end = start + len(keyword)
            if not any(claimed[start:end]) and not _cuts_a_number(text, start, end):
                claimed[start:end] = b"\x01" * len(keyword)
                matched = True
            start = text.find(keyword, start + 1)
        if matched:
            found.append((keyword, positions))
    return found


@dataclass(frozen=True)
class RuleMatch:
    rule: str
    matched: tuple[str, ...]  # the words or pattern matches found
    capabilities: tuple[str, ...]
    priority: int


@dataclass(frozen=True)
class Intent:
    """What the request asks for: the goal, the capabilities in order, and why."""

    goal: str
    capabilities: tuple[str, ...]
    matches: tuple[RuleMatch, ...]
    complexity: str  # "none", "single" or "multi"


class SemanticAnalyzer:
    """Match the rules in priority order; every matching rule contributes (OR semantics)."""

    def analyze(self, request: str, ruleset: RuleSet) -> Intent:
        text = request[:MAX_REQUEST_CHARS]
        found: dict[int, list[str]] = {}  # position in ordered_rules -> what matched
        for word in _WORD.findall(text):
            lowered = word.lower()
            for key in dict.fromkeys((lowered, *singulars(lowered))):
                for position in ruleset.word_index.get(key, ()):
                    found.setdefault(position, []).append(word)
        for keyword, positions in _unclaimed_substrings(text, ruleset):
            for position in positions:
                found.setdefault(position, []).append(keyword)
        for matcher, position in ruleset.regex_rules:
            # A pattern such as \d\s*% finds "7%" inside "17%": what it matched is the
            # whole number ("17%"), as the request says it and as Try the planner shows it.
            for match in matcher.finditer(text):
                found.setdefault(position, []).append(_whole_numbers(text, *match.span()))
        matches = []
        for position in sorted(found):
            rule = ruleset.ordered_rules[position]
            hits = tuple(dict.fromkeys(found[position]))
            matches.append(RuleMatch(rule.name, hits, rule.capabilities, rule.priority))
        capabilities = tuple(dict.fromkeys(c for match in matches for c in match.capabilities))
        goal = next((rule.goal for rule in ruleset.ordered_rules
                     if rule.goal and any(m.rule == rule.name for m in matches)), "")  # fmt: skip
        complexity = "none" if not capabilities else "single" if len(capabilities) == 1 else "multi"
        return Intent(goal, capabilities, tuple(matches), complexity)
