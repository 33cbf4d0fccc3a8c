"""Background work of traces_app. Thin tasks: take ids, call model methods."""

from __future__ import annotations

import os
import socket
from datetime import timedelta
from typing import Any

from celery import shared_task
from celery.utils.log import get_task_logger
from django.conf import settings
from django.db import close_old_connections
from django.utils import timezone

from traces_app.models import JobLease, Trace
from traces_app.partitions.conversion import convert
from traces_app.partitions.layout import ensure_days_ahead
from traces_app.rollups.recount import recount_all_marked_rollups
from traces_app.rollups.retention import purge_past_retention
from traces_app.scores.judgements import settle_pending_scores
from traces_app.spirals.scanning import rescan_spirals

logger = get_task_logger(__name__)


@shared_task(bind=True, max_retries=3, default_retry_delay=5)
def recompute_trace_totals_task(self, trace_id: str) -> None:  # noqa: ANN001 - Celery's task
    """Recount a trace's totals from its stored spans."""
    trace = Trace.objects.filter(pk=trace_id).first()
    if trace is None:
        return
    try:
        trace.recompute_totals()
    except Exception as exc:  # retry transient database errors; Celery logs the final one
        raise self.retry(exc=exc) from exc


@shared_task(bind=True, max_retries=3, default_retry_delay=5)
def recount_rollups_task(self) -> int:  # noqa: ANN001 - Celery's task
    """Recount the rollups of every marked bucket (see models.RollupMark); return the marks."""
    try:
        return recount_all_marked_rollups()
    except Exception as exc:  # retry transient database errors; Celery logs the final one
        raise self.retry(exc=exc) from exc


@shared_task
def purge_past_retention_task() -> tuple[int, int, int]:
    """Delete spans and traces older than ARES_RETENTION_DAYS; return (spans, traces, scores)."""
    purged = purge_past_retention()
    return purged.spans, purged.traces, purged.scores


@shared_task
def maintain_span_partitions_task() -> dict[str, Any]:
    """Make the coming days' span partitions, and move on a conversion still copying.

    PostgreSQL only (partitions/): a table from before migration 0018 is copied into
    partitions ARES_PARTITION_COPY_S seconds per run, ingest going on meanwhile.
    """
    made = ensure_days_ahead(timezone.now().date())
    state = convert(budget_s=settings.ARES_PARTITION_COPY_S)
    if state.state == "copying":
        logger.info("span partitions: copied %d of %d spans", state.copied, state.to_copy)
    return {"made": made, "conversion": state.state, "percent": state.percent}


RECENT_SPIRAL_WINDOW = timedelta(minutes=2)


@shared_task
def rescan_spirals_task() -> int:
    """Re-detect spirals in traces that received tool calls lately (see rescan_spirals)."""
    return rescan_spirals(timezone.now() - RECENT_SPIRAL_WINDOW)


@shared_task
def settle_scores_task() -> tuple[int, int]:
    """Join scores whose span has arrived; drop those that waited too long."""
    return settle_pending_scores()


def _holder() -> str:
    """Return who takes a lease: this host and process (a prefork worker's own pid)."""
    return f"{socket.gethostname()}:{os.getpid()}"


@shared_task(bind=True)
def periodic_job_task(self, job: str) -> Any:  # noqa: ANN001 - Celery's task
    """Run a periodic job (settings.ARES_PERIODIC_JOBS) unless another process has its period.

    The beat sends this every half period of each job: without a broker it runs in the
    beat process, with one on a worker. The job's task runs here, inline, while the
    lease is held.
    """
    task_name, every_s = settings.ARES_PERIODIC_JOBS[job]
    close_old_connections()  # as a request does: the beat holds its connection for days
    holder = _holder()
    period = JobLease.objects.take(job, every_s, holder)
    if period is None:
        logger.debug("periodic job %s: this period is taken already", job)
        return None
    try:
        result = self.app.tasks[task_name]()
        logger.info(
            "periodic job %s ran for the period from %s: %s", job, period.isoformat(), result
        )
        return result
    finally:
        JobLease.objects.release(job, period, holder)
        close_old_connections()
