"""Recording spans: the one write path for in-process code and the ingest API alike."""

from __future__ import annotations

import dataclasses
import logging
import secrets
import threading
import time
from bisect import bisect_right
from collections import Counter, OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypeVar

from django.conf import settings
from django.db import DatabaseError, DataError, IntegrityError, OperationalError, transaction
from django.utils import timezone

from traces_app.models import (
    FailureSpiral,
    Invocation,
    SpanKind,
    SpiralResolution,
    Trace,
    add_to_trace_totals,
    insert_ignoring_conflicts,
    mark_rollups_dirty,
)
from traces_app.redaction import bound_text, redact_text, safe_payload
from traces_app.schemas import InvocationFromDict, InvocationIn
from traces_app.spirals import CallView, SpiralRule, arguments_fingerprint, find_spirals
from traces_app.tasks import recount_rollups_task

logger = logging.getLogger(__name__)

ERROR_MESSAGE_MAX_BYTES = 4096
T = TypeVar("T")

# PostgreSQL's deadlock and serialization failures: the transaction can simply run again.
_RETRYABLE_SQLSTATES = {"40P01", "40001"}


def new_trace_id() -> str:
    """Return a random W3C trace id (32 hex characters)."""
    return secrets.token_hex(16)


def new_span_id() -> str:
    """Return a random W3C span id (16 hex characters)."""
    return secrets.token_hex(8)


def record_invocation(**fields: Any) -> bool:
    """Validate and store one span for in-process code; return False if it was a duplicate.

    Raises pydantic.ValidationError when a field is wrong: in-process callers are our
    own code, and a bad record is a bug to fix, not data to guess at.
    """
    outcome = record_invocations([InvocationFromDict.model_validate(fields)])[0]
    if isinstance(outcome, Refused):
        raise ValueError(f"{outcome.field}: {outcome.reason}")
    return outcome


@dataclass(frozen=True)
class Refused:
    """A valid span the database would not store: the field it named, if any, and why."""

    field: str
    reason: str


StoreOutcome = bool | Refused  # True: stored now; False: a duplicate of a stored span


def record_invocations(
    items: Sequence[InvocationIn], *, recount_rollups: bool = True
) -> list[StoreOutcome]:
    """Store validated spans and add them to their traces; return each item's outcome.

    Idempotent on (trace id, span id): the database decides, so a batch retried or sent
    twice at once never stores a span twice or counts it twice in its trace's totals.
    When the database refuses one span's values (a constraint, an encoding), the batch
    is stored span by span so that only that span is lost, and it comes back as Refused.
    The spans' rollup buckets are marked in the same transaction (models.RollupMark);
    a caller storing many batches in a row may pass recount_rollups=False and call
    models.recount_all_marked_rollups once at the end (ares_demo does).
    """
    received_at = timezone.now()
    first_of_key: dict[tuple[str, str], InvocationIn] = {}
    for item in items:
        first_of_key.setdefault((item.trace_id, item.span_id), item)
    # Sorted rows make concurrent writers take row and index locks in one order.
    spans = [first_of_key[key] for key in sorted(first_of_key)]
    rows = [invocation_row(span, received_at) for span in spans]
    refused: dict[tuple[str, str], Refused] = {}
    try:
        inserted = _run_retrying(lambda: _store(spans, rows))
    except (DataError, IntegrityError):
        inserted, refused = _store_one_by_one(spans, rows)
    if inserted and recount_rollups:
        schedule_rollup_recount()
    seen: set[tuple[str, str]] = set()
    outcomes: list[StoreOutcome] = []
    for item in items:
        key = (item.trace_id, item.span_id)
        outcomes.append(refused.get(key) or (key in inserted and key not in seen))
        seen.add(key)
    return outcomes


def _store_one_by_one(
    spans: Sequence[InvocationIn], rows: Sequence[dict[str, Any]]
) -> tuple[set[tuple[str, str]], dict[tuple[str, str], Refused]]:
    """Store spans one transaction each; return the new keys and the refused ones."""
    inserted: set[tuple[str, str]] = set()
    refused: dict[tuple[str, str], Refused] = {}
    for span, row in zip(spans, rows, strict=True):
        try:
            inserted |= _run_retrying(lambda span=span, row=row: _store([span], [row]))
        except (DataError, IntegrityError) as exc:
            refused[(span.trace_id, span.span_id)] = _refusal(exc)
            logger.warning("span %s/%s refused by the database: %s", *span_key(span), exc)
    return inserted, refused


def span_key(span: InvocationIn) -> tuple[str, str]:
    """Return a span's (trace id, span id)."""
    return span.trace_id, span.span_id


def _refusal(exc: DatabaseError) -> Refused:
    """Return what the database said about a refused span, as a field and a reason."""
    diag = getattr(exc.__cause__, "diag", None)  # PostgreSQL's error fields
    field = (getattr(diag, "column_name", None) or "") if diag else ""
    reason = (getattr(diag, "message_primary", None) if diag else None) or str(exc)
    return Refused(field=field or "(item)", reason=f"the database refused it: {reason[:300]}")


class _RecountThrottle:
    """When this process last asked for a rollup recount."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.asked_at: float | None = None

    def due(self, interval_s: float) -> bool:
        """Return whether to ask now (and note that we did)."""
        now = time.monotonic()
        with self.lock:
            if self.asked_at is not None and now - self.asked_at < interval_s:
                return False
            self.asked_at = now
            return True


_recount_throttle = _RecountThrottle()


def schedule_rollup_recount() -> None:
    """After commit, recount marked rollups, at most every ARES_ROLLUP_REFRESH_INTERVAL_S.

    Recounting after every batch halved ingest speed (a batch spread over a day marks
    every hour of it). Correctness does not depend on this ask: the marks are in the
    database, and pages, the beat and `manage.py check_rollups` recount them too.
    """
    if _recount_throttle.due(settings.ARES_ROLLUP_REFRESH_INTERVAL_S):
        transaction.on_commit(recount_rollups_task.delay)


def invocation_row(item: InvocationIn, received_at: Any) -> dict[str, Any]:
    """Return the database row for a validated span: payloads redacted and bounded."""
    limit = settings.ARES_PAYLOAD_MAX_BYTES
    return {
        "trace_id": item.trace_id,
        "span_id": item.span_id,
        "parent_span_id": item.parent_span_id or "",
        "kind": item.kind,
        "tool_name": item.tool_name,
        "tool_call_id": item.tool_call_id,
        "chosen_by": item.chosen_by or "",
        "ran_on": item.ran_on or "",
        "agent": item.agent,
        "model": item.model,
        "arguments": safe_payload(item.arguments, limit),
        "result": safe_payload(item.result, limit),
        "status": item.status,
        "error_kind": item.error_kind,
        "error_message": bound_text(redact_text(item.error_message), ERROR_MESSAGE_MAX_BYTES),
        "started_at": item.started_at,
        "latency_ms": item.latency_ms,
        "input_tokens": item.input_tokens,
        "output_tokens": item.output_tokens,
        "result_tokens": item.result_tokens,
        "cost_usd": item.cost_usd,
        "attempt": item.attempt,
        "coercions": [bound_text(redact_text(text), 200) for text in item.coercions],
        "received_at": received_at,
    }


def _store(spans: Sequence[InvocationIn], rows: Sequence[dict[str, Any]]) -> set[tuple[str, str]]:
    """Insert the spans' rows and update their traces in one transaction; return the new keys."""
    with transaction.atomic():
        inserted = set(
            insert_ignoring_conflicts(
                Invocation, rows, ("trace", "span_id"), returning=("trace", "span_id")
            )
        )
        new = [
            (span, row)
            for span, row in zip(spans, rows, strict=True)
            if (span.trace_id, span.span_id) in inserted
        ]
        failed_calls = add_to_trace_totals(trace_deltas(new))
        mark_rollups_dirty(
            (row["started_at"], row["tool_name"] if row["kind"] == SpanKind.TOOL else "")
            for _, row in new
        )
        # In the same transaction, after the trace upsert: that row lock makes concurrent
        # batches of one trace take turns, so each re-reads the spans the other stored.
        for trace_id in spiral_candidates([row for _, row in new], failed_calls):
            detect_spirals(trace_id)
    return inserted


def spiral_rule() -> SpiralRule:
    """Return the spiral rule the settings define."""
    return SpiralRule(
        min_repeats=settings.ARES_SPIRAL_MIN_REPEATS,
        allow_tools=frozenset(settings.ARES_SPIRAL_ALLOW_TOOLS),
    )


class _RecentCalls:
    """A bounded, thread-safe count of recent (trace, tool, arguments) this process stored.

    It lets a healthy span cost no query: only a trace where one call's arguments have
    come min_repeats times is worth re-reading for a loop. Being per process, a loop whose
    calls reach different worker processes can go unseen until one process has counted
    min_repeats of them (or the trace fails min_repeats times).
    """

    def __init__(self, size: int) -> None:
        self.size = size
        self.counts: OrderedDict[tuple[str, str, str], int] = OrderedDict()
        self.lock = threading.Lock()

    def add(self, key: tuple[str, str, str]) -> int:
        """Count one more call with this key; return how many have been counted."""
        with self.lock:
            count = self.counts.pop(key, 0) + 1
            self.counts[key] = count
            if len(self.counts) > self.size:
                self.counts.popitem(last=False)
            return count


_recent_calls = _RecentCalls(size=10_000)  # ~2 MB a process; loops repeat within seconds


def spiral_candidates(rows: Sequence[dict[str, Any]], failed_calls: dict[str, int]) -> set[str]:
    """Return the traces whose new tool spans may have started or changed a spiral.

    A trace qualifies when it has failed at least min_repeats times in all (a failing
    spiral needs that many failures, and later spans may resolve it) or when a call's
    arguments have now come min_repeats times (a loop). Others are not read again.
    """
    rule = spiral_rule()
    candidates = set()
    for row in rows:
        if row["kind"] != SpanKind.TOOL:
            continue
        trace_id = row["trace_id"]
        if failed_calls.get(trace_id, 0) >= rule.min_repeats:
            candidates.add(trace_id)
        elif row["tool_name"] not in rule.allow_tools:
            key = (trace_id, row["tool_name"], arguments_fingerprint(row["arguments"]))
            if _recent_calls.add(key) >= rule.min_repeats:
                candidates.add(trace_id)
    return candidates


# How many of a trace's newest tool calls detection reads: a long-lived trace (an agent
# session reusing one id) must not cost a read of its whole history on every new span.
SPIRAL_WINDOW = 100


def detect_spirals(trace_id: str) -> None:
    """Read a trace's newest tool calls and store their spirals, replacing older findings."""
    calls = with_llm_turns(trace_id, newest_tool_calls(trace_id))
    # With a full window, spirals that began before it are left as they were stored.
    window_start = calls[0].started_at if len(calls) == SPIRAL_WINDOW else None
    FailureSpiral.objects.replace_for_trace(
        trace_id, find_spirals(calls, spiral_rule()), window_start
    )


def newest_tool_calls(trace_id: str) -> list[CallView]:
    """Return a trace's newest SPIRAL_WINDOW tool calls, oldest first, as the rule reads them.

    The agent loop's spiral breaker reads the same calls, so it and the dashboards agree.
    """
    newest = (
        Invocation.objects.filter(trace_id=trace_id, kind=SpanKind.TOOL)
        .order_by("-started_at", "-span_id")
        .values_list(
            "span_id", "tool_name", "status", "error_kind", "arguments", "started_at",
            "latency_ms", "input_tokens", "output_tokens", "result_tokens", "cost_usd",
            "chosen_by", "tool_call_id", "attempt",
        )
    )[:SPIRAL_WINDOW]  # fmt: skip
    return [
        CallView(
            span_id=span_id,
            tool_name=tool_name,
            status=status,
            error_kind=error_kind,
            arguments=arguments,
            started_at=started_at,
            latency_ms=latency_ms,
            tokens=input_tokens + output_tokens + result_tokens,
            cost_usd=cost_usd,
            chosen_by=chosen_by,
            tool_call_id=tool_call_id,
            attempt=attempt,
        )
        for (span_id, tool_name, status, error_kind, arguments, started_at, latency_ms,
             input_tokens, output_tokens, result_tokens, cost_usd, chosen_by, tool_call_id,
             attempt) in reversed(newest)
    ]  # fmt: skip


# A trace whose spiral has seen no new call for this long has stopped spiralling.
SPIRAL_QUIET = timedelta(minutes=10)


def rescan_spirals(since: datetime, limit: int = 2000) -> int:
    """Re-detect spirals in traces with tool calls received since `since`; return how many.

    Ingest sees a loop only when one process counted its repeats, so a loop whose calls
    reached different processes waits for this scan (the beat runs it every minute). It
    also settles loops that went quiet: an `ongoing` spiral with no call for SPIRAL_QUIET
    is marked gave_up. At most `limit` traces, the most recently received first.
    """
    recent = (
        Invocation.objects.filter(received_at__gte=since, kind=SpanKind.TOOL)
        .order_by("-received_at")
        .values_list("trace_id", flat=True)[: limit * 10]
    )
    trace_ids = list(
        Trace.objects.filter(pk__in=set(recent), tool_calls__gte=spiral_rule().min_repeats)
        .order_by("-started_at")
        .values_list("pk", flat=True)[:limit]
    )
    for trace_id in trace_ids:
        with transaction.atomic():
            detect_spirals(trace_id)
    FailureSpiral.objects.filter(
        resolution=SpiralResolution.ONGOING, ended_at__lt=timezone.now() - SPIRAL_QUIET
    ).update(resolution=SpiralResolution.GAVE_UP, updated_at=timezone.now())
    return len(trace_ids)


def trace_deltas(spans: Sequence[tuple[InvocationIn, dict[str, Any]]]) -> list[dict[str, Any]]:
    """Return, per trace, what new spans (with their rows) add: counts, tokens, time range."""
    deltas: dict[str, dict[str, Any]] = {}
    agent_from_root: set[str] = set()  # traces whose agent came from a root span
    for span, row in spans:
        started_at = row["started_at"]
        ended_at = started_at + timedelta(milliseconds=row["latency_ms"])
        delta = deltas.get(row["trace_id"])
        if delta is None:
            delta = deltas[row["trace_id"]] = {
                "trace_id": row["trace_id"],
                "agent": "",
                "session_id": "",
                "request_text": "",
                "started_at": started_at,
                "ended_at": ended_at,
                "span_count": 0,
                "tool_calls": 0,
                "llm_calls": 0,
                "failed_calls": 0,
                "input_tokens": 0,
                "output_tokens": 0,
                "cost_usd": 0.0,
                "tool_latency_ms": 0.0,
            }
        # The root span's agent names the trace (a sub-agent's spans may sort first).
        is_root = not row["parent_span_id"]
        if (
            row["agent"]
            and (not delta["agent"] or is_root)
            and row["trace_id"] not in agent_from_root
        ):
            delta["agent"] = row["agent"]
            if is_root:
                agent_from_root.add(row["trace_id"])
        delta["session_id"] = delta["session_id"] or span.session_id
        if not delta["request_text"] and span.request_text:
            delta["request_text"] = bound_text(
                redact_text(span.request_text), settings.ARES_PAYLOAD_MAX_BYTES
            )
        delta["started_at"] = min(delta["started_at"], started_at)
        delta["ended_at"] = max(delta["ended_at"], ended_at)
        delta["span_count"] += 1
        is_tool = row["kind"] == "tool"
        delta["tool_calls"] += is_tool
        delta["llm_calls"] += row["kind"] == "llm"
        delta["failed_calls"] += row["status"] == "error"
        delta["input_tokens"] += row["input_tokens"]
        delta["output_tokens"] += row["output_tokens"]
        delta["cost_usd"] += row["cost_usd"]
        if is_tool:
            delta["tool_latency_ms"] += row["latency_ms"]
    return list(deltas.values())


def _run_retrying(operation: Callable[[], T], attempts: int = 3) -> T:
    """Run a transaction, running it again after a deadlock or serialization failure."""
    for attempt in range(1, attempts + 1):
        try:
            return operation()
        except OperationalError as exc:
            sqlstate = getattr(exc.__cause__, "sqlstate", None)
            if sqlstate not in _RETRYABLE_SQLSTATES or attempt == attempts:
                raise
            logger.warning("retrying ingest transaction after %s (attempt %d)", sqlstate, attempt)
    raise AssertionError("unreachable")


def with_llm_turns(trace_id: str, calls: list[CallView]) -> list[CallView]:
    """Return the calls with the LLM turn that asked for each one added to its cost.

    A spiral wastes the model's turns as well as the tool's time: each call a model chose
    (not the planner or a workflow) takes its share of the trace's latest llm span started
    before it, shared evenly by the calls of that turn; its start moves back by that share
    of time, so a spiral starts when the model's first turn in it did.
    """
    chosen = [
        index for index, call in enumerate(calls)
        if call.started_at is not None and call.chosen_by not in ("planner", "workflow")
    ]  # fmt: skip
    if not chosen:
        return calls
    turns = list(
        Invocation.objects.filter(
            trace_id=trace_id, kind=SpanKind.LLM, started_at__lte=calls[chosen[-1]].started_at
        )
        .order_by("-started_at")
        .values_list("started_at", "latency_ms", "input_tokens", "output_tokens")[:SPIRAL_WINDOW]
    )[::-1]
    starts = [turn[0] for turn in turns]
    owners = {index: bisect_right(starts, calls[index].started_at) - 1 for index in chosen}
    owners = {index: turn for index, turn in owners.items() if turn >= 0}
    shares = Counter(owners.values())
    with_turns = list(calls)
    for index, turn in owners.items():
        _, latency_ms, input_tokens, output_tokens = turns[turn]
        call, share = calls[index], shares[turn]
        moved = latency_ms / share
        with_turns[index] = dataclasses.replace(
            call,
            tokens=call.tokens + (input_tokens + output_tokens) // share,
            latency_ms=call.latency_ms + moved,
            started_at=call.started_at - timedelta(milliseconds=moved),
        )
    return with_turns
