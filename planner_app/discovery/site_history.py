"""This process's history of tool outcomes for the router, read from the recorded spans and scores.

Each tool span that judges its tool becomes an Outcome (outcomes.py): an error failed, an
ok call failed by the share its scores count under the current score rules; caller
faults, stopped calls and spans of other kinds count for nothing. Its request is the tool
request that offered the tool in a task with active discovery (a `tool_discovery` span),
else the trace's request text; a span without either waits for its trace's text.

A refresh reads only what is new, by primary key (spans and scores), re-reading the last
OVERLAP keys, since a transaction that took a lower key may commit after a higher one. A
full reload (the newest ARES_ROUTER_HISTORY_MAX_OUTCOMES spans) replaces it all after a
purge, a change of the rules, keys going back (deleted rows), and every RELOAD_S seconds.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from typing import Any, NamedTuple, TypeVar

from django.conf import settings
from django.db import Error, connection, models, transaction
from django.db.models.functions import Substr

from planner_app.discovery.outcomes import MAX_REQUEST_CHARS, Outcome, OutcomeHistory
from planner_app.pipeline.ruleset import RuleSet
from planner_app.ruleset_versions import current_ruleset
from traces_app.models import (
    Invocation,
    PurgeHorizon,
    Score,
    SpanKind,
    SpanStatus,
    Trace,
    caller_fault_q,
)

logger = logging.getLogger(__name__)

OVERLAP = 500  # keys re-read below the highest seen
CHUNK = 500  # spans read per round: each round asks once for traces, discovery and scores
WAITING_TRACES = 2_000  # traces whose spans wait for a request text, newest kept
DISCOVERY_SPAN = "tool_discovery"
T = TypeVar("T")


class SpanRow(NamedTuple):
    pk: int
    trace_id: str
    span_id: str
    tool: str
    status: str
    started_at: datetime


def judging_spans() -> models.QuerySet:
    """Return the tool spans that judge their tool: not stopped, not the caller's fault."""
    spans = Invocation.objects.filter(kind=SpanKind.TOOL).exclude(status=SpanStatus.STOPPED)
    return spans.exclude(caller_fault_q())


def span_rows(spans: models.QuerySet) -> Iterator[SpanRow]:
    """Yield the spans as rows, read a chunk at a time."""
    fields = ("pk", "trace_id", "span_id", "tool_name", "status", "started_at")
    for row in spans.values_list(*fields).iterator(chunk_size=CHUNK):
        yield SpanRow(*row)


def outcomes_of(rows: list[SpanRow], ruleset: RuleSet) -> tuple[list[Outcome], set[str]]:
    """Return the spans' outcomes, and the traces of the spans that have no request yet."""
    trace_ids = {row.trace_id for row in rows}
    texts = dict(
        Trace.objects.filter(pk__in=trace_ids)
        .exclude(request_text="")
        .values_list("pk", Substr("request_text", 1, 4 * MAX_REQUEST_CHARS))
    )
    offers = discovery_offers(trace_ids)
    scores = span_scores(trace_ids)
    outcomes, waiting = [], set()
    for row in rows:
        request = offered_request(offers.get(row.trace_id, []), row) or texts.get(row.trace_id)
        if not request or not request.strip():
            waiting.add(row.trace_id)
            continue
        failed = 1.0
        if row.status == SpanStatus.OK:
            failed = ruleset.score_failure(tuple(scores.get((row.trace_id, row.span_id), ())))
        at = row.started_at.timestamp()
        outcomes.append(Outcome(request, row.tool, failed, at, f"{row.trace_id}/{row.span_id}"))
    return outcomes, waiting


def discovery_offers(trace_ids: set[str]) -> dict[str, list[tuple[datetime, dict[str, str]]]]:
    """Return each trace's discovery rounds in order: when, and which request offered each tool."""
    rounds = (
        Invocation.objects.of_trace_ids(trace_ids)
        .filter(kind=SpanKind.OTHER, tool_name=DISCOVERY_SPAN)
        .order_by("started_at")
    )
    found: dict[str, list[tuple[datetime, dict[str, str]]]] = {}
    for trace_id, started_at, arguments, result in rounds.values_list(
        "trace_id", "started_at", "arguments", "result"
    ):
        found.setdefault(trace_id, []).append((started_at, round_offers(arguments, result)))
    return found


def round_offers(arguments: Any, result: Any) -> dict[str, str]:
    """Return the tool request ("server tool") whose routing offered each tool, first one first."""
    requests = arguments.get("requests") if isinstance(arguments, dict) else None
    routing = result.get("routing") if isinstance(result, dict) else None
    if not isinstance(requests, list) or not isinstance(routing, list):
        return {}
    offers: dict[str, str] = {}
    for asked, routed in zip(requests, routing, strict=False):
        if not isinstance(asked, dict) or not isinstance(routed, dict):
            continue
        text = " ".join(str(asked.get(part) or "") for part in ("server", "tool")).strip()
        tools = routed.get("tools")
        for offered in tools if text and isinstance(tools, list) else []:
            if isinstance(offered, dict) and isinstance(offered.get("tool"), str):
                offers.setdefault(offered["tool"], text)
    return offers


def offered_request(rounds: list[tuple[datetime, dict[str, str]]], row: SpanRow) -> str:
    """Return the request of the last discovery round before the call that offered its tool."""
    for started_at, offers in reversed(rounds):
        if started_at <= row.started_at and row.tool in offers:
            return offers[row.tool]
    return ""


def span_scores(trace_ids: set[str]) -> dict[tuple[str, str], list[tuple[str, float | None, str]]]:
    """Return the scores of the traces' spans, per (trace id, span id)."""
    rows = Score.objects.filter(trace_id__in=trace_ids).exclude(span_id="")
    found: dict[tuple[str, str], list[tuple[str, float | None, str]]] = {}
    for trace_id, span_id, name, value, label in rows.values_list(
        "trace_id", "span_id", "name", "value", "label"
    ):
        found.setdefault((trace_id, span_id), []).append((name, value, label))
    return found


def chunks(items: Iterable[T], size: int = CHUNK) -> Iterator[list[T]]:
    """Yield the items in lists of at most `size`."""
    chunk: list[T] = []
    for item in items:
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def newest_pk(model: type[models.Model]) -> int:
    """Return the highest primary key of a table, 0 when it is empty."""
    return model.objects.order_by("-pk").values_list("pk", flat=True).first() or 0


class SiteHistory:
    """An OutcomeHistory kept in step with the database; refreshed by one thread at a time."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.history = OutcomeHistory(settings.ARES_ROUTER_HISTORY_PER_TOOL)
        self.clock = clock
        self.loads = 0
        self._lock = threading.Lock()
        self._forget()

    def reset(self) -> None:
        """Forget everything: the next refresh reloads from the database."""
        with self._lock:
            self._forget()

    def _forget(self) -> None:
        self.history.replace([])
        self._refreshed_at = -math.inf
        self._loaded_at = -math.inf
        self._reload_due = True
        self._ruleset_version: int | None = None
        self._horizon: datetime | None = None
        self._span_mark = self._score_mark = 0
        self._seen_spans: set[int] = set()
        self._seen_scores: set[int] = set()
        self._waiting: dict[str, None] = {}  # an ordered set

    @property
    def never_refreshed(self) -> bool:
        return self._refreshed_at == -math.inf

    @property
    def due(self) -> bool:
        """Whether a refresh would read the database now: on, none running, the interval past."""
        if settings.ARES_ROUTER_HISTORY != "on" or self._lock.locked():
            return False
        return self.clock() - self._refreshed_at >= settings.ARES_ROUTER_HISTORY_REFRESH_S

    def refresh(self, force: bool = False) -> bool:
        """Read what changed in the database, at most every REFRESH_S; return if anything did.

        A refresh under way elsewhere makes this return at once. A database error is
        logged and leaves the history as it was; the next refresh reloads it all.
        """
        if settings.ARES_ROUTER_HISTORY != "on" or not self._lock.acquire(blocking=False):
            return False
        try:
            now = self.clock()
            if not force and now - self._refreshed_at < settings.ARES_ROUTER_HISTORY_REFRESH_S:
                return False
            self._refreshed_at = now
            version = self.history.version
            try:
                with transaction.atomic():
                    self._refresh(now)
            except Error:  # django.db's: any database error, the connection's included
                logger.warning("the router's history was kept as it was", exc_info=True)
                self._reload_due = True
            return self.history.version != version
        finally:
            self._lock.release()

    def _refresh(self, now: float) -> None:
        ruleset, horizon = current_ruleset(), PurgeHorizon.objects.horizon()
        newest_span, newest_score = newest_pk(Invocation), newest_pk(Score)
        if (
            self._reload_due
            or now - self._loaded_at >= settings.ARES_ROUTER_HISTORY_RELOAD_S
            or (ruleset.version, horizon) != (self._ruleset_version, self._horizon)
            or self.history.per_tool != settings.ARES_ROUTER_HISTORY_PER_TOOL
            or newest_span < self._span_mark
            or newest_score < self._score_mark
        ):
            self._load(now, ruleset, horizon, newest_span, newest_score)
            return
        waited = self._read(self._spans_now_requested(), ruleset)
        new = self._read(self._new_spans(), ruleset)
        self.history.add(waited + new + self._rescored(ruleset))

    def _load(
        self, now: float, ruleset: RuleSet, horizon: datetime | None, span: int, score: int
    ) -> None:
        """Replace the history with the outcomes of the newest spans."""
        self._waiting.clear()
        seen_scores = set(Score.objects.filter(pk__gt=score - OVERLAP).values_list("pk", flat=True))
        newest = judging_spans().order_by("-pk")[: settings.ARES_ROUTER_HISTORY_MAX_OUTCOMES]
        self._span_mark, self._seen_spans = span, set()
        outcomes = self._read(self._noting_recent(span_rows(newest)), ruleset)
        self.history.per_tool = settings.ARES_ROUTER_HISTORY_PER_TOOL
        self.history.replace(outcomes)
        self._span_mark = max([span, *self._seen_spans])
        self._score_mark, self._seen_scores = max([score, *seen_scores]), seen_scores
        self._ruleset_version, self._horizon = ruleset.version, horizon
        self._loaded_at, self._reload_due = now, False
        self.loads += 1

    def _read(self, rows: Iterable[SpanRow], ruleset: RuleSet) -> list[Outcome]:
        """Return the rows' outcomes; note the traces of those still without a request."""
        outcomes: list[Outcome] = []
        for chunk in chunks(rows):
            found, waiting = outcomes_of(chunk, ruleset)
            outcomes += found
            self._waiting.update(dict.fromkeys(waiting))
        for trace_id in list(self._waiting)[: max(0, len(self._waiting) - WAITING_TRACES)]:
            del self._waiting[trace_id]
        return outcomes

    def _noting_recent(self, rows: Iterable[SpanRow]) -> Iterator[SpanRow]:
        """Yield the rows, noting as seen those within OVERLAP keys of the highest."""
        for row in rows:
            if row.pk > self._span_mark - OVERLAP:
                self._seen_spans.add(row.pk)
            yield row

    def _new_spans(self) -> list[SpanRow]:
        """Return the spans not seen yet among those from OVERLAP keys below the highest seen."""
        mark = self._span_mark
        window = judging_spans().filter(pk__gt=mark - OVERLAP, pk__lte=mark)
        late = set(window.values_list("pk", flat=True)) - self._seen_spans  # keys only: cheap
        recent = judging_spans().filter(models.Q(pk__gt=mark) | models.Q(pk__in=late))
        bound = settings.ARES_ROUTER_HISTORY_MAX_OUTCOMES  # a burst: the rest next time
        rows = list(span_rows(recent.order_by("pk")[:bound]))
        self._seen_spans.update(row.pk for row in rows)
        self._span_mark = max([self._span_mark, *(row.pk for row in rows)])
        self._seen_spans = {pk for pk in self._seen_spans if pk > self._span_mark - OVERLAP}
        return rows

    def _spans_now_requested(self) -> list[SpanRow]:
        """Return the spans of waiting traces that have a request text now."""
        ready: dict[str, tuple[datetime, datetime]] = {}  # trace id: its spans' time bounds
        for trace_ids in chunks(list(self._waiting)):
            texted = Trace.objects.filter(pk__in=trace_ids).exclude(request_text="")
            for pk, started_at, ended_at in texted.values_list("pk", "started_at", "ended_at"):
                ready[pk] = (started_at, ended_at)
        rows = []
        for trace_ids in chunks(sorted(ready)):
            bounds = (min(ready[t][0] for t in trace_ids), max(ready[t][1] for t in trace_ids))
            rows += span_rows(judging_spans().filter(trace_id__in=trace_ids).within(bounds))
            for trace_id in trace_ids:
                del self._waiting[trace_id]
        return rows

    def _rescored(self, ruleset: RuleSet) -> list[Outcome]:
        """Return the outcomes of the spans that new scores judge, recomputed."""
        recent = Score.objects.filter(pk__gt=self._score_mark - OVERLAP).order_by("pk")
        recent = recent[: settings.ARES_ROUTER_HISTORY_MAX_OUTCOMES]
        calls = set()
        for pk, trace_id, span_id in recent.values_list("pk", "trace_id", "span_id").iterator():
            self._score_mark = max(self._score_mark, pk)
            if pk not in self._seen_scores and span_id:
                calls.add((trace_id, span_id))
            self._seen_scores.add(pk)
        self._seen_scores = {pk for pk in self._seen_scores if pk > self._score_mark - OVERLAP}
        outcomes = []
        for chunk in chunks(sorted(calls)):
            spans = (
                judging_spans()
                .of_trace_ids({trace_id for trace_id, _ in chunk})
                .filter(span_id__in={span_id for _, span_id in chunk})
            )
            rows = [row for row in span_rows(spans) if (row.trace_id, row.span_id) in calls]
            outcomes += self._read(rows, ruleset)
        return outcomes


_site: SiteHistory | None = None
_site_lock = threading.Lock()


def _the_site() -> SiteHistory:
    global _site
    with _site_lock:
        if _site is None:
            _site = SiteHistory()
        return _site


def site_history() -> OutcomeHistory:
    """Return this process's outcome history, loaded from the database on first use."""
    site = _the_site()
    if site.never_refreshed:
        site.refresh(force=True)
    return site.history


def refresh_site_history(force: bool = False) -> bool:
    """Bring this process's history up to date (time-gated unless forced); return if it changed."""
    return _the_site().refresh(force)


def refresh_site_history_in_background() -> threading.Thread | None:
    """Start a refresh in a thread of its own when one is due, so that no routing waits for it.

    A full reload reads up to ARES_ROUTER_HISTORY_MAX_OUTCOMES spans, seconds at 50,000.
    Return the thread, or None when no refresh is due.
    """
    site = _the_site()
    if not site.due:
        return None
    thread = threading.Thread(target=_refresh_and_close, args=(site,), name="site-history")
    thread.daemon = True  # a process exiting does not wait for it
    thread.start()
    return thread


def _refresh_and_close(site: SiteHistory) -> None:
    try:
        site.refresh()
    finally:
        connection.close()  # this thread's own connection, which nothing else would close


def reset_site_history() -> None:
    """Forget this process's history (a test's database is gone): the next use reloads it."""
    _the_site().reset()
