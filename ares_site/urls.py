"""Every page route of the site, in this one file: the view behind any URL is named here.

The REST API's operations are mounted by ares_site/api.py (one router per app) under /api/v1/.
"""

from django.contrib import admin
from django.urls import path

from ares_site import views
from ares_site.api import api
from planner_app import tool_pages, version_pages
from planner_app import views as planner_views
from planner_app.monitors import monitor_views
from planner_app.proposals import proposal_views
from traces_app import chain_views, session_views
from traces_app import views as traces_views
from traces_app.ingest import otlp_endpoint
from traces_app.scores import score_views

admin.site.site_header = "ARES Console"
admin.site.site_title = "ARES Console"
admin.site.index_title = "Administration"

# An address no route matches: JSON under /api/, the usual page elsewhere.
handler404 = views.not_found

urlpatterns = [
    path("", views.overview, name="overview"),
    path("healthz", views.healthz, name="healthz"),
    path("login/", views.ConsoleLoginView.as_view(), name="console-login"),
    path("logout/", views.log_out, name="console-logout"),
    path("admin/", admin.site.urls),
    path("api/v1/", api.urls),
    # The OTLP/HTTP standard paths: traces are stored, metrics and logs accepted and dropped.
    path("v1/traces", otlp_endpoint.export_traces, name="otlp-traces"),
    path("v1/metrics", otlp_endpoint.export_metrics, name="otlp-metrics"),
    path("v1/logs", otlp_endpoint.export_logs, name="otlp-logs"),
    path("planner/try", planner_views.try_planner, name="planner-try"),
    path("planner/backtest", planner_views.backtest_rules, name="planner-backtest"),
    path("planner/versions/<int:number>/", version_pages.version_page, name="planner-version"),
    path("monitors/", monitor_views.monitors, name="monitors"),
    path("monitors/<int:pk>/", monitor_views.monitor_detail, name="monitor-detail"),
    path("proposals/", proposal_views.proposals, name="proposals"),
    path("proposals/refresh", proposal_views.proposals_refresh, name="proposals-refresh"),
    path("proposals/<int:pk>/", proposal_views.proposal_detail, name="proposal-detail"),
    path("proposals/<int:pk>/apply", proposal_views.proposal_apply, name="proposal-apply"),
    path("proposals/<int:pk>/dismiss", proposal_views.proposal_dismiss, name="proposal-dismiss"),
    path("sandbox/", planner_views.sandbox_page, name="sandbox"),
    path("sandbox/run", planner_views.sandbox_run, name="sandbox-run"),
    path("sandbox/stop", planner_views.sandbox_stop, name="sandbox-stop"),
    path("scores/new", score_views.add_score, name="score-add"),
    path("traces/", traces_views.traces, name="traces"),
    path("traces/<str:trace_id>/", traces_views.trace_detail, name="trace-detail"),
    path("sessions/", session_views.session_list, name="sessions"),
    path("sessions/<path:session_id>/", session_views.session_detail, name="session-detail"),
    path("chains/", chain_views.chains_page, name="chains"),
    path("spirals/", traces_views.spirals, name="spirals"),
    path("spirals/<int:pk>/", traces_views.spiral_detail, name="spiral-detail"),
    # <path:...>: tool names hold dots (mcp.time.get_current_time), and outside agents may
    # report names with slashes, which <str:...> could not reverse.
    path("tools/", tool_pages.tools, name="tools"),
    path("tools/<path:name>/", tool_pages.tool_detail, name="tool-detail"),
    path("evidence/", tool_pages.evidence, name="evidence"),
    path("evidence/<path:capability>/", tool_pages.evidence_capability, name="evidence-capability"),
]
