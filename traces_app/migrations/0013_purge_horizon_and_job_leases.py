"""Job leases for periodic work, and the purge horizon that freezes rollups of purged hours.

A database purged before the horizon existed gets one: rollups of hours before its oldest
raw span (or, with no span left, all of them) are kept as they are from now on.
"""

import datetime

from django.db import migrations, models


def horizon_of_earlier_purges(apps, schema_editor):  # noqa: ANN001, ANN201 - Django's signature
    Invocation = apps.get_model("traces_app", "Invocation")
    ToolRollup = apps.get_model("traces_app", "ToolRollup")
    SpanRollup = apps.get_model("traces_app", "SpanRollup")
    oldest = Invocation.objects.aggregate(oldest=models.Min("started_at"))["oldest"]
    if oldest is not None:
        horizon = oldest.astimezone(datetime.UTC).replace(minute=0, second=0, microsecond=0)
    else:
        newest = [
            rollups.objects.aggregate(newest=models.Max("bucket_start"))["newest"]
            for rollups in (ToolRollup, SpanRollup)
        ]
        newest = [moment for moment in newest if moment is not None]
        if not newest:
            return
        horizon = max(newest) + datetime.timedelta(hours=1)
    older = {"bucket_start__lt": horizon}
    if ToolRollup.objects.filter(**older).exists() or SpanRollup.objects.filter(**older).exists():
        apps.get_model("traces_app", "PurgeHorizon").objects.create(pk=1, raw_spans_from=horizon)


class Migration(migrations.Migration):
    dependencies = [
        ("traces_app", "0012_scores"),
    ]

    operations = [
        migrations.CreateModel(
            name="JobLease",
            fields=[
                ("job", models.CharField(max_length=100, primary_key=True, serialize=False)),
                (
                    "period_start",
                    models.DateTimeField(
                        default=datetime.datetime(1970, 1, 1, 0, 0, tzinfo=datetime.UTC),
                        help_text="The last period taken",
                    ),
                ),
                (
                    "holder",
                    models.CharField(blank=True, help_text="host:pid that took it", max_length=200),
                ),
                (
                    "taken_at",
                    models.DateTimeField(
                        default=datetime.datetime(1970, 1, 1, 0, 0, tzinfo=datetime.UTC)
                    ),
                ),
                (
                    "expires_at",
                    models.DateTimeField(
                        default=datetime.datetime(1970, 1, 1, 0, 0, tzinfo=datetime.UTC),
                        help_text="Until then its holder is presumed running; released when done",
                    ),
                ),
            ],
        ),
        migrations.CreateModel(
            name="PurgeHorizon",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "raw_spans_from",
                    models.DateTimeField(help_text="Spans started before this were purged"),
                ),
            ],
        ),
        migrations.RunPython(horizon_of_earlier_purges, migrations.RunPython.noop),
    ]
