"""Site-wide pages: the overview and the health check."""

from __future__ import annotations

from datetime import timedelta

from django.contrib.admin.views.decorators import staff_member_required
from django.db import DatabaseError, connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.utils import timezone

from traces_app.models import Trace, tool_stats


@staff_member_required
def overview(request: HttpRequest) -> HttpResponse:
    """Show the last 24 hours at a glance: calls, failures, tools, recent traces."""
    until = timezone.now()
    since = until - timedelta(hours=24)
    tools = tool_stats(since, until)
    calls = sum(tool["calls"] for tool in tools)
    failures = sum(tool["failures"] for tool in tools)
    context = {
        "since": since,
        "until": until,
        "calls": calls,
        "failures": failures,
        "error_rate": failures / calls if calls else 0.0,
        "tools": sorted(tools, key=lambda tool: (-tool["failures"], tool["tool_name"])),
        "recent_traces": Trace.objects.order_by("-started_at")[:20],
    }
    return render(request, "ares_site/overview.html", context)


def healthz(request: HttpRequest) -> JsonResponse:
    """Report whether the database answers; 503 when it does not."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except DatabaseError:
        return JsonResponse({"status": "unavailable", "database": "down"}, status=503)
    return JsonResponse({"status": "ok", "database": connection.vendor})
