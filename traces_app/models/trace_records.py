"""Traces and their spans (tool, LLM and agent calls): the records, choices and queries."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from django.apps import apps
from django.conf import settings
from django.db import connection, models
from django.db.models.functions import Trunc
from django.utils import timezone

from traces_app.ingest.bulk_rows import rows_as_json, rows_from_json
from traces_app.rollups.histogram import LATENCY_EDGES_MS, percentile_cont

HOUR = timedelta(hours=1)


class SpanKind(models.TextChoices):
    TOOL = "tool", "Tool call"
    LLM = "llm", "LLM call"
    AGENT = "agent", "Agent step"
    OTHER = "other", "Other"


class ChosenBy(models.TextChoices):
    LLM = "llm", "LLM"
    PLANNER = "planner", "Planner"
    WORKFLOW = "workflow", "Workflow"
    EXTERNAL = "external", "Outside agent"


class SpanStatus(models.TextChoices):
    OK = "ok", "OK"
    ERROR = "error", "Error"
    # Ended by its caller's stop (the sandbox's Stop, a closed stream): no failure of the
    # tool, model or agent, and no success either, so it counts as neither anywhere.
    STOPPED = "stopped", "Stopped"


# Error kinds that are the caller's fault, not the tool's: arguments that break the
# contract (the engine refuses them before the tool runs; a tool that finds them wrong
# says so too), a tool the caller may not call, a tool an operator turned off, a call
# cancelled on the caller's side (the spiral breaker, a turn stopped early). They count
# against the model and agent that made the call (SpanRollup.caller_faults), never in a
# tool's success rate as evidence (planner_app.pipeline.scoring says why). not_found is
# not one: an unknown tool name is stored under that name, so it already falls on no
# registered tool, while a tool that answers "not found" itself has run and answered.
CALLER_FAULTS = frozenset({"invalid_arguments", "permission_denied", "disabled", "cancelled"})


class ResultReduction(models.TextChoices):
    """What the token budget did to a tool output that did not fit (agents/token_budget.py)."""

    TRUNCATED = "truncated", "Truncated (text kept its head)"
    COMPRESSED = "compressed", "Compressed (a list kept its top items)"
    OMITTED = "omitted", "Left out (the budget was spent)"


class TraceStatus(models.TextChoices):
    OK = "ok", "OK"
    ERROR = "error", "Has failures"
    STOPPED = "stopped", "Stopped"  # stopped by its caller, and nothing failed


def trace_status(failed_calls: int, stopped_calls: int) -> str:
    """Return a trace's status: a failure outweighs a stop, which outweighs ok."""
    if failed_calls:
        return TraceStatus.ERROR
    return TraceStatus.STOPPED if stopped_calls else TraceStatus.OK


class Dialect(models.TextChoices):
    """Which OpenTelemetry attribute convention reported a trace's spans (ingest/otlp_dialects)."""

    GENAI = "genai", "OpenTelemetry GenAI"
    OPENINFERENCE = "openinference", "OpenInference"
    OPENLLMETRY = "openllmetry", "OpenLLMetry"
    OTEL = "otel", "OpenTelemetry, no known dialect"


# Short names for the trace list's Source badges.
DIALECT_BADGES = {
    Dialect.GENAI: "GenAI",
    Dialect.OPENINFERENCE: "OpenInference",
    Dialect.OPENLLMETRY: "OpenLLMetry",
    Dialect.OTEL: "OTel",
}


# Above this many matching spans in a range, traces holding one are dense enough that
# walking the newest traces and probing each one's spans finds a page at once; below it,
# listing the matching spans first is cheaper than probing traces that hold none.
DENSE_SPANS = 20_000


class TraceManager(models.Manager):
    def note_dialect(self, trace_ids: Iterable[str], dialect: str) -> int:
        """Record that OTLP spans in `dialect` reported these traces; return how many changed.

        A named dialect replaces a blank one or "otel" (a trace's generic spans may come
        first); a trace keeps the first named dialect it was reported in.
        """
        weaker = [""] if dialect == Dialect.OTEL else ["", Dialect.OTEL]
        return self.filter(trace_id__in=list(trace_ids), dialect__in=weaker).update(dialect=dialect)

    def add_totals(self, deltas: Iterable[dict[str, Any]]) -> dict[str, int]:
        """Create traces or add span totals to them, in one statement; return their failed calls.

        The returned count (per trace id, after the update) comes free with the statement and
        tells the caller which traces have failed often enough to hold a failure spiral.

        Each delta holds a trace's new spans summed up (counts, tokens, cost, time range)
        and the agent and session, which fill in only what is still blank, and the request
        text with the start of its span, which replaces a request text from a later span.
        Rows are sorted by trace id so concurrent batches lock traces in the same order.
        """
        rows = sorted(deltas, key=lambda delta: delta["trace_id"])
        if not rows:
            return {}
        now = timezone.now()
        table = connection.ops.quote_name(self.model._meta.db_table)
        columns = [
            "trace_id", "agent", "session_id", "request_text", "started_at", "ended_at",
            "status", "span_count", "tool_calls", "llm_calls", "failed_calls", "stopped_calls",
            "input_tokens", "output_tokens", "cost_usd", "tool_latency_ms", "created_at",
            "updated_at",
            "request_started_at",
        ]  # fmt: skip
        fields = {name: self.model._meta.get_field(name) for name in columns}
        rows = [
            {
                **row,
                "status": trace_status(row["failed_calls"], row["stopped_calls"]),
                "created_at": now,
                "updated_at": now,
            }
            for row in rows
        ]
        fill_blank = [
            f"{name} = CASE WHEN {table}.{name} = '' THEN excluded.{name} ELSE {table}.{name} END"
            for name in ("agent", "session_id")
        ]
        # The request text of the earliest span that has one, whichever arrives first. SET
        # reads the row as it was, so both columns test the same old values.
        earlier = (
            f"excluded.request_text <> '' AND ({table}.request_text = '' "
            f"OR excluded.request_started_at < {table}.request_started_at)"
        )
        fill_blank += [
            f"{name} = CASE WHEN {earlier} THEN excluded.{name} ELSE {table}.{name} END"
            for name in ("request_text", "request_started_at")
        ]
        add = [
            f"{name} = {table}.{name} + excluded.{name}"
            for name in (
                "span_count", "tool_calls", "llm_calls", "failed_calls", "stopped_calls",
                "input_tokens", "output_tokens", "cost_usd", "tool_latency_ms",
            )
        ]  # fmt: skip
        widen = [
            f"started_at = CASE WHEN excluded.started_at < {table}.started_at "
            f"THEN excluded.started_at ELSE {table}.started_at END",
            f"ended_at = CASE WHEN excluded.ended_at > {table}.ended_at "
            f"THEN excluded.ended_at ELSE {table}.ended_at END",
            f"status = CASE WHEN {table}.failed_calls + excluded.failed_calls > 0 THEN 'error' "
            f"WHEN {table}.stopped_calls + excluded.stopped_calls > 0 THEN 'stopped' ELSE 'ok' END",
            "updated_at = excluded.updated_at",
        ]
        sql = (
            f"INSERT INTO {table} ({', '.join(columns)}) {rows_from_json(fields.values())} "
            f"ORDER BY trace_id ON CONFLICT (trace_id) DO UPDATE SET "
            f"{', '.join(fill_blank + add + widen)} RETURNING trace_id, failed_calls"
        )
        with connection.cursor() as cursor:
            cursor.execute(sql, [rows_as_json(rows, fields)])
            return dict(cursor.fetchall())

    def span_bounds(self, traces: models.QuerySet[Trace]) -> tuple[datetime, datetime] | None:
        """Return the range every stored span of these traces started in; None for no trace.

        Ingest widens a trace's [started_at, ended_at] with each span in the transaction
        that stores it, so the range is never narrower than its spans' starts.
        """
        bounds = traces.order_by().aggregate(
            low=models.Min("started_at"), high=models.Max("ended_at")
        )
        return None if bounds["low"] is None else (bounds["low"], bounds["high"])

    def holding(self, since: datetime | None = None, **span_fields: str) -> models.Q:
        """Return a condition on traces: holding a span with these fields (tool_name or chosen_by).

        The hourly rollups tell how many such spans the range holds, which picks the query
        that stays fast at a million spans: a correlated EXISTS per trace (newest first, stops
        at a page) when they are many, a trace id list (from the tool index) when they are
        few. Rollups lag a little behind ingest, which can only pick the slower of two
        queries that give the same answer. With `since`, both read only the spans that
        traces started since then can hold (InvocationQuerySet.of_traces_since), and the
        EXISTS only those within its trace's own time range: on PostgreSQL, the partitions
        of those days.
        """
        spans = Invocation.objects.filter(**span_fields)
        if since is not None:
            spans = spans.of_traces_since(since)
        if self._rollup_calls(since, span_fields) >= DENSE_SPANS:
            of_trace = spans.filter(
                trace_id=models.OuterRef("pk"),
                started_at__gte=models.OuterRef("started_at"),
                started_at__lte=models.OuterRef("ended_at"),
            )
            return models.Q(models.Exists(of_trace))
        return models.Q(pk__in=spans.values("trace_id"))

    def _rollup_calls(self, since: datetime | None, span_fields: dict[str, str]) -> int:
        """Return the spans with these fields in the rollups' hours since `since` (or in all)."""
        # By name: the rollup tables' module imports this one.
        if set(span_fields) == {"tool_name"}:
            rollups = apps.get_model("traces_app", "ToolRollup").objects
            rollups = rollups.filter(tool_name=span_fields["tool_name"])
        else:
            rollups = apps.get_model("traces_app", "SpanRollup").objects.filter(**span_fields)
        if since is not None:
            rollups = rollups.filter(
                bucket_start__gte=since.replace(minute=0, second=0, microsecond=0)
            )
        return rollups.aggregate(calls=models.Sum("calls", default=0))["calls"]


class Trace(models.Model):
    """One agent task: the spans that share a trace id, with running totals."""

    trace_id = models.CharField(max_length=32, primary_key=True)
    agent = models.CharField(max_length=200, blank=True)
    session_id = models.CharField(max_length=200, blank=True)
    request_text = models.TextField(blank=True)
    # When the span the request text is from started: a span that started earlier brings
    # its own, in whatever order they arrive (see TraceManager.add_totals).
    request_started_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField()
    ended_at = models.DateTimeField()
    status = models.CharField(max_length=16, choices=TraceStatus.choices, default=TraceStatus.OK)
    span_count = models.PositiveIntegerField(default=0)
    tool_calls = models.PositiveIntegerField(default=0)
    llm_calls = models.PositiveIntegerField(default=0)
    failed_calls = models.PositiveIntegerField(default=0)
    stopped_calls = models.PositiveIntegerField(
        default=0, db_default=0, help_text="Spans ended by their caller's stop: not failures"
    )
    input_tokens = models.PositiveBigIntegerField(default=0)
    output_tokens = models.PositiveBigIntegerField(default=0)
    cost_usd = models.FloatField(default=0.0)
    tool_latency_ms = models.FloatField(default=0.0)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)
    # A database default too: ingest inserts traces with SQL that does not name it.
    dialect = models.CharField(
        max_length=16,
        choices=Dialect.choices,
        blank=True,
        default="",
        db_default="",
        help_text="The OpenTelemetry dialect that reported it; blank for the REST API",
    )

    objects = TraceManager()

    class Meta:
        ordering = ["-started_at"]
        indexes = [
            models.Index(fields=["started_at"], name="trace_started"),
            models.Index(fields=["agent", "started_at"], name="trace_agent_started"),
            models.Index(fields=["status", "started_at"], name="trace_status_started"),
            # Sessions: the list groups by it, a session page reads its traces in order.
            models.Index(fields=["session_id", "started_at"], name="trace_session_started"),
        ]

    def __str__(self) -> str:
        return self.trace_id

    @property
    def duration_ms(self) -> float:
        return (self.ended_at - self.started_at).total_seconds() * 1000

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    @property
    def dialect_badge(self) -> str:
        """Return a short name of the OTLP dialect that reported it; "" for the REST API."""
        return DIALECT_BADGES.get(self.dialect, self.dialect)

    def recompute_totals(self) -> None:
        """Recount the totals from the stored spans, repairing any drift.

        The spans are read within the trace's time range, which ingest only ever widens
        with them: the counts may drift (a span lost), the range cannot leave one out.
        """
        spans = Invocation.objects.of_trace(self)
        totals = spans.aggregate(
            span_count=models.Count("pk"),
            tool_calls=models.Count("pk", filter=models.Q(kind=SpanKind.TOOL)),
            llm_calls=models.Count("pk", filter=models.Q(kind=SpanKind.LLM)),
            failed_calls=models.Count("pk", filter=models.Q(status=SpanStatus.ERROR)),
            stopped_calls=models.Count("pk", filter=models.Q(status=SpanStatus.STOPPED)),
            input_tokens=models.Sum("input_tokens", default=0),
            output_tokens=models.Sum("output_tokens", default=0),
            cost_usd=models.Sum("cost_usd", default=0.0),
            tool_latency_ms=models.Sum(
                "latency_ms", filter=models.Q(kind=SpanKind.TOOL), default=0.0
            ),
            started_at=models.Min("started_at"),
        )
        for name, value in totals.items():
            if value is not None:
                setattr(self, name, value)
        ends = [span.ended_at for span in spans.only("started_at", "latency_ms")]
        if ends:
            self.ended_at = max(ends)
        self.status = trace_status(self.failed_calls, self.stopped_calls)
        self.updated_at = timezone.now()
        self.save()


def caller_fault_q() -> models.Q:
    """Return the condition "a tool call that failed by the caller's fault" (CALLER_FAULTS)."""
    return models.Q(
        kind=SpanKind.TOOL, status=SpanStatus.ERROR, error_kind__in=sorted(CALLER_FAULTS)
    )


def _summed_totals() -> dict[str, models.Sum]:
    """Return the sums every rollup keeps of its spans: latency, tokens and cost."""
    return {
        name: models.Sum(column)
        for name, column in [
            ("latency_sum_ms", "latency_ms"),
            ("input_tokens", "input_tokens"),
            ("output_tokens", "output_tokens"),
            ("result_tokens", "result_tokens"),
            ("cost_usd", "cost_usd"),
        ]
    }


def _latency_bin_sql() -> models.Case:
    """Return the SQL expression of rollups.bucket_of(latency_ms), for grouping in the database."""
    return models.Case(
        *(
            models.When(latency_ms__lt=edge, then=models.Value(index))
            for index, edge in enumerate(LATENCY_EDGES_MS)
        ),
        default=models.Value(len(LATENCY_EDGES_MS)),
        output_field=models.IntegerField(),
    )


class PercentileCont(models.Aggregate):
    """PostgreSQL's percentile_cont(p) WITHIN GROUP (ORDER BY expression)."""

    function = "PERCENTILE_CONT"
    template = "%(function)s(%(percentile)s) WITHIN GROUP (ORDER BY %(expressions)s)"
    output_field = models.FloatField()

    def __init__(self, expression: Any, percentile: float) -> None:
        super().__init__(expression, percentile=float(percentile))


class InvocationQuerySet(models.QuerySet):
    def for_tool(self, name: str) -> InvocationQuerySet:
        return self.filter(tool_name=name)

    def tools(self) -> InvocationQuerySet:
        return self.filter(kind=SpanKind.TOOL)

    def since(self, moment: datetime) -> InvocationQuerySet:
        return self.filter(started_at__gte=moment)

    def until(self, moment: datetime) -> InvocationQuerySet:
        return self.filter(started_at__lt=moment)

    def failed(self) -> InvocationQuerySet:
        return self.filter(status=SpanStatus.ERROR)

    def of_trace(self, trace: Trace) -> InvocationQuerySet:
        """Return a trace's spans, bounded by its time range: on PostgreSQL, its partitions only.

        Every stored span of a trace started within [trace.started_at, trace.ended_at]:
        ingest widens the trace's range with each span in the same transaction.
        """
        return self.filter(
            trace_id=trace.pk,
            started_at__gte=trace.started_at,
            started_at__lte=trace.ended_at,
        )

    def of_traces(self, traces: Iterable[Trace]) -> InvocationQuerySet:
        """Return the spans of these traces, bounded by the time range they cover together."""
        traces = list(traces)
        if not traces:
            return self.none()
        return self.filter(
            trace_id__in=[trace.pk for trace in traces],
            started_at__gte=min(trace.started_at for trace in traces),
            started_at__lte=max(trace.ended_at for trace in traces),
        )

    def of_trace_ids(self, trace_ids: Iterable[str]) -> InvocationQuerySet:
        """Return the spans of the traces with these ids (their bounds read first: one query)."""
        trace_ids = list(trace_ids)
        bounds = Trace.objects.span_bounds(Trace.objects.filter(pk__in=trace_ids))
        return self.filter(trace_id__in=trace_ids).within(bounds)

    def of_trace_set(self, traces: models.QuerySet[Trace]) -> InvocationQuerySet:
        """Return the spans of a query's traces (a session's): their bounds read first."""
        bounds = Trace.objects.span_bounds(traces)
        return self.filter(trace_id__in=traces.values("pk")).within(bounds)

    def within(self, bounds: tuple[datetime, datetime] | None) -> InvocationQuerySet:
        """Return the spans started within [low, high] (see TraceManager.span_bounds); none
        for None."""
        if bounds is None:
            return self.none()
        return self.filter(started_at__gte=bounds[0], started_at__lte=bounds[1])

    def of_traces_since(self, since: datetime) -> InvocationQuerySet:
        """Return the spans that traces started at or after `since` can hold, by start time.

        A span starts no earlier than its trace, and no later than the latest start ingest
        accepts: now plus ARES_MAX_CLOCK_SKEW_SECONDS. So the bounds leave out no span of
        such a trace, even one that started after the end of a page's range, and on
        PostgreSQL they limit a query to the partitions of those days.
        """
        latest = timezone.now() + timedelta(seconds=settings.ARES_MAX_CLOCK_SKEW_SECONDS)
        return self.filter(started_at__gte=since, started_at__lte=latest)

    def in_hours(self, hours: Iterable[datetime]) -> InvocationQuerySet:
        """Return the spans started in one of these UTC hours."""
        window = models.Q()
        for start in sorted(hours):
            window |= models.Q(started_at__gte=start, started_at__lt=start + HOUR)
        return self.filter(window)

    def tool_groups(self, tools: Sequence[str] | None = None) -> models.QuerySet:
        """Return tool spans grouped by tool, hour, status, error kind and latency bin."""
        spans = self.tools()
        if tools is not None:
            spans = spans.filter(tool_name__in=tools)
        return (
            spans.annotate(hour=Trunc("started_at", "hour", tzinfo=UTC), bin=_latency_bin_sql())
            .values("tool_name", "hour", "status", "error_kind", "bin")
            .annotate(calls=models.Count("pk"), **_summed_totals())
            .order_by()
        )

    def span_groups(self) -> models.QuerySet:
        """Return spans grouped by hour, kind, chooser, place and agent."""
        return (
            self.annotate(bucket_start=Trunc("started_at", "hour", tzinfo=UTC))
            .values("bucket_start", "kind", "chosen_by", "ran_on", "agent")
            .annotate(
                calls=models.Count("pk"),
                failures=models.Count("pk", filter=models.Q(status=SpanStatus.ERROR)),
                stopped=models.Count("pk", filter=models.Q(status=SpanStatus.STOPPED)),
                caller_faults=models.Count("pk", filter=caller_fault_q()),
                **_summed_totals(),
            )
            .order_by()
        )

    def tool_stats(self, since: datetime, until: datetime) -> list[dict[str, Any]]:
        """Return per-tool calls, failures, stops, success rate, p50/p95 latency, tokens and cost.

        PostgreSQL computes the percentiles in SQL; SQLite has no percentile function, so
        there the latencies of the window are read and interpolated the same way in Python.
        """
        spans = self.tools().since(since).until(until)
        totals = {
            "calls": models.Count("pk"),
            "failures": models.Count("pk", filter=models.Q(status=SpanStatus.ERROR)),
            "stopped": models.Count("pk", filter=models.Q(status=SpanStatus.STOPPED)),
            "input_tokens": models.Sum("input_tokens"),
            "output_tokens": models.Sum("output_tokens"),
            "result_tokens": models.Sum("result_tokens"),
            "cost_usd": models.Sum("cost_usd"),
        }
        if connection.vendor == "postgresql":
            totals["p50_latency_ms"] = PercentileCont("latency_ms", 0.5)
            totals["p95_latency_ms"] = PercentileCont("latency_ms", 0.95)
        rows = list(spans.values("tool_name").annotate(**totals).order_by("tool_name"))
        if connection.vendor != "postgresql":
            latencies: dict[str, list[float]] = {}
            for name, latency in spans.values_list("tool_name", "latency_ms").order_by(
                "latency_ms"
            ):
                latencies.setdefault(name, []).append(latency)
            for row in rows:
                values = latencies.get(row["tool_name"], [])
                row["p50_latency_ms"] = percentile_cont(values, 0.5)
                row["p95_latency_ms"] = percentile_cont(values, 0.95)
        for row in rows:
            judged = row["calls"] - row["stopped"]  # a stopped call neither failed nor succeeded
            row["success_rate"] = (judged - row["failures"]) / judged if judged else None
        return rows


class Invocation(models.Model):
    """One span of a trace: a tool call attempt, an LLM call, or another step."""

    # No index of its own: the unique (trace, span_id) index serves look-ups by trace, and
    # a third index on every span insert costs ingest speed for nothing.
    trace = models.ForeignKey(
        Trace,
        on_delete=models.CASCADE,
        related_name="invocations",
        db_column="trace_id",
        db_index=False,
    )
    span_id = models.CharField(max_length=16)
    parent_span_id = models.CharField(max_length=16, blank=True)
    kind = models.CharField(max_length=16, choices=SpanKind.choices, default=SpanKind.TOOL)
    tool_name = models.CharField(max_length=200, blank=True)
    tool_call_id = models.CharField(max_length=200, blank=True)
    # What the producer says of the tool (OTLP gen_ai.tool.type / .description, or REST):
    # database defaults, so the bulk insert need not name them.
    tool_type = models.CharField(
        max_length=40,
        blank=True,
        default="",
        db_default="",
        help_text="function, extension or datastore (OpenTelemetry GenAI gen_ai.tool.type)",
    )
    tool_description = models.TextField(
        blank=True, default="", db_default="", help_text="The tool's description, as sent"
    )
    chosen_by = models.CharField(max_length=16, choices=ChosenBy.choices, blank=True)
    ran_on = models.CharField(
        max_length=120, blank=True, help_text="builtin, remote or mcp:<server>"
    )
    agent = models.CharField(max_length=200, blank=True)
    model = models.CharField(max_length=200, blank=True)
    arguments = models.JSONField(null=True, blank=True)
    result = models.JSONField(null=True, blank=True)
    status = models.CharField(max_length=8, choices=SpanStatus.choices)
    # A slug: invalid_arguments, not_found, timeout, tool_error, ... (tools_app.specs.ErrorKind
    # lists ours); outside reporters may send others.
    error_kind = models.CharField(max_length=40, blank=True)
    error_message = models.TextField(blank=True)
    started_at = models.DateTimeField()
    latency_ms = models.FloatField()
    input_tokens = models.PositiveIntegerField(default=0)
    output_tokens = models.PositiveIntegerField(default=0)
    result_tokens = models.PositiveIntegerField(
        default=0, help_text="Tokens of the tool output fed back to the model"
    )
    # What the token budget did to the output before the model saw it (database defaults:
    # the bulk insert need not name them).
    result_reduction = models.CharField(
        max_length=16,
        choices=ResultReduction.choices,
        blank=True,
        default="",
        db_default="",
        help_text="How the token budget cut the output fed back; blank: it was not cut",
    )
    result_tokens_dropped = models.PositiveIntegerField(
        default=0, db_default=0, help_text="Tokens of the tool output the token budget left out"
    )
    cost_usd = models.FloatField(default=0.0)
    attempt = models.PositiveIntegerField(default=1)
    coercions = models.JSONField(
        default=list, blank=True, help_text="Lossless fixes made to the arguments before the call"
    )
    received_at = models.DateTimeField(default=timezone.now)
    # OTLP agent attribution (ingest/agent_attribution.py). Set after the insert, and only
    # on the few spans that need it, so ingest writes no more for the rest: database defaults.
    names_agent = models.CharField(
        max_length=200,
        blank=True,
        default="",
        db_default="",
        help_text="An agent span's agent, handed down to the spans below it that have none",
    )
    # NULL, not "", for the spans not waiting: the partial index below leaves them out,
    # and both databases see that `agent_awaits IN (...)` can only match indexed rows.
    agent_awaits = models.CharField(  # noqa: DJ001
        max_length=16,
        null=True,
        blank=True,
        help_text="The missing ancestor span whose arrival settles this span's agent",
    )

    objects = InvocationQuerySet.as_manager()

    class Meta:
        ordering = ["started_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["trace", "span_id"], name="invocation_trace_span_unique"
            )
        ]
        indexes = [
            models.Index(fields=["tool_name", "started_at"], name="inv_tool_started"),
            models.Index(fields=["status", "started_at"], name="inv_status_started"),
            models.Index(fields=["agent", "started_at"], name="inv_agent_started"),
            models.Index(fields=["started_at"], name="inv_started"),
            # Finds what a batch or the last minutes touched, for rollup refreshes.
            models.Index(fields=["received_at"], name="inv_received"),
            # Partial: only spans still waiting for an ancestor, so it stays tiny.
            models.Index(
                fields=["trace", "agent_awaits"],
                name="inv_agent_awaits",
                condition=models.Q(agent_awaits__isnull=False),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.tool_name or self.model or self.span_id}"

    @property
    def ended_at(self) -> datetime:
        return self.started_at + timedelta(milliseconds=self.latency_ms)
