"""Planning in the site: the current rule set, recorded evidence, and the tool registry."""

from __future__ import annotations

import threading
import time
from collections.abc import Collection

from django.conf import settings

from planner_app.pipeline.planner import Plan, Planner
from planner_app.pipeline.scoring import Evidence
from planner_app.ruleset_versions import current_ruleset
from tools_app.site_engine import get_engine
from traces_app.models import Invocation, Score, SpanStatus, caller_fault_q

_planner = Planner()
_evidence_lock = threading.Lock()
_evidence: dict[tuple[str, int], tuple[float, Evidence | None]] = {}


def recent_evidence(tool: str, window: int) -> Evidence | None:
    """Return the tool's record over its last `window` calls from every path (cached briefly).

    Calls that failed by the caller's fault (CALLER_FAULTS) or were stopped by it are not
    the tool's record and are left out: the window is the tool's last calls that judge it.
    """
    now = time.monotonic()
    cached = _evidence.get((tool, window))
    if cached is not None and now - cached[0] < settings.ARES_PLANNER_EVIDENCE_TTL_S:
        return cached[1]
    spans = Invocation.objects.filter(tool_name=tool, kind="tool").exclude(caller_fault_q())
    spans = spans.exclude(status=SpanStatus.STOPPED)  # a user's Stop judges no tool
    latest = spans.order_by("-started_at").values_list(
        "trace_id", "span_id", "status", "latency_ms"
    )
    rows = list(latest[:window])
    evidence = None
    if rows:
        ok = [(trace_id, span_id) for trace_id, span_id, status, _ in rows if status == "ok"]
        evidence = Evidence(
            len(rows),
            len(ok) / len(rows),
            sum(row[3] for row in rows) / len(rows),
            scored=_scores_of(ok),
        )
    with _evidence_lock:
        _evidence[(tool, window)] = (now, evidence)
    return evidence


def _scores_of(
    calls: list[tuple[str, str]],
) -> tuple[tuple[tuple[str, float | None, str], ...], ...]:
    """Return the scores of these calls (trace id, span id) that have any, per call."""
    if not calls:
        return ()
    wanted = set(calls)
    found: dict[tuple[str, str], list[tuple[str, float | None, str]]] = {}
    rows = Score.objects.filter(span_id__in={span for _, span in calls}).values_list(
        "trace_id", "span_id", "name", "value", "label"
    )
    for trace_id, span_id, name, value, label in rows:
        if (trace_id, span_id) in wanted:
            found.setdefault((trace_id, span_id), []).append((name, value, label))
    return tuple(tuple(scores) for scores in found.values())


def plan_request(request: str, allowed_tools: Collection[str] | None = None) -> Plan:
    """Return the plan for a request under the current rules and recorded evidence.

    `allowed_tools` (None: any) limits the plan to the tools its caller may use.
    """
    return _planner.plan(
        request, get_engine().registry, current_ruleset(), recent_evidence, allowed_tools
    )
