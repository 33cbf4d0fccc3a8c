"""Active tool discovery (MCP-Zero style): agents ask for tools, the router answers.

The core (text, steps, backends, catalogue, router, requests) is plain Python with no Django, so
bench/router.py can measure it standalone; site_router.py adapts it to the tool registry.
"""

from planner_app.discovery.catalogue import BenchQuery, ExpectedTool, Server, Tool
from planner_app.discovery.requests import (
    MAX_TOOL_REQUESTS,
    ToolRequest,
    ToolRequestError,
    TooManyToolRequests,
    parse_tool_requests,
)

# The router needs numpy, SciPy and scikit-learn (~90 MB a process): it is imported on
# first use, so web and worker processes that never route a tool request don't pay for it.
_ROUTER_NAMES = {
    "Combination",
    "RouteMode",
    "RouterSettings",
    "Routing",
    "RoutingCache",
    "SearchMode",
    "ServerScoring",
    "ToolMatch",
    "ToolRouter",
}


def __getattr__(name: str) -> object:
    if name in _ROUTER_NAMES:
        from planner_app.discovery import router

        return getattr(router, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "MAX_TOOL_REQUESTS",
    "BenchQuery",
    "Combination",
    "ExpectedTool",
    "RouteMode",
    "RouterSettings",
    "Routing",
    "RoutingCache",
    "SearchMode",
    "Server",
    "ServerScoring",
    "Tool",
    "ToolMatch",
    "ToolRequest",
    "ToolRequestError",
    "ToolRouter",
    "TooManyToolRequests",
    "parse_tool_requests",
]
