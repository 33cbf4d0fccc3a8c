"""The trace pages through the test client: access, filters, cursor pages, escaping, spirals."""

from __future__ import annotations

import json
import re
import secrets
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest
from django.test import Client

from tests.conftest import make_span
from traces_app import views
from traces_app.ingest.recording import record_invocations
from traces_app.models import ApiKey, FailureSpiral, Invocation, Trace, trace_records
from traces_app.schemas import InvocationIn

# Two hours back: outside the "1h" range however that range is rounded to whole hours.
# Two hours back: outside the "1h" range however that range is rounded to whole hours.
T0 = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=2)
HOSTILE = "<script>alert('pwned')</script>"


def at(seconds: float) -> str:
    return (T0 + timedelta(seconds=seconds)).isoformat()


def record(*spans: dict[str, Any]) -> None:
    record_invocations([InvocationIn.model_validate(span) for span in spans])


def trace_ids_on(response: Any) -> set[str]:
    """Return the ids of the traces a traces page lists."""
    return set(re.findall(r'href="/traces/([0-9a-f]{32})/"', response.content.decode()))


@pytest.fixture
def traces(db: None) -> dict[str, str]:
    """Store four traces; return their names mapped to their trace ids."""
    ids = {name: secrets.token_hex(16) for name in ("T1", "T2", "T3", "OLD")}
    record(
        make_span(trace_id=ids["T1"], agent="alpha", tool_name="web_search", chosen_by="llm",
                  request_text="Summarise the QUARTERLY report", started_at=at(0)),
        make_span(trace_id=ids["T1"], agent="alpha", tool_name="calculator", chosen_by="planner",
                  status="error", error_kind="timeout", result=None, started_at=at(1),
                  error_message="the tool timed out after 30 s", arguments={"expression": "2+3"},
                  cost_usd=0.25, input_tokens=1000),
        make_span(trace_id=ids["T2"], agent="beta", tool_name="web_search", chosen_by="workflow",
                  request_text="find cheap flights", started_at=at(20)),
        make_span(trace_id=ids["T3"], agent="beta", kind="llm", tool_name="", chosen_by=None,
                  ran_on=None, model="gpt-4o", request_text="say hello", started_at=at(30)),
        make_span(trace_id=ids["OLD"], agent="gamma", tool_name="calculator",
                  chosen_by="external", started_at=at(-3 * 24 * 3600)),
    )  # fmt: skip
    return ids


def failing_calls(trace_id: str, count: int = 3, **fields: Any) -> list[dict[str, Any]]:
    """Return `count` web_search calls failing alike, one argument changing each time."""
    return [
        make_span(
            trace_id=trace_id,
            tool_name="web_search",
            arguments={"query": f"try {i}", "max_results": 5},
            status="error",
            error_kind="timeout",
            error_message="tool timed out after 30 s",
            result=None,
            started_at=at(10 + i),
            latency_ms=100.0 * (i + 1),
            result_tokens=5,
            **fields,
        )
        for i in range(count)
    ]


@pytest.fixture
def spiral(db: None) -> FailureSpiral:
    """Store a trace where web_search fails three times, then the planner falls back."""
    trace_id = secrets.token_hex(16)
    record(
        make_span(trace_id=trace_id, kind="llm", tool_name="", chosen_by=None, ran_on=None,
                  model="gpt-4o", request_text="Find recent MCP articles", started_at=at(0)),
        *failing_calls(trace_id),
        make_span(trace_id=trace_id, tool_name="http_get", chosen_by="planner",
                  arguments={"url": "https://example.org"}, started_at=at(20)),
    )  # fmt: skip
    return FailureSpiral.objects.get(trace_id=trace_id)


PAGES = [
    pytest.param("/traces/", id="traces"),
    pytest.param("/traces/" + "a" * 32 + "/", id="trace detail"),
    pytest.param("/spirals/", id="spirals"),
    pytest.param("/spirals/1/", id="spiral detail"),
]


@pytest.mark.parametrize("path", PAGES)
def test_it_sends_anonymous_visitors_to_the_login_page(client: Client, db: None, path: str) -> None:
    # db: every page first checks that the database answers (ares_site.middleware).
    response = client.get(path)

    assert response.status_code == 302
    assert urlparse(response["Location"]).path == "/admin/login/"


@pytest.mark.parametrize("path", PAGES)
def test_it_refuses_an_api_key(client: Client, db: None, path: str) -> None:
    raw_key = ApiKey.objects.issue("agent", ["read", "report"])[1]

    response = client.get(path, HTTP_AUTHORIZATION=f"Bearer {raw_key}")

    assert response.status_code == 302
    assert urlparse(response["Location"]).path == "/admin/login/"


def test_it_refuses_users_who_are_not_staff(client: Client, django_user_model: Any) -> None:
    client.force_login(django_user_model.objects.create_user("visitor", password="pw-123456"))

    response = client.get("/traces/")

    assert response.status_code == 302


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        pytest.param({}, {"T1", "T2", "T3"}, id="no filter: the last 24 hours"),
        pytest.param({"range": "7d"}, {"T1", "T2", "T3", "OLD"}, id="range"),
        pytest.param({"agent": "alpha"}, {"T1"}, id="agent"),
        pytest.param({"tool": "web_search"}, {"T1", "T2"}, id="tool"),
        pytest.param({"status": "error"}, {"T1"}, id="status"),
        pytest.param({"chosen_by": "workflow"}, {"T2"}, id="who chose"),
        pytest.param({"q": "quarterly"}, {"T1"}, id="request text, any case"),
        pytest.param({"agent": "beta", "tool": "web_search"}, {"T2"}, id="agent and tool"),
        pytest.param({"agent": "nobody"}, set(), id="no match"),
        pytest.param({"agent": "ALP"}, {"T1"}, id="agent contains, any case"),
        pytest.param({"agent": "lph"}, {"T1"}, id="agent contains, mid-name"),
        pytest.param({"agent": "lph", "match": "prefix"}, set(), id="agent prefix, not a prefix"),
        pytest.param({"agent": "al", "match": "prefix"}, {"T1"}, id="agent prefix"),
        pytest.param({"agent": "alp", "match": "exact"}, set(), id="agent exact"),
        pytest.param({"tool": "search"}, {"T1", "T2"}, id="tool contains"),
        pytest.param({"tool": "calc", "match": "prefix"}, {"T1"}, id="tool prefix"),
        pytest.param({"tool": "calc", "match": "exact"}, set(), id="tool exact"),
        pytest.param({"tool": "zzz"}, set(), id="tool matching none"),
        pytest.param({"q": "timed out"}, {"T1"}, id="search: an error message"),
        pytest.param({"q": "Calculat"}, {"T1"}, id="search: a tool name"),
        pytest.param({"q": "cheap fl"}, {"T2"}, id="search: the request"),
        pytest.param({"q": "2+3"}, {"T1"}, id="search: the arguments"),
    ],
)
@pytest.mark.parametrize(
    "dense_spans",
    [pytest.param(0, id="probe each trace"), pytest.param(10**9, id="list span traces")],
)
def test_it_filters_traces(
    admin_client: Client,
    traces: dict[str, str],
    params: dict,
    expected: set,
    dense_spans: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Both ways of finding traces that hold a tool or chooser must agree.
    monkeypatch.setattr(trace_records, "DENSE_SPANS", dense_spans)

    response = admin_client.get("/traces/", params)

    assert response.status_code == 200
    assert trace_ids_on(response) == {traces[name] for name in expected}


def test_it_links_the_same_list_in_the_api(admin_client: Client, traces: dict[str, str]) -> None:
    response = admin_client.get("/traces/", {"agent": "alp", "range": "6h", "sort": "-cost"})

    link = re.search(r'id="api-link" href="([^"]+)"', response.content.decode()).group(1)
    query = parse_qs(urlparse(link.replace("&amp;", "&")).query)
    time_range = response.context["time_range"]
    assert urlparse(link).path == "/api/v1/traces"
    assert {key: values[0] for key, values in query.items()} == {
        "agent": "alp",
        "match": "contains",
        "sort": "-cost",
        "since": time_range.since.isoformat(),
        "until": time_range.until.isoformat(),
    }
    api = admin_client.get(link.replace("&amp;", "&")).json()
    assert [item["trace_id"] for item in api["items"]] == [traces["T1"]]


def test_it_totals_the_matching_traces(admin_client: Client, traces: dict[str, str]) -> None:
    Trace.objects.filter(pk=traces["T2"]).update(cost_usd=1234.5, input_tokens=1_000_000)

    response = admin_client.get("/traces/")

    totals = response.context["totals"]
    assert (totals["traces"], totals["failed"]) == (3, 1)
    assert totals["cost_usd"] == pytest.approx(1234.75)
    html = response.content.decode()
    assert '<strong id="total-traces">3</strong>' in html
    assert '<strong id="total-cost">$1,234.75</strong>' in html
    assert '<td class="num cost">1,234.50</td>' in html  # the cost column, with separators
    assert "1,000,000" in html


@pytest.mark.parametrize(
    ("sort", "order"),
    [
        pytest.param("-started", ["T3", "T2", "T1"], id="newest first"),
        pytest.param("started", ["T1", "T2", "T3"], id="oldest first"),
        pytest.param("-cost", ["T2", "T1", "T3"], id="cost"),
        pytest.param("-tokens", ["T3", "T1", "T2"], id="tokens"),
        pytest.param("-duration", ["T1", "T2", "T3"], id="duration"),
    ],
)
def test_it_sorts_traces(
    admin_client: Client, traces: dict[str, str], sort: str, order: list[str]
) -> None:
    Trace.objects.filter(pk=traces["T2"]).update(cost_usd=9.0)
    Trace.objects.filter(pk=traces["T3"]).update(input_tokens=50_000)
    Trace.objects.filter(pk=traces["T1"]).update(ended_at=T0 + timedelta(seconds=500))
    Trace.objects.filter(pk=traces["T2"]).update(ended_at=T0 + timedelta(seconds=30))  # 10 s

    response = admin_client.get("/traces/", {"sort": sort})

    assert [row.trace.pk for row in response.context["rows"]] == [traces[n] for n in order]
    assert f"sort={sort}" not in response.context["sort_query"]


def test_it_pages_through_a_sorted_list_both_ways(
    admin_client: Client, db: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(views, "PAGE_SIZE", 2)
    record(*[make_span(agent="pager", started_at=at(i), cost_usd=float(i % 3)) for i in range(5)])
    pages, params = [], {"agent": "pager", "sort": "-cost"}
    while params is not None:
        response = admin_client.get("/traces/", params)
        pages.append([row.trace for row in response.context["rows"]])
        last, params = response, follow(response, "next")

    listed = [trace for page in pages for trace in page]
    assert len({trace.pk for trace in listed}) == 5
    assert [trace.cost_usd for trace in listed] == [2.0, 1.0, 1.0, 0.0, 0.0]
    back = admin_client.get("/traces/", follow(last, "prev"))
    assert [row.trace.pk for row in back.context["rows"]] == [t.pk for t in pages[1]]


def test_it_lists_each_trace_with_its_tools_status_and_tokens(
    admin_client: Client, traces: dict[str, str]
) -> None:
    response = admin_client.get("/traces/", {"agent": "alpha"})

    (row,) = response.context["rows"]
    assert row.tools == ["calculator", "web_search"]
    html = response.content.decode()
    assert 'href="/tools/web_search/"' in html
    assert "Summarise the QUARTERLY report" in html
    assert "Has failures" in html


@pytest.mark.parametrize(
    ("params", "message"),
    [
        pytest.param({"status": "bogus"}, "status: Select a valid choice", id="status"),
        pytest.param({"chosen_by": "robot"}, "Who chose: Select a valid choice", id="who chose"),
        pytest.param({"agent": "x" * 300}, "agent: Ensure this value", id="long agent"),
        pytest.param({"after": "not-a-cursor"}, "Page: cursor is not one", id="cursor"),
        pytest.param({"before": "bm90fGE="}, "Page: cursor is not one", id="forged cursor"),
        pytest.param({"range": "1y"}, "unknown range", id="range"),
        pytest.param({"since": "yesterday", "until": "now"}, "not an ISO 8601", id="since"),
    ],
)
def test_it_explains_a_bad_filter_and_still_answers(
    admin_client: Client, traces: dict[str, str], params: dict, message: str
) -> None:
    response = admin_client.get("/traces/", params)

    assert response.status_code == 200
    assert message in response.content.decode()
    assert trace_ids_on(response)  # the valid filters still apply


def test_it_applies_the_valid_filters_beside_a_bad_one(
    admin_client: Client, traces: dict[str, str]
) -> None:
    response = admin_client.get("/traces/", {"agent": "alpha", "status": "bogus"})

    assert trace_ids_on(response) == {traces["T1"]}


def follow(response: Any, rel: str) -> dict[str, str] | None:
    """Return the query of a page's next or prev link, or None without one."""
    found = re.search(rf'<a rel="{rel}" href="\?([^"]+)"', response.content.decode())
    if found is None:
        return None
    query = parse_qs(found.group(1).replace("&amp;", "&"))
    return {key: values[0] for key, values in query.items()}


def test_it_pages_through_traces_with_a_cursor_both_ways(
    admin_client: Client, db: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(views, "PAGE_SIZE", 2)
    # Two traces share each start time: the cursor must still neither skip nor repeat one.
    record(*[make_span(agent="pager", started_at=at(i // 2)) for i in range(5)])
    pages, params = [], {"agent": "pager"}
    while params is not None:
        response = admin_client.get("/traces/", params)
        pages.append([row.trace.pk for row in response.context["rows"]])
        last, params = response, follow(response, "next")

    assert [len(page) for page in pages] == [2, 2, 1]
    listed = [pk for page in pages for pk in page]
    assert sorted(listed) == sorted(Trace.objects.values_list("pk", flat=True))
    starts = [Trace.objects.get(pk=pk).started_at for pk in listed]
    assert starts == sorted(starts, reverse=True)
    assert follow(last, "prev")["agent"] == "pager"
    back = admin_client.get("/traces/", follow(last, "prev"))
    assert [row.trace.pk for row in back.context["rows"]] == pages[1]


def test_it_shows_a_trace_with_its_waterfall_and_every_span(
    admin_client: Client, traces: dict[str, str]
) -> None:
    response = admin_client.get(f"/traces/{traces['T1']}/")

    assert response.status_code == 200
    chart = response.context["waterfall"]
    bars = chart.figure["data"]
    assert sorted(bar["name"] for bar in bars) == ["Tool call", "Tool call, failed"]
    assert [row[2] for row in chart.rows] == ["web_search", "calculator"]
    xaxis = chart.figure["layout"]["xaxis"]
    assert (xaxis["type"], xaxis["tickprefix"], xaxis["ticksuffix"]) == ("linear", "+", " ms")
    assert [bar["base"][0] for bar in sorted(bars, key=lambda bar: bar["name"])] == [0, 1000]
    html = response.content.decode()
    assert 'id="waterfall-figure"' in html
    assert 'class="tool-link" href="/tools/calculator/"' in html
    assert "timeout" in html


def test_it_nests_spans_under_their_parents_in_tree_order(admin_client: Client, db: None) -> None:
    trace_id = secrets.token_hex(16)
    record(
        make_span(trace_id=trace_id, span_id="a" * 16, kind="agent", tool_name="", chosen_by=None,
                  ran_on=None, started_at=at(0), latency_ms=5000),
        make_span(trace_id=trace_id, span_id="b" * 16, parent_span_id="a" * 16, kind="llm",
                  tool_name="", chosen_by=None, ran_on=None, model="gpt-4o", started_at=at(1)),
        make_span(trace_id=trace_id, span_id="d" * 16, parent_span_id="9" * 16,
                  tool_name="orphan", started_at=at(2)),
        make_span(trace_id=trace_id, span_id="c" * 16, parent_span_id="b" * 16,
                  tool_name="web_search", started_at=at(3)),
    )  # fmt: skip

    response = admin_client.get(f"/traces/{trace_id}/")

    rows = response.context["rows"]
    assert [(row.span.span_id[0], row.depth, row.number) for row in rows] == [
        ("a", 0, 1), ("b", 1, 2), ("c", 2, 3), ("d", 0, 4),
    ]  # fmt: skip
    assert [root.span.span_id[0] for root in response.context["tree"]] == ["a", "d"]
    waterfall = response.context["waterfall"]
    assert waterfall.figure["layout"]["yaxis"]["categoryarray"][:3] == [
        "1. Agent step", "2. gpt-4o", "3. web_search",
    ]  # fmt: skip
    html = response.content.decode()
    start = html.index('<ul class="span-tree"')
    tree = html[start : html.index("</nav>", start)]
    # c is inside b's list, itself inside a's: three nested lists before c's link.
    before_c = tree[: tree.index(f'data-span="{"c" * 16}"')]
    assert before_c.count("<ul") - before_c.count("</ul>") == 3
    assert tree.count('<button type="button" class="tree-toggle"') == 2  # a and b have children


def test_it_collapses_every_payload(admin_client: Client, traces: dict[str, str]) -> None:
    html = admin_client.get(f"/traces/{traces['T1']}/").content.decode()

    assert html.count('<details class="payload-block"><summary>Arguments') == 2
    assert '<details class="payload-block"><summary>Result' in html
    assert "<details open><summary>Arguments" not in html
    assert 'tabindex="0">' in html  # scrolling payload blocks are reachable by keyboard


def test_it_shows_what_an_llm_span_was_sent_and_answered(admin_client: Client, db: None) -> None:
    trace_id = secrets.token_hex(16)
    sent = {
        "messages": [
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": [{"type": "text", "text": "What is 6*7?"}]},
        ],
        "tools": [{"type": "function", "function": {"name": "calculator"}}, {"name": "web_search"}],
    }
    answer = {
        "content": None,
        "finish_reason": "tool_calls",
        "tool_calls": [{"function": {"name": "calculator", "arguments": '{"expression": "6*7"}'}}],
    }
    record(
        make_span(trace_id=trace_id, kind="llm", tool_name="", chosen_by=None, ran_on=None,
                  model="gpt-4o", arguments=sent, result=answer),
    )  # fmt: skip

    response = admin_client.get(f"/traces/{trace_id}/")

    (row,) = response.context["rows"]
    llm = row.llm
    assert [(m.role, m.content) for m in llm.messages] == [
        ("system", "You are terse."), ("user", "What is 6*7?"),
    ]  # fmt: skip
    assert llm.tools == ["calculator", "web_search"]
    assert llm.tool_calls == ['calculator({"expression": "6*7"})']
    html = response.content.decode()
    assert "Input messages (2)" in html
    assert "Tools offered (2)" in html
    assert "finish reason: tool_calls" in html
    assert "calculator({&quot;expression&quot;: &quot;6*7&quot;})" in html


def test_it_reads_opentelemetry_genai_messages_made_of_parts(
    admin_client: Client, db: None
) -> None:
    trace_id = secrets.token_hex(16)
    sent = {"messages": [{"role": "user", "parts": [{"type": "text", "content": "Weather?"}]}]}
    answer = [
        {
            "role": "assistant",
            "finish_reason": "tool_call",
            "parts": [{"type": "tool_call", "name": "weather", "arguments": {"city": "Oslo"}}],
        }
    ]
    record(
        make_span(trace_id=trace_id, kind="llm", tool_name="", chosen_by=None, ran_on=None,
                  model="gpt-4o", arguments=sent, result=answer),
    )  # fmt: skip

    (row,) = admin_client.get(f"/traces/{trace_id}/").context["rows"]

    assert [(m.role, m.content) for m in row.llm.messages] == [("user", "Weather?")]
    assert row.llm.tool_calls == ['weather({"city": "Oslo"})']
    assert row.llm.finish_reason == "tool_call"


def test_it_says_when_an_llm_span_recorded_only_counts(admin_client: Client, db: None) -> None:
    trace_id = secrets.token_hex(16)
    record(
        make_span(trace_id=trace_id, kind="llm", tool_name="", chosen_by=None, ran_on=None,
                  model="gpt-4o", arguments={"messages": 4, "tools": 3},
                  result={"content": "42", "finish_reason": "stop"}),
    )  # fmt: skip

    html = admin_client.get(f"/traces/{trace_id}/").content.decode()

    assert "Input messages: 4, contents not recorded" in html
    assert "Tools offered: 3, names not recorded" in html
    assert '<pre class="payload output" tabindex="0">42</pre>' in html


def test_it_answers_404_for_an_unknown_trace(admin_client: Client, db: None) -> None:
    assert admin_client.get("/traces/" + "b" * 32 + "/").status_code == 404
    assert admin_client.get("/traces/not-an-id/").status_code == 404


def test_it_escapes_hostile_tool_output_everywhere(admin_client: Client, db: None) -> None:
    trace_id = secrets.token_hex(16)
    record(
        make_span(trace_id=trace_id, tool_name="<b>bold</b>", request_text=HOSTILE,
                  result={"html": HOSTILE}, arguments={"q": HOSTILE}, status="error",
                  error_kind="tool_error", error_message=HOSTILE),
    )  # fmt: skip

    for path in (f"/traces/{trace_id}/", "/traces/"):
        html = admin_client.get(path).content.decode()
        assert HOSTILE not in html, path
        assert "<b>bold</b>" not in html, path
        assert "&lt;b&gt;bold&lt;/b&gt;" in html, path
    detail = admin_client.get(f"/traces/{trace_id}/").content.decode()
    assert detail.count("&lt;script&gt;alert(&#x27;pwned&#x27;)&lt;/script&gt;") == 4


def test_it_keeps_chart_data_inside_its_script_block(admin_client: Client, db: None) -> None:
    trace_id = secrets.token_hex(16)
    record(make_span(trace_id=trace_id, tool_name="</script><script>alert(1)</script>"))

    html = admin_client.get(f"/traces/{trace_id}/").content.decode()

    figure = re.search(
        r'<script id="waterfall-figure" type="application/json">(.*?)</script>', html, re.S
    )
    data = json.loads(figure.group(1))
    assert "&lt;/script&gt;" in data["data"][0]["customdata"][0][0]
    assert "</script><script>" not in html


def test_it_marks_spiral_attempts_and_the_planner_fallback(
    admin_client: Client, spiral: FailureSpiral
) -> None:
    response = admin_client.get(f"/traces/{spiral.trace_id}/")

    rows = response.context["rows"]
    assert [bool(row.spirals) for row in rows] == [False, True, True, True, False]
    assert [row.is_fallback for row in rows] == [False, False, False, False, True]
    html = response.content.decode()
    # The list above, 3 attempt badges and 3 "n of 3 in the spiral" links.
    assert html.count(f'href="/spirals/{spiral.pk}/"') == 7
    assert [[n for _, n in row.spiral_attempts] for row in rows] == [[], [1], [2], [3], []]
    for number in (1, 2, 3):
        assert f"{number} of 3 in the <a" in html
        assert f'<span class="badge attempt">attempt {number}/3</span>' in html
    assert 'href="/planner/try?request=Find%20recent%20MCP%20articles"' in html


def test_it_does_not_link_the_plan_when_the_planner_did_not_choose(
    admin_client: Client, traces: dict[str, str]
) -> None:
    html = admin_client.get(f"/traces/{traces['T2']}/").content.decode()

    assert "/planner/try?request=" not in html


@pytest.mark.parametrize(
    ("params", "found"),
    [
        pytest.param({}, True, id="no filter"),
        pytest.param({"tool": "web_search"}, True, id="tool"),
        pytest.param({"tool": "calculator"}, False, id="another tool"),
        pytest.param({"resolution": "planner_fallback"}, True, id="resolution"),
        pytest.param({"resolution": "gave_up"}, False, id="another resolution"),
        pytest.param({"kind": "loop"}, False, id="kind"),
        pytest.param({"range": "1h"}, False, id="range"),
    ],
)
def test_it_filters_spirals(
    admin_client: Client, spiral: FailureSpiral, params: dict, found: bool
) -> None:
    response = admin_client.get("/spirals/", params)

    assert response.status_code == 200
    assert ([spiral] if found else []) == list(response.context["page"].rows)


def test_it_lists_a_spiral_with_what_it_wasted_and_links(
    admin_client: Client, spiral: FailureSpiral
) -> None:
    html = admin_client.get("/spirals/").content.decode()

    assert f'href="/spirals/{spiral.pk}/"' in html
    assert f'href="/traces/{spiral.trace_id}/#span-{spiral.first_span_id}"' in html
    assert "Planner fallback" in html
    assert ">15<" in html  # wasted tokens: 3 attempts x 5 result tokens
    # The kind as the filter names it, not its key.
    assert "<td>Same failure repeated</td>" in html and "<td>failing</td>" not in html


def test_it_explains_a_bad_spiral_filter(admin_client: Client, spiral: FailureSpiral) -> None:
    response = admin_client.get("/spirals/", {"resolution": "exploded", "tool": "web_search"})

    assert response.status_code == 200
    assert "How it ended: Select a valid choice" in response.content.decode()
    assert list(response.context["page"].rows) == [spiral]


def test_it_shows_a_spiral_attempt_by_attempt(admin_client: Client, spiral: FailureSpiral) -> None:
    response = admin_client.get(f"/spirals/{spiral.pk}/")

    assert response.status_code == 200
    attempts = response.context["attempts"]
    assert [span.arguments["query"] for span in attempts] == ["try 0", "try 1", "try 2"]
    chart = response.context["chart"]
    assert [row[0] for row in chart.rows] == [1, 2, 3]
    assert [row[4] for row in chart.rows] == ["timeout"] * 3
    assert [row[5] for row in chart.rows] == [100.0, 200.0, 300.0]
    changes = response.context["changes"]
    assert [(change.step, change.keys) for change in changes] == [
        ("1 → 2", ["query"]),
        ("2 → 3", ["query"]),
    ]
    assert json.loads(changes[0].before) == {"query": "try 0"}
    assert json.loads(changes[0].after) == {"query": "try 1"}
    ending = response.context["ending"]
    assert (ending.tool_name, ending.chosen_by) == ("http_get", "planner")
    html = response.content.decode()
    # 3 calls of 100, 200 and 300 ms, and the 3.5 ms LLM turn that asked for the first.
    assert "15 tokens, 603.5 ms" in html
    assert 'href="/tools/web_search/"' in html
    assert f'href="/traces/{spiral.trace_id}/#span-{ending.span_id}"' in html


def test_it_shows_a_spiral_whose_spans_were_purged(
    admin_client: Client, spiral: FailureSpiral
) -> None:
    Invocation.objects.filter(trace_id=spiral.trace_id).delete()

    response = admin_client.get(f"/spirals/{spiral.pk}/")

    assert response.status_code == 200
    assert "no longer stored" in response.content.decode()
    assert "15 tokens" in response.content.decode()


def test_it_answers_404_for_an_unknown_spiral(admin_client: Client, db: None) -> None:
    assert admin_client.get("/spirals/999999/").status_code == 404


def test_it_links_a_tool_filter_to_the_tool_and_its_spirals(
    admin_client: Client, traces: dict[str, str]
) -> None:
    html = admin_client.get("/traces/", {"tool": "web_search", "range": "6h"}).content.decode()

    assert 'href="/spirals/?range=6h&amp;tool=web_search"' in html
    assert '<a href="/tools/web_search/">web_search</a>' in html


def test_it_links_a_spiral_tool_filter_to_its_traces(
    admin_client: Client, spiral: FailureSpiral
) -> None:
    html = admin_client.get("/spirals/", {"tool": "web_search"}).content.decode()

    assert 'href="/traces/?range=24h&amp;tool=web_search"' in html


def test_it_keeps_filters_but_not_the_page_when_the_range_changes(
    admin_client: Client, traces: dict[str, str]
) -> None:
    response = admin_client.get("/traces/", {"agent": "alpha", "after": "abc", "before": "def"})

    picker = re.search(r'<form class="range-picker".*?</form>', response.content.decode(), re.S)
    assert '<input type="hidden" name="agent" value="alpha">' in picker.group(0)
    assert 'name="after"' not in picker.group(0)
    assert 'name="before"' not in picker.group(0)
