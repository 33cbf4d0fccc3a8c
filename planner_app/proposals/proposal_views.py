"""The Proposals pages: the list with filters, one proposal with its evidence and backtest,
and the staff's posts that apply, dismiss or refresh them."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from django.contrib import messages
from django.contrib.admin.views.decorators import staff_member_required
from django.db import transaction
from django.db.models import Count
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from planner_app.models import Proposal
from planner_app.proposals import decisions
from planner_app.proposals.changes import describe

STATUSES = ("open", "applied", "dismissed", "all")
KINDS = ("", *Proposal.Kind.values)
PER_PAGE = 100
NO_VERSION = (
    "The page did not say which rule-set version it showed: reload it, check the backtest, "
    "and apply again. Nothing was applied."
)
# The backtest's labels, in the direction they read: what the change makes the planner
# plan, what it breaks (the LLM is needed again), and plans it alters otherwise.
BACKTEST_LABELS = [
    ("newly_planned", "newly_planned_count", "Newly planned",
     "need the LLM today; planned with the change"),
    ("newly_needs_llm", "newly_needs_llm_count", "Newly need the LLM",
     "planned today; the change breaks them"),
    ("changed", "other_changes_count", "Planned differently",
     "planned both ways, with other steps, tools or arguments"),
]  # fmt: skip


@staff_member_required
@require_GET
def proposals(request: HttpRequest) -> HttpResponse:
    """List proposals, the most supported first, filtered by status (open by default) and kind."""
    status, kind = request.GET.get("status", "open"), request.GET.get("kind", "")
    problems = _filter_problems(status, kind)
    if problems:
        status, kind = "open", ""
    rows = Proposal.objects.order_by(f"-{decisions.BY_SUPPORT.field}", "-pk")
    if status != "all":
        rows = rows.filter(status=status)
    if kind:
        rows = rows.filter(kind=kind)
    context = {
        "rows": [_row(p) for p in rows[: PER_PAGE + 1]],
        "status": status,
        "kind": kind,
        "status_options": _status_options(),
        "kinds": KINDS,
        "problems": problems,
        "per_page": PER_PAGE,
    }
    context["more"] = len(context["rows"]) > PER_PAGE
    context["rows"] = context["rows"][:PER_PAGE]
    return render(request, "planner_app/proposals.html", context, status=400 if problems else 200)


@staff_member_required
@require_GET
def proposal_detail(request: HttpRequest, pk: int) -> HttpResponse:
    """Show one proposal: why, the change, its backtest, the requests behind it, the buttons."""
    return _detail(request, pk)


@staff_member_required
@require_POST
def proposal_apply(request: HttpRequest, pk: int) -> HttpResponse:
    """Apply the proposal, if the rules are still those the page showed."""
    seen = request.POST.get("seen_version", "")
    if not seen.isdigit():
        return _detail(request, pk, NO_VERSION)
    try:
        proposal = decisions.apply(pk, decisions.acting_user(request), int(seen))
    except decisions.Refused as exc:
        return _detail(request, pk, str(exc), status=exc.status)
    messages.success(request, _applied_message(proposal))
    return redirect("proposal-detail", pk=proposal.pk)


@staff_member_required
@require_POST
def proposal_dismiss(request: HttpRequest, pk: int) -> HttpResponse:
    """Dismiss the proposal: it stays away unless its evidence grows."""
    try:
        proposal = decisions.dismiss(pk, decisions.acting_user(request))
    except decisions.Refused as exc:
        return _detail(request, pk, str(exc), status=exc.status)
    messages.success(request, f"Dismissed: {proposal.title}.")
    return redirect("proposal-detail", pk=proposal.pk)


@staff_member_required
@require_POST
def proposals_refresh(request: HttpRequest) -> HttpResponse:
    """Mine the recorded traffic for proposals now, rather than at the next periodic run.

    With Celery workers the refresh is theirs (mining thousands of requests takes longer
    than a page should); on the default setup, without a broker, it runs here.
    """
    from planner_app.tasks import refresh_proposals_task

    if refresh_proposals_task.app.conf.task_always_eager:
        messages.success(request, f"Proposals refreshed: {decisions.refresh()}.")
    else:
        transaction.on_commit(refresh_proposals_task.delay)
        messages.success(request, "A refresh is queued for a worker: reload this page shortly.")
    return redirect(reverse("proposals"))


def _filter_problems(status: str, kind: str) -> list[str]:
    problems = []
    if status not in STATUSES:
        problems.append(f"There is no status “{status}”: choose one of {', '.join(STATUSES)}.")
    if kind not in KINDS:
        problems.append(f"There is no kind “{kind}”: choose one of {', '.join(KINDS[1:])}.")
    return problems


def _status_options() -> list[tuple[str, int]]:
    """Return each status filter with how many proposals it shows."""
    rows = Proposal.objects.order_by().values_list("status").annotate(n=Count("pk"))
    counts = dict(rows)
    return [(s, counts.get(s, 0) if s != "all" else sum(counts.values())) for s in STATUSES]


def _row(proposal: Proposal) -> dict[str, Any]:
    return {"proposal": proposal, "counts": decisions.backtest_counts(proposal)}


def _detail(request: HttpRequest, pk: int, error: str = "", status: int = 200) -> HttpResponse:
    """Render proposal `pk` (or say it is gone), with an error from a refused post."""
    seen = decisions.current_version()  # read before the row: a stale page is never fresh
    proposal = decisions.find(pk)
    if proposal is None:
        message = f"There is no proposal #{pk}: a refresh removes open proposals the traffic no "
        message += "longer supports."
        context = {"message": message}
        return render(request, "planner_app/proposal_missing.html", context, status=404)
    context = {
        "proposal": proposal,
        "change": decisions.described(proposal),
        "counts": decisions.backtest_counts(proposal),
        "ops_described": [describe(op) for op in proposal.ops],
        "labelled": _labelled(proposal),
        "other_lists": _other_lists(proposal),
        "workflow_json": _as_json(proposal.workflow_definition),
        "seen_version": seen,
        "error": error,
        "evidence_shown": len(proposal.evidence),
        "evidence_rows": [{**item, "at": _moment(item.get("at"))} for item in proposal.evidence],
    }
    if error and status == 200:
        status = 400
    return render(request, "planner_app/proposal_detail.html", context, status=status)


def _labelled(proposal: Proposal) -> list[dict[str, Any]]:
    """Return the backtest's examples per label, with their counts, for rule and mapping ones."""
    backtest = proposal.backtest or {}
    return [
        {
            "key": key,
            "title": title,
            "meaning": meaning,
            "count": backtest.get(count, len(backtest[key])),
            "entries": backtest[key],
        }
        for key, count, title, meaning in BACKTEST_LABELS
        if isinstance(backtest.get(key), list)
    ]


def _other_lists(proposal: Proposal) -> list[tuple[str, list[str]]]:
    """Return a workflow backtest's lists (the traces, the problems) as lines of text."""
    labelled = {key for key, *_ in BACKTEST_LABELS}
    return [
        (
            name,
            [
                item if isinstance(item, str) else json.dumps(item, ensure_ascii=False)
                for item in items
            ],
        )  # fmt: skip
        for name, items in (proposal.backtest or {}).items()
        if isinstance(items, list) and name not in labelled
    ]


def _moment(text: Any) -> str:
    """Return an evidence entry's ISO moment as the pages show times (UTC, to the second)."""
    try:
        moment = datetime.fromisoformat(str(text))
    except ValueError:
        return str(text or "")
    if moment.tzinfo is not None:
        moment = moment.astimezone(UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S")


def _as_json(value: Any) -> str:
    if value is None:
        return ""
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)


def _applied_message(proposal: Proposal) -> str:
    if proposal.workflow_id:
        return f"Applied: saved workflow {proposal.workflow}."
    return f"Applied: the rules are now v{proposal.applied_version}."
