"""The built-in tools' contracts, as the site's settings configure them (allowed hosts, SearXNG)."""

from __future__ import annotations

from django.conf import settings

from tools_app.builtins import (
    calculator,
    datetime_tool,
    hash_tool,
    http_request,
    json_tools,
    string_utils,
    web_search,
)
from tools_app.specs import ToolSpec


def builtin_specs() -> list[ToolSpec]:
    """Return the contracts of the built-in tools, configured from settings."""
    return [
        calculator.SPEC,
        hash_tool.SPEC,
        string_utils.SPEC,
        datetime_tool.SPEC,
        json_tools.SPEC,
        http_request.make_spec(
            settings.ARES_HTTP_ALLOWED_HOSTS, settings.ARES_HTTP_ALLOWED_NETWORKS
        ),
        web_search.make_spec(settings.ARES_SEARXNG_URL or None),
    ]
