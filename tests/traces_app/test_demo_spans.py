"""ares_demo: realistic demo data through the one write path, rollups complete, idempotent."""

from __future__ import annotations

import io
from collections import Counter, defaultdict
from datetime import UTC, datetime, timedelta
from itertools import pairwise

import pytest
from django.core.management import CommandError, call_command
from django.db.models import Sum

from traces_app.demo_spans import INCIDENT, demo_spans, demo_trace_stream, demo_traces
from traces_app.models import FailureSpiral, Invocation, SpanRollup, ToolRollup, Trace

SPANS = 4000


def run_demo(*args: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command("ares_demo", "--invocations", str(SPANS), *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


@pytest.fixture
def demo(db: None) -> tuple[str, str]:
    return run_demo("--seed", "7")


def test_it_records_exactly_n_spans_in_whole_traces(demo: tuple[str, str]) -> None:
    assert f"Recorded {SPANS} new spans (0 already there)" in demo[0]
    assert Invocation.objects.count() == SPANS
    assert Trace.objects.aggregate(spans=Sum("span_count"))["spans"] == SPANS
    assert Trace.objects.count() > SPANS / 8  # a few spans a trace, not one big trace


def test_it_shows_progress_on_stderr(demo: tuple[str, str]) -> None:
    lines = demo[1].strip().splitlines()
    assert any("100%" in line and f"{SPANS:,}/{SPANS:,} spans" in line for line in lines)


def test_it_has_every_chooser_place_and_status(demo: tuple[str, str]) -> None:
    tools = Invocation.objects.tools()
    assert set(tools.values_list("chosen_by", flat=True)) == {
        "llm", "planner", "workflow", "external",
    }  # fmt: skip
    assert {"builtin", "remote", "mcp:time", "mcp:files"} <= set(
        tools.values_list("ran_on", flat=True)
    )
    assert Invocation.objects.filter(kind="llm").count() > SPANS / 4
    assert tools.filter(attempt=2).exists()  # engine retries


def test_it_has_planner_fallbacks(demo: tuple[str, str]) -> None:
    fallbacks = 0
    for trace in Trace.objects.filter(tool_calls__gte=2):
        calls = list(trace.invocations.filter(kind="tool").order_by("started_at"))
        fallbacks += sum(
            1
            for before, after in pairwise(calls)
            if (before.status, before.chosen_by) == ("error", "llm")
            and after.chosen_by == "planner"
            and after.tool_name != before.tool_name
        )
    assert fallbacks >= 10


def test_it_has_spirals_of_both_kinds_and_every_ending(demo: tuple[str, str]) -> None:
    kinds = Counter(FailureSpiral.objects.values_list("kind", "resolution"))
    assert kinds[("loop", "ongoing")] >= 1  # still going at the end of the window
    assert kinds[("loop", "repeated")] >= 1  # older loops of answered calls went quiet
    for ending in ("gave_up", "recovered", "planner_fallback"):
        assert kinds[("failing", ending)] >= 1, ending
    quiet = datetime.now(UTC) - timedelta(minutes=10)
    assert not FailureSpiral.objects.filter(resolution="ongoing", ended_at__lt=quiet).exists()


def test_it_leaves_the_rollups_complete(demo: tuple[str, str]) -> None:
    tool_calls = ToolRollup.objects.aggregate(calls=Sum("calls"))["calls"]
    assert tool_calls == Invocation.objects.tools().count()
    assert SpanRollup.objects.aggregate(calls=Sum("calls"))["calls"] == SPANS
    failures = ToolRollup.objects.aggregate(failures=Sum("failures"))["failures"]
    assert failures == Invocation.objects.tools().failed().count()


def test_it_adds_nothing_when_run_again_with_the_same_seed(demo: tuple[str, str]) -> None:
    before = (
        Trace.objects.aggregate(spans=Sum("span_count"), failed=Sum("failed_calls")),
        FailureSpiral.objects.count(),
        ToolRollup.objects.aggregate(calls=Sum("calls")),
    )
    out, _ = run_demo("--seed", "7")
    assert f"Recorded 0 new spans ({SPANS} already there)" in out
    assert Invocation.objects.count() == SPANS
    after = (
        Trace.objects.aggregate(spans=Sum("span_count"), failed=Sum("failed_calls")),
        FailureSpiral.objects.count(),
        ToolRollup.objects.aggregate(calls=Sum("calls")),
    )
    assert after == before


@pytest.mark.django_db
def test_it_spreads_the_spans_over_the_days_asked() -> None:
    run_demo("--days", "3", "--seed", "1")
    first = Invocation.objects.order_by("started_at").first().started_at
    last = Invocation.objects.order_by("-started_at").first().started_at
    now = datetime.now(UTC)
    assert now - timedelta(days=3, minutes=1) <= first < now - timedelta(days=2, hours=20)
    assert now - timedelta(hours=1) < last <= now
    hours = ToolRollup.objects.values("bucket_start").distinct().count()
    assert hours >= 3 * 24


@pytest.mark.django_db
@pytest.mark.parametrize("args", [["--days", "0"], ["--days", "400"], ["--batch", "0"]])
def test_it_refuses_bad_options(args: list[str]) -> None:
    with pytest.raises(CommandError):
        run_demo(*args)
    assert not Invocation.objects.exists()


def test_the_same_seed_gives_the_same_ids_whatever_the_clock() -> None:
    def ids(spans: list[dict]) -> list[tuple[str, str]]:
        return [(span["trace_id"], span["span_id"]) for span in spans]

    today = demo_spans(500, seed=4, now=datetime(2026, 1, 2, tzinfo=UTC))
    later = demo_spans(500, seed=4, now=datetime(2026, 3, 4, tzinfo=UTC))
    assert ids(today) == ids(later)
    assert len(set(ids(today))) == 500
    assert ids(today) != ids(demo_spans(500, seed=5))


def test_it_streams_traces_in_time_order() -> None:
    now = datetime(2026, 1, 2, tzinfo=UTC)
    starts = [
        datetime.fromisoformat(trace[0]["started_at"])
        for trace in demo_trace_stream(3000, seed=2, now=now)
    ]
    assert starts == sorted(starts)
    assert now - timedelta(days=1) <= starts[0] and starts[-1] < now


def test_its_tools_fail_each_in_their_own_way() -> None:
    called, failed, kinds = Counter(), Counter(), defaultdict(set)
    searches = {True: Counter(), False: Counter()}  # in the incident or not: status counts
    for index, trace in enumerate(demo_traces(10_000, seed=3)):
        in_incident = INCIDENT[0] <= index / 10_000 < INCIDENT[1]
        for span in trace:
            if span["kind"] != "tool":
                continue
            called[span["tool_name"]] += 1
            failed[span["tool_name"]] += span["status"] == "error"
            kinds[span["tool_name"]].add(span["error_kind"])
            if span["tool_name"] == "web_search":
                searches[in_incident][span["status"]] += 1
    rate = {name: failed[name] / called[name] for name in called}
    assert rate["hash_tool"] < 0.03 < 0.10 < rate["http_request"]
    # Bad expressions (the caller's fault), and timeouts in its incident: nothing else.
    assert kinds["calculator"] - {""} == {"invalid_arguments", "timeout"}
    assert "timeout" in kinds["web_search"] and "not_found" in kinds["mcp.files.read_file"]
    incident, usual = (searches[flag]["error"] / searches[flag].total() for flag in (True, False))
    assert incident > 3 * usual


def test_it_asks_at_least_fifty_different_things() -> None:
    spans = demo_spans(20_000, seed=1)
    requests = {span["request_text"] for span in spans if span.get("request_text")}
    assert len(requests) >= 50


def test_its_error_messages_agree_with_the_arguments() -> None:
    failed = [s for s in demo_spans(20_000, seed=1) if s["status"] == "error"]
    assert {s["error_kind"] for s in failed} >= {"invalid_arguments", "timeout", "not_found"}
    for span in failed:
        message, arguments = span["error_message"], span["arguments"]
        if span["error_kind"] == "invalid_arguments":
            name, _, said = message.partition(": ")
            assert str(arguments[name]) in said, span  # the wrong value it names is the one sent
        elif span["error_kind"] in ("timeout", "rate_limited"):
            assert message.startswith(span["tool_name"]), span
        else:
            assert any(str(value) in message for value in arguments.values()), span
    calculator = [s for s in failed if s["tool_name"] == "calculator"]
    assert all(
        isinstance(s["arguments"]["expression"], int)
        for s in calculator
        if s["error_kind"] == "invalid_arguments"
    )
