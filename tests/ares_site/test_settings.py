"""Settings come from the environment and refuse bad values loudly, naming the variable."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run_check(**env: str) -> subprocess.CompletedProcess:
    """Run `manage.py check` in a fresh process with these variables over a clean base."""
    base = {k: v for k, v in os.environ.items() if k not in ("SECRET_KEY", "DATABASE_URL")}
    return subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=ROOT,
        env={**base, "DEBUG": "0", "SECRET_KEY": "s", **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"DEBUG": "maybe"}, "DEBUG='maybe' is not a boolean"),
        ({"SECRET_KEY": ""}, "SECRET_KEY is not set"),
        ({"DATABASE_URL": "mysql://u:p@127.0.0.1/db"}, "only sqlite:// and postgres://"),
        ({"DATABASE_URL": "nonsense"}, "DATABASE_URL='nonsense' cannot be used"),
        ({"CELERY_BROKER_URL": "amqp://127.0.0.1"}, "CELERY_BROKER_URL='amqp://127.0.0.1' must"),
        ({"SQLITE_TIMEOUT": "soon"}, "SQLITE_TIMEOUT='soon' is not an integer"),
        ({"ARES_INGEST_MAX_ITEMS": "0"}, "ARES_INGEST_MAX_ITEMS=0 is below the minimum"),
        ({"LOG_LEVEL": "LOUD"}, "LOG_LEVEL='LOUD' must be"),
        ({"ARES_HTTP_ALLOWED_NETWORKS": "10.0.0.0/33"}, "ARES_HTTP_ALLOWED_NETWORKS has '10.0"),
        ({"ARES_SEARXNG_URL": "searx.local"}, "ARES_SEARXNG_URL='searx.local' must be"),
        ({"ARES_ROUTER_MIN_SCORE": "high"}, "ARES_ROUTER_MIN_SCORE='high' is not a number"),
        ({"ARES_ROUTER_COMBINATION": "sum"}, "ARES_ROUTER_COMBINATION='sum' is not one of"),
        ({"ARES_ROUTER_BACKEND": "embeddings"}, "needs ARES_ROUTER_EMBEDDING_MODEL"),
    ],
)
def test_it_refuses_to_start_with_a_bad_value(env: dict[str, str], message: str) -> None:
    result = run_check(**env)
    assert result.returncode != 0
    assert message in result.stderr


def test_it_starts_in_debug_without_a_secret_key() -> None:
    result = run_check(SECRET_KEY="", DEBUG="1")
    assert result.returncode == 0, result.stderr
    assert "no issues" in result.stdout


def test_it_reads_a_postgres_database_url() -> None:
    code = (
        "from django.conf import settings; d = settings.DATABASES['default']; "
        "print(d['ENGINE'], d['NAME'], d['HOST'], d['PORT'])"
    )
    result = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", code],
        cwd=ROOT,
        env={**os.environ, "SECRET_KEY": "s", "DATABASE_URL": "postgres://u:p@db.local:6543/ares"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "django.db.backends.postgresql ares db.local 6543" in result.stdout, result.stderr
