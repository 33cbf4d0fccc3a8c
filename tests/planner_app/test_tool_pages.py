"""The tools, tool detail and evidence pages through the test client."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from planner_app import ruleset_versions
from planner_app.models import Capability, CapabilityMapping
from planner_app.pipeline.resolution import Candidate
from planner_app.pipeline.scoring import Evidence, ToolScorer
from tests.conftest import make_span
from tools_app.site_engine import get_engine
from traces_app.charts import latency_bin_label
from traces_app.ingest.recording import record_invocations
from traces_app.models import ApiKey, ToolRollup
from traces_app.rollups.histogram import bin_bounds, merge, percentile_from_histogram
from traces_app.rollups.recount import recount_all_marked_rollups
from traces_app.schemas import InvocationIn

pytestmark = pytest.mark.django_db

HOUR = timedelta(hours=1)


@pytest.fixture(autouse=True)
def fresh_evidence(settings: Any) -> None:
    """Read the planner's recent evidence afresh: no cache kept from another test."""
    settings.ARES_PLANNER_EVIDENCE_TTL_S = 0


def hours_ago(hours: int, minutes: int = 10) -> datetime:
    """Return `minutes` past the start of the UTC hour `hours` before this one."""
    start = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - hours * HOUR
    return start + timedelta(minutes=minutes)


def record(*spans: dict[str, Any]) -> None:
    """Store spans and recount their rollups (the refresh task's work, done inline)."""
    record_invocations([InvocationIn.model_validate(span) for span in spans])
    recount_all_marked_rollups()


def calls(tool: str, count: int, **fields: Any) -> list[dict[str, Any]]:
    return [make_span(tool_name=tool, **fields) for _ in range(count)]


def rows_by_name(response: Any) -> dict[str, Any]:
    return {row.name: row for row in response.context["rows"]}


def test_it_sends_anonymous_visitors_to_the_login_page(client: Client) -> None:
    for url in ("/tools/", "/tools/calculator/", "/evidence/", "/evidence/Arithmetic/"):
        response = client.get(url)
        assert response.status_code == 302, url
        assert response["Location"].startswith("/admin/login/"), url


def test_it_refuses_an_api_key(client: Client) -> None:
    _, raw_key = ApiKey.objects.issue("agent", ("report", "read"))
    response = client.get("/tools/", HTTP_AUTHORIZATION=f"Bearer {raw_key}")
    assert response.status_code == 302
    assert response["Location"].startswith("/admin/login/")


def test_it_refuses_a_user_who_is_not_staff(client: Client, django_user_model: Any) -> None:
    client.force_login(django_user_model.objects.create_user("visitor", password="pw-12345678"))
    assert client.get("/tools/").status_code == 302


def test_it_shows_each_tools_numbers_as_summed_from_the_rollups(admin_client: Client) -> None:
    record(
        *calls("calculator", 3, started_at=hours_ago(2).isoformat(), latency_ms=100.0,
               input_tokens=5, cost_usd=0.01),
        *calls("calculator", 1, started_at=hours_ago(1).isoformat(), latency_ms=300.0,
               status="error", error_kind="timeout", result_tokens=0),
    )  # fmt: skip
    response = admin_client.get("/tools/?range=24h")
    assert response.status_code == 200
    row = rows_by_name(response)["calculator"]
    rollups = list(ToolRollup.objects.filter(tool_name="calculator"))
    histogram = merge(*(rollup.latency_histogram for rollup in rollups))
    assert (row.totals.calls, row.totals.successes, row.totals.failures) == (4, 3, 1)
    assert row.totals.success_rate == 0.75
    assert row.totals.p50_ms == percentile_from_histogram(histogram, 0.5)
    assert row.totals.p95_ms == percentile_from_histogram(histogram, 0.95)
    assert row.totals.tokens == sum(r.input_tokens + r.output_tokens + r.result_tokens
                                    for r in rollups) == 3 * 5 + 3 * 4  # fmt: skip
    assert row.totals.cost_usd == pytest.approx(0.03)
    assert ">75.0%<" in response.content.decode()  # a percentage, as on the traces pages
    assert "Showing <strong>last 24 hours</strong>" in response.content.decode()


def tool_changes_shown(response: Any, tool: str) -> list[tuple[str, str]]:
    """Return the changes on one tool's line of the tools table: (tone, text) each, in order."""
    line = re.search(
        rf'<tr data-tool="{re.escape(tool)}">.*?</tr>', response.content.decode(), re.S
    )
    assert line, tool
    found = re.findall(r'<span class="delta ?([a-z]*)"[^>]*>([^<]*)</span>', line.group(0))
    return [(tone, text.strip()) for tone, text in found]


def test_it_shows_each_tools_change_against_the_previous_period(admin_client: Client) -> None:
    record(
        *calls("calculator", 3, started_at=hours_ago(2).isoformat(), latency_ms=100.0),
        *calls("calculator", 1, started_at=hours_ago(2).isoformat(), latency_ms=100.0,
               status="error", error_kind="timeout"),
        *calls("calculator", 2, started_at=hours_ago(30).isoformat(), latency_ms=100.0),
        *calls("web_search", 2, started_at=hours_ago(30).isoformat()),
    )  # fmt: skip
    response = admin_client.get("/tools/?range=24h")

    assert tool_changes_shown(response, "calculator") == [  # calls, success rate, p95
        ("", "▲ +100.0% vs the previous day"),
        ("worse", "▼ -25.0 pts vs the previous day"),
        ("", "no change vs the previous day"),
    ]
    assert tool_changes_shown(response, "web_search") == [  # called only the day before
        ("", "▼ -100.0% vs the previous day"),
        ("", "no calls now vs the previous day"),
    ]
    assert tool_changes_shown(response, "hash_tool") == []  # quiet in both periods


def test_it_lists_registered_tools_without_calls_and_reported_tools_without_a_contract(
    admin_client: Client,
) -> None:
    record(*calls("outside.crm.lookup", 2))
    rows = rows_by_name(admin_client.get("/tools/"))
    registered = {spec.name for spec in get_engine().registry.list(enabled_only=False)}
    assert registered | {"outside.crm.lookup"} == set(rows)
    assert rows["hash_tool"].totals.calls == 0 and rows["hash_tool"].score is not None
    assert rows["outside.crm.lookup"].totals.calls == 2
    assert rows["outside.crm.lookup"].score is None


def test_it_gives_each_tool_the_planners_score_on_its_recent_calls(admin_client: Client) -> None:
    record(
        *calls("calculator", 2, latency_ms=200.0),
        *calls("calculator", 2, latency_ms=10.0, status="error", error_kind="tool_error"),
    )
    row = rows_by_name(admin_client.get("/tools/"))["calculator"]
    spec = get_engine().registry.get("calculator")
    recent = Evidence(4, 0.5, 105.0)
    expected = ToolScorer().score(
        Candidate(spec, "", "tool", 0.0), ruleset_versions.current_ruleset(), lambda *_: recent
    )
    assert row.score.final == expected.final


def test_a_call_stopped_by_its_caller_is_neither_a_success_nor_a_failure_of_the_tool(
    admin_client: Client,
) -> None:
    record(
        *calls("calculator", 3),
        *calls("calculator", 1, status="error", error_kind="timeout"),
        *calls("calculator", 2, status="stopped", error_kind="cancelled"),
    )
    row = rows_by_name(admin_client.get("/tools/"))["calculator"]
    assert (row.totals.calls, row.totals.failures, row.totals.stopped) == (6, 1, 2)
    assert (row.totals.judged_calls, row.totals.success_rate) == (4, 0.75)
    page = admin_client.get("/tools/").content.decode()
    assert "(2 stopped left out)" in page
    evidence = rows_by_name(admin_client.get("/tools/"))["calculator"].score
    assert (evidence.samples, evidence.success_rate) == (4, 0.75)  # the planner's, too


SORT_CASES = [
    ("-calls", ["web_search", "zz.outside", "aa.outside", "calculator"]),
    ("calls", ["aa.outside", "calculator", "web_search", "zz.outside"]),
    ("-success_rate", ["calculator", "web_search", "zz.outside", "aa.outside"]),
    ("name", ["aa.outside", "calculator", "web_search", "zz.outside"]),
    ("-name", ["zz.outside", "web_search", "calculator", "aa.outside"]),
]


@pytest.mark.parametrize(("sort", "expected"), SORT_CASES)
def test_it_sorts_the_table_stably_on_the_server(
    admin_client: Client, sort: str, expected: list[str]
) -> None:
    record(
        *calls("web_search", 3), *calls("zz.outside", 2), *calls("zz.outside", 1, status="error"),
        *calls("aa.outside", 1, status="error"), *calls("calculator", 1),
    )  # fmt: skip
    names = [row.name for row in admin_client.get(f"/tools/?sort={sort}").context["rows"]]
    assert [name for name in names if name in expected] == expected


def test_it_puts_tools_without_a_value_last_whatever_the_direction(admin_client: Client) -> None:
    record(*calls("aa.outside", 1), *calls("calculator", 1))
    for sort in ("score", "-score"):
        names = [row.name for row in admin_client.get(f"/tools/?sort={sort}").context["rows"]]
        assert names[-1] == "aa.outside", sort
    names = [row.name for row in admin_client.get("/tools/?sort=-p95").context["rows"]]
    assert names[:2] == ["aa.outside", "calculator"]  # the tools with calls, then the rest


def test_it_links_each_header_to_the_flipped_sort_within_the_range(admin_client: Client) -> None:
    response = admin_client.get("/tools/?range=7d&sort=-calls")
    headers = {header["key"]: header for header in response.context["headers"]}
    assert headers["calls"]["href"] == "?range=7d&sort=calls"
    assert headers["calls"]["aria_sort"] == "descending"
    assert headers["cost"]["href"] == "?range=7d&sort=-cost"
    assert headers["name"]["href"] == "?range=7d&sort=name"
    assert 'href="?range=7d&amp;sort=calls"' in response.content.decode()


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("sort=banana", "Sort not applied: unknown sort &#x27;banana&#x27;"),
        ("sort=--calls", "Sort not applied"),
        ("range=banana", "Range not applied: unknown range &#x27;banana&#x27;"),
        ("since=yesterday&until=now", "Range not applied: since"),
    ],
)
def test_it_explains_a_bad_sort_or_range_and_shows_the_default(
    admin_client: Client, query: str, message: str
) -> None:
    response = admin_client.get(f"/tools/?{query}")
    assert response.status_code == 200
    assert message in response.content.decode()


def test_it_scores_each_bucket_as_the_planner_scores_that_buckets_calls(
    admin_client: Client,
) -> None:
    record(
        *calls("calculator", 3, started_at=hours_ago(3).isoformat(), latency_ms=100.0),
        *calls("calculator", 1, started_at=hours_ago(3, 40).isoformat(), latency_ms=300.0,
               status="error", error_kind="timeout"),
    )  # fmt: skip
    response = admin_client.get("/tools/calculator/?range=24h")
    rows = {row[0]: row for row in response.context["score_chart"].rows}
    spec, ruleset = get_engine().registry.get("calculator"), ruleset_versions.current_ruleset()
    by_hand = ToolScorer().score(
        Candidate(spec, "", "tool", 0.0), ruleset, lambda tool, window: Evidence(4, 0.75, 150.0)
    )
    bucket = rows[f"{hours_ago(3, 0):%Y-%m-%d %H:%M}"]
    assert bucket[1:3] == [4, "this bucket"]
    assert bucket[5:] == [by_hand.base, by_hand.evidence, by_hand.penalty, by_hand.final]
    quiet_after = rows[f"{hours_ago(2, 0):%Y-%m-%d %H:%M}"]
    assert quiet_after[1:3] == [0, f"carried from {hours_ago(3, 0):%Y-%m-%d %H:%M}"]
    assert quiet_after[-1] == by_hand.final
    never_called = rows[f"{hours_ago(5, 0):%Y-%m-%d %H:%M}"]
    default = ToolScorer().score(Candidate(spec, "", "tool", 0.0), ruleset, lambda *_: None)
    assert (never_called[1], never_called[-1]) == (0, default.final)


def test_it_starts_a_quiet_range_from_the_tools_calls_before_it(admin_client: Client) -> None:
    record(*calls("calculator", 2, started_at=hours_ago(30).isoformat(), status="error"))
    response = admin_client.get("/tools/calculator/?range=24h")
    first = response.context["score_chart"].rows[0]
    spec, ruleset = get_engine().registry.get("calculator"), ruleset_versions.current_ruleset()
    failing = ToolScorer().score(
        Candidate(spec, "", "tool", 0.0), ruleset, lambda *_: Evidence(2, 0.0, 3.5)
    )
    assert first[2] == f"carried from {hours_ago(30, 0):%Y-%m-%d %H:%M}"
    assert first[-1] == failing.final


def test_it_shows_a_tools_calls_latency_errors_and_recent_failures(admin_client: Client) -> None:
    failed = make_span(tool_name="calculator", started_at=hours_ago(1).isoformat(),
                       status="error", error_kind="timeout", latency_ms=900.0,
                       error_message="took too long")  # fmt: skip
    record(failed, *calls("calculator", 2, started_at=hours_ago(1).isoformat(), latency_ms=20.0))
    response = admin_client.get("/tools/calculator/")
    charts = {chart.id: chart for chart in response.context["charts"]}
    assert [row[1:4] for row in charts["success-rate"].rows] == [[3, 2, 1]]
    assert charts["error-kinds"].rows == [["timeout", 1]]
    assert sum(row[-1] for row in charts["latency-histogram"].rows) == 3
    assert [call.span_id for call in response.context["failures"]] == [failed["span_id"]]
    page = response.content.decode()
    assert f'href="/traces/{failed["trace_id"]}/"' in page
    assert 'href="/traces/?tool=calculator&amp;range=24h"' in page
    assert 'href="/spirals/?tool=calculator&amp;range=24h"' in page
    assert "Idempotent" in page and "read_only" in page


def test_it_labels_the_latency_histogram_as_people_read_latencies(admin_client: Client) -> None:
    record(
        *calls("calculator", 2, started_at=hours_ago(1).isoformat(), latency_ms=30_000.0),
        *calls("calculator", 1, started_at=hours_ago(1).isoformat(), latency_ms=900.0),
    )
    response = admin_client.get("/tools/calculator/")
    chart = {chart.id: chart for chart in response.context["charts"]}["latency-histogram"]
    (bars,) = chart.figure["data"]
    assert bars["x"] == [latency_bin_label(*bin_bounds(index)) for index in range(30, 46)]
    assert (bars["x"][0], bars["y"][0]) == ("794 ms – 1 s", 1)
    assert (bars["x"][-1], bars["y"][-1]) == ("25 s – 32 s", 2)
    assert chart.columns == ["Latency", "From ms", "To ms", "Calls"]
    assert chart.rows[-1] == ["25 s – 32 s", "25118.9", "31622.8", 2]  # exact bounds kept
    assert "25 s – 32 s" in response.content.decode()


def test_it_opens_a_tool_named_with_dots_and_says_it_has_no_contract(
    admin_client: Client,
) -> None:
    record(*calls("mcp.time.get_current_time", 2))
    response = admin_client.get("/tools/mcp.time.get_current_time/")
    assert response.status_code == 200
    assert response.context["totals"].calls == 2
    assert response.context["score_chart"] is None
    assert "the evidence score needs a registered contract" in response.content.decode()


def test_it_opens_a_reported_tool_whose_name_holds_a_slash(admin_client: Client) -> None:
    record(*calls("crm/lookup", 1))
    url = reverse("tool-detail", args=["crm/lookup"])
    assert url == "/tools/crm/lookup/"
    assert admin_client.get(url).context["tool"] == "crm/lookup"
    assert 'href="/tools/crm/lookup/?range=24h"' in admin_client.get("/tools/").content.decode()


def test_it_answers_404_for_a_tool_nobody_registered_or_called(admin_client: Client) -> None:
    response = admin_client.get("/tools/no.such.tool/")
    assert response.status_code == 404
    assert "No tool is named “no.such.tool”" in response.content.decode()


def test_it_escapes_a_hostile_tool_name(admin_client: Client) -> None:
    hostile = "<script>alert(1)</script>"
    record(make_span(tool_name=hostile))
    for url in ("/tools/", reverse("tool-detail", args=[hostile])):
        page = admin_client.get(url).content.decode()
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page, url
        assert hostile not in page, url


def test_it_lists_capabilities_with_their_candidates(
    admin_client: Client, default_rules: None
) -> None:
    response = admin_client.get("/evidence/")
    overview = {item.name: item for item in response.context["capabilities"]}
    assert [score.tool for score in overview["Arithmetic"].scores_now][0] == "calculator"
    assert 'href="/evidence/Arithmetic/"' in response.content.decode()


def test_it_answers_404_for_an_unknown_capability(admin_client: Client) -> None:
    response = admin_client.get("/evidence/Teleportation/")
    assert response.status_code == 404
    assert "No capability is named “Teleportation”" in response.content.decode()


def test_it_says_when_no_tool_serves_a_capability(admin_client: Client) -> None:
    Capability.objects.create(name="Teleportation")
    ruleset_versions.record_version("a capability with no tools")
    response = admin_client.get("/evidence/Teleportation/")
    assert response.status_code == 200
    assert "No registered, enabled tool offers this capability" in response.content.decode()
    assert response.context["chart"] is None


def test_it_marks_the_bucket_where_the_preferred_tool_changes(admin_client: Client) -> None:
    checksum = Capability.objects.create(name="Checksum")
    for tool in ("hash_tool", "json_tools"):
        CapabilityMapping.objects.create(capability=checksum, tool=tool)
    ruleset_versions.record_version("two candidates")
    record(
        *calls("hash_tool", 4, started_at=hours_ago(4).isoformat()),
        *calls("json_tools", 4, started_at=hours_ago(4).isoformat(), status="error"),
        *calls("hash_tool", 4, started_at=hours_ago(3).isoformat(), status="error"),
        *calls("json_tools", 4, started_at=hours_ago(3).isoformat()),
    )
    response = admin_client.get("/evidence/Checksum/?range=6h")
    found = response.context["evidence"]
    assert set(found.series) == {"hash_tool", "json_tools"}
    flip = next(f for f in found.flips if f.bucket_start == hours_ago(3, 0))
    assert (flip.before, flip.after) == ("hash_tool", "json_tools")
    assert "json_tools" in flip.why and "0% ok" in flip.why
    chart = response.context["chart"]
    assert [trace["name"] for trace in chart.figure["data"]] == [
        "hash_tool", "json_tools", "Leader changes"
    ]  # fmt: skip
    leader_rows = [row for row in chart.rows if row[-1] == "leader"]
    assert len(leader_rows) == len(found.leaders) == len(chart.rows) // 2
    assert "Showing <strong>last 6 hours</strong>" in response.content.decode()
