"""REST endpoint of tool chains and waste: GET /api/v1/chains, one report in four sections."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.http import HttpRequest
from ninja import Field, Query, Router, Schema

from traces_app import tool_chains as chains
from traces_app.http.auth import key_or_staff
from traces_app.http.errors import query_window, responses
from traces_app.schemas import NAME_PATTERN, FilterMoment

router = Router(tags=["chains"])

OFTEN_FAILING_RANKING = (
    "tools with at least min_calls calls (stopped ones left out) that failed more often than "
    "they succeeded, most failures (calls x failure rate) first, then the higher failure rate"
)


class ChainQuery(Schema):
    since: FilterMoment | None = Field(
        None, description="Traces from this moment on (ISO 8601; default: 7 days before until)"
    )
    until: FilterMoment | None = Field(None, description="Traces before this moment (default: now)")
    tool: str | None = Field(
        None, max_length=200, pattern=NAME_PATTERN, description="Only rows holding this tool"
    )
    min_count: int = Field(
        chains.DEFAULT_MIN_COUNT,
        ge=1,
        le=1_000_000,
        description="Pairs and chains seen less are left out",
    )
    min_calls: int = Field(
        chains.DEFAULT_MIN_CALLS, ge=1, le=1_000_000, description="For often_failing: fewest calls"
    )
    limit: int = Field(chains.DEFAULT_LIMIT, ge=1, le=500, description="Rows per section")


class SampleOut(Schema):
    since: datetime
    until: datetime
    traces_read: int = Field(description="The newest traces with tool calls in the window read")
    spans_read: int = Field(description="Their tool spans")
    complete: bool = Field(description="False when the window holds more traces than were read")


class PairOut(Schema):
    tools: list[str] = Field(description="Two tools, by name in order")
    traces: int = Field(description="Traces that called both")
    failed_traces: int = Field(description="Of those, traces in which either failed")
    failure_rate: float
    trace_ids: list[str] = Field(description="Up to 20 of those traces, newest first")


class ChainOut(Schema):
    tools: list[str] = Field(description="Consecutive distinct tool calls, in call order")
    count: int = Field(description="Times the chain occurred")
    traces: int = Field(description="Traces it occurred in")
    failed: int = Field(description="Occurrences in which a step failed (its last attempt)")
    failure_rate: float
    trace_ids: list[str] = Field(description="Up to 20 of those traces, newest first")


class WasteOut(Schema):
    tool_name: str
    calls: int = Field(description="Tool spans (every attempt)")
    p50_result_tokens: float
    p95_result_tokens: float
    result_tokens: int = Field(description="Their output tokens in all")
    cut_calls: int = Field(description="Calls whose output the agent's token budget cut")
    cut_share: float
    truncated: int
    compressed: int
    omitted: int
    tokens_dropped: int = Field(description="Output tokens the budget cut away")


class OftenFailingOut(Schema):
    tool_name: str
    calls: int = Field(description="Calls that succeeded or failed (stopped ones left out)")
    failures: int
    failure_rate: float
    trace_ids: list[str] = Field(description="Up to 20 traces with a failed call, newest first")


class ChainReportOut(Schema):
    sample: SampleOut
    pairs: list[PairOut] = Field(description="Tools called in the same trace, most traces first")
    chains: list[ChainOut] = Field(description="A then B (then C), most occurrences first")
    waste: list[WasteOut] = Field(description="Per tool, most tokens dropped first")
    often_failing: list[OftenFailingOut] = Field(description="Called often, succeeds rarely")
    often_failing_ranking: str = Field(description="How often_failing is chosen and ranked")


@router.get(
    "/chains",
    auth=key_or_staff("read"),
    response=responses(ChainReportOut),
    summary="Tool pairs and chains with failure rates, output-token waste, tools that fail often",
)
def get_chains(request: HttpRequest, query: Query[ChainQuery]) -> dict[str, Any]:
    """Return the chains report of the newest traces in [since, until)."""
    since, until = query_window(query.since, query.until, chains.DEFAULT_WINDOW)
    report = chains.chain_report(
        since,
        until,
        tool=query.tool or "",
        min_count=query.min_count,
        min_calls=query.min_calls,
        limit=query.limit,
    )
    return report_body(report)


def report_body(report: chains.ChainReport) -> dict[str, Any]:
    """Return the report as the API's JSON body."""
    return {
        "sample": {
            "since": report.since,
            "until": report.until,
            "traces_read": report.traces_read,
            "spans_read": report.spans_read,
            "complete": report.sample_complete,
        },
        "pairs": [
            {
                "tools": list(pair.tools),
                "traces": pair.count,
                "failed_traces": pair.failed,
                "failure_rate": pair.failure_rate,
                "trace_ids": pair.trace_ids,
            }
            for pair in report.pairs
        ],  # fmt: skip
        "chains": [
            {
                "tools": list(chain.tools),
                "count": chain.count,
                "traces": chain.traces,
                "failed": chain.failed,
                "failure_rate": chain.failure_rate,
                "trace_ids": chain.trace_ids,
            }
            for chain in report.chains
        ],  # fmt: skip
        "waste": [{**vars(row), "cut_share": row.cut_share} for row in report.waste],
        "often_failing": [
            {
                "tool_name": row.tool_name,
                "calls": row.count,
                "failures": row.failed,
                "failure_rate": row.failure_rate,
                "trace_ids": row.trace_ids,
            }
            for row in report.often_failing
        ],  # fmt: skip
        "often_failing_ranking": OFTEN_FAILING_RANKING,
    }
