"""Store which agent each span belongs to when a trace's spans arrive out of order."""

# A span's agent is its own agent attribute, else the resource's `gen_ai.agent.name`, else
# the name of its nearest agent span (itself included), else the resource's `service.name`.
# The nearest agent span is looked for in the export request, then among stored spans; a
# span that lacks one because an ancestor has not arrived yet waits for that ancestor, and
# takes its agent when it comes (see settle_agents), in whatever request and order.

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.db import connection

from traces_app.ingest.bulk_rows import rows_as_json, rows_from_json
from traces_app.models import Invocation, SpanKind, Trace
from traces_app.rollups.marks import mark_rollups_dirty

# The time range the spans of a request's traces started in (TraceManager.span_bounds).
Bounds = tuple[datetime, datetime] | None

if TYPE_CHECKING:
    from traces_app.ingest.otlp_spans import ParsedSpan, SpanReading


@dataclass(frozen=True)
class Above:
    """What a walk up from a span's parent found: an agent's name, or a missing ancestor.

    The nearest agent span's name; else the id of the first ancestor not there (yet);
    neither when the walk reached a root or went round a parent loop.
    """

    name: str = ""
    awaits: str = ""


NOTHING_ABOVE = Above()


def agents_above(spans: Sequence[ParsedSpan]) -> dict[tuple[bytes, bytes], Above]:
    """Return, per span, what a walk up from its parent through these spans finds.

    The name of the nearest agent span above it; else the id of the first ancestor that
    is not among them (exported in another request: settle_agents goes on from there);
    else nothing (the walk reached a root, or a parent loop). Each span is walked once.
    """
    by_key = {one.key: one for one in spans}
    found: dict[tuple[bytes, bytes], Above] = {}  # from a span, itself included

    def walk_from(start: tuple[bytes, bytes]) -> Above:
        path: list[tuple[bytes, bytes]] = []
        seen: set[tuple[bytes, bytes]] = set()
        key = start
        while True:
            if key in found:
                result = found[key]
                break
            if key not in by_key:
                result = Above(awaits=key[1].hex())
                break
            if key in seen:  # a parent loop
                result = NOTHING_ABOVE
                break
            path.append(key)
            seen.add(key)
            current = by_key[key]
            if current.said.names_agent:
                result = Above(name=current.said.names_agent)
                break
            if not current.span.parent_span_id:
                result = NOTHING_ABOVE
                break
            key = (current.span.trace_id, current.span.parent_span_id)
        found.update(dict.fromkeys(path, result))
        return result

    return {
        one.key: walk_from((one.span.trace_id, one.span.parent_span_id))
        if one.span.parent_span_id
        else NOTHING_ABOVE
        for one in spans
    }


# Agent attribution across requests. The batch exporter splits a trace over requests, and
# an agent span ends (and is exported) after the spans below it. A span without an agent
# whose walk up stops at an ancestor that is not stored yet keeps its service's name and
# records that ancestor in agent_awaits (a partial index holds only such spans); the
# ancestor's arrival settles it. An agent span records its name in names_agent, so spans
# arriving later find it. Only these few spans are written again after the insert.

SpanKey = tuple[str, str]  # (trace id, span id), hex
MAX_STORED_ANCESTORS = 32  # database look-ups (one query each) a walk up may take


@dataclass
class AgentChanges:
    """What settling a request's agents writes: span fields, spans renamed, trace names."""

    # Per span, what it holds now (see hold) and, once changed, its new values.
    held: dict[SpanKey, dict[str, Any]] = field(default_factory=dict)
    span_fields: dict[SpanKey, dict[str, Any]] = field(default_factory=dict)
    renamed: list[tuple[datetime, str]] = field(default_factory=list)  # (started_at, tool)
    roots: dict[str, str] = field(default_factory=dict)  # trace: its root span's own agent
    topmost: dict[str, tuple[datetime, str]] = field(default_factory=dict)
    fallback_names: dict[str, set[str]] = field(default_factory=dict)

    def hold(self, key: SpanKey, agent: str, names_agent: str, agent_awaits: str | None) -> None:
        """Note a span's stored agent fields: a change writes them all, changed or not."""
        self.held[key] = {"agent": agent, "names_agent": names_agent, "agent_awaits": agent_awaits}

    def set(self, key: SpanKey, **fields: Any) -> None:
        self.span_fields.setdefault(key, dict(self.held[key])).update(fields)

    def rename(self, key: SpanKey, agent: str, started_at: datetime, kind: str, tool: str) -> None:
        """Give a span whose agent was its service's name the agent of its agent span."""
        self.set(key, agent=agent, agent_awaits=None)
        self.renamed.append((started_at, tool if kind == SpanKind.TOOL else ""))

    def note_topmost(self, trace_id: str, started_at: datetime, name: str) -> None:
        """Note an agent span with no agent span above it; the earliest one names its trace."""
        if trace_id not in self.topmost or started_at < self.topmost[trace_id][0]:
            self.topmost[trace_id] = (started_at, name)


def settle_agents(readings: Sequence[SpanReading], is_new: Sequence[bool]) -> None:
    """Settle the agents of stored spans, in the transaction that stored them.

    A new span without an agent takes that of its nearest agent span stored earlier, or
    waits for the missing ancestor it stopped at; stored spans waiting for a span of this
    request take what that span hands down. A trace is named after its root span's own
    agent, else after its topmost agent span when its name was a service's. Runs after
    the insert, under the trace's row lock, so concurrent requests of one trace take turns.
    Every read and write of stored spans is bounded by the traces' time range, read once
    after the insert widened it: on PostgreSQL, only those days' partitions.
    """
    in_request = {(reading.trace_id, reading.span_id): reading for reading in readings}
    traces = Trace.objects.filter(pk__in={trace_id for trace_id, _ in in_request})
    bounds = Trace.objects.span_bounds(traces) if in_request else None
    waiters = _stored_waiters(set(in_request), bounds)
    new = [reading for reading, new in zip(readings, is_new, strict=True) if new]
    open_ends = {
        (reading.trace_id, reading.above.awaits)
        for reading in new
        if (reading.agent_fell_back or reading.names_agent) and reading.above.awaits
    }
    for trace_id, _, awaits, *_ in waiters:
        below = in_request[(trace_id, awaits)].agent_below()
        if below.awaits:
            open_ends.add((trace_id, below.awaits))
    found = _walk_stored(open_ends, in_request, bounds)

    def settled(trace_id: str, above: Above) -> Above:
        return found[(trace_id, above.awaits)] if above.awaits else above

    changes = AgentChanges()
    for reading in new:
        walked = reading.agent_fell_back or reading.names_agent  # as in open_ends
        above = settled(reading.trace_id, reading.above) if walked else reading.above
        _settle_new(reading, above, changes)
    for trace_id, span_id, awaits, agent, names_agent, kind, tool, started_at in waiters:
        below = settled(trace_id, in_request[(trace_id, awaits)].agent_below())
        key = (trace_id, span_id)
        changes.hold(key, agent, names_agent, awaits)
        if below.awaits:
            changes.set(key, agent_awaits=below.awaits)
        elif names_agent:  # an agent span that waited to learn whether it is topmost
            changes.set(key, agent_awaits=None)
            if not below.name:
                changes.note_topmost(trace_id, started_at, names_agent)
        elif below.name:
            changes.rename(key, below.name, started_at, kind, tool)
            changes.fallback_names.setdefault(trace_id, set()).add(agent)
        else:
            changes.set(key, agent_awaits=None)
    for reading in readings:
        changes.fallback_names.setdefault(reading.trace_id, set()).add(reading.producer)
    _write_agent_changes(changes, bounds)


def _settle_new(reading: SpanReading, above: Above, changes: AgentChanges) -> None:
    """Note what a newly stored span's walk up (through the request, then stored spans) gives."""
    item = reading.item
    assert item is not None  # only stored spans are settled
    key = (reading.trace_id, reading.span_id)
    changes.hold(key, item.agent, "", None)
    if not reading.parent_span_id and (reading.own_agent or reading.names_agent):
        changes.roots[reading.trace_id] = item.agent
    if reading.names_agent:
        changes.set(key, names_agent=reading.names_agent)
        if above.awaits:
            changes.set(key, agent_awaits=above.awaits)
        elif not above.name:
            changes.note_topmost(reading.trace_id, item.started_at, reading.names_agent)
    elif reading.agent_fell_back:
        changes.fallback_names.setdefault(reading.trace_id, set()).add(item.agent)
        if above.name:  # found among stored spans
            changes.rename(key, above.name, item.started_at, item.kind, item.tool_name)
        elif above.awaits:
            changes.set(key, agent_awaits=above.awaits)


def _stored_waiters(keys: set[SpanKey], bounds: Bounds) -> list[tuple]:
    """Return the stored spans waiting for one of these spans, with what settling them needs."""
    rows = (
        # By trace alone, matching the partial index's condition: fewer parameters to bind.
        Invocation.objects.filter(
            trace_id__in={trace_id for trace_id, _ in keys}, agent_awaits__isnull=False
        )
        .within(bounds)
        .order_by()
        .values_list(
            "trace_id", "span_id", "agent_awaits", "agent", "names_agent", "kind", "tool_name",
            "started_at",
        )
    )  # fmt: skip
    return [row for row in rows if (row[0], row[2]) in keys]


def _walk_stored(
    starts: set[SpanKey], in_request: dict[SpanKey, SpanReading], bounds: Bounds
) -> dict[SpanKey, Above]:
    """Return, per span missing from the request, what a walk up through stored spans finds.

    A stored agent span gives its name; a stored span that waits goes on from the span it
    waits for, others from their parent; a span of the request goes on as its walk in the
    request did; a span not stored is where the walk stops, to wait. One query per step
    up for all walks, at most MAX_STORED_ANCESTORS; a parent loop or a deeper chain finds
    nothing.
    """
    found: dict[SpanKey, Above] = {}
    stored: dict[SpanKey, tuple[str, str, str | None] | None] = {}
    walks = {start: (start, {start}) for start in starts}  # start: (where it is, seen)
    for _ in range(MAX_STORED_ANCESTORS):
        for start, (key, seen) in list(walks.items()):
            while key in in_request or key in stored:
                step = _step(key, in_request, stored)
                if isinstance(step, Above):
                    found[start] = step
                    del walks[start]
                    break
                if step in seen:
                    found[start] = NOTHING_ABOVE
                    del walks[start]
                    break
                seen.add(step)
                key = step
            else:
                walks[start] = (key, seen)
        if not walks:
            return found
        _fetch_stored({key for key, _ in walks.values()}, stored, bounds)
    found.update(dict.fromkeys(walks, NOTHING_ABOVE))
    return found


def _step(
    key: SpanKey,
    in_request: dict[SpanKey, SpanReading],
    stored: dict[SpanKey, tuple[str, str, str | None] | None],
) -> Above | SpanKey:
    """Return where a walk up goes from a span it reached, or what it found there."""
    trace_id, span_id = key
    if key in in_request:
        below = in_request[key].agent_below()
        return (trace_id, below.awaits) if below.awaits else below
    row = stored[key]
    if row is None:
        return Above(awaits=span_id)
    parent, names_agent, awaits = row
    if names_agent:
        return Above(name=names_agent)
    if awaits or parent:
        return (trace_id, awaits or parent)
    return NOTHING_ABOVE


def _fetch_stored(
    keys: set[SpanKey], stored: dict[SpanKey, tuple[str, str, str | None] | None], bounds: Bounds
) -> None:
    """Read these spans' parent, names_agent and agent_awaits into `stored` (None: not stored)."""
    rows = (
        Invocation.objects.filter(
            trace_id__in={trace_id for trace_id, _ in keys},
            span_id__in={span_id for _, span_id in keys},
        )
        .within(bounds)
        .order_by()
        .values_list("trace_id", "span_id", "parent_span_id", "names_agent", "agent_awaits")
    )
    stored.update(dict.fromkeys(keys))
    for trace_id, span_id, *row in rows:
        if (trace_id, span_id) in keys:
            stored[(trace_id, span_id)] = tuple(row)


def _write_agent_changes(changes: AgentChanges, bounds: Bounds) -> None:
    """Write the settled agents: the spans' in one statement, then the traces' names."""
    if changes.span_fields and bounds is not None:  # no bounds: no stored trace, no span
        _update_span_agents(
            [{"trace": trace_id, "span_id": span_id, **fields}
             for (trace_id, span_id), fields in changes.span_fields.items()],
            bounds,
        )  # fmt: skip
    if changes.renamed:
        mark_rollups_dirty(changes.renamed)
    wanted = {trace_id: (agent, None) for trace_id, agent in changes.roots.items()}
    for trace_id, (_, agent) in changes.topmost.items():
        # Only a name that came from a fallback (a service's) gives way to an agent's.
        fallbacks = {"", *changes.fallback_names.get(trace_id, ())}
        wanted.setdefault(trace_id, (agent, fallbacks))
    if not wanted:
        return
    renames: dict[str, list[str]] = {}
    for trace_id, agent in Trace.objects.filter(pk__in=wanted).values_list("pk", "agent"):
        name, fallbacks = wanted[trace_id]
        if agent != name and (fallbacks is None or agent in fallbacks):
            renames.setdefault(name, []).append(trace_id)
    for name, trace_ids in renames.items():
        Trace.objects.filter(pk__in=trace_ids).update(agent=name)


_AGENT_FIELDS = ("trace", "span_id", "agent", "names_agent", "agent_awaits")


def _update_span_agents(rows: Sequence[dict[str, Any]], bounds: tuple[datetime, datetime]) -> None:
    """Set agent, names_agent and agent_awaits of spans, rows keyed as _AGENT_FIELDS, at once.

    One statement whatever the changes: a filter and an UPDATE per distinct change cost
    ingest a third of its speed in Django's query building alone. The spans' traces'
    bounds, as constants, let PostgreSQL leave out the other days' partitions.
    """
    fields = {name: Invocation._meta.get_field(name) for name in _AGENT_FIELDS}
    quote = connection.ops.quote_name
    table = quote(Invocation._meta.db_table)
    assignments = ", ".join(
        f"{quote(name)} = changed.{quote(name)}"
        for name in ("agent", "names_agent", "agent_awaits")
    )
    sql = (
        f"UPDATE {table} SET {assignments} FROM ({rows_from_json(fields.values())}) AS changed "
        f"WHERE {table}.trace_id = changed.trace_id AND {table}.span_id = changed.span_id "
        f"AND {table}.{quote('started_at')} >= %s AND {table}.{quote('started_at')} <= %s"
    )
    low, high = (connection.ops.adapt_datetimefield_value(moment) for moment in bounds)
    with connection.cursor() as cursor:
        cursor.execute(sql, [rows_as_json(rows, fields), low, high])
