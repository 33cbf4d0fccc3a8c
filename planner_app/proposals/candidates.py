"""A proposed change before it is stored, and its backtest on the recorded requests.

Every backtest reads one way: `before` is the rules as they are, `after` the rules with
the change, so "newly planned" is a request planned with the change and not without it,
and "newly needs the LLM" is one the change breaks.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from planner_app.backtest import BacktestReport, Change, Choice
from planner_app.pipeline.planner import Planner, no_evidence
from planner_app.pipeline.ruleset import RuleSet
from planner_app.pipeline.scoring import EvidenceSource
from planner_app.proposals.changes import apply_ops, describe
from planner_app.proposals.traffic import Served
from planner_app.ruleset_versions import ruleset_from_snapshot
from tools_app.registry import ToolRegistry

EVIDENCE_SHOWN = 50  # requests kept behind a proposal
CHANGES_SHOWN = 50  # backtest entries kept per label


@dataclass
class Candidate:
    """A change the traffic suggests, with the requests behind it.

    `key` names what is proposed, stably across refreshes ("rule:Summation:tally"), so a
    dismissed proposal is known again; `ops` (changes.py) or `workflow` is the change.
    """

    kind: str  # rule, mapping or workflow
    key: str
    title: str
    target: str  # the capability, or the workflow's name
    why: str
    evidence: list[Served]
    ops: list[dict[str, Any]] = field(default_factory=list)
    workflow: dict[str, Any] | None = None  # a workflow proposal's definition
    backtest: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> str:
        """Return the change as one line."""
        if self.workflow is not None:
            return f"new workflow {self.target}"
        return "; ".join(describe(op) for op in self.ops)


class Backtester:
    """Plan recorded requests under the current rules once, then under each proposed change.

    The current plans are cached, and a change that only adds words re-plans only the
    requests those words could match (a case-insensitive substring or pattern search, a
    superset of what the rule will match), so many candidates cost little more than one.
    """

    def __init__(
        self,
        requests: Sequence[str],
        ruleset: RuleSet,
        snapshot: dict[str, Any],
        registry: ToolRegistry,
        evidence_of: EvidenceSource = no_evidence,
    ) -> None:
        self.requests = list(dict.fromkeys(requests))
        self.ruleset, self.snapshot, self.registry = ruleset, snapshot, registry
        self.evidence_of = evidence_of
        self._planner = Planner()
        self._before: dict[str, Choice] = {}

    def choice(self, request: str, ruleset: RuleSet | None = None) -> Choice:
        """Return what the planner makes of `request` (under the current rules by default)."""
        if ruleset is None:
            cached = self._before.get(request)
            if cached is None:
                cached = self._before[request] = self._plan(request, self.ruleset)
            return cached
        return self._plan(request, ruleset)

    def ruleset_with(self, ops: list[dict[str, Any]]) -> RuleSet:
        """Return the current rules with the operations made (version 0: a draft)."""
        return ruleset_from_snapshot(apply_ops(self.snapshot, ops), 0)

    def run(
        self, ops: list[dict[str, Any]], requests: Sequence[str] | None = None
    ) -> BacktestReport:
        """Return what the change does to `requests` (default: every recorded one)."""
        after = self.ruleset_with(ops)
        pool = self.requests if requests is None else list(dict.fromkeys(requests))
        report = BacktestReport(self.ruleset.version, 0, total=len(pool))
        for request in filter(_could_change(ops), pool):
            old, new = self.choice(request), self.choice(request, after)
            if old != new and (old.needs_llm != new.needs_llm or Change(request, old, new).aspects):
                report.changes.append(Change(request, old, new))
        return report

    def _plan(self, request: str, ruleset: RuleSet) -> Choice:
        return Choice.of(self._planner.plan(request, self.registry, ruleset, self.evidence_of))


def summary(report: BacktestReport) -> dict[str, Any]:
    """Return a backtest as the JSON a Proposal keeps: counts, then examples per label."""
    labelled: dict[str, list[dict[str, str]]] = {
        "newly_planned": [], "newly_needs_llm": [], "changed": [],
    }  # fmt: skip
    for change in report.changes:
        label = {"newly planned": "newly_planned", "newly needs the LLM": "newly_needs_llm"}
        entries = labelled[label.get(change.kind, "changed")]
        if len(entries) < CHANGES_SHOWN:
            entries.append(
                {
                    "request": change.request,
                    "kind": change.kind,
                    "before": change.before.describe(),
                    "after": change.after.describe(),
                    "before_intent": change.before.intent(),
                    "after_intent": change.after.intent(),
                }
            )
    return {
        "before_version": report.before_version,
        "total": report.total,
        "changed_count": report.changed,
        "newly_planned_count": report.newly_planned,
        "newly_needs_llm_count": report.newly_needs_llm,
        "other_changes_count": report.changed - report.newly_planned - report.newly_needs_llm,
        **labelled,
    }


def _could_change(ops: list[dict[str, Any]]) -> Callable[[str], bool]:
    """Return a predicate: may this change alter the plan of a request?"""
    if not ops or any(op.get("op") != "add_words" for op in ops):
        return lambda request: True
    words = [w.strip().lower() for op in ops for w in op.get("keywords", []) if w.strip()]
    patterns = [re.compile(p, re.IGNORECASE) for op in ops for p in op.get("patterns", [])]

    def could(request: str) -> bool:
        text = request.lower()
        return any(w in text for w in words) or any(p.search(request) for p in patterns)

    return could
