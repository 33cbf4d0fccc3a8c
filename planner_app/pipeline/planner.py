"""The planner (Path 2): request -> intent -> capabilities -> tools -> scores -> arguments.

Deterministic and explainable: every plan carries what matched, what was considered,
each candidate's score broken down, what was chosen and why anything was rejected.
Each stage is an object with one method, so any of them can be replaced.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from planner_app.pipeline.analysis import Intent, SemanticAnalyzer, singulars
from planner_app.pipeline.extraction import RuleWord, extract_arguments, extract_with_rule_words
from planner_app.pipeline.planning import CapabilityPlanner
from planner_app.pipeline.resolution import DISABLED, NOT_ALLOWED, ToolResolver
from planner_app.pipeline.ruleset import RuleSet
from planner_app.pipeline.scoring import EvidenceSource, Score, ToolScorer
from tools_app.registry import ToolRegistry
from tools_app.validation import ArgumentsError, validate_arguments


@dataclass(frozen=True)
class PlanStep:
    step_id: str
    tool: str
    capability: str
    arguments: dict[str, Any]
    depends_on: tuple[str, ...] = ()
    fallback_tools: tuple[str, ...] = ()


@dataclass
class Plan:
    """What to run for a request, and the whole reasoning behind it."""

    plan_id: str
    request: str
    ruleset_version: int
    intent: Intent
    steps: list[PlanStep]
    needs_llm: bool
    reason: str
    explanation: dict[str, Any] = field(default_factory=dict)

    @property
    def is_multi_step(self) -> bool:
        return len(self.steps) > 1

    def as_dict(self) -> dict[str, Any]:
        return {
            "plan_id": self.plan_id,
            "request": self.request,
            "ruleset_version": self.ruleset_version,
            "goal": self.intent.goal,
            "capabilities": list(self.intent.capabilities),
            "steps": [
                step.__dict__
                | {"depends_on": list(step.depends_on), "fallback_tools": list(step.fallback_tools)}
                for step in self.steps
            ],  # fmt: skip
            "is_multi_step": self.is_multi_step,
            "needs_llm": self.needs_llm,
            "reason": self.reason,
            "explanation": self.explanation,
        }


def _same_call(step: PlanStep, steps: list[PlanStep]) -> PlanStep | None:
    """Return the earlier step that makes exactly this call (tool and arguments), if any.

    Two capabilities may resolve to one call ("5的阶乘" once matched both factorial and
    multiply): running it twice would cost twice and record a second, identical span.
    """
    return next((s for s in steps if (s.tool, s.arguments) == (step.tool, step.arguments)), None)


def _none_allowed(
    capability: str, explanation: dict[str, Any], allowed_tools: Collection[str] | None
) -> str | None:
    """Return why no tool the caller may use serves the capability, or None if not that."""
    passed_over = [
        entry["tool"]
        for entry in explanation["rejected"]
        if entry.get("capability") == capability and entry["why"] == NOT_ALLOWED
    ]
    if allowed_tools is None or not passed_over:
        return None
    may_use = ", ".join(sorted(allowed_tools)) or "none"
    return (
        f"no tool the caller may use offers {capability} ({', '.join(passed_over)} would, "
        f"but the caller may not use them; it may use: {may_use})"
    )


def _rule_words(intent: Intent, ruleset: RuleSet, capability: str) -> tuple[RuleWord, ...]:
    """Return the keywords that rules giving `capability` matched, each with its rule's keywords.

    What a rule's pattern matched ("17%") is left out: it is not a word to read as another.
    """
    rules = {rule.name: rule for rule in ruleset.ordered_rules}
    words = []
    for match in intent.matches:
        rule = rules.get(match.rule)
        if rule is None or capability not in match.capabilities:
            continue
        keywords = {keyword.strip().lower() for keyword in rule.keywords}
        for found in match.matched:
            if keywords & {found.lower(), *singulars(found.lower())}:
                words.append(RuleWord(found, rule.name, rule.keywords))
    return tuple(words)


def no_evidence(tool: str, window: int) -> None:
    """An evidence source that knows nothing: every tool gets the defaults."""
    return None


class Planner:
    def __init__(
        self,
        analyzer: SemanticAnalyzer | None = None,
        capability_planner: CapabilityPlanner | None = None,
        resolver: ToolResolver | None = None,
        scorer: ToolScorer | None = None,
    ) -> None:
        self.analyzer = analyzer or SemanticAnalyzer()
        self.capability_planner = capability_planner or CapabilityPlanner()
        self.resolver = resolver or ToolResolver()
        self.scorer = scorer or ToolScorer()

    def plan(
        self,
        request: str,
        registry: ToolRegistry,
        ruleset: RuleSet,
        evidence_of: EvidenceSource = no_evidence,
        allowed_tools: Collection[str] | None = None,
    ) -> Plan:
        """Return the plan for a request; needs_llm with a reason when it cannot make one.

        `allowed_tools` (None: any) are the tools the caller may use: the plan chooses
        among them alone, and says which others it passed over for that.
        """
        intent = self.analyzer.analyze(request, ruleset)
        capability_plan = self.capability_planner.plan(intent.capabilities, ruleset)
        explanation: dict[str, Any] = {
            "rules_matched": [
                {"rule": m.rule, "matched": list(m.matched), "capabilities": list(m.capabilities)}
                for m in intent.matches
            ],
            "capabilities": list(capability_plan.required),
            "capabilities_dropped": [
                {"capability": c, "why": w} for c, w in capability_plan.dropped
            ],
            "candidates": {},
            "rejected": [],
        }
        plan = Plan(uuid.uuid4().hex, request, ruleset.version, intent, [], True, "", explanation)
        if not capability_plan.required:
            plan.reason = "no rule matched the request; needs the LLM"
            return plan
        step_of: dict[str, str] = {}
        for capability in capability_plan.required:
            scores = self._ranked(
                capability, registry, ruleset, evidence_of, explanation, allowed_tools
            )
            if not scores:
                why = self._disabled_step(capability, request, registry, explanation)
                why = why or _none_allowed(capability, explanation, allowed_tools)
                why = why or "no registered, enabled tool offers it"
                explanation["rejected"].append({"capability": capability, "why": why})
                continue
            step_id = f"step_{len(plan.steps) + 1}"
            words = _rule_words(intent, ruleset, capability)
            step = self._step(step_id, capability, scores, request, registry, explanation, words)
            if step is None:
                continue
            same = _same_call(step, plan.steps)
            if same is not None:
                explanation.setdefault("arguments", {}).pop(step_id, None)
                explanation.setdefault("steps_merged", []).append(
                    {"capability": capability, "tool": step.tool, "into": same.step_id,
                     "why": f"the same call as {same.step_id} (for {same.capability})"}
                )  # fmt: skip
                step_of[capability] = same.step_id
                continue
            depends = tuple(
                step_of[d] for d in capability_plan.depends_on[capability] if d in step_of
            )
            plan.steps.append(PlanStep(step.step_id, step.tool, capability, step.arguments,
                                       depends, step.fallback_tools))  # fmt: skip
            step_of[capability] = step.step_id
        plan.needs_llm = not plan.steps
        if plan.steps:
            plan.reason = "; ".join(f"{s.step_id}: {s.tool} for {s.capability}" for s in plan.steps)
        else:
            reasons = [r["why"] for r in explanation["rejected"]]
            reason = reasons[-1] if reasons else "no tool fits"
            plan.reason = reason if reason.endswith("needs the LLM") else f"{reason}; needs the LLM"
        return plan

    def _ranked(
        self,
        capability: str,
        registry: ToolRegistry,
        ruleset: RuleSet,
        evidence_of: EvidenceSource,
        explanation: dict[str, Any],
        allowed_tools: Collection[str] | None,
    ) -> list[Score]:
        candidates, rejected = self.resolver.resolve(capability, registry, ruleset, allowed_tools)
        for tool, why in rejected:
            explanation["rejected"].append({"capability": capability, "tool": tool, "why": why})
        scores = sorted(
            (self.scorer.score(c, ruleset, evidence_of) for c in candidates),
            key=lambda s: (-s.final, s.tool),
        )
        explanation["candidates"][capability] = [score.as_dict() for score in scores]
        return scores

    def _disabled_step(
        self, capability: str, request: str, registry: ToolRegistry, explanation: dict[str, Any]
    ) -> str | None:
        """Return why the step a disabled tool would have made cannot run, or None if none.

        The step goes into the explanation (`disabled_steps`), not the plan: the engine
        would refuse it, and the reason tells the reader what to turn on.
        """
        disabled = [
            entry["tool"]
            for entry in explanation["rejected"]
            if entry.get("capability") == capability and entry["why"] == DISABLED
        ]
        for tool in disabled:
            extraction = extract_arguments(tool, request)
            if extraction.needs_llm:
                continue
            try:
                arguments = validate_arguments(
                    registry.get(tool).parameters, extraction.arguments
                ).arguments
            except ArgumentsError:
                continue
            explanation.setdefault("disabled_steps", []).append(
                {"capability": capability, "tool": tool, "arguments": arguments}
            )
            return (
                f"{tool} would run with {json.dumps(arguments, ensure_ascii=False)} but it is "
                "disabled: an operator turned it off, or it needs configuring (web_search "
                "needs ARES_SEARXNG_URL)"
            )
        return None

    def _step(
        self,
        step_id: str,
        capability: str,
        scores: list[Score],
        request: str,
        registry: ToolRegistry,
        explanation: dict[str, Any],
        words: tuple[RuleWord, ...] = (),
    ) -> PlanStep | None:
        """Return a step with the best-scoring tool whose arguments can be read from the request."""
        for position, score in enumerate(scores):
            extraction = extract_with_rule_words(score.tool, request, words)
            why = extraction.reason
            if not extraction.needs_llm:
                try:
                    arguments = validate_arguments(
                        registry.get(score.tool).parameters, extraction.arguments
                    ).arguments
                except ArgumentsError as exc:
                    why = f"extracted arguments are invalid: {exc}"
                else:
                    fallbacks = tuple(s.tool for s in scores[position + 1 :])
                    explanation.setdefault("arguments", {})[step_id] = {
                        "tool": score.tool,
                        "arguments": arguments,
                        "how": extraction.reason,
                    }
                    return PlanStep(step_id, score.tool, capability, arguments, (), fallbacks)
            explanation["rejected"].append(
                {"capability": capability, "tool": score.tool, "why": why}
            )
        return None
