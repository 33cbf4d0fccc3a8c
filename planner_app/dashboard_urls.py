"""The observatory's planner pages, mounted at the site root: /tools/ and /evidence/."""

from django.urls import path

from planner_app import dashboards

# <path:...>: tool names hold dots (mcp.time.get_current_time), and outside agents may
# report names with slashes, which <str:...> could not reverse.
urlpatterns = [
    path("tools/", dashboards.tools, name="tools"),
    path("tools/<path:name>/", dashboards.tool_detail, name="tool-detail"),
    path("evidence/", dashboards.evidence, name="evidence"),
    path("evidence/<path:capability>/", dashboards.evidence_capability, name="evidence-capability"),
]
