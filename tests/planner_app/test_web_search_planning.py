"""Search requests plan a web_search step and run it on a fake SearXNG on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from planner_app import bridge
from planner_app.services import plan_request
from tests.tools_app.local_http import LocalServer
from tests.tools_app.test_web_search import search
from tools_app.builtins.web_search import make_spec
from tools_app.site_engine import get_engine

SEARCHES = [
    ("search the web for the latest django release", "the latest django release"),
    ("look up the population of France", "the population of France"),
    ("google django 5.1 release notes", "django 5.1 release notes"),
    ("find information about the Rust borrow checker", "the Rust borrow checker"),
    ("查找最新的Python版本", "最新的Python版本"),
    ("搜索量子计算", "量子计算"),
    ("查一下长城有多长", "长城有多长"),
]


@pytest.fixture
def searxng(settings: Any) -> Iterator[LocalServer]:
    """Configure web_search against a fake SearXNG, as ARES_SEARXNG_URL would."""
    registry = get_engine().registry
    before = registry.get("web_search")
    with LocalServer({"/search": search}) as server:
        settings.ARES_SEARXNG_URL = server.url("").rstrip("/")
        registry.replace(make_spec(settings.ARES_SEARXNG_URL))
        try:
            yield server
        finally:
            registry.replace(before)


@pytest.mark.django_db
@pytest.mark.parametrize(("request_text", "query"), SEARCHES)
def test_it_plans_a_web_search_with_the_query(
    default_rules: None, searxng: LocalServer, request_text: str, query: str
) -> None:
    [step] = plan_request(request_text).steps
    assert (step.tool, step.capability, step.arguments) == ("web_search", "WebSearch",
                                                            {"query": query})  # fmt: skip


@pytest.mark.django_db(transaction=True)
def test_the_bridge_runs_the_search_on_searxng(default_rules: None, searxng: LocalServer) -> None:
    outcome = bridge.execute(None, None, "search the web for the latest django release")
    assert outcome.path == "planner" and outcome.success
    [result] = outcome.results
    assert result.data["query"] == "the latest django release"
    assert result.data["results"][0]["url"] == "https://example.org/page-1"
    [seen] = searxng.seen
    assert parse_qs(urlsplit(seen.path).query)["q"] == ["the latest django release"]


@pytest.mark.django_db
def test_without_searxng_the_plan_shows_the_search_it_would_run(default_rules: None) -> None:
    plan = plan_request("查找最新的Python版本")
    assert plan.needs_llm and plan.steps == []
    assert plan.explanation["disabled_steps"] == [
        {
            "capability": "WebSearch",
            "tool": "web_search",
            "arguments": {"query": "最新的Python版本"},
        }
    ]
    assert "web_search needs ARES_SEARXNG_URL" in plan.reason


@pytest.mark.django_db(transaction=True)
def test_without_searxng_the_bridge_says_why_nothing_ran(default_rules: None) -> None:
    outcome = bridge.execute(None, None, "search the web for the latest django release")
    assert not outcome.success
    [result] = outcome.results
    assert result.error.kind == "not_found"
    assert 'web_search would run with {"query": "the latest django release"}' in result.text
    assert "ARES_SEARXNG_URL" in result.text
