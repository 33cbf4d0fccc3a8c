"""The planner's configuration as plain data: rules, capabilities, mappings, weights.

The database holds these as rows the admin edits; the pipeline takes a frozen RuleSet so
it runs without Django and compiles its matchers once per version.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property

# English keywords match whole words, plurals too; anything else (Chinese) as a substring,
# where a longer keyword claims its characters first (see RuleSet.substring_index).
_LATIN_WORD = re.compile(r"^[A-Za-z0-9][A-Za-z0-9 _'-]*$")
_SINGLE_WORD = re.compile(r"^[A-Za-z0-9_]+$")


@dataclass(frozen=True)
class IntentRule:
    """Keywords or patterns that, found in a request, say which capabilities it needs."""

    name: str
    capabilities: tuple[str, ...]
    keywords: tuple[str, ...] = ()
    patterns: tuple[str, ...] = ()
    goal: str = ""
    language: str = "any"
    priority: int = 100
    enabled: bool = True

    @cached_property
    def words(self) -> tuple[str, ...]:
        """Return the single English words of the rule, lowercased, for the word index."""
        return tuple(k.strip().lower() for k in self.keywords if _SINGLE_WORD.match(k.strip()))

    @cached_property
    def substrings(self) -> tuple[str, ...]:
        """Return the keywords matched as substrings (Chinese and other scripts)."""
        return tuple(
            k.strip() for k in self.keywords if k.strip() and not _LATIN_WORD.match(k.strip())
        )

    @cached_property
    def matcher(self) -> re.Pattern[str] | None:
        """Return a regex for what the indexes can't do: phrases and the rule's own patterns."""
        parts = [  # never inside a number: "5 percent" is not in "1.5 percent"
            rf"(?<![0-9][.,])\b{re.escape(k.strip())}(?:s|es)?\b(?![.,][0-9])"
            for k in self.keywords
            if _LATIN_WORD.match(k.strip()) and not _SINGLE_WORD.match(k.strip())
        ]
        parts.extend(f"(?:{pattern})" for pattern in self.patterns)
        return re.compile("|".join(parts), re.IGNORECASE) if parts else None


@dataclass(frozen=True)
class Capability:
    """Something a request may need done: 'Summation', 'Hashing', 'PDFParsing'..."""

    name: str
    description: str = ""
    input_type: str = ""
    output_type: str = ""
    subsumes: tuple[str, ...] = ()
    depends_on: tuple[str, ...] = ()


@dataclass(frozen=True)
class CapabilityMapping:
    capability: str
    tool: str
    weight: float = 0.0


@dataclass(frozen=True)
class ToolProfile:
    """The planner's view of a tool's contract; None means 'take it from the tool spec'."""

    tool: str
    cost: float | None = None
    latency_ms: float | None = None
    deterministic: bool | None = None
    composable: bool | None = None
    side_effects: bool | None = None


@dataclass(frozen=True)
class ScoreRule:
    """An ok call whose score `score_name` compares true with `threshold` counts as failed.

    It counts `weight` of a failed call (1 in full). Numbers compare as numbers (true and
    false as 1 and 0); labels only with = and !=.
    """

    score_name: str
    operator: str
    threshold: str
    weight: float = 1.0
    enabled: bool = True

    def problem(self) -> str:
        """Return why the rule cannot work, or an empty string."""
        if self.operator not in _COMPARE:
            return f"operator must be one of {', '.join(_COMPARE)}"
        if not 0 <= self.weight <= 1:
            return "weight must be between 0 and 1"
        if self.operator not in ("=", "!=") and self._number(self.threshold) is None:
            return f"{self.operator} compares numbers: the threshold must be a number"
        return ""

    def matches(self, value: float | None, label: str) -> bool:
        if not self.enabled or self.problem():
            return False
        threshold = self._number(self.threshold)
        if value is not None and threshold is not None:
            return _COMPARE[self.operator](value, threshold)
        if self.operator in ("=", "!="):
            return (label == self.threshold.strip()) == (self.operator == "=")
        return False

    @staticmethod
    def _number(text: str) -> float | None:
        text = text.strip().lower()
        if text in ("true", "false"):
            return 1.0 if text == "true" else 0.0
        try:
            number = float(text)
        except ValueError:
            return None
        return number if number == number and abs(number) != float("inf") else None


_COMPARE = {
    "=": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
}


@dataclass(frozen=True)
class ScoringWeights:
    """The weights of Final = Base + Evidence - Penalty (+ the mapping's static weight)."""

    cost: float = 10.0
    deterministic: float = 3.0
    composable: float = 2.0
    success_rate: float = 20.0
    latency_per_100ms: float = 1.0
    latency_cap: float = 5.0
    failure_ratio: float = 10.0
    side_effects: float = 5.0
    default_success_rate: float = 0.95
    evidence_window: int = 200


@dataclass(frozen=True)
class RuleSet:
    version: int
    rules: tuple[IntentRule, ...] = ()
    capabilities: dict[str, Capability] = field(default_factory=dict)
    mappings: tuple[CapabilityMapping, ...] = ()
    profiles: dict[str, ToolProfile] = field(default_factory=dict)
    weights: ScoringWeights = field(default_factory=ScoringWeights)
    score_rules: tuple[ScoreRule, ...] = ()

    def score_failure(self, scores: tuple[tuple[str, float | None, str], ...]) -> float:
        """Return the share of a failed call an ok call's scores make it (0 to 1).

        Each score counts the weight of the first enabled rule of its name it matches; a
        call's scores add up to at most one failed call.
        """
        total = 0.0
        for name, value, label in scores:
            for rule in self.score_rules:
                if rule.score_name == name and rule.matches(value, label):
                    total += rule.weight
                    break
        return min(total, 1.0)

    @cached_property
    def ordered_rules(self) -> tuple[IntentRule, ...]:
        """Return the enabled rules, most specific (lowest priority number) first."""
        return tuple(sorted((r for r in self.rules if r.enabled), key=lambda r: r.priority))

    @cached_property
    def word_index(self) -> dict[str, tuple[int, ...]]:
        """Map each English keyword to the positions in ordered_rules of the rules that have it.

        With an index, a request costs one look-up per word, however many rules there are.
        """
        index: dict[str, list[int]] = {}
        for position, rule in enumerate(self.ordered_rules):
            for word in rule.words:
                index.setdefault(word, []).append(position)
        return {word: tuple(positions) for word, positions in index.items()}

    @cached_property
    def substring_index(self) -> tuple[tuple[str, tuple[int, ...]], ...]:
        """Return each substring keyword with the positions of its rules, longest keyword first.

        Longest first so that a keyword claims its characters before any shorter keyword
        inside it: 阶乘 (factorial) before 乘 (multiply), 乘以 before 乘.
        """
        index: dict[str, list[int]] = {}
        for position, rule in enumerate(self.ordered_rules):
            for keyword in rule.substrings:
                index.setdefault(keyword, []).append(position)
        ordered = sorted(index.items(), key=lambda item: (-len(item[0]), item[0]))
        return tuple((keyword, tuple(positions)) for keyword, positions in ordered)

    @cached_property
    def regex_rules(self) -> tuple[tuple[re.Pattern[str], int], ...]:
        return tuple(
            (rule.matcher, position)
            for position, rule in enumerate(self.ordered_rules)
            if rule.matcher is not None
        )

    def __hash__(self) -> int:  # cached_property needs a dict; version identifies the set
        return hash(self.version)
