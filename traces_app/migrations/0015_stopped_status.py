"""Stopped spans: a status of their own (issue 22), counted apart from failures."""

from datetime import UTC

from django.db import migrations, models
from django.db.models import Count, Q
from django.db.models.functions import Trunc

# How a stop was recorded before it had a status of its own: error / cancelled, with the
# message of agents.stopping.STOPPED_BY or one ending like tools_app.engine's stop messages.
STOP_MESSAGE = "stopped by its caller"
STOP_ENDING = "the task was stopped"


def mark_old_stops_stopped(apps, schema_editor):
    """Give the spans a user's Stop ended their own status, and recount what counted them.

    Their traces' totals are recounted here; their hours get rollup marks, so the next
    recount (a page, the beat, check_rollups) counts them again from the raw spans.
    """
    Invocation = apps.get_model("traces_app", "Invocation")
    Trace = apps.get_model("traces_app", "Trace")
    RollupMark = apps.get_model("traces_app", "RollupMark")
    stops = Invocation.objects.filter(status="error", error_kind="cancelled").filter(
        Q(error_message=STOP_MESSAGE) | Q(error_message__endswith=STOP_ENDING)
    )
    hours = set(
        stops.annotate(hour=Trunc("started_at", "hour", tzinfo=UTC))
        .values_list("hour", "kind", "tool_name")
        .distinct()
        .order_by()
    )
    trace_ids = set(stops.values_list("trace_id", flat=True).distinct().order_by())
    if not trace_ids:
        return
    stops.update(status="stopped")
    for trace in Trace.objects.filter(pk__in=trace_ids).iterator(chunk_size=500):
        counts = Invocation.objects.filter(trace_id=trace.pk).aggregate(
            failed=Count("pk", filter=Q(status="error")),
            stopped=Count("pk", filter=Q(status="stopped")),
        )
        trace.failed_calls, trace.stopped_calls = counts["failed"], counts["stopped"]
        trace.status = "error" if trace.failed_calls else "stopped" if trace.stopped_calls else "ok"
        trace.save(update_fields=["failed_calls", "stopped_calls", "status"])
    # Any mark recounts its hour's span rollups; a tool's mark its tool rollup too.
    marks = {(hour, tool if kind == "tool" else "") for hour, kind, tool in hours}
    RollupMark.objects.bulk_create(
        [RollupMark(bucket_start=hour, tool_name=tool) for hour, tool in marks], batch_size=1000
    )


class Migration(migrations.Migration):
    dependencies = [
        ("traces_app", "0014_spiral_resolution_repeated"),
    ]

    operations = [
        migrations.AddField(
            model_name="spanrollup",
            name="stopped",
            field=models.PositiveIntegerField(
                default=0, help_text="Spans stopped by their caller: not failures"
            ),
        ),
        migrations.AddField(
            model_name="toolrollup",
            name="stopped",
            field=models.PositiveIntegerField(
                default=0, help_text="Calls stopped by their caller: neither successes nor failures"
            ),
        ),
        migrations.AddField(
            model_name="trace",
            name="stopped_calls",
            field=models.PositiveIntegerField(
                db_default=0,
                default=0,
                help_text="Spans ended by their caller's stop: not failures",
            ),
        ),
        migrations.AlterField(
            model_name="invocation",
            name="status",
            field=models.CharField(
                choices=[("ok", "OK"), ("error", "Error"), ("stopped", "Stopped")], max_length=8
            ),
        ),
        migrations.AlterField(
            model_name="trace",
            name="status",
            field=models.CharField(
                choices=[("ok", "OK"), ("error", "Has failures"), ("stopped", "Stopped")],
                default="ok",
                max_length=16,
            ),
        ),
        migrations.RunPython(mark_old_stops_stopped, migrations.RunPython.noop),
    ]
