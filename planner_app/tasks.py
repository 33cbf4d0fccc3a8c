"""Background work of planner_app. Thin tasks: take ids, call a plain function."""

from __future__ import annotations

from celery import shared_task

from planner_app.workflows.runs import execute_run


@shared_task
def run_workflow_task(run_pk: int) -> None:
    """Run a saved workflow (long ones belong on a worker); progress is saved on the run."""
    execute_run(run_pk)
