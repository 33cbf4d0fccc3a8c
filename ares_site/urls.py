from django.contrib import admin
from django.urls import include, path

from ares_site import views
from ares_site.api import api
from planner_app import views as planner_views
from traces_app import otlp_views, score_views

admin.site.site_header = "ARES Console"
admin.site.site_title = "ARES Console"
admin.site.index_title = "Administration"

urlpatterns = [
    path("", views.overview, name="overview"),
    path("healthz", views.healthz, name="healthz"),
    path("login/", views.ConsoleLoginView.as_view(), name="console-login"),
    path("logout/", views.log_out, name="console-logout"),
    path("admin/", admin.site.urls),
    path("api/v1/", api.urls),
    path("v1/traces", otlp_views.export_traces, name="otlp-traces"),  # the OTLP/HTTP standard path
    path("v1/metrics", otlp_views.export_metrics, name="otlp-metrics"),  # accepted and dropped
    path("v1/logs", otlp_views.export_logs, name="otlp-logs"),  # accepted and dropped
    path("planner/", include("planner_app.urls")),
    path("sandbox/", planner_views.sandbox_page, name="sandbox"),
    path("sandbox/run", planner_views.sandbox_run, name="sandbox-run"),
    path("sandbox/stop", planner_views.sandbox_stop, name="sandbox-stop"),
    path("scores/new", score_views.add_score, name="score-add"),
    path("", include("traces_app.urls")),
    path("", include("planner_app.dashboard_urls")),
]
