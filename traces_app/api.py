"""REST endpoints of traces_app: report spans, read traces, invocations and tool statistics."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta
from typing import Annotated, Any, Literal

from django.db.models import DurationField, ExpressionWrapper, F, Q, QuerySet, Window
from django.db.models.functions import RowNumber
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404
from django.utils import timezone
from ninja import Field, FilterLookup, FilterSchema, Query, Router, Schema
from ninja.errors import HttpError

from traces_app.http.auth import ApiKeyAuth, key_or_staff
from traces_app.http.bodies import batch_items, batch_request_body, batch_response, read_json_body
from traces_app.http.errors import WITH_BODY, InvalidRequestOut, query_window, responses
from traces_app.http.json_output import PreciseJsonEncoder, json_response
from traces_app.http.paging import NEWEST_FIRST, BadCursor, SortKey, keyset_page
from traces_app.ingest.recording import Refused, record_invocations
from traces_app.models import Invocation, OtlpProducer, RollupMark, ToolRollup, Trace
from traces_app.rollups.ranges import EARLIEST_FILTER
from traces_app.schemas import (
    BatchOut,
    CountOut,
    FieldError,
    FilterMoment,
    InvalidItem,
    InvocationFromDict,
    InvocationIn,
    InvocationOut,
    ItemOutcome,
    OtlpProducerOut,
    ToolStatsWindowOut,
    TraceDetailOut,
    TraceListItemOut,
    TraceOut,
    is_trace_id,
    validated,
)
from traces_app.scores.judgements import SCORE_FILTER_PATTERN, scores_matching

router = Router(tags=["traces"])


@router.post(
    "/invocations",
    auth=ApiKeyAuth("report"),
    # A 422 is a BatchOut when every item was rejected, the shared error for a bad envelope.
    response=responses(BatchOut, *WITH_BODY, others={422: BatchOut | InvalidRequestOut}),
    summary="Report a batch of spans (tool calls, LLM calls)",
    openapi_extra=batch_request_body("invocations", InvocationIn.model_json_schema()),
)
def report_invocations(request: HttpRequest) -> HttpResponse:
    """Validate each item on its own, store the valid ones, report every item's outcome.

    Idempotent on (trace_id, span_id). Gzip bodies are accepted. The status is 422 only
    when every item was rejected; otherwise 200 with per-item outcomes.
    """
    raw_items = batch_items(read_json_body(request), "invocations")
    outcomes: list[dict[str, Any] | None] = [None] * len(raw_items)
    valid: list[tuple[int, InvocationIn]] = []
    for index, raw in enumerate(raw_items):
        try:
            valid.append((index, validated(InvocationFromDict, raw)))
        except InvalidItem as exc:
            outcomes[index] = _rejected(index, raw, exc.errors).model_dump()
    stored = record_invocations([item for _, item in valid]) if valid else []
    for (index, item), outcome in zip(valid, stored, strict=True):
        if isinstance(outcome, Refused):  # a value the database would not store
            error = FieldError(field=outcome.field, reason=outcome.reason)
            outcomes[index] = _rejected(index, item.model_dump(), [error]).model_dump()
        else:
            outcomes[index] = _outcome(index, "accepted" if outcome else "duplicate", item)
    return batch_response(request, outcomes)  # the JSON of a BatchOut


def _outcome(index: int, status: str, item: InvocationIn) -> dict[str, Any]:
    """Return the ItemOutcome of a stored span as the dict its JSON is made from."""
    return {
        "index": index,
        "status": status,
        "trace_id": item.trace_id,
        "span_id": item.span_id,
        "errors": [],
    }


def _rejected(index: int, raw: Any, errors: list[FieldError]) -> ItemOutcome:
    ids = raw if isinstance(raw, dict) else {}
    trace_id, span_id = ids.get("trace_id"), ids.get("span_id")
    return ItemOutcome(
        index=index,
        status="rejected",
        trace_id=trace_id if isinstance(trace_id, str) and len(trace_id) <= 64 else None,
        span_id=span_id if isinstance(span_id, str) and len(span_id) <= 64 else None,
        errors=errors,
    )


# A list or count whose request names no `since` reads this far back (see read_window).
DEFAULT_WINDOW_DAYS = 7


class WindowOut(Schema):
    since: datetime = Field(description="The earliest start read (included)")
    until: datetime | None = Field(description="The start read up to (excluded); null: no end")
    basis: Literal["given", "default", "trace"] = Field(
        description=f"given: the request's since; default: none given, so the "
        f"{DEFAULT_WINDOW_DAYS} days before until (or before now); trace: none given, so "
        f"from the start of the trace named by trace_id"
    )


class Page(Schema):
    next_cursor: str | None = Field(description="Pass as ?cursor= to get the next page")
    window: WindowOut = Field(description="The time window the list was read in")


class TracePage(Page):
    items: list[TraceListItemOut]


class InvocationPage(Page):
    items: list[InvocationOut]


class WindowCountOut(CountOut):
    window: WindowOut = Field(description="The time window counted in")


class PageQuery(Schema):
    cursor: str | None = None
    limit: int = Field(50, ge=1, le=500)


# With include=spans, a page holds at most TRACES_WITH_SPANS traces of at most
# SPANS_PER_TRACE spans each, which bounds what one answer reads, holds and sends.
TRACES_WITH_SPANS = 50
SPANS_PER_TRACE = 1000
# Counting stops here: a count costs at most this many rows, however many match.
COUNT_LIMIT = 10_000


class IncludeQuery(Schema):
    include: Literal["spans"] | None = Field(
        None,
        description=f"spans: each trace with its spans, in time order (then limit is at most "
        f"{TRACES_WITH_SPANS})",
    )
    spans_limit: int = Field(
        SPANS_PER_TRACE,
        ge=1,
        le=SPANS_PER_TRACE,
        description="With include=spans: at most this many spans a trace, the earliest; "
        "spans_truncated says when a trace has more",
    )


class TimeFilter(FilterSchema):
    agent: str | None = None
    status: str | None = None
    since: Annotated[FilterMoment | None, FilterLookup("started_at__gte")] = Field(
        None, description="From this moment on (ISO 8601; UTC without a zone)"
    )
    until: Annotated[FilterMoment | None, FilterLookup("started_at__lt")] = Field(
        None, description="Before this moment (ISO 8601; UTC without a zone)"
    )


NameMatch = Literal["exact", "prefix", "contains"]
# A name filter that matches more tools than this is refused rather than run (see matching_tools).
MAX_MATCHED_TOOLS = 50


class TraceFilter(TimeFilter):
    session: Annotated[str | None, FilterLookup("session_id")] = Field(
        None, description="The traces (turns) of this session id, exactly"
    )
    q: str | None = Field(
        None,
        description="Text (any case) in the request, or in a span's error message, tool name "
        "or arguments",
    )
    tool: str | None = Field(None, description="Traces that called this tool (see match)")
    chosen_by: str | None = Field(None, description="Traces with a span chosen by llm/planner/...")
    score: str | None = Field(
        None,
        pattern=SCORE_FILTER_PATTERN,
        description="Traces with a score of this name (on the trace or any of its spans), "
        "or name:value with the value true, false, a number or a label: result_correct:false",
    )
    match: NameMatch = Field(
        "exact",
        description="How agent and tool match: the exact name, a prefix, or text it contains "
        "(prefix and contains ignore case)",
    )

    def filter_match(self, value: str) -> Q:
        return Q()  # read by filter_agent and filter_tool

    def filter_agent(self, value: str | None) -> Q:
        if not value:
            return Q()
        lookup = {"exact": "agent", "prefix": "agent__istartswith", "contains": "agent__icontains"}
        return Q(**{lookup[self.match]: value})

    def filter_tool(self, value: str | None) -> Q:
        if not value:
            return Q()
        if self.match == "exact":
            return Trace.objects.holding(self.since, tool_name=value)
        tools = matching_tools(self.match, value, self.since, self.until, MAX_MATCHED_TOOLS)
        return _holding_any(self.since, tools)

    def filter_score(self, value: str | None) -> Q:
        return Q(trace_id__in=scores_matching(value).values("trace_id")) if value else Q()

    def filter_chosen_by(self, value: str | None) -> Q:
        return Trace.objects.holding(self.since, chosen_by=value) if value else Q()

    def filter_q(self, value: str | None) -> Q:
        """Return traces whose request holds the text, or with a span that holds it.

        A span holds it in its error message or arguments (trigram indexes on PostgreSQL,
        migration 0011), or in its tool name, matched against the names the hourly rollups
        know, then found by the tool index. Spans start no earlier than their trace, so
        with `since` only the spans started since then are read (of_traces_since).
        """
        if not value:
            return Q()
        spans = Invocation.objects.filter(
            Q(error_message__icontains=value) | Q(arguments__icontains=value)
        )
        tools = matching_tools("contains", value, self.since, self.until, limit=None)
        if tools:
            spans = Invocation.objects.filter(
                Q(error_message__icontains=value)
                | Q(arguments__icontains=value)
                | Q(tool_name__in=tools)
            )
        if self.since is not None:
            spans = spans.of_traces_since(self.since)
        # Two id sets, not `request_text ILIKE ... OR pk IN (...)`: PostgreSQL then finds the
        # requests by their trigram index too, instead of matching every trace in the range.
        requests = Trace.objects.filter(request_text__icontains=value)
        if self.since is not None:
            requests = requests.filter(started_at__gte=self.since)
        if self.until is not None:
            requests = requests.filter(started_at__lt=self.until)
        return Q(pk__in=requests.values("pk")) | Q(pk__in=spans.values("trace_id"))


def matching_tools(
    match: NameMatch,
    text: str,
    since: Any,
    until: Any,
    limit: int | None,
) -> list[str]:
    """Return the tool names (from the hourly rollups of the range) that a prefix or text matches.

    The rollups hold one row per tool and hour, and the rollup marks name the tools of
    spans not counted yet, so this stays small however many spans are stored and misses
    none; the names then use the span index on tool_name. Raises HttpError(422)
    when more than `limit` tools match, rather than run a query on all of them.
    """
    lookup = "tool_name__istartswith" if match == "prefix" else "tool_name__icontains"
    names: set[str] = set()
    # The marks name the tools of spans the rollups have not counted yet.
    for model in (ToolRollup, RollupMark):
        hours = model.objects.filter(**{lookup: text})
        if since is not None:
            hours = hours.filter(bucket_start__gte=since.replace(minute=0, second=0, microsecond=0))
        if until is not None:
            hours = hours.filter(bucket_start__lt=until)
        names.update(hours.order_by().values_list("tool_name", flat=True).distinct())
    names.discard("")
    if limit is not None and len(names) > limit:
        raise HttpError(422, f"tool: {text!r} matches {len(names)} tools; at most {limit}")
    return sorted(names)


def _holding_any(since: Any, tools: list[str]) -> Q:
    """Return traces holding a span of any of these tools (none: no trace).

    Several names are one semi-join on the tool index, not one condition per name: OR-ing
    a correlated EXISTS per name made PostgreSQL probe each trace once per name (1.2 s
    for two names over 7 days at a million spans, 0.3 s this way).
    """
    if len(tools) == 1:
        return Trace.objects.holding(since, tool_name=tools[0])
    spans = Invocation.objects.filter(tool_name__in=tools)
    if since is not None:
        spans = spans.of_traces_since(since)
    return Q(pk__in=spans.values("trace_id")) if tools else Q(pk__in=[])


class InvocationFilter(TimeFilter):
    tool: Annotated[str | None, FilterLookup("tool_name")] = None
    chosen_by: str | None = None
    kind: str | None = None
    error_kind: str | None = None
    trace_id: str | None = None


def read_window(filters: TimeFilter) -> dict[str, Any]:
    """Give a filter without `since` one, so a read never scans every day; return the window.

    The default is DEFAULT_WINDOW_DAYS before `until` (or now). A span list of one trace
    (trace_id) starts at that trace instead, as a trace's spans start no earlier than it:
    every span of it, however old, and only its days read.
    """
    basis = "given"
    if filters.since is None:
        started = _trace_start(getattr(filters, "trace_id", None))
        basis = "trace" if started else "default"
        filters.since = started or _days_before(filters.until or timezone.now())
    return {"since": filters.since, "until": filters.until, "basis": basis}


def _trace_start(trace_id: str | None) -> datetime | None:
    if not trace_id:
        return None
    return Trace.objects.filter(pk=trace_id).values_list("started_at", flat=True).first()


def _days_before(moment: datetime) -> datetime:
    """Return DEFAULT_WINDOW_DAYS before a moment, or the earliest a filter may name."""
    window = timedelta(days=DEFAULT_WINDOW_DAYS)
    return moment - window if moment - EARLIEST_FILTER > window else EARLIEST_FILTER


# The orders a trace list can take: each pages on (its key, pk), see traces_app.http.paging.
TraceSort = Literal["-started", "started", "-duration", "-tokens", "-cost", "-spans", "-failed"]
TRACE_SORTS: dict[str, tuple[SortKey, str]] = {
    "-started": (NEWEST_FIRST, "newest first"),
    "started": (SortKey("started_at", descending=False), "oldest first"),
    "-duration": (SortKey("duration", kind="duration"), "longest first"),
    "-tokens": (SortKey("tokens", kind="number"), "most tokens first"),
    "-cost": (SortKey("cost_usd", kind="number"), "most expensive first"),
    "-spans": (SortKey("span_count", kind="number"), "most spans first"),
    "-failed": (SortKey("failed_calls", kind="number"), "most failed calls first"),
}


def sorted_traces(traces: QuerySet, sort: str) -> tuple[QuerySet, SortKey]:
    """Return the traces with the value a sort pages on, and that sort's key."""
    key, _ = TRACE_SORTS[sort]
    if key.field == "duration":
        duration = ExpressionWrapper(F("ended_at") - F("started_at"), output_field=DurationField())
        traces = traces.annotate(duration=duration)
    elif key.field == "tokens":
        traces = traces.annotate(tokens=F("input_tokens") + F("output_tokens"))
    return traces, key


class SortQuery(Schema):
    sort: TraceSort = Field(
        "-started",
        description="The order: -started (newest first), started, -duration, -tokens, -cost, "
        "-spans, -failed; a cursor pages in the order it came from",
    )


def paginate_by_start(
    queryset: QuerySet, page: PageQuery, key: SortKey = NEWEST_FIRST
) -> tuple[list[Any], str | None]:
    """Return one page, newest first, and the cursor of the next page (traces_app.http.paging)."""
    try:
        found = keyset_page(queryset, page.limit, after=page.cursor, key=key)
    except BadCursor:
        raise HttpError(422, "cursor is not one this API returned") from None
    return found.rows, found.next_cursor


@router.get(
    "/traces",
    auth=key_or_staff("read"),
    response=responses(TracePage),
    summary="List traces",
    exclude_unset=True,  # spans and spans_truncated: only with include=spans
)
def list_traces(
    request: HttpRequest,
    filters: Query[TraceFilter],
    page: Query[PageQuery],
    include: Query[IncludeQuery],
    order: Query[SortQuery],
) -> HttpResponse:
    """List traces, newest first or in another order; with include=spans, with their spans."""
    # (The docstring is the operation's OpenAPI description.) The answer is plain data in
    # TracePage's shape, rendered as is (rendered_page): validating 50 traces and their 250
    # spans through the schema took most of the request's time.
    if include.include == "spans" and page.limit > TRACES_WITH_SPANS:
        raise HttpError(422, f"limit: at most {TRACES_WITH_SPANS} traces a page with include=spans")
    window = read_window(filters)
    listed = Trace.objects.only(*TRACE_COLUMNS)  # not the times it was stored and updated
    traces, key = sorted_traces(filters.filter(listed), order.sort)
    items, next_cursor = paginate_by_start(traces, page, key)
    if include.include == "spans":
        attach_spans(items, include.spans_limit)
    rows = [trace_row(trace) for trace in items]
    return rendered_page(request, {"next_cursor": next_cursor, "window": window, "items": rows})


# The answer's fields in the schemas' order, which is the order model_dump gave them in.
# Their values are as validation left them: the databases give str, int and float (a
# FloatField's 0 too) for these columns, and JSON values as parsed.
TRACE_FIELDS = tuple(TraceOut.model_fields)
SPAN_FIELDS = tuple(InvocationOut.model_fields)
# The columns they are read from (duration_ms is a property of the start and end).
TRACE_COLUMNS = sorted({*TRACE_FIELDS} - {"duration_ms"})


def trace_row(trace: Trace) -> dict[str, Any]:
    """Return a trace as TraceListItemOut dumps it: with spans only when attach_spans gave them."""
    row = {name: getattr(trace, name) for name in TRACE_FIELDS}
    if hasattr(trace, "spans"):
        row["spans"], row["spans_truncated"] = trace.spans, trace.spans_truncated
    return row


def rendered_page(request: HttpRequest, page: dict[str, Any]) -> HttpResponse:
    """Return a page of plain data (TracePage's fields, in its order) as ninja would render it.

    Returning a response skips ninja's validation of the result through the schema, which
    the OpenAPI document still describes: the data is built to match it field for field
    (tests/traces_app/test_trace_list_answer.py compares the two). Its moments are written
    as text first, as the site's encoder writes them: the same text, for a third less
    time than the encoder calling back for each of them.
    """
    text_of = PreciseJsonEncoder().default
    window = page["window"]
    for name in ("since", "until"):
        if window[name] is not None:
            window[name] = text_of(window[name])
    for row in page["items"]:
        row["started_at"], row["ended_at"] = text_of(row["started_at"]), text_of(row["ended_at"])
        for span in row.get("spans", ()):
            span["started_at"] = text_of(span["started_at"])
    return json_response(request, page)


def attach_spans(traces: list[Trace], per_trace: int) -> None:
    """Give each trace its first `per_trace` spans in time order and whether it has more.

    One query for the whole page. When a trace may hold more than per_trace spans, a
    window function numbers each trace's spans in time order, and only the first
    per_trace + 1 of each are read (the extra one says that there are more). When none
    can (their span counts, which ingest adds in the transaction that stores the spans,
    are within it), every span of the page is read without one: that query costs a third
    as much. Each span is a dict in InvocationOut's shape, read as values, not model
    instances.
    """
    spans = Invocation.objects.of_traces(traces)
    if any(trace.span_count > per_trace for trace in traces):
        position = Window(
            RowNumber(),
            partition_by=F("trace_id"),
            order_by=(F("started_at").asc(), F("pk").asc()),
        )
        spans = spans.annotate(position=position).filter(position__lte=per_trace + 1)
    rows = spans.order_by("trace_id", "started_at", "pk").values_list(*SPAN_FIELDS)
    by_trace: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        span = dict(zip(SPAN_FIELDS, row, strict=True))
        by_trace[span["trace_id"]].append(span)
    for trace in traces:
        found = by_trace[trace.pk]
        trace.spans, trace.spans_truncated = found[:per_trace], len(found) > per_trace


def count_up_to_limit(queryset: QuerySet) -> dict[str, Any]:
    """Return how many rows match, exact up to COUNT_LIMIT; beyond it, COUNT_LIMIT, not exact."""
    found = queryset.order_by()[: COUNT_LIMIT + 1].count()
    return {"count": min(found, COUNT_LIMIT), "exact": found <= COUNT_LIMIT}


def first_up_to_limit(queryset: QuerySet, *fields: str) -> tuple[list[tuple[Any, ...]], bool]:
    """Return these fields of the first COUNT_LIMIT rows (in the queryset's order), and
    whether those are all that match.

    One query that reads at most COUNT_LIMIT + 1 rows however many match, as
    count_up_to_limit does: the traces page sums what it shows from them.
    """
    rows = list(queryset.values_list(*fields)[: COUNT_LIMIT + 1])
    return rows[:COUNT_LIMIT], len(rows) <= COUNT_LIMIT


COUNT_DESCRIPTION = (
    f"Exact up to {COUNT_LIMIT:,}: counting stops there, so a count costs at most "
    f"{COUNT_LIMIT + 1:,} rows. When more match, the answer is "
    f'`{{"count": {COUNT_LIMIT}, "exact": false}}`: more than {COUNT_LIMIT:,}.'
)


@router.get(
    "/traces/count",
    auth=key_or_staff("read"),
    response=responses(WindowCountOut),
    summary="Count the traces a filter matches",
    description=COUNT_DESCRIPTION,
)
def count_traces(request: HttpRequest, filters: Query[TraceFilter]) -> dict[str, Any]:
    window = read_window(filters)
    return {**count_up_to_limit(filters.filter(Trace.objects.all())), "window": window}


@router.get(
    "/traces/{trace_id}",
    auth=key_or_staff("read"),
    response=responses(TraceDetailOut, 404),
    summary="One trace with its spans",
)
def get_trace(request: HttpRequest, trace_id: str) -> Trace:
    if not is_trace_id(trace_id):
        raise HttpError(422, "trace_id must be 32 hex characters")
    trace = get_object_or_404(Trace, trace_id=trace_id.lower())
    trace.spans = list(Invocation.objects.of_trace(trace).order_by("started_at", "pk"))
    return trace


@router.get(
    "/invocations",
    auth=key_or_staff("read"),
    response=responses(InvocationPage),
    summary="List spans",
)
def list_invocations(
    request: HttpRequest, filters: Query[InvocationFilter], page: Query[PageQuery]
) -> dict[str, Any]:
    window = read_window(filters)
    queryset = filters.filter(Invocation.objects.all())
    items, next_cursor = paginate_by_start(queryset, page)
    return {"items": items, "next_cursor": next_cursor, "window": window}


@router.get(
    "/invocations/count",
    auth=key_or_staff("read"),
    response=responses(WindowCountOut),
    summary="Count the spans a filter matches",
    description=COUNT_DESCRIPTION,
)
def count_invocations(request: HttpRequest, filters: Query[InvocationFilter]) -> dict[str, Any]:
    window = read_window(filters)
    return {**count_up_to_limit(filters.filter(Invocation.objects.all())), "window": window}


@router.get(
    "/tools/stats",
    auth=key_or_staff("read"),
    response=responses(ToolStatsWindowOut),
    summary="Per-tool calls, success rate, p50/p95 latency and tokens over a window",
)
def get_tool_stats(
    request: HttpRequest, since: FilterMoment | None = None, until: FilterMoment | None = None
) -> dict[str, Any]:
    since, until = query_window(since, until, timedelta(hours=24))
    return {"since": since, "until": until, "tools": Invocation.objects.tool_stats(since, until)}


@router.get(
    "/otlp/producers",
    auth=key_or_staff("read"),
    response=responses(list[OtlpProducerOut]),
    summary="OpenTelemetry producers and their tool spans that arrived missing attributes",
)
def list_otlp_producers(request: HttpRequest, name: str | None = None) -> QuerySet:
    """List each service sending OTLP tool spans: how many lacked a tool name, status or arguments.

    Such spans are stored all the same (named after the span, status ok when unset); this
    tells the producer's developers which attributes their instrumentation leaves out.
    """
    producers = OtlpProducer.objects.all()
    return producers.filter(name=name) if name else producers
