"""Background work of traces_app. Thin tasks: take ids, call model methods."""

from __future__ import annotations

from celery import shared_task

from traces_app.models import Trace


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
