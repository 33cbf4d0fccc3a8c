"""On PostgreSQL, a trigram index for "request contains" searches (pg_trgm, a trusted extension).

Without it PostgreSQL scans every trace for `request_text ILIKE '%...%'`: 60-110 ms at
200,000 traces, and growing with them. SQLite has no such index; it keeps scanning.
"""

from django.db import migrations

INDEX = "trace_request_trgm"


def create_index(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
    # Django's icontains on PostgreSQL is UPPER(column) LIKE UPPER(pattern): index that.
    schema_editor.execute(
        f"CREATE INDEX IF NOT EXISTS {INDEX} ON traces_app_trace "
        "USING gin (UPPER(request_text) gin_trgm_ops)"
    )


def drop_index(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"DROP INDEX IF EXISTS {INDEX}")


class Migration(migrations.Migration):
    dependencies = [("traces_app", "0005_otlp_dialect_producers")]

    operations = [migrations.RunPython(create_index, drop_index)]
