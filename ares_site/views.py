"""Site-wide pages: the overview and the health check."""

from __future__ import annotations

from django.contrib.admin.views.decorators import staff_member_required
from django.db import DatabaseError, connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.utils import timezone

from ares_site.overview import FAILING_ORDERS, active_spirals, overview_of
from traces_app.dashboards import fresh_range_context
from traces_app.models import Trace

RECENT_TRACES_SHOWN = 20


@staff_member_required
def overview(request: HttpRequest) -> HttpResponse:
    """Show a time range at a glance: calls, errors, latency, cost, failing tools, spirals."""
    context = fresh_range_context(request.GET, timezone.now())
    time_range = context["time_range"]
    failing_order = request.GET.get("failing", "count")
    if failing_order not in FAILING_ORDERS:
        failing_order = "count"
    recent = Trace.objects.filter(started_at__gte=time_range.since, started_at__lt=time_range.until)
    context.update(
        overview=overview_of(time_range, failing_order),
        failing_order=failing_order,
        failing_orders=FAILING_ORDERS,
        active_spirals=active_spirals(time_range),
        recent_traces=recent.order_by("-started_at")[:RECENT_TRACES_SHOWN],
        range_note="whole UTC hours",
    )
    return render(request, "ares_site/overview.html", context)


def healthz(request: HttpRequest) -> JsonResponse:
    """Report whether the database answers; 503 when it does not."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except DatabaseError:
        return JsonResponse({"status": "unavailable", "database": "down"}, status=503)
    return JsonResponse({"status": "ok", "database": connection.vendor})
