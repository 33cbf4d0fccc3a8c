"""Step 4, evidence scoring: a tool's contract plus how it has really done lately.

    Base     = (1 / max(cost, 1)) * 10 + (deterministic ? 3 : 0) + (composable ? 2 : 0)
    Evidence = success_rate * 20 - min(latency_ms / 100, 5) - failure_ratio * 10
    Penalty  = side effects ? 5 : 0
    Scores   = -scored_failures / samples * (20 + 10)
    Final    = Base + Evidence + Scores - Penalty + the mapping's static weight

Scores is what people, agents and evaluators said of the calls (traces_app.models.Score):
each ok call among the evidence whose scores match the rule set's score rules counts as
that share of a failed call (rule weights, at most one call per call), so it moves the
score as much as that many failures would have: its success weight lost, its failure
weight gained. scored_failures never exceeds the successes.

The numbers are the editable ScoringWeights. With no recorded evidence, the success
rate is 0.95 and the latency is the profile's (else 0).

The evidence blames the right party. A call that failed by its caller's fault is no
evidence about the tool, so it is in neither the calls nor the failures of the success
rate, nor in the latency: arguments that break the contract (invalid_arguments, which
the engine refuses before the tool runs), a tool the caller may not call
(permission_denied), a tool an operator turned off (disabled), a call cancelled on the
caller's side (cancelled). traces_app.models.CALLER_FAULTS lists them; they count
against the model and agent that sent them (the overview's calls by agent). Otherwise a
model that sends {"expression": 123} ten times would sink the calculator, which did
exactly what it should, and the planner would stop choosing a tool that works. Failures
of the tool's own (timeout, tool_error, not_found, unavailable, ...) count in full.
The success rate counts attempts (spans), not calls: each attempt of an engine retry is
the tool tried once more, and timing out again is the tool's record.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from planner_app.pipeline.resolution import Candidate
from planner_app.pipeline.ruleset import RuleSet, ToolProfile
from tools_app.specs import SideEffect


@dataclass(frozen=True)
class Evidence:
    """A tool's recent record: calls counted, successes and mean latency."""

    samples: int
    success_rate: float
    latency_ms: float
    # The scores of the ok calls among the samples: per call, (name, value, label) each.
    scored: tuple[tuple[tuple[str, float | None, str], ...], ...] = ()


EvidenceSource = Callable[[str, int], Evidence | None]


@dataclass(frozen=True)
class Score:
    tool: str
    capability: str
    base: float
    evidence: float
    penalty: float
    mapping_weight: float
    final: float
    success_rate: float
    latency_ms: float
    samples: int
    scores: float = 0.0  # the Scores term (zero or negative)
    scored_failures: float = 0.0  # ok calls the scores count as failed (weighted)

    def as_dict(self) -> dict[str, float | int | str]:
        return dict(self.__dict__)


class ToolScorer:
    def score(self, candidate: Candidate, ruleset: RuleSet, evidence_of: EvidenceSource) -> Score:
        spec, weights = candidate.spec, ruleset.weights
        profile = ruleset.profiles.get(spec.name) or ToolProfile(spec.name)
        cost = spec.cost if profile.cost is None else profile.cost
        deterministic = (
            spec.deterministic if profile.deterministic is None else profile.deterministic
        )
        composable = spec.composable if profile.composable is None else profile.composable
        side_effects = (
            spec.side_effect != SideEffect.READ_ONLY
            if profile.side_effects is None
            else profile.side_effects
        )
        record = evidence_of(spec.name, weights.evidence_window)
        scored_failures = 0.0
        if record is not None and record.samples and ruleset.score_rules:
            scored_failures = min(
                sum(ruleset.score_failure(scores) for scores in record.scored),
                record.success_rate * record.samples,
            )
        if record is None or record.samples == 0:
            success_rate, latency, samples = (
                weights.default_success_rate,
                profile.latency_ms or 0,
                0,
            )
        else:
            success_rate, latency, samples = record.success_rate, record.latency_ms, record.samples
        base = (
            (1 / max(cost, 1)) * weights.cost
            + (weights.deterministic if deterministic else 0)
            + (weights.composable if composable else 0)
        )
        evidence = (
            success_rate * weights.success_rate
            - min(latency / 100 * weights.latency_per_100ms, weights.latency_cap)
            - (1 - success_rate) * weights.failure_ratio
        )
        scores = 0.0
        if scored_failures:
            scores = -scored_failures / samples * (weights.success_rate + weights.failure_ratio)
        penalty = weights.side_effects if side_effects else 0.0
        final = base + evidence + scores - penalty + candidate.mapping_weight
        return Score(spec.name, candidate.capability, round(base, 6), round(evidence, 6),
                     penalty, candidate.mapping_weight, round(final, 6), success_rate, latency,
                     samples, round(scores, 6), round(scored_failures, 6))  # fmt: skip
