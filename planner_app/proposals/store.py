"""The stored proposals: refreshed from recorded traffic, applied as a rule-set version, dismissed.

`refresh_proposals` mines the recorded traffic (rules.py, mappings.py, chains.py),
backtests each candidate and keeps it as a Proposal row named by its key. Every write
here (a refresh's upserts, an apply, a dismiss) runs under one lock, taken before the
rules' lock, so two refreshes, or a refresh and an apply, or two appliers, queue
instead of crossing: the second applier finds the proposal decided and is told by whom.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from planner_app.models import Proposal, RuleSetVersion, Workflow
from planner_app.proposals.candidates import EVIDENCE_SHOWN, Backtester, Candidate, summary
from planner_app.proposals.changes import ChangeError, apply_ops, describe
from planner_app.proposals.traffic import Served, recorded_traffic
from planner_app.ruleset_versions import (
    RulesChanged,
    apply_change,
    current_ruleset,
    latest_number,
    take_snapshot,
)
from traces_app.models.job_leases import hold_transaction_lock

logger = logging.getLogger(__name__)

__all__ = [
    "AlreadyDecided", "ChangeError", "ProposalError", "RefreshReport", "RulesChanged",
    "WorkflowInvalid", "apply_proposal", "dismiss_proposal", "refresh_proposals",
]  # fmt: skip

# pg_advisory_xact_lock's key for "the proposals are being written" ('PROP').
PROPOSALS_LOCK_KEY = 0x50524F50
REFRESH_ATTEMPTS = 2  # mine again once when the rules changed while mining
KEY_LENGTH = Proposal._meta.get_field("key").max_length


class ProposalError(Exception):
    """A proposal that can't be applied or dismissed as asked (the message says why)."""


class AlreadyDecided(ProposalError):
    """The proposal was applied or dismissed already (by someone else, at once, say)."""


class WorkflowInvalid(ProposalError):
    """A workflow proposal whose definition does not pass validation against the registry."""


@dataclass
class RefreshReport:
    """What one refresh read and wrote."""

    traffic: int = 0
    ruleset_version: int = 0
    proposed: int = 0
    created: int = 0
    updated: int = 0
    reopened: int = 0
    deleted: int = 0

    def __str__(self) -> str:
        return (
            f"{self.proposed} proposed from {self.traffic} recorded requests at "
            f"v{self.ruleset_version}: {self.created} new, {self.updated} updated, "
            f"{self.reopened} reopened, {self.deleted} gone"
        )


# Refreshing ------------------------------------------------------------------------------


def refresh_proposals(limit: int | None = None) -> RefreshReport:
    """Mine the recorded traffic for proposals, backtest them, and store them by key.

    A dismissed proposal comes back only when its evidence grew past what it had when
    dismissed; an applied one stays applied unless its change is no longer in the rules
    (rolled back, say) and the traffic proposes it again; an open one the traffic no
    longer proposes is deleted.
    """
    since = timezone.now() - timedelta(days=settings.ARES_PROPOSALS_WINDOW_DAYS)
    traffic = recorded_traffic(limit or settings.ARES_PROPOSALS_TRAFFIC, since)
    for _ in range(REFRESH_ATTEMPTS):
        report = RefreshReport(traffic=len(traffic))
        candidates = _mine(traffic, report)
        if latest_number() == report.ruleset_version:
            break  # else the backtests are of rules that changed meanwhile: mine again
    with transaction.atomic():
        lock_proposals()
        _store(candidates, report)
    logger.info("refreshed proposals: %s", report)
    return report


def _mine(traffic: list[Served], report: RefreshReport) -> list[Candidate]:
    """Return every miner's candidates, backtested."""
    from planner_app.services import recent_evidence
    from tools_app.site_engine import get_engine

    ruleset = current_ruleset()
    snapshot = _snapshot_of(ruleset.version)
    registry = get_engine().registry
    report.ruleset_version = ruleset.version
    requests = [served.request for served in traffic]
    backtester = Backtester(requests, ruleset, snapshot, registry, recent_evidence)
    candidates: list[Candidate] = []
    for mine in _miners().values():
        found = mine(traffic, backtester, ruleset, registry)
        for candidate in found:
            if candidate.ops and not candidate.backtest:
                candidate.backtest = summary(backtester.run(candidate.ops))
            candidates.append(candidate)
    report.proposed = len(candidates)
    return candidates


def _snapshot_of(number: int) -> dict[str, Any]:
    from planner_app.models import RuleSetVersion

    return RuleSetVersion.objects.get(number=number).snapshot


Miner = Callable[..., list[Candidate]]


def _miners() -> dict[str, Miner]:
    """Return the miners by the kind of proposal each makes, all called alike."""
    # Here, not at the top: the rule miner loads scikit-learn, which a web process that
    # only lists proposals never needs.
    from planner_app.proposals.chains import propose_workflows
    from planner_app.proposals.mappings import propose_mappings
    from planner_app.proposals.rules import propose_rules

    return {
        Proposal.Kind.RULE: lambda traffic, backtester, ruleset, registry: propose_rules(
            traffic, backtester, ruleset
        ),
        Proposal.Kind.MAPPING: propose_mappings,
        Proposal.Kind.WORKFLOW: lambda traffic, backtester, ruleset, registry: propose_workflows(
            traffic, registry
        ),
    }


def lock_proposals() -> None:
    """Hold the proposals' lock until the current transaction ends (like lock_rules)."""
    hold_transaction_lock(PROPOSALS_LOCK_KEY, Proposal._meta.db_table, "id")


def _store(candidates: list[Candidate], report: RefreshReport) -> None:
    """Upsert the candidates by key; delete the open proposals no longer made (under the lock)."""
    rules = take_snapshot()  # the rules as they are now, read under the lock
    saved = _saved_chains()
    wanted = {c.key[:KEY_LENGTH]: c for c in candidates if not _in_rules(c, rules, saved)}
    stored = Proposal.objects.filter(Q(key__in=list(wanted)) | Q(status=Proposal.Status.OPEN))
    existing = {proposal.key: proposal for proposal in stored}
    for key, candidate in wanted.items():
        proposal = existing.get(key)
        if proposal is None:
            Proposal.objects.create(**_fields(candidate, report.ruleset_version))
            report.created += 1
        elif proposal.status == Proposal.Status.OPEN:
            _update(proposal, candidate, report.ruleset_version)
            report.updated += 1
        elif _comes_back(proposal, candidate):
            _reopen(proposal)
            _update(proposal, candidate, report.ruleset_version)
            report.reopened += 1
    gone = [
        p.pk for p in existing.values()
        if p.status == Proposal.Status.OPEN and p.key not in wanted
    ]  # fmt: skip
    report.deleted = Proposal.objects.filter(pk__in=gone).delete()[0]


def _saved_chains() -> set[tuple[str, ...]]:
    """Return the tools of each saved workflow, in its steps' order."""
    chains = set()
    for definition in Workflow.objects.values_list("definition", flat=True):
        steps = definition.get("steps") if isinstance(definition, dict) else None
        if isinstance(steps, list):
            chains.add(tuple(str(s.get("tool")) for s in steps if isinstance(s, dict)))
    return chains


def _chain_of(workflow: dict[str, Any]) -> tuple[str, ...]:
    return tuple(str(step.get("tool")) for step in workflow.get("steps", []))


def _in_rules(
    candidate: Candidate, rules: dict[str, Any], saved: set[tuple[str, ...]] = frozenset()
) -> bool:
    """Return whether the rules hold the change already (or it no longer fits them).

    A workflow proposal is held already when a saved workflow runs the same tools in
    the same order: agents still running that chain by hand need the workflow, not a
    second copy of it.
    """
    if candidate.workflow is not None:
        return _chain_of(candidate.workflow) in saved
    if not candidate.ops:
        return False
    try:
        return apply_ops(rules, candidate.ops) == rules
    except ChangeError:
        return True  # mapped already, say: nothing to propose against these rules


def _comes_back(proposal: Proposal, candidate: Candidate) -> bool:
    """Return whether a decided proposal reopens now that the traffic proposes it again."""
    if proposal.status == Proposal.Status.DISMISSED:
        return len(candidate.evidence) > (proposal.dismissed_evidence or 0)
    if proposal.kind == Proposal.Kind.WORKFLOW:
        return proposal.workflow_id is None  # the saved workflow was deleted since
    return True  # applied, yet proposed again: rolled back or undone since (see _in_rules)


def _reopen(proposal: Proposal) -> None:
    """Open a decided proposal again, keeping what was decided, and what undid it, in history."""
    entry: dict[str, Any] = {
        "status": proposal.status,
        "by": _decider(proposal),
        "at": proposal.decided_at.isoformat() if proposal.decided_at else "",
        "applied_version": proposal.applied_version,
        "dismissed_evidence": proposal.dismissed_evidence,
    }
    if proposal.status == Proposal.Status.APPLIED and proposal.applied_version:
        newest = RuleSetVersion.objects.order_by("-number").only("number", "change").first()
        if newest is not None and newest.number != proposal.applied_version:
            entry["undone_by"] = {"version": newest.number, "change": newest.change}
    proposal.history = [*proposal.history, entry]
    proposal.status = Proposal.Status.OPEN
    proposal.applied_version = proposal.dismissed_evidence = None
    proposal.decided_by, proposal.decided_at, proposal.decided_via = None, None, ""


def _fields(candidate: Candidate, version: int) -> dict[str, Any]:
    """Return a Proposal's fields for a candidate."""
    return {
        "kind": candidate.kind,
        "key": candidate.key[:KEY_LENGTH],
        "title": candidate.title[:300],
        "target": candidate.target[:200],
        "why": candidate.why,
        "ops": candidate.ops,
        "workflow_definition": candidate.workflow,
        "evidence": [_evidence_entry(served) for served in candidate.evidence[:EVIDENCE_SHOWN]],
        "evidence_count": len(candidate.evidence),
        "backtest": candidate.backtest,
        "ruleset_version": version,
    }


def _update(proposal: Proposal, candidate: Candidate, version: int) -> None:
    for name, value in _fields(candidate, version).items():
        setattr(proposal, name, value)
    proposal.updated_at = timezone.now()
    proposal.save()


def _evidence_entry(served: Served) -> dict[str, Any]:
    """Return a request behind a proposal as the JSON Proposal.evidence keeps."""
    call = served.served_by()
    return {
        "trace_id": served.trace_id,
        "request": served.request,
        "at": served.at.isoformat(),
        "tools": list(served.tools),
        "served_by": call.tool if call else "",
        "chosen_by": call.chosen_by if call else "",
    }


# Deciding --------------------------------------------------------------------------------


def apply_proposal(
    pk: int, user: Any = None, seen_version: int | None = None, via: str = ""
) -> Proposal:
    """Apply an open proposal: one new rule-set version for a change, a Workflow row for a workflow.

    Raises Proposal.DoesNotExist, AlreadyDecided (applied or dismissed, by whom),
    RulesChanged (the rules moved past `seen_version`, the version the operator's page
    showed), ChangeError (the change no longer fits the rules) or WorkflowInvalid;
    each leaves everything as it was. `via` names a decider without an account (an API key).
    """
    with transaction.atomic():
        lock_proposals()
        proposal = Proposal.objects.select_for_update().get(pk=pk)
        _check_open(proposal)
        if proposal.kind == Proposal.Kind.WORKFLOW:
            proposal.workflow = _save_workflow(proposal)
        elif not proposal.ops:
            raise ChangeError(f"proposal #{proposal.pk} has no change to make")
        else:
            note = f"proposal #{proposal.pk}: {'; '.join(describe(op) for op in proposal.ops)}"
            version = apply_change(_changed_by(proposal.ops), note, user, seen_version)
            proposal.applied_version = version.number
        _decide(proposal, Proposal.Status.APPLIED, user, via)
    return proposal


def dismiss_proposal(pk: int, user: Any = None, via: str = "") -> Proposal:
    """Dismiss an open proposal: it stays away until its evidence grows past today's.

    Raises Proposal.DoesNotExist or AlreadyDecided; `via` as for apply_proposal.
    """
    with transaction.atomic():
        lock_proposals()
        proposal = Proposal.objects.select_for_update().get(pk=pk)
        _check_open(proposal)
        proposal.dismissed_evidence = proposal.evidence_count
        _decide(proposal, Proposal.Status.DISMISSED, user, via)
    return proposal


def _check_open(proposal: Proposal) -> None:
    """Raise AlreadyDecided, naming who decided and when, unless the proposal is open."""
    if proposal.status == Proposal.Status.OPEN:
        return
    who = _decider(proposal)
    when = proposal.decided_at.strftime("%Y-%m-%d %H:%M:%S UTC") if proposal.decided_at else ""
    what = {
        Proposal.Status.APPLIED: "applied",
        Proposal.Status.DISMISSED: "dismissed",
    }.get(proposal.status, proposal.status)
    result = f" as rule-set version v{proposal.applied_version}" if proposal.applied_version else ""
    if proposal.workflow_id:
        result = f" as workflow {proposal.workflow.name!r}"
    raise AlreadyDecided(
        f"Proposal #{proposal.pk} was already {what} by {who}{f' at {when}' if when else ''}"
        f"{result}. Nothing was done."
    )


def _decider(proposal: Proposal) -> str:
    """Return who decided the proposal, as a page says it."""
    if proposal.decided_by:
        return proposal.decided_by.get_username()
    return proposal.decided_via or "someone without an account"


def _decide(proposal: Proposal, status: str, user: Any, via: str = "") -> None:
    proposal.status = status
    proposal.decided_by = user if getattr(user, "pk", None) else None
    proposal.decided_via = via[:250]
    proposal.decided_at = proposal.updated_at = timezone.now()
    proposal.save()


def _changed_by(ops: list[dict[str, Any]]) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """Return the change as a function of the rules (ChangeError if it does nothing to them)."""

    def change(rules: dict[str, Any]) -> dict[str, Any]:
        changed = apply_ops(rules, ops)
        if changed == rules:
            raise ChangeError("the rules hold this change already (made by hand since?)")
        return changed

    return change


def _save_workflow(proposal: Proposal) -> Workflow:
    """Save a workflow proposal's definition as a Workflow row, under a free name."""
    definition = proposal.workflow_definition
    if not isinstance(definition, dict):
        raise WorkflowInvalid(f"proposal #{proposal.pk} has no workflow definition to save")
    workflow = Workflow(
        name=_free_name(proposal.target or f"proposal-{proposal.pk}"),
        description=f"From proposal #{proposal.pk}: {proposal.title}"[:1000],
        definition=definition,
    )
    try:
        workflow.full_clean()
    except ValidationError as exc:
        problems = "; ".join(_messages(exc))
        raise WorkflowInvalid(f"the proposed workflow does not validate: {problems}") from None
    workflow.save()
    return workflow


def _free_name(name: str) -> str:
    """Return `name`, or `name-2`, `name-3`... if a workflow has it already."""
    name = name[:90]
    taken = set(Workflow.objects.filter(name__startswith=name).values_list("name", flat=True))
    number = 1
    candidate = name
    while candidate in taken:
        number += 1
        candidate = f"{name}-{number}"
    return candidate


def _messages(error: ValidationError) -> Iterable[str]:
    if hasattr(error, "message_dict"):
        for name, messages in error.message_dict.items():
            yield from (f"{name}: {message}" for message in messages)
    else:
        yield from error.messages
