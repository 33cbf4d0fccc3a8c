"""On PostgreSQL, trigram indexes for the traces page's search over spans (pg_trgm).

The search (TraceFilter.q) looks for its text in a span's error message and arguments as
well as the request: without these, PostgreSQL scans every span in the range for
`UPPER(error_message) LIKE UPPER('%...%')` and `UPPER(arguments::text) LIKE ...`, which
grows with the spans (a million and more). Tool names are matched through the rollups
and the tool index, so they need none. SQLite has no such index; it keeps scanning.
"""

from django.db import migrations

INDEXES = {
    # Django's icontains on PostgreSQL is UPPER(column::text) LIKE UPPER(pattern): index that.
    "inv_error_message_trgm": "UPPER(error_message::text)",
    "inv_arguments_trgm": "UPPER(arguments::text)",
}


def create_indexes(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
    for name, expression in INDEXES.items():
        schema_editor.execute(
            f"CREATE INDEX IF NOT EXISTS {name} ON traces_app_invocation "
            f"USING gin (({expression}) gin_trgm_ops)"
        )


def drop_indexes(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        for name in INDEXES:
            schema_editor.execute(f"DROP INDEX IF EXISTS {name}")


class Migration(migrations.Migration):
    dependencies = [("traces_app", "0010_invocation_tool_type_description")]

    operations = [migrations.RunPython(create_indexes, drop_indexes)]
