"""Background work of planner_app. Thin tasks: take ids, call a plain function.

start_run lives here, beside the task it enqueues: the runs module stays below this one,
so imports point one way (tasks -> workflows.runs).
"""

from __future__ import annotations

import secrets

from celery import shared_task
from django.db import transaction

from planner_app.models import Workflow, WorkflowRun
from planner_app.proposals.store import refresh_proposals
from planner_app.rules_guard import guard_newest_version
from planner_app.workflows.workflow_runs import execute_run


@shared_task
def refresh_proposals_task() -> str:
    """Mine the recorded traffic for proposals again (the periodic job refresh-proposals)."""
    return str(refresh_proposals())


@shared_task
def guard_rule_versions_task() -> str:
    """Judge the newest rule-set version; roll it back if it did worse (rules_guard)."""
    verdict = guard_newest_version()
    return "the guard is off" if verdict is None else f"v{verdict.version}: {verdict.decision}"


@shared_task
def evaluate_monitors_task() -> str:
    """Evaluate every enabled monitor (the periodic job evaluate-monitors)."""
    from planner_app.monitors.evaluation import evaluate_monitors

    return str(evaluate_monitors())


@shared_task
def deliver_notifications_task() -> int:
    """Send the notifications that are due, retries included (deliver-notifications)."""
    from planner_app.monitors.notify.delivery import deliver_due

    return deliver_due()


@shared_task
def run_workflow_task(run_pk: int) -> None:
    """Run a saved workflow (long ones belong on a worker); progress is saved on the run."""
    execute_run(run_pk)


def start_run(workflow: Workflow, *, background: bool) -> WorkflowRun:
    """Create a run and execute it now, or hand it to a Celery worker after the commit."""
    run = WorkflowRun.objects.create(workflow=workflow, trace_id=secrets.token_hex(16))
    if background:
        transaction.on_commit(lambda: run_workflow_task.delay(run.pk))
    else:
        execute_run(run.pk)
        run.refresh_from_db()
    return run
