"""Small helpers the benchmark scripts share."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import sql


def percentile(values: list[float], fraction: float) -> float:
    """Return the nearest-rank percentile of values (fraction 0.95 for p95)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def migrated_site(name: str, database_url: str = "") -> str:
    """Set Django up on a fresh var/ folder (and SQLite there, unless `database_url`), migrated.

    Returns the folder. For scripts that run the site's code in their own process.
    """
    workdir = tempfile.mkdtemp(prefix=f"ares-bench-{name}-")
    os.environ.update(
        DATABASE_URL=database_url or f"sqlite:///{workdir}/bench.sqlite3",
        ARES_VAR_DIR=workdir,
        DJANGO_SETTINGS_MODULE="ares_site.settings",
    )
    os.environ.setdefault("SECRET_KEY", "bench-only")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    return workdir


@contextmanager
def postgres_database(server_url: str, name: str, *, keep: bool = False) -> Iterator[str | None]:
    """Create database `name` on the server of `server_url` (unless it exists) and yield its URL.

    Yields None, after saying why, when the server is unreachable. The database is
    dropped afterwards unless `keep` is set (to reuse slow-to-build data next run).
    """
    parts = urlsplit(server_url)
    admin_url = urlunsplit(parts._replace(scheme="postgresql", path="/postgres"))
    try:
        admin = psycopg.connect(admin_url, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as exc:
        print(f"PostgreSQL at {parts.hostname}:{parts.port or 5432} is unreachable, skipped: {exc}")
        yield None
        return
    with admin:
        exists = admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone()
        if not exists:
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield urlunsplit(parts._replace(path=f"/{name}"))
    finally:
        if not keep:  # a new connection: a bench may have restarted the server meanwhile
            with psycopg.connect(admin_url, autocommit=True, connect_timeout=5) as admin:
                admin.execute(
                    sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
                )
