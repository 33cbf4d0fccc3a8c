"""Migration 0011: the span search's trigram indexes, built without blocking writes (PostgreSQL)."""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection
from django.db.migrations.loader import MigrationLoader

pytestmark = pytest.mark.django_db(transaction=True)

NAME = ("traces_app", "0011_span_search_trigrams")
module = importlib.import_module("traces_app.migrations.0011_span_search_trigrams")
on_postgresql = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="PostgreSQL's indexes (DATABASE_URL=postgres://...)"
)


def how() -> str:
    """Return how the migration builds: concurrently, but on a span table partitioned by
    day (migration 0018, so PostgreSQL in these tests), where PostgreSQL cannot."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT relkind FROM pg_class WHERE oid = 'traces_app_invocation'::regclass")
        return "" if cursor.fetchone()[0] == "p" else " CONCURRENTLY"


def run(direction: str) -> list[tuple[str, bool]]:
    """Apply or unapply 0011 as the executor does; return each statement and whether it ran
    inside a transaction."""
    loader = MigrationLoader(connection)
    migration = loader.get_migration(*NAME)
    state = loader.project_state(NAME, at_end=False)
    statements: list[tuple[str, bool]] = []

    def watch(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        statements.append((sql, connection.in_atomic_block))
        return execute(sql, params, many, context)

    editing = connection.schema_editor(atomic=migration.atomic)
    with connection.execute_wrapper(watch), editing as editor:
        if direction == "forwards":
            migration.apply(state, editor)
        else:
            migration.unapply(loader.project_state(NAME), editor)
    return statements


def indexes() -> dict[str, bool]:
    """Return the migration's indexes that exist, with whether each is valid."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT class.relname, pg_index.indisvalid FROM pg_index "
            "JOIN pg_class class ON class.oid = indexrelid WHERE class.relname = ANY(%s)",
            [list(module.INDEXES)],
        )
        return dict(cursor.fetchall())


@pytest.fixture
def indexes_built() -> Iterator[None]:
    yield
    run("forwards")  # whatever a test did, the database keeps its indexes


@on_postgresql
def test_it_builds_the_indexes_concurrently_outside_a_transaction(indexes_built: None) -> None:
    run("backwards")
    assert indexes() == {}
    statements = run("forwards")
    creates = [(sql, atomic) for sql, atomic in statements if sql.startswith("CREATE INDEX")]
    assert len(creates) == 2
    for sql, in_transaction in creates:
        assert sql.startswith(f"CREATE INDEX{how()} IF NOT EXISTS"), sql
        assert not in_transaction, sql
    assert indexes() == {"inv_error_message_trgm": True, "inv_arguments_trgm": True}


@on_postgresql
def test_it_does_nothing_to_indexes_that_are_there(indexes_built: None) -> None:
    run("forwards")
    statements = run("forwards")
    assert not any(sql.startswith("DROP") for sql, _ in statements)
    assert indexes() == {"inv_error_message_trgm": True, "inv_arguments_trgm": True}


@on_postgresql
def test_it_rebuilds_an_index_a_failed_concurrent_build_left_invalid(indexes_built: None) -> None:
    run("forwards")
    with connection.cursor() as cursor:  # what an interrupted CREATE INDEX CONCURRENTLY leaves
        cursor.execute(
            "UPDATE pg_index SET indisvalid = false WHERE indexrelid = "
            "'inv_arguments_trgm'::regclass"
        )
    assert indexes()["inv_arguments_trgm"] is False
    statements = run("forwards")
    assert (f"DROP INDEX{how()} IF EXISTS inv_arguments_trgm", False) in statements
    assert indexes() == {"inv_error_message_trgm": True, "inv_arguments_trgm": True}


@on_postgresql
def test_reversing_it_drops_the_indexes_concurrently(indexes_built: None) -> None:
    statements = run("backwards")
    drops = [sql for sql, atomic in statements if sql.startswith("DROP INDEX") and not atomic]
    assert drops == [f"DROP INDEX{how()} IF EXISTS {name}" for name in module.INDEXES]
    assert indexes() == {}


@pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite only")
def test_it_changes_nothing_on_sqlite() -> None:
    for direction in ("backwards", "forwards"):
        # The schema editor's own PRAGMAs around any migration, and nothing else.
        assert [sql for sql, _ in run(direction) if not sql.startswith("PRAGMA")] == []
