"""POST /v1/traces under pressure: 503 when the database is down, 429 when it is busy.

Both carry Retry-After, so exporters retry later, and a google.rpc.Status saying why.
The servers are the production one (gunicorn) in its own process.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from django.conf import settings
from google.rpc.status_pb2 import Status as RpcStatus
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from tests.conftest import subprocess_env
from tests.traces_app import test_unavailable_db
from tests.traces_app.test_unavailable_db import RAW_KEY, gunicorn_client
from traces_app.models import Invocation

down = test_unavailable_db.down  # the fixture: gunicorn with a database out of reach

PROTOBUF = {"Content-Type": "application/x-protobuf"}
BODY = ExportTraceServiceRequest().SerializeToString()


def test_it_answers_503_with_retry_after_when_the_database_is_down(down):
    response = down.post(
        "/v1/traces", content=BODY, headers={**PROTOBUF, "Authorization": f"Bearer {RAW_KEY}"}
    )

    assert response.status_code == 503
    assert response.headers["Retry-After"] == "5"
    assert response.headers["Content-Type"] == "application/x-protobuf"
    status = RpcStatus.FromString(response.content)
    assert status.code == 14  # UNAVAILABLE
    assert status.message == "database unavailable; nothing was stored, retry later"


@pytest.fixture
def impatient_server(transactional_db: None, tmp_path: Any) -> Iterator[httpx.Client]:
    """A gunicorn server on the test database that gives up at once on a locked SQLite."""
    if settings.DATABASES["default"]["ENGINE"] != "django.db.backends.sqlite3":
        pytest.skip("SQLite's write lock; PostgreSQL's busy states are mapped the same way")
    with gunicorn_client(subprocess_env(SQLITE_TIMEOUT="0"), tmp_path / "gunicorn.log") as client:
        yield client


def test_it_answers_429_with_retry_after_when_the_database_is_locked(
    impatient_server, make_key, span_request
):
    key = make_key("report")
    locker = sqlite3.connect(settings.DATABASES["default"]["NAME"], isolation_level=None)
    locker.execute("BEGIN IMMEDIATE")  # another writer holds the lock
    try:
        response = impatient_server.post(
            "/v1/traces", json=span_request, headers={"x-api-key": key}
        )
    finally:
        locker.execute("ROLLBACK")
        locker.close()

    assert response.status_code == 429
    assert response.headers["Retry-After"] == "5"
    assert response.json() == {
        "code": 8,  # RESOURCE_EXHAUSTED
        "message": "database busy; nothing was stored, retry later",
    }
    assert not Invocation.objects.exists()


@pytest.fixture
def span_request() -> dict[str, Any]:
    """A one-span OTLP/JSON request."""
    now = time.time_ns() - 10**9
    span = {
        "traceId": "5b8efff798038103d269b633813fc60c",
        "spanId": "eee19b7ec3c1b174",
        "name": "execute_tool calculator",
        "startTimeUnixNano": str(now),
        "endTimeUnixNano": str(now + 1_000_000),
        "attributes": [
            {"key": "gen_ai.operation.name", "value": {"stringValue": "execute_tool"}},
            {"key": "gen_ai.tool.name", "value": {"stringValue": "calculator"}},
        ],
    }
    return {"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}
