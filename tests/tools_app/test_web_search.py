"""The web_search built-in against a fake SearXNG on 127.0.0.1 speaking its JSON API."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from tests.tools_app.local_http import LocalServer, RouteHandler, reply
from tests.tools_app.tool_calls import call
from tools_app.builtins.web_search import SPEC, make_spec
from tools_app.specs import ErrorKind, ToolFailure, ToolSpec
from tools_app.validation import ArgumentsError


def searxng_answer(query: str, results: list[dict[str, Any]], **extra: Any) -> bytes:
    """Return a SearXNG /search?format=json body, in the shape SearXNG really sends."""
    return json.dumps(
        {
            "query": query,
            "number_of_results": 0,
            "results": results,
            "answers": [],
            "corrections": [],
            "infoboxes": [],
            "suggestions": [],
            "unresponsive_engines": [],
            **extra,
        }
    ).encode()


def searxng_result(n: int) -> dict[str, Any]:
    return {
        "url": f"https://example.org/page-{n}",
        "title": f"Result {n}",
        "content": f"  Snippet of result {n}.  ",
        "engine": "duckduckgo",
        "engines": ["duckduckgo", "brave"],
        "positions": [n],
        "score": 10 - n / 10,
        "category": "general",
        "parsed_url": ["https", "example.org", f"/page-{n}", "", "", ""],
        "template": "default.html",
    }


def search(handler: RouteHandler) -> None:
    query = parse_qs(urlsplit(handler.path).query)["q"][0]
    body = searxng_answer(query, [searxng_result(n) for n in range(1, 11)])
    reply(handler, 200, body, {"Content-Type": "application/json"})


def answering(status: int, body: bytes, content_type: str = "application/json") -> Any:
    return lambda handler: reply(handler, status, body, {"Content-Type": content_type})


@pytest.fixture
def searxng() -> Iterator[LocalServer]:
    with LocalServer({"/search": search}) as server:
        yield server


def spec_for(server: LocalServer, path: str = "", **options: Any) -> ToolSpec:
    return make_spec(server.url(path).rstrip("/"), **options)


def failure_of(spec: ToolSpec, **arguments: Any) -> ToolFailure:
    with pytest.raises(ToolFailure) as failure:
        call(spec, **arguments)
    return failure.value


def test_it_returns_searxng_results(searxng: LocalServer) -> None:
    result = call(spec_for(searxng), query="django tools", max_results=2)
    assert result == {
        "query": "django tools",
        "results": [
            {
                "title": "Result 1",
                "url": "https://example.org/page-1",
                "snippet": "Snippet of result 1.",
            },
            {
                "title": "Result 2",
                "url": "https://example.org/page-2",
                "snippet": "Snippet of result 2.",
            },
        ],
        "count": 2,
    }


@pytest.mark.parametrize(("max_results", "count"), [(None, 5), (1, 1), (7, 7), (20, 10)])
def test_it_returns_at_most_max_results(
    searxng: LocalServer, max_results: int | None, count: int
) -> None:
    arguments = {"query": "q"} | ({"max_results": max_results} if max_results else {})
    result = call(spec_for(searxng), **arguments)
    assert result["count"] == len(result["results"]) == count
    assert [r["title"] for r in result["results"]] == [f"Result {n}" for n in range(1, count + 1)]


def test_it_asks_searxng_for_json(searxng: LocalServer) -> None:
    call(spec_for(searxng), query="what is 2+2 & why?")
    seen = searxng.seen[0]
    assert urlsplit(seen.path).path == "/search"
    assert parse_qs(urlsplit(seen.path).query) == {"q": ["what is 2+2 & why?"], "format": ["json"]}


def test_it_keeps_a_path_in_the_base_url() -> None:
    with LocalServer({"/searx/search": search}) as server:
        result = call(make_spec(server.url("/searx/")), query="q")
    assert result["count"] == 5


def test_it_skips_results_without_a_url_and_tolerates_missing_fields() -> None:
    results = [{"title": "no url"}, {"url": "https://example.org/bare"}, "junk"]
    route = answering(200, searxng_answer("q", results))
    with LocalServer({"/search": route}) as server:
        result = call(spec_for(server), query="q")
    assert result["results"] == [{"title": "", "url": "https://example.org/bare", "snippet": ""}]


def test_it_returns_no_results_when_searxng_found_none() -> None:
    with LocalServer({"/search": answering(200, searxng_answer("q", []))}) as server:
        result = call(spec_for(server), query="q")
    assert (result["results"], result["count"]) == ([], 0)


@pytest.mark.parametrize(
    ("status", "body", "content_type", "kind", "problem"),
    [
        (500, b"Internal Server Error", "text/plain", ErrorKind.UNAVAILABLE, "answered HTTP 500"),
        (502, b"", "text/html", ErrorKind.UNAVAILABLE, "answered HTTP 502"),
        (
            403,
            b"Forbidden",
            "text/html",
            ErrorKind.UNAVAILABLE,
            "refused the JSON API (HTTP 403): the operator must add 'json' to search.formats",
        ),
        (429, b"Too Many Requests", "text/html", ErrorKind.RATE_LIMITED, "limiting requests"),
        (
            200,
            b"<html>SearXNG</html>",
            "text/html",
            ErrorKind.UNAVAILABLE,
            "did not return JSON (text/html); check that ARES_SEARXNG_URL points at",
        ),
        (
            200,
            b'{"results": "x"}',
            "application/json",
            ErrorKind.UNAVAILABLE,
            "without a `results`",
        ),
        (200, b"[1, 2]", "application/json", ErrorKind.UNAVAILABLE, "without a `results` list"),
        (
            200,
            searxng_answer(
                "q", [], unresponsive_engines=[["google", "CAPTCHA"], ["bing", "timeout"]]
            ),
            "application/json",
            ErrorKind.UNAVAILABLE,
            "found nothing because its engines failed: google (CAPTCHA), bing (timeout)",
        ),
    ],
)
def test_it_reports_provider_errors_clearly(
    status: int, body: bytes, content_type: str, kind: ErrorKind, problem: str
) -> None:
    with LocalServer({"/search": answering(status, body, content_type)}) as server:
        failure = failure_of(spec_for(server), query="q")
    assert failure.kind == kind
    assert f"the search provider (SearXNG at {server.url('').rstrip('/')})" in str(failure)
    assert problem in str(failure)


def test_it_reports_a_provider_that_does_not_answer_in_time() -> None:
    with LocalServer({"/search": lambda handler: handler.release.wait(30)}) as server:
        failure = failure_of(spec_for(server, timeout_s=0.5), query="q")
    assert failure.kind == ErrorKind.UNAVAILABLE
    assert "did not answer within 0.5 seconds" in str(failure)


def test_it_reports_a_provider_that_is_down() -> None:
    with LocalServer({}) as stopped:
        url = stopped.url("")
    failure = failure_of(make_spec(url), query="q")  # Nothing listens there any more.
    assert failure.kind == ErrorKind.UNAVAILABLE
    assert "could not be reached" in str(failure)


def test_it_is_disabled_and_says_how_to_configure_it_without_a_provider() -> None:
    assert SPEC.enabled is False
    failure = failure_of(SPEC, query="q")
    assert failure.kind == ErrorKind.DISABLED
    assert str(failure).startswith("web search is not configured: set ARES_SEARXNG_URL to")


def test_it_is_enabled_with_a_provider(searxng: LocalServer) -> None:
    spec = spec_for(searxng)
    assert (spec.name, spec.enabled, spec.capabilities) == ("web_search", True, ("WebSearch",))


@pytest.mark.parametrize("url", ["searxng:8080", "ftp://searxng/", "http://"])
def test_it_refuses_a_malformed_provider_url(url: str) -> None:
    with pytest.raises(ValueError, match="ARES_SEARXNG_URL must be an http"):
        make_spec(url)


@pytest.mark.parametrize(
    "arguments",
    [{"query": ""}, {"query": "q", "max_results": 0}, {"query": "q", "max_results": 21}, {}],
)
def test_its_schema_rejects_malformed_arguments(arguments: dict[str, Any]) -> None:
    with pytest.raises(ArgumentsError):
        call(SPEC, **arguments)
