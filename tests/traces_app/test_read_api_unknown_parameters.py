"""Every read endpoint of the REST API refuses a query parameter it does not know, naming it.

A filter the endpoint does not have (`?session_id=x`) would otherwise be dropped, and the
answer would hold everything as if no filter had been asked for. The endpoints are taken
from the published OpenAPI schema, so one added later is held to the same rule.
"""

from __future__ import annotations

import secrets

import pytest

from ares_site.api import api
from traces_app.models import SCOPES

# A value for each path parameter of a read endpoint.
PATH_VALUES = {
    "trace_id": "4bf92f3577b34da6a3ce929d0e0e4736",
    "proposal_id": "1",
    "session_id": "s-1",
    "monitor_id": "1",
    "channel_id": "1",
}
READ_ENDPOINTS = [
    (path.removeprefix("/api/v1"), operation)
    for path, methods in api.get_openapi_schema()["paths"].items()
    for method, operation in methods.items()
    if method == "get"
]


def query_parameters(operation: dict) -> list[str]:
    return [p["name"] for p in operation.get("parameters", []) if p["in"] == "query"]


@pytest.fixture
def reader(api, make_key):
    """The API client, with a key that may read everything."""
    api.headers["Authorization"] = f"Bearer {make_key(*SCOPES)}"
    return api


@pytest.mark.parametrize(("path", "operation"), READ_ENDPOINTS, ids=[p for p, _ in READ_ENDPOINTS])
def test_it_refuses_an_unknown_query_parameter_naming_it(reader, problem, path, operation):
    response = reader.get(path.format(**PATH_VALUES), params={"session_id": "x"})

    assert response.status_code == 422, response.text
    body = response.json()
    assert body["errors"] == [{"field": "session_id", "reason": "unknown query parameter"}]
    assert body["detail"].startswith("unknown query parameter: session_id; ")
    known = query_parameters(operation)
    if known:
        assert body["detail"].endswith(f"known: {', '.join(sorted(known))}")
    else:
        assert body["detail"].endswith("this endpoint takes no query parameters")


@pytest.mark.parametrize(("path", "operation"), READ_ENDPOINTS, ids=[p for p, _ in READ_ENDPOINTS])
def test_it_still_answers_without_unknown_parameters(reader, path, operation):
    response = reader.get(path.format(**PATH_VALUES))

    assert response.status_code in (200, 404), response.text


def test_it_names_every_unknown_parameter_and_keeps_known_ones_working(reader, report, span):
    trace_id = secrets.token_hex(16)
    report(span(trace_id=trace_id, agent="alpha"), span(agent="beta"))

    refused = reader.get("/traces", params={"agent": "alpha", "session_id": "x", "sort_by": "y"})
    answered = reader.get("/traces", params={"agent": "alpha"})

    assert refused.status_code == 422
    assert [error["field"] for error in refused.json()["errors"]] == ["session_id", "sort_by"]
    assert refused.json()["detail"].startswith("unknown query parameters: session_id, sort_by; ")
    assert answered.status_code == 200
    assert [trace["trace_id"] for trace in answered.json()["items"]] == [trace_id]


def test_it_asks_for_a_key_before_it_looks_at_the_parameters(anonymous_api):
    response = anonymous_api.get("/traces", params={"session_id": "x"})

    assert response.status_code == 401
    assert "authentication required" in response.json()["detail"]


def test_it_keeps_refusing_a_parameter_given_twice(reader):
    response = reader.get("/traces?agent=a&agent=b")

    assert response.status_code == 422
    assert "agent: given 2 times" in response.json()["detail"]
