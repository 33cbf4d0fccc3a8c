"""The traces list and the API's lists read what they show, not the whole span table.

The page's totals agree with the raw records (and say when they are capped or come from
the rollups), every span sub-query carries start-time bounds, and an API list or count
without `since` reads a default window that its answer names.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from tests.conftest import make_span
from traces_app import api as traces_api
from traces_app.forms import TraceFilterForm
from traces_app.ingest.recording import record_invocations
from traces_app.models import Invocation, Trace, trace_records
from traces_app.rollups.ranges import TimeRange
from traces_app.schemas import InvocationIn

NOW = datetime.now(UTC).replace(microsecond=0)
SINCE, UNTIL = NOW - timedelta(hours=6), NOW - timedelta(minutes=1)
RANGE = {"since": SINCE.isoformat(), "until": UNTIL.isoformat()}
SPAN_TABLE = '"traces_app_invocation"'


def record(*spans: dict[str, Any]) -> None:
    record_invocations([InvocationIn.model_validate(span) for span in spans])


def ago(**delta: float) -> str:
    return (NOW - timedelta(**delta)).isoformat()


@pytest.fixture
def mixed(db: None) -> list[str]:
    """Store 12 traces in the range (agents, tools, failures, stops, tokens, cost) and 2 out."""
    ids = [secrets.token_hex(16) for _ in range(14)]
    spans = []
    for n, trace_id in enumerate(ids[:12]):
        spans.append(
            make_span(
                trace_id=trace_id,
                agent="alpha" if n % 3 else "beta",
                tool_name="calculator" if n % 2 else "web_search",
                request_text=f"request {n}" + (" about FLIGHTS" if n % 4 == 0 else ""),
                status=["ok", "error", "ok", "stopped"][n % 4],
                error_kind="timeout" if n % 4 == 1 else "",
                result=None if n % 4 == 1 else {},
                input_tokens=100 * n,
                output_tokens=7 * n,
                cost_usd=0.01 * n,
                started_at=ago(hours=5, minutes=-20 * n),
            )
        )
        if n % 5 == 0:  # a second span, an LLM call, a few seconds later
            spans.append(
                make_span(
                    trace_id=trace_id,
                    kind="llm",
                    tool_name="",
                    model="m",
                    input_tokens=11,
                    cost_usd=0.5,
                    started_at=ago(hours=5, minutes=-20 * n, seconds=-5),
                )
            )
    spans.append(make_span(trace_id=ids[12], tool_name="calculator", started_at=ago(days=3)))
    spans.append(make_span(trace_id=ids[13], tool_name="calculator", started_at=ago(seconds=20)))
    record(*spans)  # fmt: skip
    return ids


def expected_totals(matches: Callable[[Trace], bool]) -> tuple[int, int, int, int, float]:
    """Return traces, failed, stopped, tokens and cost of the range's traces that match."""
    found = [
        trace
        for trace in Trace.objects.filter(started_at__gte=SINCE, started_at__lt=UNTIL)
        if matches(trace)
    ]
    return (
        len(found),
        sum(trace.status == "error" for trace in found),
        sum(trace.status == "stopped" for trace in found),
        sum(trace.input_tokens + trace.output_tokens for trace in found),
        round(sum(trace.cost_usd for trace in found), 6),
    )


def tools_of(trace: Trace) -> set[str]:
    return set(Invocation.objects.filter(trace_id=trace.pk).values_list("tool_name", flat=True))


def shown_totals(response: Any) -> tuple[int, int, int, int, float]:
    totals = response.context["totals"]
    return (
        totals["traces"],
        totals["failed"],
        totals["stopped"],
        totals["tokens"],
        round(totals["cost_usd"], 6),
    )


def strong(response: Any, name: str) -> str:
    html = response.content.decode()
    return re.search(rf'<strong id="total-{name}">([^<]*)</strong>', html).group(1)


FILTERS = [
    pytest.param({}, lambda trace: True, id="no filter"),
    pytest.param({"tool": "calc"}, lambda trace: "calculator" in tools_of(trace), id="tool"),
    pytest.param({"status": "error"}, lambda trace: trace.status == "error", id="status"),
    pytest.param({"agent": "bet"}, lambda trace: trace.agent == "beta", id="agent"),
    pytest.param({"q": "flights"}, lambda trace: "FLIGHTS" in trace.request_text, id="search"),
    pytest.param(
        {"tool": "calculator", "match": "exact", "status": "stopped"},
        lambda trace: "calculator" in tools_of(trace) and trace.status == "stopped",
        id="tool and status",
    ),
]


@pytest.mark.parametrize(("params", "matches"), FILTERS)
def test_it_totals_what_a_direct_count_of_the_records_finds(
    admin_client: Client, mixed: list[str], params: dict[str, str], matches: Callable
) -> None:
    response = admin_client.get("/traces/", {**RANGE, **params})

    assert response.status_code == 200
    assert shown_totals(response) == expected_totals(matches)
    assert expected_totals(matches)[0] > 0  # the data set has something to count
    assert strong(response, "traces") == str(expected_totals(matches)[0])
    assert 'id="totals-basis"' not in response.content.decode()


def test_it_says_more_than_the_limit_and_sums_the_newest_with_a_filter(
    admin_client: Client, mixed: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(traces_api, "COUNT_LIMIT", 3)

    response = admin_client.get("/traces/", {**RANGE, "agent": "alpha"})

    newest = Trace.objects.filter(agent="alpha", started_at__gte=SINCE, started_at__lt=UNTIL)
    newest = list(newest.order_by("-started_at")[:3])
    assert strong(response, "traces") == "more than 3"
    assert response.context["totals"]["basis"] == "newest"
    assert shown_totals(response)[1:] == expected_totals(lambda trace: trace in newest)[1:]
    assert "those of the newest 3 that match" in response.content.decode()


def test_it_takes_tokens_and_cost_from_the_rollups_past_the_limit_without_a_filter(
    admin_client: Client, mixed: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(traces_api, "COUNT_LIMIT", 3)
    hours = {"started_at__gte": SINCE.replace(minute=0, second=0), "started_at__lt": UNTIL}
    spans = list(Invocation.objects.filter(**hours))

    response = admin_client.get("/traces/", RANGE)

    totals = response.context["totals"]
    assert strong(response, "traces") == "more than 3"
    assert totals["basis"] == "rollups"
    assert totals["tokens"] == sum(span.input_tokens + span.output_tokens for span in spans)
    assert totals["cost_usd"] == pytest.approx(sum(span.cost_usd for span in spans))
    assert strong(response, "failed") == "3"  # 3 failed traces: exactly the limit, exact
    assert strong(response, "stopped") == "3"
    assert "from the hourly rollups" in response.content.decode()


def test_it_says_more_than_the_limit_of_failures_and_stops_too(
    admin_client: Client, mixed: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(traces_api, "COUNT_LIMIT", 2)

    response = admin_client.get("/traces/", RANGE)

    assert [strong(response, name) for name in ("traces", "failed", "stopped")] == [
        "more than 2"
    ] * 3


def span_subqueries(sql: str) -> list[str]:
    """Return the text of every SELECT on the span table in a statement, up to its end."""
    found = []
    for match in re.finditer(rf"FROM {SPAN_TABLE}", sql):
        depth, end = 0, len(sql)
        for index in range(match.end(), len(sql)):
            depth += {"(": 1, ")": -1}.get(sql[index], 0)
            if depth < 0:
                end = index
                break
        found.append(sql[match.start() : end])
    return found


def assert_bounded(queries: CaptureQueriesContext, *, least: int) -> None:
    """Assert that every read of the span table has a start-time lower and upper bound."""
    subqueries = [part for query in queries for part in span_subqueries(query["sql"])]
    assert len(subqueries) >= least, [query["sql"] for query in queries]
    for part in subqueries:
        assert re.search(r'"started_at" >=? ', part), part
        assert re.search(r'"started_at" <=? ', part), part


@pytest.mark.parametrize("dense", [False, True], ids=["id list", "exists"])
@pytest.mark.parametrize(
    "params",
    [
        {"tool": "calculator", "match": "exact"},
        {"tool": "calc", "status": "error"},
        {"chosen_by": "llm"},
        {"q": "timed out"},
        {"q": "calc", "tool": "web", "agent": "alpha"},
    ],
)
def test_every_span_subquery_of_the_page_carries_start_bounds(
    admin_client: Client,
    mixed: list[str],
    monkeypatch: pytest.MonkeyPatch,
    params: dict[str, str],
    dense: bool,
) -> None:
    monkeypatch.setattr(trace_records, "DENSE_SPANS", 0 if dense else 10**9)

    with CaptureQueriesContext(connection) as queries:
        response = admin_client.get("/traces/", {"range": "7d", **params})

    assert response.status_code == 200
    assert_bounded(queries, least=2)  # the page's rows and its totals at least


def test_the_exists_probe_reads_only_its_traces_time_range(
    mixed: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(trace_records, "DENSE_SPANS", 0)
    holding = Trace.objects.holding(SINCE, tool_name="calculator")

    sql = str(Trace.objects.filter(holding).query)

    assert "EXISTS" in sql
    assert re.search(r'"started_at" >= \(?"traces_app_trace"\."started_at"', sql), sql
    assert re.search(r'"started_at" <= \(?"traces_app_trace"\."ended_at"', sql), sql
    found = set(Trace.objects.filter(holding, started_at__gte=SINCE).values_list("pk", flat=True))
    assert found == {mixed[n] for n in range(1, 12, 2)} | {mixed[13]}


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/traces?tool=calc&match=prefix&q=flights",
        "/api/v1/traces/count?chosen_by=llm",
        "/api/v1/traces?tool=calculator",
        "/api/v1/invocations?tool=calculator",
        "/api/v1/invocations/count",
    ],
)
def test_every_span_read_of_an_api_list_without_since_carries_start_bounds(
    admin_client: Client, mixed: list[str], path: str
) -> None:
    with CaptureQueriesContext(connection) as queries:
        response = admin_client.get(path)

    assert response.status_code == 200, response.content
    assert response.json()["window"]["basis"] == "default"
    for part in (p for query in queries for p in span_subqueries(query["sql"])):
        assert re.search(r'"started_at" >=? ', part), part


# The API over real HTTP ----------------------------------------------------------------


@pytest.fixture
def ages(transactional_db: None) -> dict[str, str]:
    """Store traces started 1, 6, 8 and 20 days ago (one span each, the last with three)."""
    ids = {days: secrets.token_hex(16) for days in (1, 6, 8, 20)}
    record(*(make_span(trace_id=ids[days], started_at=ago(days=days)) for days in ids))
    record(*(make_span(trace_id=ids[20], started_at=ago(days=20, seconds=-n)) for n in (1, 2)))
    return {f"{days}d": trace_id for days, trace_id in ids.items()}


def listed(answer: Any) -> set[str]:
    return {item["trace_id"] for item in answer.json()["items"]}


def moment(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def test_a_list_without_since_reads_the_default_window_and_says_so(api, ages) -> None:
    answer = api.get("/traces")

    window = answer.json()["window"]
    assert listed(answer) == {ages["1d"], ages["6d"]}
    assert window["basis"] == "default" and window["until"] is None
    expected_since = datetime.now(UTC) - timedelta(days=traces_api.DEFAULT_WINDOW_DAYS)
    assert abs(moment(window["since"]) - expected_since) < timedelta(minutes=1)
    assert answer.json()["next_cursor"] is None  # the existing fields are still there


def test_a_list_with_since_reads_from_it(api, ages) -> None:
    answer = api.get("/traces", params={"since": ago(days=30)})

    assert listed(answer) == set(ages.values())
    assert answer.json()["window"] == {
        "since": ago(days=30).replace("+00:00", "Z"),
        "until": None,
        "basis": "given",
    }


def test_a_list_with_only_until_reads_the_window_before_it(api, ages) -> None:
    answer = api.get("/traces", params={"until": ago(days=5)})

    window = answer.json()["window"]
    assert listed(answer) == {ages["6d"], ages["8d"]}
    assert moment(window["until"]) - moment(window["since"]) == timedelta(days=7)
    assert window["basis"] == "default"


def test_a_count_reads_the_same_window_as_its_list(api, ages) -> None:
    for path in ("/traces", "/invocations"):
        items = api.get(path, params={"limit": 500}).json()["items"]
        count = api.get(f"{path}/count").json()

        assert (count["count"], count["exact"]) == (len(items), True)
        assert count["window"]["basis"] == "default"
    assert len(items) == 2  # the spans of the 1- and 6-day-old traces


def test_the_spans_of_a_named_trace_are_read_from_its_start(api, ages) -> None:
    answer = api.get("/invocations", params={"trace_id": ages["20d"]})
    count = api.get("/invocations/count", params={"trace_id": ages["20d"]}).json()

    assert len(answer.json()["items"]) == 3 == count["count"]
    assert answer.json()["window"]["basis"] == "trace"
    assert moment(answer.json()["window"]["since"]) == Trace.objects.get(pk=ages["20d"]).started_at


def test_an_unknown_trace_id_reads_the_default_window(api, ages) -> None:
    answer = api.get("/invocations", params={"trace_id": "f" * 32})

    assert answer.status_code == 200
    assert answer.json()["items"] == [] and answer.json()["window"]["basis"] == "default"


@pytest.mark.parametrize(
    ("params", "fragment"),
    [
        pytest.param({"until": "0001-01-02T00:00:00Z"}, None, id="until at the earliest"),
        pytest.param({"until": "0001-01-01T00:00:00Z"}, "until", id="until before it"),
        pytest.param({"since": "yesterday"}, "since", id="since not a date"),
    ],
)
def test_an_edge_of_the_window_is_an_answer_or_a_clear_error(
    api, ages, problem, params: dict[str, str], fragment: str | None
) -> None:
    for path in ("/traces", "/traces/count", "/invocations", "/invocations/count"):
        answer = api.get(path, params=params)

        if fragment is None:
            assert answer.status_code == 200, answer.text
            assert answer.json()["window"]["since"].startswith("0001-01-02")
        else:
            assert answer.status_code == 422
            assert fragment in problem(answer)


@pytest.mark.postgres
@pytest.mark.parametrize("dense", [False, True], ids=["id list", "exists"])
def test_on_postgresql_the_filters_read_only_the_partitions_of_the_range(
    mixed: list[str], monkeypatch: pytest.MonkeyPatch, dense: bool
) -> None:
    layout = pytest.importorskip("traces_app.partitions.layout")
    if not layout.is_partitioned():
        pytest.skip("the span table is not partitioned")
    monkeypatch.setattr(trace_records, "DENSE_SPANS", 0 if dense else 10**9)
    form = TraceFilterForm({"tool": "calculator", "q": "timed out", "chosen_by": "llm"})

    plan = form.filter(Trace.objects.all(), TimeRange(SINCE, UNTIL, "six hours")).explain()

    assert layout.partition_name(layout.day_of(NOW)) in plan, plan
    assert layout.partition_name(layout.day_of(NOW - timedelta(days=3))) not in plan, plan


def pages_walked(admin_client: Client, params: dict[str, str]) -> list[list[str]]:
    """Return the trace ids of every page of the list, following its older-page cursors."""
    pages, cursor = [], None
    while True:
        response = admin_client.get("/traces/", {**params, **({"after": cursor} if cursor else {})})
        assert response.status_code == 200
        pages.append([row.trace.pk for row in response.context["rows"]])
        cursor = response.context["page"].next_cursor
        if not cursor:
            return pages


@pytest.mark.parametrize(("params", "matches"), FILTERS)
@pytest.mark.parametrize("limit", [traces_api.COUNT_LIMIT, 4], ids=["all counted", "capped"])
def test_the_first_page_taken_from_the_totals_is_the_page_a_search_for_it_gives(
    admin_client: Client,
    mixed: list[str],
    params: dict[str, str],
    matches: Callable,
    limit: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from traces_app import views

    monkeypatch.setattr(views, "PAGE_SIZE", 3)
    monkeypatch.setattr(traces_api, "COUNT_LIMIT", limit)
    query = {**RANGE, **params}
    form = TraceFilterForm(query)
    matching = form.filter(Trace.objects.all(), TimeRange(SINCE, UNTIL, "six hours"))
    searched = views.keyset_page(matching, 3)

    pages = pages_walked(admin_client, query)

    assert pages[0] == [trace.pk for trace in searched.rows]
    newest_first = Trace.objects.filter(started_at__gte=SINCE, started_at__lt=UNTIL)
    expected = [t.pk for t in newest_first.order_by("-started_at", "-pk") if matches(t)]
    assert [pk for page in pages for pk in page] == expected and len(expected) >= 3


def test_a_text_search_runs_once_for_the_first_page_and_its_totals(
    admin_client: Client, mixed: list[str]
) -> None:
    with CaptureQueriesContext(connection) as queries:
        response = admin_client.get("/traces/", {**RANGE, "q": "flights"})

    searches = [query["sql"] for query in queries if "request_text" in query["sql"]
                and "LIKE" in query["sql"].upper()]  # fmt: skip
    assert response.status_code == 200 and len(response.context["rows"]) == 3
    assert len(searches) == 1, searches
