"""Shared fixtures: API keys, a real HTTP client on the live server, valid spans."""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from traces_app.models import ApiKey


@pytest.fixture(scope="session", autouse=True)
def stop_the_engine_last(django_db_setup: None, django_db_blocker: Any) -> Iterator[None]:
    """Stop the site's tool engine before the test database is dropped.

    Its recording threads hold database connections, which would keep PostgreSQL from
    dropping the test database.
    """
    yield
    from tools_app import runtime

    with django_db_blocker.unblock():
        runtime.shutdown()


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
