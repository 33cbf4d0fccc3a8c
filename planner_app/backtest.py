"""Backtest a rule change: plan recorded requests under two rule sets and list what changes.

`backtest` is pure: requests, two RuleSets and a registry in, a report out. The loaders
below it read the requests, versions and drafts from the database and turn a pasted
draft into a RuleSet, naming the problem when it can't be one.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db.models import Max
from pydantic import BaseModel, ConfigDict, ValidationError

from planner_app.models import RuleSetVersion
from planner_app.pipeline.planner import Plan, Planner, no_evidence
from planner_app.pipeline.ruleset import RuleSet
from planner_app.pipeline.scoring import EvidenceSource
from planner_app.ruleset_versions import current_ruleset, ruleset_from_snapshot
from tools_app.registry import ToolRegistry
from traces_app.models import Trace

DEFAULT_REQUESTS = 200
MAX_REQUESTS = 2000


ASPECTS = ("capability", "goal", "tool", "arguments")


@dataclass(frozen=True)
class Choice:
    """What the planner made of one request: capabilities, goal, each step's tool and arguments."""

    steps: tuple[tuple[str, str], ...]  # (tool, arguments as canonical JSON)
    needs_llm: bool
    reason: str
    capabilities: tuple[str, ...] = ()
    goal: str = ""

    @classmethod
    def of(cls, plan: Plan) -> Choice:
        steps = tuple((s.tool, json.dumps(s.arguments, sort_keys=True)) for s in plan.steps)
        capabilities = tuple(plan.explanation.get("capabilities", ()))
        return cls(steps, plan.needs_llm, plan.reason, capabilities, plan.intent.goal)

    @property
    def tools(self) -> tuple[str, ...]:
        return tuple(tool for tool, _ in self.steps)

    def describe(self) -> str:
        """Return the choice as one line: 'tool {args} then tool {args}', or the LLM's reason."""
        if self.needs_llm:
            return f"needs the LLM: {self.reason}"
        return " then ".join(f"{tool} {arguments}" for tool, arguments in self.steps)

    def intent(self) -> str:
        """Return the capabilities and goal as one line."""
        capabilities = ", ".join(self.capabilities) or "no capability"
        return f"{capabilities}; goal: {self.goal or '—'}"


@dataclass(frozen=True)
class Change:
    request: str
    before: Choice
    after: Choice

    @property
    def aspects(self) -> list[str]:
        """Return which of capability, goal, tool and arguments changed."""
        before, after = self.before, self.after
        changed = {
            "capability": before.capabilities != after.capabilities,
            "goal": before.goal != after.goal,
            "tool": before.tools != after.tools,
            "arguments": before.tools == after.tools and before.steps != after.steps,
        }
        return [aspect for aspect in ASPECTS if changed[aspect]]

    @property
    def kind(self) -> str:
        if self.before.needs_llm and not self.after.needs_llm:
            return "newly planned"
        if self.after.needs_llm and not self.before.needs_llm:
            return "newly needs the LLM"
        return ", ".join(self.aspects)


@dataclass
class BacktestReport:
    """What changes from the rules `before` to the rules `after` (version 0: a draft).

    Every label reads in that one direction: "newly planned" is planned after, not before.
    """

    before_version: int
    after_version: int
    total: int = 0
    changes: list[Change] = field(default_factory=list)

    @property
    def changed(self) -> int:
        return len(self.changes)

    @property
    def newly_planned(self) -> int:
        return sum(1 for change in self.changes if change.kind == "newly planned")

    @property
    def newly_needs_llm(self) -> int:
        return sum(1 for change in self.changes if change.kind == "newly needs the LLM")

    @property
    def by_aspect(self) -> dict[str, int]:
        """Return how many requests changed in each aspect (one request may count in several)."""
        return {
            aspect: sum(1 for change in self.changes if aspect in change.aspects)
            for aspect in ASPECTS
        }


def backtest(
    requests: Sequence[str],
    before: RuleSet,
    after: RuleSet,
    registry: ToolRegistry,
    evidence_of: EvidenceSource = no_evidence,
) -> BacktestReport:
    """Plan each request under the rules `before` and `after`; report those whose capabilities,
    goal, tool or arguments change from the one to the other."""
    planner = Planner()
    report = BacktestReport(before.version, after.version, total=len(requests))
    for request in requests:
        old = Choice.of(planner.plan(request, registry, before, evidence_of))
        new = Choice.of(planner.plan(request, registry, after, evidence_of))
        if old != new and (old.needs_llm != new.needs_llm or Change(request, old, new).aspects):
            report.changes.append(Change(request, old, new))
    return report


def in_order(current: RuleSet, other: RuleSet) -> tuple[RuleSet, RuleSet]:
    """Return (before, after): an older version comes before the current rules, a draft after.

    A backtest reads old -> new, so an edit that loses a plan shows as "newly needs the
    LLM" whichever rule set the operator picked to compare with.
    """
    if other.version == 0 or other.version > current.version:  # 0: a draft, a change to come
        return current, other
    return other, current


def previous_version(current: int) -> int | None:
    """Return the newest recorded version before `current`: what a backtest compares with."""
    return (
        RuleSetVersion.objects.filter(number__lt=current)
        .order_by("-number")
        .values_list("number", flat=True)
        .first()
    )


# --- Loading from the database -------------------------------------------------------------


class DraftError(ValueError):
    """A pasted draft that is not JSON, not in the snapshot's shape, or not a valid rule set."""


class _Row(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _SnapshotRow(_Row):
    id: int | None = None  # a version's rows carry their ids; a draft's may leave them out


class _CapabilityIn(_SnapshotRow):
    name: str
    description: str = ""
    input_type: str = ""
    output_type: str = ""
    subsumes: list[str] = []
    depends_on: list[str] = []


class _RuleIn(_SnapshotRow):
    name: str
    capabilities: list[str]
    keywords: list[str] = []
    patterns: list[str] = []
    language: str = "any"
    goal: str = ""
    priority: int = 100
    enabled: bool = True


class _MappingIn(_SnapshotRow):
    capability: str
    tool: str
    weight: float = 0.0


class _ProfileIn(_SnapshotRow):
    tool: str
    cost: float | None = None
    latency_ms: float | None = None
    deterministic: bool | None = None
    composable: bool | None = None
    side_effects: bool | None = None


class _WeightsIn(_Row):
    cost: float | None = None
    deterministic: float | None = None
    composable: float | None = None
    success_rate: float | None = None
    latency_per_100ms: float | None = None
    latency_cap: float | None = None
    failure_ratio: float | None = None
    side_effects: float | None = None
    default_success_rate: float | None = None
    evidence_window: int | None = None


class _DraftIn(_Row):
    """The snapshot's shape; a section left out keeps the current one."""

    capabilities: list[_CapabilityIn] | None = None
    rules: list[_RuleIn] | None = None
    mappings: list[_MappingIn] | None = None
    profiles: list[_ProfileIn] | None = None
    weights: _WeightsIn | None = None


def merge_draft(current: dict[str, Any], draft_text: str) -> dict[str, Any]:
    """Return the current snapshot with the draft's sections in place of its own.

    Raises DraftError naming the first problems: bad JSON, a wrong shape, an invalid
    regex, or a name that refers to a capability the draft does not have.
    """
    try:
        data = json.loads(draft_text)
    except json.JSONDecodeError as exc:
        raise DraftError(f"the draft is not valid JSON: {exc}") from None
    try:
        draft = _DraftIn.model_validate(data)
    except ValidationError as exc:
        problems = [
            f"{'.'.join(str(part) for part in error['loc']) or 'draft'}: {error['msg']}"
            for error in exc.errors()[:5]
        ]
        raise DraftError(
            f"the draft is not in the snapshot's shape: {'; '.join(problems)}"
        ) from None
    snapshot = dict(current)
    for section in ("capabilities", "rules", "mappings", "profiles"):
        rows = getattr(draft, section)
        if rows is not None:
            snapshot[section] = [row.model_dump() for row in rows]
    if draft.weights is not None:
        snapshot["weights"] = current["weights"] | draft.weights.model_dump(exclude_none=True)
    _check(snapshot)
    return snapshot


def _check(snapshot: dict[str, Any]) -> None:
    """Raise DraftError for an invalid regex or a reference to an unknown capability."""
    names = {c["name"] for c in snapshot["capabilities"]}
    problems = []
    for capability in snapshot["capabilities"]:
        for other in capability["subsumes"] + capability["depends_on"]:
            if other not in names:
                problems.append(f"capability {capability['name']!r} names unknown {other!r}")
    for rule in snapshot["rules"]:
        for pattern in rule["patterns"]:
            try:
                re.compile(pattern)
            except re.error as exc:
                problems.append(f"rule {rule['name']!r}: invalid regex {pattern!r}: {exc}")
        for capability in rule["capabilities"]:
            if capability not in names:
                problems.append(f"rule {rule['name']!r} names unknown capability {capability!r}")
    for mapping in snapshot["mappings"]:
        if mapping["capability"] not in names:
            problems.append(
                f"mapping to {mapping['tool']!r} names unknown capability {mapping['capability']!r}"
            )
    if problems:
        raise DraftError("; ".join(problems[:5]))


def recent_requests(limit: int = DEFAULT_REQUESTS) -> list[str]:
    """Return the last `limit` distinct non-empty user requests recorded, newest first."""
    limit = max(1, min(limit, MAX_REQUESTS))
    rows = (
        Trace.objects.exclude(request_text="")
        .values("request_text")
        .annotate(latest=Max("started_at"))
        .order_by("-latest", "request_text")
    )
    return [row["request_text"] for row in rows[:limit]]


def current_snapshot() -> tuple[RuleSet, dict[str, Any]]:
    """Return the current rule set and the snapshot it was built from."""
    ruleset = current_ruleset()
    version = RuleSetVersion.objects.get(number=ruleset.version)
    return ruleset, version.snapshot


def version_ruleset(number: int) -> RuleSet:
    """Return the rule set of a recorded version (RuleSetVersion.DoesNotExist if none)."""
    return ruleset_from_snapshot(RuleSetVersion.objects.get(number=number).snapshot, number)


def draft_ruleset(draft_text: str) -> RuleSet:
    """Return the rule set of a draft: the current snapshot with the draft's edits.

    A draft has no version number of its own; it is numbered 0 so it never passes for
    a recorded version.
    """
    _, snapshot = current_snapshot()
    return ruleset_from_snapshot(merge_draft(snapshot, draft_text), 0)
