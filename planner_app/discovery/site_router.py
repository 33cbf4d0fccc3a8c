"""The router over this process's tool registry, rebuilt on the next search after a change.

Built-in tools are grouped into categories, each MCP server is a group of its own. The
registry calls back on every registration, change and removal; the router only counts
them, and rebuilds (a few milliseconds for a registry this size) when asked to search
after one. A rebuild starts with an empty routing cache. The site's router takes its
settings from Django's (ARES_ROUTER_*).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, replace

from django.core.exceptions import ImproperlyConfigured

from planner_app.discovery.backends import (
    Backend,
    WordLlamaBackend,
    make_backend,
    semantic_available,
)
from planner_app.discovery.catalogue import Server, Tool
from planner_app.discovery.learned import LearnedIndex
from planner_app.discovery.outcomes import DAY_S, OutcomeHistory
from planner_app.discovery.router import RouterSettings, Routing, ToolRouter
from tools_app.registry import ToolRegistry
from tools_app.specs import ToolSpec

# The semantic signal: wordllama fused with TF-IDF, when installed ('auto'), always
# ('wordllama': an error without the package), or never. 'auto' by default: fused with
# weight 0.25 it has the best mean hit@5 over the tune halves of StableToolBench and BFCL
# (bench/README.md, "router.py").
SEMANTIC_CHOICES = ("auto", "wordllama", "off")
SEMANTIC_DEFAULT = "auto"

logger = logging.getLogger(__name__)
# Up to this many outcomes the learned index is rebuilt before the search that finds the
# history changed (tens of milliseconds); past it, in a thread, the search using the last
# index meanwhile (none at first: a first build takes about half a millisecond per text).
SYNC_BUILD_OUTCOMES = 2_000

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
    """A ToolRouter following a ToolRegistry: after any change, rebuilt before the next search.

    With a `history`, each search also matches the request against the tools' past
    outcomes: their index is rebuilt when the history changed (`refresh` brings it up to
    date before each search), small ones at once, big ones in a thread meanwhile.
    """

    def __init__(
        self,
        registry: ToolRegistry,
        settings: RouterSettings | None = None,
        backend: Backend | None = None,
        semantic: Backend | None = None,
        history: OutcomeHistory | None = None,
        refresh: Callable[[], object] | None = None,
    ) -> None:
        self.registry = registry
        self.settings = settings or RouterSettings()
        self.backend = backend
        self.semantic = semantic
        self.history = history
        self.refresh = refresh
        self._lock = threading.Lock()
        self._changes = 0
        self._built_for = -1
        self._router: ToolRouter | None = None
        # The last learned index: the router, history and history version it was built for.
        self._learned: tuple[ToolRouter, OutcomeHistory, int, LearnedIndex] | None = None
        self._learning = False  # a thread is building the learned index
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
        router = self.router()
        return router.route(tool, server, limit=limit, learned=self.learned(router))

    def learned(self, router: ToolRouter) -> LearnedIndex | None:
        """Return the history's index for this router, rebuilt if the history changed."""
        if self.history is None:
            return None
        if self.refresh is not None:
            self.refresh()
        version = self.history.version
        with self._lock:
            last, building = self._learned, self._learning
            fits = last is not None and last[0] is router and last[1] is self.history
            if last is not None and fits and last[2] == version:
                return last[3]
            if len(self.history) > SYNC_BUILD_OUTCOMES:
                if not building:
                    self._learning = True
                    threading.Thread(target=self._learn_aside, args=(router,), daemon=True).start()
                # The last index, while it fits this router; else none until the new one.
                return last[3] if last is not None and fits else None
        try:
            return self._learn(router)
        except Exception:  # routing by the descriptions beats no routing at all
            logger.exception("the router's learned index could not be built")
            return None

    def _learn_aside(self, router: ToolRouter) -> None:
        """Build the learned index in a thread; a failure is logged, the last index stays."""
        try:
            self._learn(router)
        except Exception:
            logger.exception("the router's learned index could not be rebuilt")

    def _learn(self, router: ToolRouter) -> LearnedIndex:
        """Build the learned index of the history as it is now, and keep it."""
        history = self.history
        assert history is not None
        try:
            version = history.version
            with self._lock:
                previous = self._learned[3] if self._learned is not None else None
            index = router.learned_index(history.outcomes(), time.time(), version, previous)
            with self._lock:
                last = self._learned
                if last is None or last[1] is not history or last[2] <= version:
                    self._learned = (router, history, version, index)
            return index
        finally:
            with self._lock:
                self._learning = False


@dataclass(frozen=True)
class SiteRouterConfig:
    """The site's router configuration, as Django's settings give it."""

    settings: RouterSettings
    backend: str = "tfidf"
    model_path: str = ""
    semantic: str = SEMANTIC_DEFAULT
    history: bool = True  # learn from the site's recorded outcomes (ARES_ROUTER_HISTORY)


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
    router_settings = replace(
        router_settings,
        history_half_life_s=settings.ARES_ROUTER_HISTORY_HALF_LIFE_DAYS * DAY_S,
    )
    return SiteRouterConfig(
        router_settings,
        settings.ARES_ROUTER_BACKEND,
        settings.ARES_ROUTER_EMBEDDING_MODEL,
        semantic_setting(settings.ARES_ROUTER_SEMANTIC),
        settings.ARES_ROUTER_HISTORY == "on",
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
        _current.history, _current.refresh = _history(config)
        return _current


def _history(config: SiteRouterConfig) -> tuple[OutcomeHistory | None, Callable[[], object] | None]:
    """Return the site's outcome history and how to refresh it, when learning is on."""
    if not config.history:
        return None, None
    from planner_app.discovery.site_history import site_history

    return site_history(), _refresh_history


def _refresh_history() -> None:
    """Bring the site history up to date before a search: a small one at once, a big one
    (whose full reload takes seconds) in a thread, the search using it as it is."""
    from planner_app.discovery.site_history import (
        refresh_site_history,
        refresh_site_history_in_background,
        site_history,
    )

    if len(site_history()) <= SYNC_BUILD_OUTCOMES:
        refresh_site_history()
    else:
        refresh_site_history_in_background()


def _semantic(config: SiteRouterConfig) -> Backend | None:
    if config.semantic == "off" or (config.semantic == "auto" and not semantic_available()):
        return None
    return WordLlamaBackend()


def _backend(config: SiteRouterConfig) -> Backend | None:
    if config.backend == "tfidf":
        return None  # the router's default
    return make_backend(config.backend, config.model_path or None)
