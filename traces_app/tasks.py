"""Background work of traces_app. Thin tasks: take ids, call model methods."""

from __future__ import annotations

from datetime import timedelta

from celery import shared_task
from django.utils import timezone

from traces_app.models import Trace, purge_old_invocations, recount_all_marked_rollups
from traces_app.scores import settle_pending_scores
from traces_app.spiral_detection import rescan_spirals


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
def purge_invocations_task() -> int:
    """Delete raw spans older than ARES_RETENTION_DAYS; rollups stay."""
    return purge_old_invocations()


RECENT_SPIRAL_WINDOW = timedelta(minutes=2)


@shared_task
def rescan_spirals_task() -> int:
    """Re-detect spirals in traces that received tool calls lately (see rescan_spirals)."""
    return rescan_spirals(timezone.now() - RECENT_SPIRAL_WINDOW)


@shared_task
def settle_scores_task() -> tuple[int, int]:
    """Join scores whose span has arrived; drop those that waited too long."""
    return settle_pending_scores()
