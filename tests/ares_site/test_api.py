"""The REST API says what it does: every body is an object, every error status is documented."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import jsonschema
import pytest
from django.conf import settings

from tests.traces_app.test_otlp_unavailable import impatient_server  # noqa: F401 (a fixture)
from traces_app.http.errors import AUTHENTICATED, WITH_BODY
from traces_app.models import SCOPES

# Every operation that takes a body.
BODY_OPERATIONS = [
    pytest.param("/invocations", id="report invocations"),
    pytest.param("/tools/calculator/execute", id="execute a tool"),
    pytest.param("/execute", id="execute through the Bridge"),
    pytest.param("/plan", id="plan"),
    pytest.param("/planner/route", id="route a tool request"),
    pytest.param("/chat", id="chat"),
]
NOT_OBJECTS = [
    pytest.param(b"[null, null]", "an array", id="array"),
    pytest.param(b"[]", "an array", id="empty array"),
    pytest.param(b'"calculator"', "a string", id="string"),
    pytest.param(b"42", "a number", id="number"),
    pytest.param(b"true", "a boolean", id="boolean"),
    pytest.param(b"null", "null", id="null"),
]
JSON = {"Content-Type": "application/json"}


@pytest.fixture
def full_api(live_server: Any, make_key: Callable[..., str]) -> Iterator[httpx.Client]:
    """An HTTP client for /api/v1/ holding a key with every scope."""
    headers = {"Authorization": f"Bearer {make_key(*SCOPES)}"}
    with httpx.Client(base_url=f"{live_server.url}/api/v1", headers=headers, timeout=30) as client:
        yield client


@pytest.fixture(scope="module")
def openapi() -> dict[str, Any]:
    from ares_site.api import api

    return api.get_openapi_schema()


def operations(openapi: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, methods in openapi["paths"].items():
        for method, operation in methods.items():
            yield method.upper(), path, operation


@pytest.mark.parametrize("path", BODY_OPERATIONS)
@pytest.mark.parametrize(("body", "named"), NOT_OBJECTS)
def test_it_refuses_a_body_that_is_not_an_object(full_api, path, body, named):
    response = full_api.post(path, content=body, headers=JSON)

    assert response.status_code == 422
    detail = response.json()["detail"]
    if path == "/invocations":  # its envelope check says what the object must hold
        assert detail == 'body must be an object {"invocations": [...]}'
    else:
        assert detail == f"body must be a JSON object {{...}}, got {named}"


@pytest.mark.parametrize("path", BODY_OPERATIONS)
def test_it_answers_422_when_the_body_is_missing(full_api, path):
    response = full_api.post(path)

    assert response.status_code == 422
    assert response.json() == {
        "detail": "a JSON object body is required (Content-Type: application/json)"
    }


@pytest.mark.parametrize("path", BODY_OPERATIONS)
def test_it_answers_415_not_400_for_a_body_that_is_not_json(full_api, path):
    response = full_api.post(path, content=b"{}", headers={"Content-Type": "text/plain"})

    assert response.status_code == 415
    assert response.json() == {"detail": "Content-Type must be application/json, got text/plain"}


def test_it_still_runs_a_tool_given_an_object(full_api):
    response = full_api.post("/tools/calculator/execute", json={"arguments": {"expression": "2*3"}})

    assert response.status_code == 200
    assert response.json()["data"]["result"] == 6


@pytest.mark.parametrize("path", ["/nothing-here", "/sessions/a%0Ab", "/traces/x/y/z"])
def test_an_address_no_route_matches_answers_json_under_the_api(full_api, path):
    response = full_api.get(path)  # a newline matches no route's path converter

    assert response.status_code == 404
    assert response.headers["content-type"].startswith("application/json")
    assert response.json() == {"detail": "Not Found"}


def test_an_address_no_page_matches_is_still_the_html_page(live_server):
    response = httpx.get(f"{live_server.url}/no-such-page/")

    assert response.status_code == 404
    assert response.headers["content-type"].startswith("text/html")


def test_every_operation_documents_its_errors_with_a_body(openapi):
    documented = {}
    for method, path, operation in operations(openapi):
        statuses = {int(status) for status in operation["responses"]}
        documented[f"{method} {path}"] = statuses
        assert statuses >= {200, *AUTHENTICATED}, f"{method} {path}"
        if "requestBody" in operation:
            assert statuses >= set(WITH_BODY), f"{method} {path}"
        for status, answer in operation["responses"].items():
            assert answer["description"], f"{method} {path} {status}"
            assert "application/json" in answer["content"], f"{method} {path} {status}"
        for status in (429, 503):
            assert "Retry-After" in operation["responses"][status]["headers"]

    assert documented["POST /api/v1/invocations"] == {200, 400, 401, 403, 413, 415, 422, 429, 503}
    assert documented["GET /api/v1/traces/{trace_id}"] == {200, 401, 403, 404, 422, 429, 503}
    assert documented["POST /api/v1/chat"] >= {404, 502}
    assert documented["GET /api/v1/tools"] == {200, *AUTHENTICATED}


def response_schema(openapi: dict[str, Any], method: str, path: str, status: int) -> dict:
    """Return the documented JSON schema of an answer, with the components it refers to."""
    answer = openapi["paths"][path][method.lower()]["responses"][status]
    schema = answer["content"]["application/json"]["schema"]
    return {**schema, "components": openapi["components"]}


@pytest.mark.parametrize(
    ("body", "shape"),
    [
        pytest.param({"invocations": []}, "detail", id="empty batch: the error body"),
        pytest.param({"invocations": [{"kind": "tool"}]}, "items", id="all rejected: BatchOut"),
    ],
)
def test_the_batch_422_matches_its_documented_body(full_api, openapi, body, shape):
    response = full_api.post("/invocations", json=body)

    assert response.status_code == 422
    assert shape in response.json()
    schema = response_schema(openapi, "POST", "/api/v1/invocations", 422)
    jsonschema.validate(response.json(), schema)


def test_a_documented_error_body_holds_the_validation_errors(full_api, openapi):
    response = full_api.get("/invocations", params={"limit": "many"})

    assert response.status_code == 422
    assert response.json()["errors"][0]["field"] == "limit"
    jsonschema.validate(
        response.json(), response_schema(openapi, "GET", "/api/v1/invocations", 422)
    )


def test_it_answers_429_with_retry_after_when_the_database_is_locked(
    impatient_server,  # noqa: F811 (the fixture imported above)
    make_key,
):
    key = make_key("execute")
    locker = sqlite3.connect(settings.DATABASES["default"]["NAME"], isolation_level=None)
    locker.execute("BEGIN IMMEDIATE")  # another writer holds the lock
    try:
        response = impatient_server.post(
            "/api/v1/tools/calculator/execute",
            json={"arguments": {"expression": "1+1"}},
            headers={"Authorization": f"Bearer {key}"},
        )
    finally:
        locker.execute("ROLLBACK")
        locker.close()

    assert response.status_code == 429
    assert response.headers["Retry-After"] == "5"
    assert response.json() == {"detail": "database busy; nothing was stored, retry later"}


@pytest.mark.parametrize(
    ("method", "path", "field"),
    [
        ("post", "/api/v1/tools/{name}/execute", "parent_span_id"),
        ("post", "/api/v1/execute", "fallback"),
        ("post", "/api/v1/plan", "request"),
        ("post", "/api/v1/chat", "messages"),
    ],
)
def test_each_body_is_documented_with_its_own_fields(openapi, method, path, field):
    body = openapi["paths"][path][method]["requestBody"]["content"]["application/json"]["schema"]
    name = body["$ref"].rsplit("/", 1)[-1]

    assert field in openapi["components"]["schemas"][name]["properties"]


@pytest.mark.parametrize(
    ("path", "query"),
    [
        ("/traces", "tool=calculator&tool=hash_tool"),
        ("/invocations", "limit=5&limit=6"),
        ("/otlp/producers", "name=a&name=b"),
    ],
)
def test_it_refuses_a_query_parameter_given_twice(full_api, path, query):
    response = full_api.get(f"{path}?{query}")

    assert response.status_code == 422
    name = query.split("=", 1)[0]
    assert response.json() == {"detail": f"{name}: given 2 times; give it once"}


@pytest.mark.parametrize("path", ["/traces", "/invocations", "/tools/stats", "/traces/count"])
@pytest.mark.parametrize("moment", ["0", "1767225600", "-0.5", "2026-01-31"])
def test_it_refuses_a_moment_that_is_not_an_iso_date_time(full_api, path, moment):
    response = full_api.get(path, params={"since": moment})

    assert response.status_code == 422
    assert "must be an ISO 8601 datetime" in response.json()["detail"]
