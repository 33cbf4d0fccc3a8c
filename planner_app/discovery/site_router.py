"""The router over this process's tool registry, rebuilt on the next search after a change.

Built-in tools are grouped into categories, each MCP server is a group of its own. The
registry calls back on every registration, change and removal; the router only counts
them, and rebuilds (a few milliseconds for a registry this size) when asked to search
after one. A rebuild starts with an empty routing cache. The site's router takes its
settings from Django's (ARES_ROUTER_*).
"""

from __future__ import annotations

import os
import threading
from collections import defaultdict
from dataclasses import dataclass

from django.core.exceptions import ImproperlyConfigured

from planner_app.discovery.backends import (
    Backend,
    WordLlamaBackend,
    make_backend,
    semantic_available,
)
from planner_app.discovery.catalogue import Server, Tool
from planner_app.discovery.router import RouterSettings, Routing, ToolRouter
from tools_app.registry import ToolRegistry
from tools_app.specs import ToolSpec

# The semantic signal: wordllama fused with TF-IDF, when installed ('auto'), always
# ('wordllama': an error without the package), or never. 'auto' by default: fused with
# weight 0.25 it has the best mean hit@5 over the tune halves of StableToolBench and BFCL
# (bench/README.md, "router.py").
SEMANTIC_CHOICES = ("auto", "wordllama", "off")
SEMANTIC_DEFAULT = "auto"

# Built-in tool -> category; a built-in not listed here joins OTHER_BUILTINS.
BUILTIN_CATEGORIES = {
    "calculator": "math",
    "datetime": "time",
    "string_utils": "text",
    "hash_tool": "text",
    "json_tools": "text",
    "http_request": "web",
    "web_search": "web",
}
CATEGORY_DESCRIPTIONS = {
    "math": "Calculate and compute: arithmetic, expressions, percentages, statistics, number "
    "theory, probability.",
    "time": "Dates, times, time zones, calendars and durations.",
    "text": "Text and data: string operations, hashing, encoding, JSON processing.",
    "web": "The web: HTTP requests to URLs and web search.",
}
OTHER_BUILTINS = "other"
# Words people ask for a built-in with that its description lacks: to a word matcher,
# "calculate" is not "calculator", nor "download" "HTTP request".
BUILTIN_KEYWORDS = {
    "calculator": ("calculate", "compute", "math", "percentage"),
    "hash_tool": ("checksum", "encode", "decode"),
    "http_request": ("fetch", "download", "web page", "API"),
    "web_search": ("look up", "find", "news"),
}


def server_of(spec: ToolSpec) -> tuple[str, str]:
    """Return the (name, description) of the group a tool belongs to."""
    if spec.ran_on.startswith("mcp:"):
        name = spec.ran_on.removeprefix("mcp:")
        return f"mcp:{name}", f"Tools of the MCP server {name}."
    category = BUILTIN_CATEGORIES.get(spec.name, OTHER_BUILTINS)
    return f"builtin:{category}", CATEGORY_DESCRIPTIONS.get(category, "Other built-in tools.")


def catalogue_from_specs(specs: list[ToolSpec]) -> list[Server]:
    """Return the router's catalogue of enabled tools, grouped into servers."""
    groups: dict[tuple[str, str], list[Tool]] = defaultdict(list)
    for spec in specs:
        if not spec.enabled:
            continue
        properties = spec.parameters.get("properties")
        properties = properties if isinstance(properties, dict) else {}
        parameters = tuple(
            (name, str(schema.get("description", "")) if isinstance(schema, dict) else "")
            for name, schema in properties.items()
        )
        keywords = BUILTIN_KEYWORDS.get(spec.name, ()) if spec.ran_on == "builtin" else ()
        keywords += tuple(spec.capabilities)
        groups[server_of(spec)].append(Tool(spec.name, spec.description, keywords, parameters))
    return [
        Server(name=name, description=description, tools=tuple(tools))
        for (name, description), tools in sorted(groups.items())
    ]


class RegistryRouter:
    """A ToolRouter following a ToolRegistry: after any change, rebuilt before the next search."""

    def __init__(
        self,
        registry: ToolRegistry,
        settings: RouterSettings | None = None,
        backend: Backend | None = None,
        semantic: Backend | None = None,
    ) -> None:
        self.registry = registry
        self.settings = settings or RouterSettings()
        self.backend = backend
        self.semantic = semantic
        self._lock = threading.Lock()
        self._changes = 0
        self._built_for = -1
        self._router: ToolRouter | None = None
        self.builds = 0
        registry.on_change(self._count_change)

    def _count_change(self, name: str, spec: ToolSpec | None) -> None:
        with self._lock:
            self._changes += 1

    def reconfigure(
        self,
        settings: RouterSettings,
        backend: Backend | None = None,
        semantic: Backend | None = None,
    ) -> None:
        """Use other settings (and backends) from the next search on: rebuilt, cache emptied."""
        with self._lock:
            self.settings, self.backend, self.semantic = settings, backend, semantic
            self._changes += 1

    def router(self) -> ToolRouter:
        """Return a router over the registry's current tools, rebuilding it if they changed."""
        with self._lock:
            changes = self._changes
            if self._router is not None and self._built_for == changes:
                return self._router
        # Built outside the lock: a change meanwhile bumps the count, so the next call
        # rebuilds again rather than keep a stale index.
        with self._lock:
            settings, backend, semantic = self.settings, self.backend, self.semantic
        catalogue = catalogue_from_specs(self.registry.list())
        router = ToolRouter(catalogue, settings, backend, semantic)
        with self._lock:
            if self._built_for <= changes:
                self._router, self._built_for = router, changes
                self.builds += 1
        return router

    def search(self, tool: str, server: str = "", *, limit: int | None = None) -> Routing:
        """Return the best tools for a request, as the settings say (see ToolRouter.route)."""
        return self.router().route(tool, server, limit=limit)


@dataclass(frozen=True)
class SiteRouterConfig:
    """The site's router configuration, as Django's settings give it."""

    settings: RouterSettings
    backend: str = "tfidf"
    model_path: str = ""
    semantic: str = SEMANTIC_DEFAULT


def site_router_config() -> SiteRouterConfig:
    """Return the router configuration in Django's settings (ARES_ROUTER_*)."""
    from django.conf import settings

    router_settings = RouterSettings(
        server_weight=settings.ARES_ROUTER_SERVER_WEIGHT,
        tool_weight=settings.ARES_ROUTER_TOOL_WEIGHT,
        top_servers=settings.ARES_ROUTER_TOP_SERVERS,
        top_tools=settings.ARES_ROUTER_TOP_TOOLS,
        server_threshold=settings.ARES_ROUTER_SERVER_THRESHOLD,
        min_score=settings.ARES_ROUTER_MIN_SCORE,
        combination=settings.ARES_ROUTER_COMBINATION,
        server_scoring=settings.ARES_ROUTER_SERVER_SCORING,
        cache_size=settings.ARES_ROUTER_CACHE_SIZE,
        search=_choice_setting(
            "ARES_ROUTER_SEARCH",
            settings.ARES_ROUTER_SEARCH,
            ("flat", "two_stage"),
            "flat",
        ),
        per_step=_choice_setting(
            "ARES_ROUTER_PER_STEP",
            settings.ARES_ROUTER_PER_STEP,
            ("true", "false"),
            "false",
        )
        == "true",
        fusion=_choice_setting(
            "ARES_ROUTER_FUSION",
            settings.ARES_ROUTER_FUSION,
            ("zscore", "rrf"),
            "zscore",
        ),
    )
    return SiteRouterConfig(
        router_settings,
        settings.ARES_ROUTER_BACKEND,
        settings.ARES_ROUTER_EMBEDDING_MODEL,
        semantic_setting(settings.ARES_ROUTER_SEMANTIC),
    )


def semantic_setting(value: str | None) -> str:
    """Return the semantic signal asked for: Django's setting, else ARES_ROUTER_SEMANTIC.

    'wordllama' fuses wordllama's embeddings with TF-IDF (BackendUnavailable at the first
    search if the package is missing), 'auto' does when the package is installed, 'off'
    never does. Anything else is refused.
    """
    return _choice_setting("ARES_ROUTER_SEMANTIC", value, SEMANTIC_CHOICES, SEMANTIC_DEFAULT)


def _choice_setting(name: str, value: str | None, choices: tuple[str, ...], default: str) -> str:
    """Return a setting's value (None: the environment's), else the default, checked.

    settings.py declares and checks these when the site starts; checked again here, since
    a value set later (a test, an override) has not been.
    """
    value = value if value is not None else os.environ.get(name, "")
    value = value.strip().lower() or default
    if value not in choices:
        listed = ", ".join(repr(choice) for choice in choices)
        raise ImproperlyConfigured(f"{name}={value!r}: choose {listed}")
    return value


_current: RegistryRouter | None = None
_current_config: SiteRouterConfig | None = None
_current_lock = threading.Lock()


def get_router() -> RegistryRouter:
    """Return the router over this process's engine registry, configured by the settings.

    A new engine gets a new router; changed settings reconfigure the current one.
    """
    global _current, _current_config
    from tools_app.site_engine import get_engine  # the runtime needs Django set up: import late

    registry = get_engine().registry
    config = site_router_config()
    with _current_lock:
        if _current is None or _current.registry is not registry:
            _current = RegistryRouter(
                registry, config.settings, _backend(config), _semantic(config)
            )
        elif config != _current_config:
            _current.reconfigure(config.settings, _backend(config), _semantic(config))
        _current_config = config
        return _current


def _semantic(config: SiteRouterConfig) -> Backend | None:
    if config.semantic == "off" or (config.semantic == "auto" and not semantic_available()):
        return None
    return WordLlamaBackend()


def _backend(config: SiteRouterConfig) -> Backend | None:
    if config.backend == "tfidf":
        return None  # the router's default
    return make_backend(config.backend, config.model_path or None)
