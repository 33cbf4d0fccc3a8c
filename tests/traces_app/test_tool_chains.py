"""The chains report's sample read in process: which traces' spans it reads, at its edges and
on demo traffic against each trace's own spans."""

from __future__ import annotations

import io
import secrets
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.core.management import call_command

from tests.conftest import make_span
from traces_app import tool_chains as chains
from traces_app.ingest.recording import record_invocation
from traces_app.models import Invocation, SpanKind, Trace

pytestmark = pytest.mark.django_db

NOW = datetime.now(UTC).replace(microsecond=0)
SINCE, UNTIL = NOW - timedelta(hours=2), NOW


def record(trace_id: str, start: datetime, *steps: tuple[str, float]) -> None:
    """Record one trace's tool calls: (tool, seconds after `start`), in order."""
    for tool, seconds in steps:
        moment = start + timedelta(seconds=seconds)
        record_invocation(**make_span(trace_id=trace_id, tool_name=tool, started_at=moment))


def chain_names(report: chains.ChainReport) -> list[tuple[str, ...]]:
    return [chain.tools for chain in report.chains]


def test_it_cuts_traces_that_started_together_in_trace_id_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    start = NOW - timedelta(minutes=30)
    low, middle, high = sorted(secrets.token_hex(16) for _ in range(3))
    record(low, start, ("left", 0), ("out", 1))
    record(middle, start, ("kept", 0), ("too", 1))
    record(high, start, ("kept", 0), ("too", 1))
    monkeypatch.setattr(chains, "MAX_TRACES", 2)
    report = chains.chain_report(SINCE, UNTIL, min_count=1)
    assert (report.traces_read, report.spans_read, report.sample_complete) == (2, 4, False)
    assert chain_names(report) == [("kept", "too")]
    assert report.chains[0].trace_ids == [high, middle]


def test_it_reads_a_sampled_trace_s_spans_after_the_window(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    trace_id = secrets.token_hex(16)
    record(trace_id, UNTIL - timedelta(minutes=1), ("first", 0), ("after", 120))
    report = chains.chain_report(SINCE, UNTIL, min_count=1)
    assert chain_names(report) == [("first", "after")]


def test_it_leaves_out_an_older_trace_s_spans_among_the_sampled_ones(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    older, newer = secrets.token_hex(16), secrets.token_hex(16)
    # The older trace runs on through the newer one's time: its calls there are not read.
    record(older, NOW - timedelta(minutes=40), ("old", 0), ("still", 20 * 60))
    record(newer, NOW - timedelta(minutes=25), ("new", 0), ("one", 10 * 60))
    monkeypatch.setattr(chains, "MAX_TRACES", 1)
    report = chains.chain_report(SINCE, UNTIL, min_count=1)
    assert (report.traces_read, report.spans_read) == (1, 2)
    assert chain_names(report) == [("new", "one")]
    assert [row.tool_name for row in report.waste] == ["new", "one"]


def test_it_reads_every_trace_when_the_window_holds_few() -> None:
    first, second = secrets.token_hex(16), secrets.token_hex(16)
    record(first, NOW - timedelta(minutes=50), ("a", 0), ("b", 1), ("c", 2))
    record(second, NOW - timedelta(minutes=10), ("a", 0), ("b", 1))
    record(secrets.token_hex(16), SINCE - timedelta(minutes=5), ("a", 0), ("b", 1))
    report = chains.chain_report(SINCE, UNTIL, min_count=1)
    assert (report.traces_read, report.spans_read, report.sample_complete) == (2, 5, True)
    by_tools = {chain.tools: chain for chain in report.chains}
    assert (by_tools["a", "b"].count, by_tools["a", "b"].trace_ids) == (2, [second, first])
    assert by_tools["a", "b", "c"].count == 1


def each_trace_s_own_spans(window: Any, trace_ids: list[str]) -> dict[str, list[Any]]:
    """Read the sampled traces' tool spans one trace at a time, each within its own bounds."""
    by_trace = {}
    for found in Trace.objects.filter(pk__in=trace_ids):
        spans = Invocation.objects.of_trace(found).filter(kind=SpanKind.TOOL)
        rows = spans.order_by("started_at", "span_id").values_list(*chains._Span._fields)
        by_trace[found.pk] = [chains._Span._make(row) for row in rows]
    return by_trace


def late_spans() -> None:
    """Send spans that arrive late: before a trace's first call, after another's last."""
    newest, *_, oldest = Trace.objects.filter(tool_calls__gt=0).order_by("-started_at")[:150]
    for found, moment in ((newest, newest.started_at - timedelta(minutes=3)),
                          (oldest, oldest.ended_at + timedelta(minutes=30))):  # fmt: skip
        record_invocation(**make_span(trace_id=found.pk, tool_name="late", started_at=moment))


def test_the_report_is_what_each_trace_s_own_spans_give(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    call_command("ares_demo", "--invocations", "3000", "--seed", "3", "--no-demo-server",
                 stdout=io.StringIO(), stderr=io.StringIO())  # fmt: skip
    now = datetime.now(UTC)
    windows = [
        {"since": now - timedelta(days=7), "until": now},
        {"since": now - timedelta(days=1), "until": now - timedelta(hours=6)},
        {"since": now - timedelta(days=1), "until": now, "max_traces": 100},
        {"since": now - timedelta(days=1), "until": now, "tool": "web_search"},
    ]
    for sent_late in (False, True):
        if sent_late:
            late_spans()
        for window in windows:
            options = {**window, "min_count": 1, "min_calls": 1, "limit": 500}
            read = chains.chain_report(**options)
            with monkeypatch.context() as patched:
                patched.setattr(chains, "_tool_spans", each_trace_s_own_spans)
                assert chains.chain_report(**options) == read, (window, sent_late)
            assert read.traces_read and read.chains and read.waste
    assert any(row.tool_name == "late" for row in chains.chain_report(**windows[0]).waste)
