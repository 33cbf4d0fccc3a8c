"""Site-wide pages: the overview, logging in and out of the console, and the health check."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.admin.views.decorators import staff_member_required
from django.contrib.auth import logout
from django.contrib.auth.views import LoginView
from django.db import DatabaseError, connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views import defaults
from django.views.decorators.http import require_POST

from ares_site.nul_bytes import API_PREFIX
from ares_site.overview import FAILING_ORDERS, active_spirals, overview_of
from planner_app.rules_guard import guard_notice
from traces_app.models import Trace
from traces_app.rollups.range_totals import fresh_range_context

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
        guard_notice=guard_notice(),
    )
    return render(request, "ares_site/overview.html", context)


class ConsoleLoginView(LoginView):
    """Log a staff member in on the console's own page, then back to the overview or `next`."""

    template_name = "ares_site/login.html"
    authentication_form = AdminAuthenticationForm  # staff only, as the pages themselves
    redirect_authenticated_user = True
    next_page = "overview"


@require_POST
def log_out(request: HttpRequest) -> HttpResponse:
    """Log out and come back to the console's login page, which says so.

    The admin's own logout ends on its "Logged out" page, outside the console.
    """
    name = request.user.get_username()
    logout(request)  # flushes the session; the message lives in its cookie meanwhile
    messages.success(request, f"{name} is logged out." if name else "You are logged out.")
    return redirect("console-login")


def healthz(request: HttpRequest) -> JsonResponse:
    """Report whether the database answers; 503 when it does not."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except DatabaseError:
        return JsonResponse({"status": "unavailable", "database": "down"}, status=503)
    return JsonResponse({"status": "ok", "database": connection.vendor})


def not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    """Answer 404: in the API's JSON error shape under /api/, Django's own page elsewhere.

    An address no route matches (an id with a newline, a path past the API's) would
    otherwise give an API client an HTML page.
    """
    if request.path_info.startswith(API_PREFIX):
        return JsonResponse({"detail": "Not Found"}, status=404)
    return defaults.page_not_found(request, exception)
