"""Scores: judgements of calls and traces, checked against their definitions and stored.

A score names a ScoreDefinition, whose type and range or labels its value must fit. It
belongs to a span (trace id + span id) or to a whole trace (trace id only), which need not
be stored yet: such a score is kept `pending`, up to ARES_SCORE_PENDING_MAX at a time, and
is dropped when its span has not arrived within ARES_SCORE_PENDING_TTL_H hours.
Sending a score again with the same client id stores nothing new.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Exists, OuterRef, Q, QuerySet
from django.utils import timezone

from traces_app.models import Invocation, Score, ScoreDefinition, Trace


@dataclass
class ScoreItem:
    """One score of a batch, read: the row to store, or why it cannot be."""

    index: int
    row: dict[str, Any] | None = None
    errors: list[tuple[str, str]] = field(default_factory=list)
    status: str = ""  # accepted, duplicate or rejected once stored
    score_id: int | None = None
    pending: bool = False


def check_values(items: Sequence[ScoreItem]) -> None:
    """Check each item's value against its definition; an unknown name is an error."""
    names = {item.row["name"] for item in items if item.row}
    definitions = {d.name: d for d in ScoreDefinition.objects.filter(name__in=names)}
    known = ""
    for item in items:
        if item.row is None:
            continue
        definition = definitions.get(item.row["name"])
        if definition is None:
            known = known or ", ".join(ScoreDefinition.objects.values_list("name", flat=True)[:20])
            item.errors.append(
                ("name", f"no score definition named {item.row['name']!r} (defined: {known})")
            )
            item.row = None
            continue
        try:
            value, label = definition.read_value(item.row.pop("raw_value"))
        except ValueError as exc:
            item.errors.append(("value", str(exc)))
            item.row = None
            continue
        item.row.update(data_type=definition.data_type, value=value, label=label)


def store_scores(items: Sequence[ScoreItem], reported_by: str) -> None:
    """Store the items that passed their checks; set each item's status, id and pending."""
    ready = [item for item in items if item.row is not None]
    _mark_duplicates(ready)
    new = [item for item in ready if not item.status]
    _mark_pending(new)
    waiting = [item for item in new if item.pending]
    if waiting:
        room = settings.ARES_SCORE_PENDING_MAX - pending_count()
        if len(waiting) > room:
            settle_pending_scores()
            room = settings.ARES_SCORE_PENDING_MAX - pending_count()
        for item in waiting[max(room, 0) :]:
            item.errors.append(
                ("span_id", f"{settings.ARES_SCORE_PENDING_MAX} scores already wait for spans "
                 "not stored yet: send the span first, or the score again later")
            )  # fmt: skip
            item.row, item.status = None, "rejected"
    now = timezone.now()
    storing = [item for item in new if item.row is not None]
    rows = [
        Score(pending=item.pending, reported_by=reported_by[:200], created_at=now, **item.row)
        for item in storing
    ]
    try:
        with transaction.atomic():
            Score.objects.bulk_create(rows)
    except IntegrityError:  # a client id stored meanwhile by another request: one by one
        _store_one_by_one(storing, rows)
        return
    for item, score in zip(storing, rows, strict=True):
        item.status, item.score_id = "accepted", score.pk


def _store_one_by_one(items: Sequence[ScoreItem], rows: Sequence[Score]) -> None:
    for item, score in zip(items, rows, strict=True):
        try:
            with transaction.atomic():
                score.pk = None
                score.save(force_insert=True)
            item.status, item.score_id = "accepted", score.pk
        except IntegrityError:
            existing = Score.objects.filter(client_id=score.client_id).first()
            item.status = "duplicate"
            item.score_id = existing.pk if existing else None
            item.pending = bool(existing and existing.pending)


def _mark_duplicates(items: Sequence[ScoreItem]) -> None:
    """Mark items whose client id is stored already, or came earlier in the batch."""
    ids = [item.row["client_id"] for item in items if item.row.get("client_id")]
    stored = dict(
        Score.objects.filter(client_id__in=ids).values_list("client_id", "pk")
    ) if ids else {}  # fmt: skip
    pending = set(
        Score.objects.filter(pk__in=stored.values(), pending=True).values_list("pk", flat=True)
    )
    seen: dict[str, ScoreItem] = {}
    for item in items:
        client_id = item.row.get("client_id")
        if not client_id:
            continue
        if client_id in stored:
            item.status, item.score_id = "duplicate", stored[client_id]
            item.pending = stored[client_id] in pending
        elif client_id in seen:
            item.status = "duplicate"
        else:
            seen[client_id] = item


def _mark_pending(items: Sequence[ScoreItem]) -> None:
    """Mark the items whose span (or, for a trace's score, trace) is not stored yet."""
    span_keys = {(i.row["trace_id"], i.row["span_id"]) for i in items if i.row["span_id"]}
    trace_ids = {i.row["trace_id"] for i in items if not i.row["span_id"]}
    spans = set()
    if span_keys:
        spans = set(
            Invocation.objects.of_trace_ids({t for t, _ in span_keys})
            .filter(span_id__in={s for _, s in span_keys})
            .values_list("trace_id", "span_id")
        )
    traces = set(Trace.objects.filter(pk__in=trace_ids).values_list("pk", flat=True))
    for item in items:
        trace_id, span_id = item.row["trace_id"], item.row["span_id"]
        item.pending = (trace_id, span_id) not in spans if span_id else trace_id not in traces


def pending_count() -> int:
    return Score.objects.filter(pending=True).count()


def settle_pending_scores() -> tuple[int, int]:
    """Join pending scores whose span (or trace) has arrived; drop those waiting too long.

    Returns (joined, dropped). Run by the Celery beat every minute and when the pending
    limit is reached.
    """
    pending = Score.objects.filter(pending=True)
    # Through the span's trace, whose time bounds keep the probe to the trace's partitions.
    span_in_trace = Invocation.objects.filter(
        trace_id=OuterRef("pk"),
        span_id=OuterRef(OuterRef("span_id")),
        started_at__gte=OuterRef("started_at"),
        started_at__lte=OuterRef("ended_at"),
    )
    span_arrived = Exists(
        Trace.objects.filter(pk=OuterRef("trace_id")).filter(Exists(span_in_trace))
    )
    trace_arrived = Exists(Trace.objects.filter(pk=OuterRef("trace_id")))
    joined = pending.exclude(span_id="").filter(span_arrived).update(pending=False)
    joined += pending.filter(span_id="").filter(trace_arrived).update(pending=False)
    cutoff = timezone.now() - timedelta(hours=settings.ARES_SCORE_PENDING_TTL_H)
    dropped, _ = Score.objects.filter(pending=True, created_at__lt=cutoff).delete()
    return joined, dropped


SCORE_FILTER_PATTERN = r"^[a-z][a-z0-9_.-]{0,63}(:[^\x00-\x1f\x7f]{1,100})?$"


def scores_matching(spec: str) -> QuerySet:
    """Return the scores a filter names: `name`, or `name:value` (true, 0.3, a label)."""
    name, _, wanted = spec.partition(":")
    scores = Score.objects.filter(name=name)
    wanted = wanted.strip()
    if not wanted:
        return scores
    match = Q(label=wanted)
    number = {"true": 1.0, "false": 0.0}.get(wanted.lower())
    if number is None:
        try:
            number = float(wanted)
        except ValueError:
            number = None
    if number is not None and math.isfinite(number):
        match |= Q(value=number)
    return scores.filter(match)


def score_value(score: Score) -> Any:
    """Return a score's value as sent: a number, true or false, or a label."""
    if score.data_type == "numeric":
        return score.value
    if score.data_type == "boolean":
        return score.label == "true"
    return score.label
