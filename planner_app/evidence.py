"""Evidence scores for the dashboards: the planner's scorer applied to recorded rollups.

The planner scores a tool on its latest calls (services.recent_evidence). Over time, the
pages apply the same ToolScorer to each chart bucket's rollup instead: that bucket's
calls, success rate and mean latency become the Evidence. A bucket without calls
carries the tool's latest earlier bucket with calls, as the planner keeps scoring a
quiet tool on its last calls however old; a tool never called gets the planner's
default. Every bucket is scored under the current rules, so between buckets only the
evidence part moves.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from planner_app.pipeline.resolution import Candidate, ToolResolver
from planner_app.pipeline.ruleset import RuleSet
from planner_app.pipeline.scoring import Evidence, Score, ToolScorer
from planner_app.services import recent_evidence
from tools_app.registry import ToolRegistry
from tools_app.specs import ToolSpec
from traces_app.models import ToolRollup
from traces_app.rollups.range_totals import ToolTotals, tool_series, tool_totals
from traces_app.rollups.ranges import TimeRange

_scorer = ToolScorer()
_resolver = ToolResolver()


def evidence_from(totals: ToolTotals | None) -> Evidence | None:
    """Return a rollup's record as the scorer's Evidence; None when no call judges the tool.

    The caller's faults are left out (see planner_app.pipeline.scoring), as the planner's
    own record (services.recent_evidence) leaves them out.
    """
    if totals is None or not totals.judged_calls:
        return None
    return Evidence(totals.judged_calls, totals.success_rate or 0.0, totals.mean_latency_ms)


def score_with(candidate: Candidate, ruleset: RuleSet, evidence: Evidence | None) -> Score:
    """Return the planner's score of a candidate given this evidence (not the recent record)."""
    return _scorer.score(candidate, ruleset, lambda _tool, _window: evidence)


def own_candidate(spec: ToolSpec) -> Candidate:
    """Return the tool as a candidate of no capability: its score before any mapping weight."""
    return Candidate(spec, "", "tool", 0.0)


def current_score(candidate: Candidate, ruleset: RuleSet) -> Score:
    """Return the score the planner gives the candidate now, on the tool's recent calls."""
    return _scorer.score(candidate, ruleset, recent_evidence)


@dataclass(frozen=True)
class BucketScore:
    bucket_start: datetime
    totals: ToolTotals | None  # this bucket's calls; None when it had none
    score: Score
    evidence_of: datetime | None  # the bucket whose calls are the evidence; None: no record

    @property
    def calls(self) -> int:
        return self.totals.calls if self.totals else 0

    @property
    def source(self) -> str:
        """Say where the bucket's evidence comes from."""
        if self.evidence_of is None:
            return "no calls yet: the planner's default"
        if self.evidence_of == self.bucket_start:
            return "this bucket"
        return f"carried from {self.evidence_of:%Y-%m-%d %H:%M}"


def last_calls_before(tools: list[str], moment: datetime) -> dict[str, tuple[datetime, ToolTotals]]:
    """Return each tool's latest hourly rollup with calls before a moment, if it has one.

    One indexed look-up per tool: the record a range's quiet first buckets carry.
    """
    found = {}
    for name in tools:
        earlier = ToolRollup.objects.filter(tool_name=name, bucket_start__lt=moment, calls__gt=0)
        # Usually the first: only an hour of nothing but the caller's faults is passed over.
        for rollup in earlier.order_by("-bucket_start").iterator(chunk_size=24):
            totals = ToolTotals(name)
            totals.add(rollup)
            if totals.judged_calls:
                found[name] = (rollup.bucket_start, totals)
                break
    return found


def score_series(
    candidate: Candidate,
    ruleset: RuleSet,
    time_range: TimeRange,
    points: dict[datetime, ToolTotals],
    before: tuple[datetime, ToolTotals] | None = None,
) -> list[BucketScore]:
    """Return the candidate's score in every chart bucket of the range, oldest first.

    `before` is the tool's latest bucket with calls before the range (last_calls_before).
    """
    carried: tuple[datetime | None, Score] = (None, score_with(candidate, ruleset, None))
    if before is not None:
        carried = (before[0], score_with(candidate, ruleset, evidence_from(before[1])))
    scores = []
    for start in time_range.bucket_starts():
        totals = points.get(start)
        if evidence_from(totals) is not None:
            carried = (start, score_with(candidate, ruleset, evidence_from(totals)))
        scores.append(BucketScore(start, totals, carried[1], carried[0]))
    return scores


def own_score_series(
    spec: ToolSpec, ruleset: RuleSet, time_range: TimeRange, points: dict[datetime, ToolTotals]
) -> list[BucketScore]:
    """Return the tool's own score (no mapping weight) in every chart bucket of the range."""
    before = last_calls_before([spec.name], time_range.bucket_starts()[0]).get(spec.name)
    return score_series(own_candidate(spec), ruleset, time_range, points, before)


@dataclass(frozen=True)
class ToolRow:
    """One line of the tools table: a tool's totals over the range and its current score."""

    name: str
    spec: ToolSpec | None  # None: reported by an outside agent, no contract registered
    totals: ToolTotals
    score: Score | None


def tool_rows(time_range: TimeRange, registry: ToolRegistry, ruleset: RuleSet) -> list[ToolRow]:
    """Return every registered tool and every tool seen in the range's rollups, by name."""
    specs = {spec.name: spec for spec in registry.list(enabled_only=False)}
    totals = {total.tool_name: total for total in tool_totals(time_range)}
    rows = []
    for name in sorted(set(specs) | set(totals)):
        spec = specs.get(name)
        score = current_score(own_candidate(spec), ruleset) if spec else None
        rows.append(ToolRow(name, spec, totals.get(name) or ToolTotals(name), score))
    return rows


def capability_names(ruleset: RuleSet, registry: ToolRegistry) -> list[str]:
    """Return every capability the planner knows: the rule set's and those tools declare."""
    declared = {name for spec in registry.list() for name in spec.capabilities}
    return sorted(set(ruleset.capabilities) | declared)


def capabilities_of(tool: str, ruleset: RuleSet, registry: ToolRegistry) -> list[Candidate]:
    """Return the tool as a candidate of each capability it can serve."""
    found = []
    for capability in capability_names(ruleset, registry):
        candidates, _ = _resolver.resolve(capability, registry, ruleset)
        found.extend(c for c in candidates if c.spec.name == tool)
    return found


@dataclass(frozen=True)
class Flip:
    """A bucket where the planner's preferred tool changed, and the scores that made it."""

    bucket_start: datetime
    before: str
    after: str
    final: float  # the new leader's score in that bucket
    why: str


@dataclass(frozen=True)
class CandidateParts:
    """A candidate's score over a whole range (its calls as evidence) and now."""

    candidate: Candidate
    over_range: Score
    now: Score
    caller_faults: int = 0  # calls of the range left out of its evidence: the callers' faults


@dataclass(frozen=True)
class CapabilityEvidence:
    capability: str
    candidates: list[Candidate]
    rejected: list[tuple[str, str]]
    series: dict[str, list[BucketScore]]  # per tool, one entry per chart bucket
    leaders: list[str]  # the top tool of each chart bucket
    flips: list[Flip]
    parts: list[CandidateParts]  # best over the range first


def _ranked(scores: list[Score]) -> Score:
    return min(scores, key=lambda score: (-score.final, score.tool))


def capability_evidence(
    capability: str, ruleset: RuleSet, registry: ToolRegistry, time_range: TimeRange
) -> CapabilityEvidence:
    """Return a capability's candidates, their scores per bucket and where the leader changed."""
    candidates, rejected = _resolver.resolve(capability, registry, ruleset)
    names = [c.spec.name for c in candidates]
    points = tool_series(time_range, names) if names else {}
    before = last_calls_before(names, time_range.bucket_starts()[0])
    series = {
        name: score_series(c, ruleset, time_range, points.get(name, {}), before.get(name))
        for name, c in zip(names, candidates, strict=True)
    }
    buckets = range(len(time_range.bucket_starts())) if names else range(0)
    leaders = [_ranked([series[name][i].score for name in names]).tool for i in buckets]
    totals = {total.tool_name: total for total in tool_totals(time_range, names)} if names else {}
    parts = [
        CandidateParts(
            c,
            score_with(c, ruleset, evidence_from(totals.get(c.spec.name))),
            current_score(c, ruleset),
            totals[c.spec.name].caller_faults if c.spec.name in totals else 0,
        )
        for c in candidates
    ]
    parts.sort(key=lambda part: (-part.over_range.final, part.over_range.tool))
    flips = _flips(series, leaders)
    return CapabilityEvidence(capability, candidates, rejected, series, leaders, flips, parts)


@dataclass(frozen=True)
class CapabilityCandidates:
    name: str
    description: str
    scores_now: list[Score]  # best first
    rejected: list[tuple[str, str]]


def capability_overview(ruleset: RuleSet, registry: ToolRegistry) -> list[CapabilityCandidates]:
    """Return every capability with its candidates' scores now, as the planner ranks them."""
    overview = []
    for name in capability_names(ruleset, registry):
        candidates, rejected = _resolver.resolve(name, registry, ruleset)
        scores = sorted(
            (current_score(c, ruleset) for c in candidates),
            key=lambda score: (-score.final, score.tool),
        )
        info = ruleset.capabilities.get(name)
        overview.append(
            CapabilityCandidates(name, info.description if info else "", scores, rejected)
        )
    return overview


def _flips(series: dict[str, list[BucketScore]], leaders: list[str]) -> list[Flip]:
    flips = []
    for index in range(1, len(leaders)):
        before, after = leaders[index - 1], leaders[index]
        if before != after:
            old, new = series[before][index], series[after][index]
            flips.append(Flip(new.bucket_start, before, after, new.score.final, _why(new, old)))
    return flips


def _why(new: BucketScore, old: BucketScore) -> str:
    """Say which score parts put the new leader ahead of the old one in this bucket."""
    a, b = new.score, old.score

    def record(point: BucketScore) -> str:
        score = point.score
        if point.evidence_of is None:
            return point.source
        calls = f"{score.samples} calls, {score.success_rate:.0%} ok, {score.latency_ms:.0f} ms"
        return calls if point.calls else f"{calls}, {point.source}"

    return (
        f"{a.tool} {a.final:.2f} vs {b.tool} {b.final:.2f}; evidence {a.evidence:.2f} vs "
        f"{b.evidence:.2f} ({record(new)} vs {record(old)}); base {a.base:.2f} vs {b.base:.2f}, "
        f"scores {a.scores:.2f} vs {b.scores:.2f}, "
        f"penalty {a.penalty:.2f} vs {b.penalty:.2f}, mapping weight {a.mapping_weight:g} vs "
        f"{b.mapping_weight:g}"
    )
