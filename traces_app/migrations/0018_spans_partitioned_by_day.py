"""On PostgreSQL, the span table becomes partitioned by day (traces_app/partitions/).

An empty or small table is converted here. A larger one is only started here (the
partitioned copy and its triggers: ingest goes on), and copied in batches by the periodic
work or at once by `manage.py partition_spans`. Django's model state is unchanged: the
layout is the database's business (see partitions/layout.py for how the keys differ).
"""

from django.conf import settings
from django.db import migrations


def partition_spans(apps, schema_editor) -> None:  # noqa: ANN001 - Django's signature
    if schema_editor.connection.vendor != "postgresql":
        return
    from traces_app.partitions import conversion

    # Above this many spans, copying them all would hold `migrate` up: left to the batches.
    up_to = settings.ARES_PARTITION_IN_MIGRATION_UP_TO
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM (SELECT 1 FROM traces_app_invocation LIMIT %s) AS spans",
            [up_to + 1],
        )
        spans = cursor.fetchone()[0]
    if spans <= up_to:
        conversion.convert()
        return
    conversion.start()
    print(
        f"\n  More than {up_to:,} spans: they are copied into daily partitions "
        "in batches by the periodic work (ingest goes on), or at once by "
        "`manage.py partition_spans`."
    )


class Migration(migrations.Migration):
    atomic = False  # the copy commits batch by batch

    dependencies = [("traces_app", "0017_result_reduction_and_session_index")]

    operations = [migrations.RunPython(partition_spans, migrations.RunPython.noop, elidable=False)]
