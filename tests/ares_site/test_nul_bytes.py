"""NUL bytes in addresses: a path holding one is 404, a query parameter holding one is 422.

On PostgreSQL, a NUL that reached a query was a 500 (it refuses NUL in text); every page,
API operation and admin list now answers the same on both databases.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from django.test import Client

from tests.conftest import make_span


@pytest.fixture
def stored(api: httpx.Client) -> dict[str, Any]:
    """Store one tool span, so that every filter and page has rows to look through."""
    span = make_span()
    assert api.post("/invocations", json={"invocations": [span]}).json()["accepted"] == 1
    return span


@pytest.fixture
def staff(live_server: Any, django_user_model: Any) -> Iterator[httpx.Client]:
    """An HTTP client on the live server, logged in as a superuser (who may use the admin)."""
    user = django_user_model.objects.create_superuser("operator", "", "operator-pass-123")
    django_client = Client()
    django_client.force_login(user)
    with httpx.Client(base_url=live_server.url, timeout=30) as client:
        client.cookies.set("sessionid", django_client.cookies["sessionid"].value)
        yield client


# (API listing, query parameter)
API_FILTERS = [
    *[("/traces", name) for name in ("agent", "q", "tool", "status", "chosen_by", "since",
                                      "until", "cursor", "limit")],
    *[("/invocations", name) for name in ("agent", "tool", "status", "chosen_by", "kind",
                                           "error_kind", "trace_id", "since", "cursor")],
    ("/traces/count", "agent"), ("/traces/count", "q"), ("/invocations/count", "tool"),
    ("/tools/stats", "since"), ("/tools/stats", "until"),
    ("/otlp/producers", "name"),
    ("/tools", "unknown"),
]  # fmt: skip


@pytest.mark.parametrize(("path", "name"), API_FILTERS)
@pytest.mark.parametrize("value", ["\x00", "calc\x00ulator", "\x00\x00"])
def test_it_refuses_a_nul_byte_in_an_api_parameter(api, stored, path, name, value):
    response = api.get(path, params={name: value})

    assert response.status_code == 422, response.text
    body = response.json()
    assert body["errors"] == [{"field": name, "reason": "must not contain a NUL byte (%00)"}]
    assert body["detail"].startswith(f"{name}: ")


def test_it_names_every_parameter_with_a_nul_byte(api):
    response = api.get("/traces", params={"agent": "\x00", "q": "ok", "tool": "a\x00"})

    assert response.status_code == 422
    assert [error["field"] for error in response.json()["errors"]] == ["agent", "tool"]


def test_it_refuses_a_nul_byte_in_a_parameter_name(api):
    response = api.get("/traces?age%00nt=alpha")

    assert response.status_code == 422
    assert response.json()["errors"][0]["field"] == "age%00nt"


def test_it_still_filters_by_a_value_without_a_nul_byte(api, stored):
    response = api.get("/invocations", params={"agent": stored["agent"], "tool": "calculator"})

    assert response.status_code == 200
    assert [item["span_id"] for item in response.json()["items"]] == [stored["span_id"]]


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/traces/%00"),
        ("GET", "/traces/0123456789abcdef0123456789abcde%00"),
        ("GET", "/traces/%00/count"),
        ("POST", "/tools/%00/execute"),
        ("POST", "/tools/calc%00ulator/execute"),
        ("GET", "/invocations%00"),
    ],
)
def test_it_answers_404_to_an_api_path_with_a_nul_byte(api, stored, method, path):
    response = api.request(method, path, json={"arguments": {}})

    assert response.status_code == 404
    assert response.json() == {"detail": "Not Found"}


PAGE_PATHS = [
    "/traces/%00/",
    "/traces/0123456789abcdef0123456789abcde%00/",
    "/tools/%00/",
    "/tools/calc%00ulator/",
    "/tools/mcp.time/%00/",
    "/evidence/%00/",
    "/evidence/math%00/",
    "/spirals/%00/",
    "/planner/try%00",
    "/admin/traces_app/trace/%00/change/",
    "/%00",
]


@pytest.mark.parametrize("path", PAGE_PATHS)
def test_it_answers_404_to_a_page_path_with_a_nul_byte(staff, stored, path):
    assert staff.get(path).status_code == 404


# (page, query parameter)
PAGE_FILTERS = [
    *[("/traces/", name) for name in ("agent", "q", "tool", "status", "chosen_by", "since",
                                       "after", "range")],
    ("/spirals/", "tool"), ("/spirals/", "kind"), ("/", "range"), ("/", "until"),
    ("/tools/", "range"), ("/tools/calculator/", "since"), ("/evidence/", "range"),
    ("/planner/try", "q"),
    ("/admin/traces_app/trace/", "q"), ("/admin/traces_app/invocation/", "q"),
    ("/admin/traces_app/otlpproducer/", "q"), ("/admin/planner_app/intentrule/", "q"),
    ("/admin/traces_app/invocation/", "agent__exact"),
]  # fmt: skip


@pytest.mark.parametrize(("page", "name"), PAGE_FILTERS)
def test_it_refuses_a_nul_byte_in_a_page_parameter(staff, stored, page, name):
    response = staff.get(page, params={name: "calc\x00ulator"})

    assert response.status_code == 422
    assert f"{name}: must not contain a NUL byte" in response.text


@pytest.mark.parametrize(
    "page", ["/traces/", "/admin/traces_app/trace/", "/admin/traces_app/invocation/"]
)
def test_it_still_searches_a_page_without_a_nul_byte(staff, stored, page):
    response = staff.get(page, params={"q": stored["agent"]} if "admin" in page else {})

    assert response.status_code == 200
    assert stored["trace_id"] in response.text
