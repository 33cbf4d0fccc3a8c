"""Planning in the site: the current rule set, recorded evidence, and the tool registry."""

from __future__ import annotations

import threading
import time

from django.conf import settings
from django.db.models import Avg, Count, Q

from planner_app.pipeline.planner import Plan, Planner
from planner_app.pipeline.scoring import Evidence
from planner_app.rulesets import current_ruleset
from tools_app.runtime import get_engine
from traces_app.models import Invocation, caller_fault_q

_planner = Planner()
_evidence_lock = threading.Lock()
_evidence: dict[tuple[str, int], tuple[float, Evidence | None]] = {}


def recent_evidence(tool: str, window: int) -> Evidence | None:
    """Return the tool's record over its last `window` calls from every path (cached briefly).

    Calls that failed by the caller's fault (CALLER_FAULTS) are not the tool's record and
    are left out: the window is the tool's last calls that judge it.
    """
    now = time.monotonic()
    cached = _evidence.get((tool, window))
    if cached is not None and now - cached[0] < settings.ARES_PLANNER_EVIDENCE_TTL_S:
        return cached[1]
    spans = Invocation.objects.filter(tool_name=tool, kind="tool").exclude(caller_fault_q())
    latest = spans.order_by("-started_at")
    ids = latest.values("pk")[:window]
    totals = Invocation.objects.filter(pk__in=ids).aggregate(
        samples=Count("pk"), ok=Count("pk", filter=Q(status="ok")), latency=Avg("latency_ms")
    )
    evidence = None
    if totals["samples"]:
        evidence = Evidence(
            totals["samples"], totals["ok"] / totals["samples"], totals["latency"] or 0.0
        )
    with _evidence_lock:
        _evidence[(tool, window)] = (now, evidence)
    return evidence


def plan_request(request: str) -> Plan:
    """Return the plan for a request under the current rules and recorded evidence."""
    return _planner.plan(request, get_engine().registry, current_ruleset(), recent_evidence)
