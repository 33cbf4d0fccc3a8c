"""The planner's configuration as plain data: rules, capabilities, mappings, weights.

The database holds these as rows the admin edits; the pipeline takes a frozen RuleSet so
it runs without Django and compiles its matchers once per version.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property

# English keywords match whole words, plurals too; anything else (Chinese) as a substring.
_LATIN_WORD = re.compile(r"^[A-Za-z0-9][A-Za-z0-9 _'-]*$")


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
    def matcher(self) -> re.Pattern[str] | None:
        """Return one compiled regex for every keyword and pattern of the rule."""
        parts = []
        for keyword in self.keywords:
            keyword = keyword.strip()
            if not keyword:
                continue
            if _LATIN_WORD.match(keyword):
                # \b...(s|es)?\b: "sum" and "sums" match, "summary" does not.
                parts.append(rf"\b{re.escape(keyword)}(?:s|es)?\b")
            else:
                parts.append(re.escape(keyword))
        parts.extend(f"(?:{pattern})" for pattern in self.patterns)
        if not parts:
            return None
        return re.compile("|".join(parts), re.IGNORECASE)


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

    @cached_property
    def ordered_rules(self) -> tuple[IntentRule, ...]:
        """Return the enabled rules, most specific (lowest priority number) first."""
        return tuple(sorted((r for r in self.rules if r.enabled), key=lambda r: r.priority))

    def __hash__(self) -> int:  # cached_property needs a dict; version identifies the set
        return hash(self.version)
