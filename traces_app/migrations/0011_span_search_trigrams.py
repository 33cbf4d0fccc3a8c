"""On PostgreSQL, trigram indexes for the traces page's search over spans (pg_trgm).

The search (TraceFilter.q) looks for its text in a span's error message and arguments as
well as the request: without these, PostgreSQL scans every span in the range for
`UPPER(error_message) LIKE UPPER('%...%')` and `UPPER(arguments::text) LIKE ...`, which
grows with the spans (a million and more). Tool names are matched through the rollups
and the tool index, so they need none. SQLite has no such index; it keeps scanning.

The indexes are built CONCURRENTLY, so a large existing database keeps taking spans while
they build (a plain CREATE INDEX holds a lock that blocks every write to the table for
the minutes a build takes). CONCURRENTLY cannot run inside a transaction, hence a
non-atomic migration. A concurrent build that fails (interrupted, or a deadlock) leaves
an invalid index behind, which IF NOT EXISTS would keep for good: it is dropped and built
again. Reversing drops them, concurrently too. On the span table partitioned by day
(migration 0018: this one runs again on it only when migrating back and forth) PostgreSQL
cannot build or drop an index concurrently: there it is a plain CREATE or DROP INDEX.
"""

from django.db import migrations

INDEXES = {
    # Django's icontains on PostgreSQL is UPPER(column::text) LIKE UPPER(pattern): index that.
    "inv_error_message_trgm": "UPPER(error_message::text)",
    "inv_arguments_trgm": "UPPER(arguments::text)",
}


def invalid_indexes(schema_editor, names):
    """Return those of the named indexes that a failed concurrent build left invalid."""
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(
            "SELECT class.relname FROM pg_index JOIN pg_class class ON class.oid = indexrelid "
            "WHERE class.relname = ANY(%s) AND NOT pg_index.indisvalid",
            [list(names)],
        )
        return {row[0] for row in cursor.fetchall()}


def concurrently(schema_editor):
    """Return " CONCURRENTLY", or "" for a partitioned span table (see above)."""
    with schema_editor.connection.cursor() as cursor:
        cursor.execute("SELECT relkind FROM pg_class WHERE oid = 'traces_app_invocation'::regclass")
        return "" if cursor.fetchone()[0] == "p" else " CONCURRENTLY"


def create_indexes(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
    how = concurrently(schema_editor)
    for name in invalid_indexes(schema_editor, INDEXES):
        schema_editor.execute(f"DROP INDEX{how} IF EXISTS {name}")
    for name, expression in INDEXES.items():
        schema_editor.execute(
            f"CREATE INDEX{how} IF NOT EXISTS {name} ON traces_app_invocation "
            f"USING gin (({expression}) gin_trgm_ops)"
        )


def drop_indexes(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        how = concurrently(schema_editor)
        for name in INDEXES:
            schema_editor.execute(f"DROP INDEX{how} IF EXISTS {name}")


class Migration(migrations.Migration):
    atomic = False  # CREATE INDEX CONCURRENTLY cannot run in a transaction

    dependencies = [("traces_app", "0010_invocation_tool_type_description")]

    operations = [migrations.RunPython(create_indexes, drop_indexes)]
