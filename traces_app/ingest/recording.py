"""Recording spans: the one write path for in-process code and the ingest API alike."""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

from django.conf import settings
from django.db import (
    DatabaseError,
    DataError,
    IntegrityError,
    OperationalError,
    connection,
    transaction,
)
from django.utils import timezone

from traces_app.ingest.bulk_rows import insert_ignoring_conflicts
from traces_app.ingest.redaction import bound_text, redact_text, safe_payload
from traces_app.models import Invocation, SpanKind, Trace
from traces_app.partitions.layout import ensure_span_partitions, known_days
from traces_app.rollups.marks import mark_rollups_dirty
from traces_app.rollups.retention import oldest_storable
from traces_app.schemas import InvocationFromDict, InvocationIn
from traces_app.spirals.scanning import detect_spirals_in_traces, spiral_candidates

logger = logging.getLogger(__name__)

ERROR_MESSAGE_MAX_BYTES = 4096
T = TypeVar("T")

# The first key of the per-trace locks ingest takes on PostgreSQL ("ARES").
TRACE_TURN_LOCK = 0x41524553

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


def record_invocations(items: Sequence[InvocationIn]) -> list[StoreOutcome]:
    """Store validated spans and add them to their traces; return each item's outcome.

    Idempotent on (trace id, span id): the database decides, so a batch retried or sent
    twice at once never stores a span twice or counts it twice in its trace's totals.
    When the database refuses one span's values (a constraint, an encoding), the batch
    is stored span by span so that only that span is lost, and it comes back as Refused.
    The spans' rollup buckets are marked in the same transaction (models.RollupMark) and
    never recounted here: a recount grows with the hour, and the beat's
    recount-marked-rollups (every ARES_ROLLUP_BEAT_S) and pages (their range's marks,
    before rendering) do it.
    """
    received_at = timezone.now()
    first_of_key: dict[tuple[str, str], InvocationIn] = {}
    for item in items:
        first_of_key.setdefault((item.trace_id, item.span_id), item)
    # Sorted rows make concurrent writers take row and index locks in one order.
    refused = _past_retention(first_of_key.values())
    spans = [first_of_key[key] for key in sorted(first_of_key) if key not in refused]
    rows = [invocation_row(span, received_at) for span in spans]
    inserted: set[tuple[str, str]] = set()
    try:
        if spans:
            inserted = _store_in_partitions(spans, rows)
    except (DataError, IntegrityError):
        inserted, refused_by_database = _store_one_by_one(spans, rows)
        refused |= refused_by_database
    seen: set[tuple[str, str]] = set()
    outcomes: list[StoreOutcome] = []
    for item in items:
        key = (item.trace_id, item.span_id)
        outcomes.append(refused.get(key) or (key in inserted and key not in seen))
        seen.add(key)
    return outcomes


def _past_retention(spans: Iterable[InvocationIn]) -> dict[tuple[str, str], Refused]:
    """Return the spans started too long ago to keep: purged at once, they would count nowhere.

    Their hour's rollup is frozen, or soon will be (see models.PurgeHorizon): refused
    with the reason, rather than stored and never counted.
    """
    oldest = oldest_storable()
    reason = (
        f"started_at is before {oldest:%Y-%m-%d %H:%M} UTC: spans older than the retention "
        f"(ARES_RETENTION_DAYS={settings.ARES_RETENTION_DAYS}) are purged and not counted"
    )
    return {
        span_key(span): Refused("started_at", reason) for span in spans if span.started_at < oldest
    }


def _store_in_partitions(
    spans: Sequence[InvocationIn], rows: Sequence[dict[str, Any]]
) -> set[tuple[str, str]]:
    """Store spans once their days have partitions (PostgreSQL); return the new keys.

    A day's partition may have gone since this process saw it (a test's rolled-back
    transaction, a database restored): then the days are looked up again, once.
    """
    ensure_span_partitions(row["started_at"] for row in rows)
    try:
        return _run_retrying(lambda: _store(spans, rows))
    except IntegrityError as exc:
        if "no partition of relation" not in str(exc):
            raise
    known_days.forget()
    ensure_span_partitions(row["started_at"] for row in rows)
    return _run_retrying(lambda: _store(spans, rows))


def _store_one_by_one(
    spans: Sequence[InvocationIn], rows: Sequence[dict[str, Any]]
) -> tuple[set[tuple[str, str]], dict[tuple[str, str], Refused]]:
    """Store spans one transaction each; return the new keys and the refused ones."""
    inserted: set[tuple[str, str]] = set()
    refused: dict[tuple[str, str], Refused] = {}
    for span, row in zip(spans, rows, strict=True):
        try:
            inserted |= _store_in_partitions([span], [row])
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
        "tool_type": item.tool_type,
        "tool_description": item.tool_description,
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
        "result_reduction": item.result_reduction,
        "result_tokens_dropped": item.result_tokens_dropped,
        "cost_usd": item.cost_usd,
        "attempt": item.attempt,
        "coercions": [bound_text(redact_text(text), 200) for text in item.coercions],
        "received_at": received_at,
    }


def _store(spans: Sequence[InvocationIn], rows: Sequence[dict[str, Any]]) -> set[tuple[str, str]]:
    """Insert the spans' rows and update their traces in one transaction; return the new keys."""
    with transaction.atomic():
        fresh = rows
        if connection.vendor == "postgresql":
            stored = _take_turns_and_find_stored(rows)
            fresh = [row for row in rows if (row["trace_id"], row["span_id"]) not in stored]
        inserted = set(
            insert_ignoring_conflicts(
                Invocation, fresh, ("trace", "span_id"), returning=("trace", "span_id")
            )
        )
        new = [
            (span, row)
            for span, row in zip(spans, rows, strict=True)
            if (span.trace_id, span.span_id) in inserted
        ]
        failed_calls = Trace.objects.add_totals(trace_deltas(new))
        mark_rollups_dirty(
            (row["started_at"], row["tool_name"] if row["kind"] == SpanKind.TOOL else "")
            for _, row in new
        )
        # In the same transaction, after the trace upsert: that row lock makes concurrent
        # batches of one trace take turns, so each re-reads the spans the other stored.
        detect_spirals_in_traces(spiral_candidates([row for _, row in new], failed_calls))
    return inserted


def _take_turns_and_find_stored(rows: Sequence[dict[str, Any]]) -> set[tuple[str, str]]:
    """Wait for each trace's turn, then return the keys among `rows` already stored.

    On PostgreSQL the span table is partitioned by start time (partitions/layout.py),
    and its unique key holds the start, so by itself it would store a span sent again
    with another start time twice. Batches of one trace take turns on a lock per trace
    id (held to commit; taken in sorted order, so two batches cannot wait on each other),
    and look their keys up within the traces' time range: every stored span of a trace
    starts inside it, so the look-up reads the trace's one or two days.
    """
    trace_ids = sorted({row["trace_id"] for row in rows})
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_advisory_xact_lock(%s, hashtext(t)) FROM unnest(%s::text[]) AS t ORDER BY t",
            [TRACE_TURN_LOCK, trace_ids],
        )
        # Only a trace stored before can hold stored spans: most batches bring new ones.
        cursor.execute(
            "SELECT array_agg(trace_id), min(started_at), max(ended_at) FROM traces_app_trace "
            "WHERE trace_id = ANY(%s)",
            [trace_ids],
        )
        known, low, high = cursor.fetchone()
        if not known:
            return set()
        known = set(known)
        keys = [(row["trace_id"], row["span_id"]) for row in rows if row["trace_id"] in known]
        cursor.execute(
            "SELECT s.trace_id, s.span_id FROM unnest(%s::text[], %s::text[]) AS k(trace_id, "
            "span_id) JOIN traces_app_invocation s ON s.trace_id = k.trace_id "
            "AND s.span_id = k.span_id WHERE s.started_at >= %s AND s.started_at <= %s",
            [[key[0] for key in keys], [key[1] for key in keys], low, high],
        )
        return set(cursor.fetchall())


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
                "request_started_at": None,
                "started_at": started_at,
                "ended_at": ended_at,
                "span_count": 0,
                "tool_calls": 0,
                "llm_calls": 0,
                "failed_calls": 0,
                "stopped_calls": 0,
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
        # The request is the earliest span's that has one, not the first to arrive.
        if span.request_text and (
            not delta["request_text"] or started_at < delta["request_started_at"]
        ):
            delta["request_text"] = bound_text(
                redact_text(span.request_text), settings.ARES_PAYLOAD_MAX_BYTES
            )
            delta["request_started_at"] = started_at
        delta["started_at"] = min(delta["started_at"], started_at)
        delta["ended_at"] = max(delta["ended_at"], ended_at)
        delta["span_count"] += 1
        is_tool = row["kind"] == "tool"
        delta["tool_calls"] += is_tool
        delta["llm_calls"] += row["kind"] == "llm"
        delta["failed_calls"] += row["status"] == "error"
        delta["stopped_calls"] += row["status"] == "stopped"
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
