"""Step 1, semantic analysis: which rules a request matches, and the capabilities they give."""

from __future__ import annotations

from dataclasses import dataclass

from planner_app.pipeline.ruleset import RuleSet

MAX_REQUEST_CHARS = 4000


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
        matches = []
        for rule in ruleset.ordered_rules:
            matcher = rule.matcher
            if matcher is None:
                continue
            found = tuple(dict.fromkeys(m.group(0) for m in matcher.finditer(text)))
            if found:
                matches.append(RuleMatch(rule.name, found, rule.capabilities, rule.priority))
        capabilities = tuple(dict.fromkeys(c for match in matches for c in match.capabilities))
        goal = next((rule.goal for rule in ruleset.ordered_rules
                     if rule.goal and any(m.rule == rule.name for m in matches)), "")  # fmt: skip
        complexity = "none" if not capabilities else "single" if len(capabilities) == 1 else "multi"
        return Intent(goal, capabilities, tuple(matches), complexity)
