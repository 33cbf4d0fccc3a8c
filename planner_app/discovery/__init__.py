"""Active tool discovery (MCP-Zero style): agents ask for tools, a two-stage router answers.

The core (text, backends, catalogue, router, requests) is plain Python with no Django, so
bench/router.py can measure it standalone; registry.py adapts it to the tool registry.
"""

from planner_app.discovery.catalogue import BenchQuery, ExpectedTool, Server, Tool
from planner_app.discovery.requests import (
    MAX_TOOL_REQUESTS,
    ToolRequest,
    ToolRequestError,
    TooManyToolRequests,
    parse_tool_requests,
)
from planner_app.discovery.router import RouteMode, RouterSettings, Routing, ToolMatch, ToolRouter

__all__ = [
    "MAX_TOOL_REQUESTS",
    "BenchQuery",
    "ExpectedTool",
    "RouteMode",
    "RouterSettings",
    "Routing",
    "Server",
    "Tool",
    "ToolMatch",
    "ToolRequest",
    "ToolRequestError",
    "ToolRouter",
    "TooManyToolRequests",
    "parse_tool_requests",
]
