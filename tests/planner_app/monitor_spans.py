"""Test data for monitors: spans sent through the ingest API, at chosen times, and monitors."""

from __future__ import annotations

import secrets
from datetime import UTC, datetime, timedelta
from typing import Any

from django.test import Client

from planner_app.monitors.records import Monitor
from tests.conftest import make_span
from traces_app.models import ApiKey

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def reporter() -> Client:
    """Return a test client holding a key that may report spans."""
    key = ApiKey.objects.issue("monitor tests", ["report"])[1]
    return Client(headers={"Authorization": f"Bearer {key}"})


def send(client: Any, spans: list[dict[str, Any]]) -> None:
    """Send spans through POST /api/v1/invocations; fail unless every one was accepted."""
    response = client.post(
        "/api/v1/invocations", {"invocations": spans}, content_type="application/json"
    )
    body = response.json()
    assert body["accepted"] == len(spans), body


def calls(
    count: int, *, status: str = "ok", at: datetime = NOW, tool: str = "calculator", **fields: Any
) -> list[dict[str, Any]]:
    """Return `count` tool spans of one tool, each its own trace, a second apart before `at`."""
    spans = []
    for index in range(count):
        started = at - timedelta(minutes=1, seconds=index)
        span = make_span(tool_name=tool, status=status, started_at=started.isoformat(), **fields)
        if status == "error":
            span.setdefault("error_kind", "tool_error")
            span.setdefault("error_message", "it broke")
        spans.append(span)
    return spans


def one_trace(spans: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Return the spans moved into one new trace."""
    trace_id = secrets.token_hex(16)
    return [{**span, "trace_id": trace_id} for span in spans]


def monitor(**fields: Any) -> Monitor:
    """Create a monitor: an error rate of calculator above 20% over 15 minutes, unless told."""
    defaults: dict[str, Any] = {
        "name": f"monitor {secrets.token_hex(3)}", "metric": "error_rate", "scope": "tool",
        "target": "calculator", "threshold": 0.2, "window_minutes": 15,
        "renotify_minutes": 60,
    }  # fmt: skip
    defaults.update(fields)
    channels = defaults.pop("channels", [])
    made = Monitor.objects.create(**defaults)
    made.channels.set(channels)
    return made
