"""The spirals list shows and filters whether the arguments changed between attempts."""

from __future__ import annotations

import secrets
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.test import Client

from tests.conftest import make_span
from traces_app.ingest.recording import record_invocations
from traces_app.models import FailureSpiral
from traces_app.schemas import InvocationIn

T0 = datetime.now(UTC) - timedelta(hours=1)


def failing_spiral(tool: str, arguments: list[dict[str, Any]]) -> FailureSpiral:
    """Store a trace where the tool fails alike once per arguments; return its spiral."""
    trace_id = secrets.token_hex(16)
    spans = [
        make_span(trace_id=trace_id, tool_name=tool, arguments=args, status="error",
                  error_kind="timeout", started_at=(T0 + timedelta(seconds=n)).isoformat())
        for n, args in enumerate(arguments)
    ]  # fmt: skip
    record_invocations([InvocationIn.model_validate(span) for span in spans])
    return FailureSpiral.objects.get(trace_id=trace_id)


@pytest.fixture
def spirals(db: None) -> dict[str, FailureSpiral]:
    return {
        "same": failing_spiral("web_search", [{"q": "mcp"}] * 3),
        "changed": failing_spiral(
            "web_search",
            [{"q": "mcp", "page": 1}, {"q": "mcp", "page": 2}, {"q": "MCP", "page": 2}],
        ),
    }


@pytest.mark.parametrize(("which", "listed"), [("changed", ["changed"]), ("same", ["same"]),
                                                ("", ["changed", "same"])])  # fmt: skip
def test_it_filters_spirals_by_whether_their_arguments_changed(
    admin_client: Client, spirals: dict[str, FailureSpiral], which: str, listed: list[str]
) -> None:
    response = admin_client.get("/spirals/", {"arguments": which})
    rows = list(response.context["page"].rows)
    assert sorted(rows, key=lambda s: s.pk) == sorted(
        (spirals[n] for n in listed), key=lambda s: s.pk
    )


def test_it_shows_which_arguments_changed(
    admin_client: Client, spirals: dict[str, FailureSpiral]
) -> None:
    assert spirals["changed"].changed_arguments == ["page", "q"]
    html = admin_client.get("/spirals/", {"arguments": "changed"}).content.decode()
    assert '<span class="badge">changed</span> <code>page</code>, <code>q</code>' in html
    same = admin_client.get("/spirals/", {"arguments": "same"}).content.decode()
    assert '<td class="arguments">same</td>' in same


def test_a_bad_arguments_filter_is_explained_and_left_out(
    admin_client: Client, spirals: dict[str, FailureSpiral]
) -> None:
    response = admin_client.get("/spirals/", {"arguments": "sometimes"})
    assert response.status_code == 200
    assert any("Arguments between attempts" in line for line in response.context["filter_errors"])
    assert len(response.context["page"].rows) == 2
