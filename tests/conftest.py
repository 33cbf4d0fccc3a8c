"""Shared fixtures: API keys, a real HTTP client on the live server, valid spans."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.conf import settings
from django.test import override_settings

from traces_app.models import ApiKey

# The fixtures through which a test reaches the database (directly or through others: a
# test's fixturenames hold every fixture it depends on).
DATABASE_FIXTURES = frozenset(
    {"db", "transactional_db", "django_db_reset_sequences", "django_db_serialized_rollback",
     "live_server", "admin_user", "admin_client", "django_user_model"}
)  # fmt: skip


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """With ARES_TESTS_DATABASE_ONLY=1, leave out the tests that never reach a database.

    CI runs the suite on SQLite and on PostgreSQL side by side; a test without database
    access (pytest-django refuses it any in this process) gives the same answer in both, so
    the PostgreSQL pass runs only the others. A test that starts a process on the run's
    database without a database fixture carries the `each_database` mark instead.
    """
    if os.environ.get("ARES_TESTS_DATABASE_ONLY") != "1":
        return
    kept, left_out = [], []
    for item in items:
        reaches = (
            item.get_closest_marker("django_db") is not None
            or item.get_closest_marker("each_database") is not None
            or not DATABASE_FIXTURES.isdisjoint(getattr(item, "fixturenames", ()))
        )
        (kept if reaches else left_out).append(item)
    if left_out:
        config.hook.pytest_deselected(items=left_out)
        items[:] = kept


@pytest.fixture(scope="session", autouse=True)
def quick_password_hashing() -> Iterator[None]:
    """Hash the test users' passwords at one PBKDF2 iteration instead of a million.

    Every admin_client, staff page and login made a user with a password, at about half a
    second of hashing each (a second for a login through the form, which checks it too).
    """
    quick = "tests.quick_hasher.QuickPBKDF2PasswordHasher"
    with override_settings(PASSWORD_HASHERS=[quick, *settings.PASSWORD_HASHERS]):
        yield


@pytest.fixture(scope="session", autouse=True)
def stop_the_engine_last(django_db_setup: None, django_db_blocker: Any) -> Iterator[None]:
    """Stop the site's tool engine before the test database is dropped.

    Its recording threads hold database connections, which would keep PostgreSQL from
    dropping the test database.
    """
    yield
    from tools_app import site_engine

    with django_db_blocker.unblock():
        site_engine.shutdown()


@pytest.fixture(autouse=True)
def fresh_site_history() -> Iterator[None]:
    """Start every test with the router's outcome history unloaded: the last test's
    outcomes went with its database, and the next use reloads from this one's."""
    from planner_app.discovery.site_history import reset_site_history

    reset_site_history()
    yield
    reset_site_history()


@pytest.fixture
def make_key(transactional_db: None) -> Callable[..., str]:
    """Return a function that issues an API key with the given scopes and returns it raw."""

    def make(*scopes: str, name: str = "test agent") -> str:
        return ApiKey.objects.issue(name, scopes or ("report", "read"))[1]

    return make


@pytest.fixture
def api(live_server: Any, make_key: Callable[..., str]) -> Iterator[httpx.Client]:
    """An HTTP client for the live server's /api/v1/, holding a report+read key."""
    headers = {"Authorization": f"Bearer {make_key('report', 'read')}"}
    with httpx.Client(base_url=f"{live_server.url}/api/v1", headers=headers, timeout=30) as client:
        yield client


@pytest.fixture
def anonymous_api(live_server: Any) -> Iterator[httpx.Client]:
    """An HTTP client for the live server's /api/v1/ with no credentials."""
    with httpx.Client(base_url=f"{live_server.url}/api/v1", timeout=30) as client:
        yield client


def make_span(**overrides: Any) -> dict[str, Any]:
    """Return a valid tool span in the ingest API's JSON shape, with fresh ids."""
    span = {
        "trace_id": secrets.token_hex(16),
        "span_id": secrets.token_hex(8),
        "kind": "tool",
        "tool_name": "calculator",
        "tool_call_id": "call_1",
        "chosen_by": "llm",
        "ran_on": "builtin",
        "agent": "math-tutor",
        "arguments": {"expression": "1+1"},
        "result": {"value": 2},
        "status": "ok",
        "started_at": (datetime.now(UTC) - timedelta(minutes=5)).isoformat(),
        "latency_ms": 3.5,
        "result_tokens": 4,
    }
    span.update(overrides)
    return span


@pytest.fixture
def span() -> Callable[..., dict[str, Any]]:
    """Return the valid-span factory."""
    return make_span


ROOT = Path(__file__).resolve().parents[1]


def subprocess_database_url() -> str:
    """Return a DATABASE_URL that points another process at this test run's database."""
    db = settings.DATABASES["default"]
    if db["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{db['NAME']}"
    return f"postgres://{db['USER']}:{db['PASSWORD']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"


def subprocess_env(**extra: str) -> dict[str, str]:
    """Return the environment for a process of the site that shares the test database."""
    return {
        **os.environ,
        "DATABASE_URL": subprocess_database_url(),
        "SECRET_KEY": "tests-only-secret",
        "DEBUG": "0",
        "ARES_VAR_DIR": str(settings.VAR_DIR),
        **extra,
    }


@pytest.fixture
def redis_worker(transactional_db: None) -> Iterator[tuple[str, str]]:
    """Start a real Celery worker on a private queue of a real Redis; yield (broker, queue)."""
    from ares_site.celery import app as celery_app

    broker = os.environ.get("CELERY_TEST_BROKER_URL")
    if not broker:
        pytest.skip("set CELERY_TEST_BROKER_URL=redis://... to run against a real broker")
    queue = f"test-{uuid.uuid4().hex[:8]}"
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "ares_site", "worker", "--pool=solo", "-Q", queue,
         "--without-gossip", "--without-mingle", "--without-heartbeat", "--loglevel=INFO"],
        cwd=ROOT, env=subprocess_env(CELERY_BROKER_URL=broker), stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    celery_app.conf.task_always_eager = False
    try:
        yield broker, queue
    finally:
        celery_app.conf.task_always_eager = settings.CELERY_TASK_ALWAYS_EAGER
        worker.terminate()
        output, _ = worker.communicate(timeout=30)
        print(output[-4000:])
