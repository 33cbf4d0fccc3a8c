"""The hierarchical tool router: rank servers, then tools inside the best servers (MCP-Zero).

Stage 1 scores every server (a built-in category or an MCP server) against the request's
server text; stage 2 scores the tools of the best `top_servers` against its tool text, and
ranks them by a combination of the two scores: by default server_weight * server score +
tool_weight * tool score, or MCP-Zero's (s * t) * max(s, t). Tools below `min_score` are
dropped. When no server reaches `server_threshold`, the router searches all tools flat
instead. Scores are cosine similarities in [0, 1], from one vector space shared by servers
and tools.

Building is one fit and a few sparse encodings, cheap enough to redo whenever tools change;
a router answers a request it has seen from a small cache, which goes with the router
when the index is rebuilt.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

import numpy as np

from planner_app.discovery.backends import Backend, TfidfBackend, similarities
from planner_app.discovery.catalogue import Server, Tool


class Combination(StrEnum):
    """How stage 2 ranks a tool from its server's score s and its own score t."""

    WEIGHTED = "weighted"  # (server_weight * s + tool_weight * t) / (server_weight + tool_weight)
    PRODUCT = "product"  # (s * t) * max(s, t): MCP-Zero's; high only when both are high


# The default threshold of each combination: a product of three similarities is about
# their cube, so its scale is far below a weighted mean's.
MIN_SCORES = {Combination.WEIGHTED: 0.1, Combination.PRODUCT: 0.001}


class ServerScoring(StrEnum):
    """What stage 1 matches a server on."""

    # One document: the server's name and description with its tools' names and descriptions.
    JOINT = "joint"
    # MCP-Zero's: the better of two similarities, with the server's own name and description,
    # and with the summary of its tools (their names and descriptions).
    MAX = "max"


@dataclass(frozen=True)
class RouterSettings:
    """How the two stages combine and how much each keeps."""

    server_weight: float = 0.3
    tool_weight: float = 0.7
    top_servers: int = 3
    top_tools: int = 5
    # Below this stage-1 score a server is no match; with no match at all, search flat.
    server_threshold: float = 0.05
    # The threshold filter: tools scoring below this (combined, or the tool score when flat)
    # are not returned. None: the combination's default (MIN_SCORES). TF-IDF scores of a
    # long request are low (a right tool often scores 0.1 to 0.2), so 0.1 only drops near
    # misses; 0.15 costs a point of hit@5 (bench/README.md).
    min_score: float | None = None
    combination: Combination = Combination.WEIGHTED
    server_scoring: ServerScoring = ServerScoring.JOINT
    # Requests remembered with their answers (least recently used first out); 0: none.
    cache_size: int = 256

    def __post_init__(self) -> None:
        # Frozen: set through object.__setattr__; a bad enum name raises ValueError.
        object.__setattr__(self, "combination", _choice(Combination, self.combination))
        object.__setattr__(self, "server_scoring", _choice(ServerScoring, self.server_scoring))
        if self.min_score is None:
            object.__setattr__(self, "min_score", MIN_SCORES[self.combination])
        if self.server_weight < 0 or self.tool_weight < 0:
            raise ValueError("server_weight and tool_weight must not be negative")
        if self.server_weight + self.tool_weight <= 0:
            raise ValueError("server_weight + tool_weight must be positive")
        if self.top_servers < 1 or self.top_tools < 1:
            raise ValueError("top_servers and top_tools must be at least 1")
        for name in ("server_threshold", "min_score"):
            if not 0 <= getattr(self, name) <= 1:
                raise ValueError(f"{name} must be between 0 and 1")
        if self.cache_size < 0:
            raise ValueError("cache_size must not be negative")


def _choice(kind: type[StrEnum], value: str) -> Any:
    try:
        return kind(value)
    except ValueError:
        choices = ", ".join(repr(member.value) for member in kind)
        raise ValueError(f"{value!r} is not a {kind.__name__}: choose {choices}") from None


class RouteMode(StrEnum):
    TWO_STAGE = "two_stage"
    FLAT = "flat"
    FLAT_FALLBACK = "flat_fallback"  # two-stage asked, but no server reached the threshold


@dataclass(frozen=True)
class ToolMatch:
    server: str
    tool: str
    description: str
    score: float
    server_score: float
    tool_score: float


@dataclass(frozen=True)
class Routing:
    """The answer to one request: the tools, best first, and how they were found."""

    mode: RouteMode
    matches: tuple[ToolMatch, ...]
    servers: tuple[tuple[str, float], ...] = ()  # stage 1's kept servers and their scores
    cached: bool = False  # answered from the router's cache

    @property
    def tool_names(self) -> list[str]:
        return [match.tool for match in self.matches]

    def explain(self) -> dict[str, Any]:
        """Return how the tools were found, as JSON-ready data for a trace or a page.

        The mode, stage 1's kept servers with their scores (none when flat), and each tool
        returned with its combined, server and tool score, best first.
        """
        return {
            "mode": str(self.mode),
            "cached": self.cached,
            "servers": [{"server": name, "score": round(score, 4)} for name, score in self.servers],
            "tools": [
                {
                    "server": match.server,
                    "tool": match.tool,
                    "score": round(match.score, 4),
                    "server_score": round(match.server_score, 4),
                    "tool_score": round(match.tool_score, 4),
                }
                for match in self.matches
            ],
        }


class RoutingCache:
    """A bounded map from a request to its routing, least recently used out first; thread-safe.

    A routing is frozen, so a hit hands out the stored one (marked cached) without a copy
    of its matches.
    """

    def __init__(self, size: int) -> None:
        self.size = size
        self.hits = self.misses = 0
        self._entries: OrderedDict[tuple[object, ...], Routing] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: tuple[object, ...]) -> Routing | None:
        with self._lock:
            routing = self._entries.get(key)
            if routing is None:
                self.misses += 1
                return None
            self._entries.move_to_end(key)
            self.hits += 1
            return routing

    def put(self, key: tuple[object, ...], routing: Routing) -> None:
        if self.size == 0:
            return
        with self._lock:
            self._entries[key] = replace(routing, cached=True)
            self._entries.move_to_end(key)
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)


def server_document(server: Server) -> str:
    """Return the text stage 1 matches a server on: its name, description and tools."""
    tools = " ".join(f"{tool.name} {tool.description}" for tool in server.tools)
    return f"{server.name} {server.name} {server.description} {tools}"


def server_own_document(server: Server) -> str:
    """Return a server's own text (name, description) for MAX scoring; the name is dense."""
    return f"{server.name} {server.name} {server.description}"


def tools_summary(server: Server) -> str:
    """Return the summary of a server's tools that MAX scoring matches: names, descriptions."""
    return " ".join(f"{tool.name} {tool.description}" for tool in server.tools)


def tool_document(tool: Tool) -> str:
    """Return the text stage 2 matches a tool on: its name (twice: it is dense), description."""
    return f"{tool.name} {tool.name} {tool.description} {' '.join(tool.keywords)}"


def flat_document(server: Server, tool: Tool) -> str:
    """Return the text flat search matches a tool on: the tool's with its server's name."""
    return f"{server.name} {server.description} {tool_document(tool)}"


class ToolRouter:
    """Find the tools a request asks for in a catalogue of servers, two-stage or flat."""

    def __init__(
        self,
        servers: Sequence[Server],
        settings: RouterSettings | None = None,
        backend: Backend | None = None,
    ) -> None:
        self.settings = settings or RouterSettings()
        self.backend = backend or TfidfBackend()
        self.servers = tuple(server for server in servers if server.tools)
        self._tools = [(server, tool) for server in self.servers for tool in server.tools]
        self._tool_server = np.array(
            [i for i, server in enumerate(self.servers) for _ in server.tools], dtype=np.intp
        )
        tool_docs = [tool_document(tool) for _, tool in self._tools]
        # The vocabulary comes from the tools and from the servers' own names and descriptions
        # (once each, so a server's name is not discounted for every tool it has).
        own_docs = [f"{server.name} {server.description}" for server in self.servers]
        self._encoder = self.backend.fit(tool_docs + own_docs)
        self.cache = RoutingCache(self.settings.cache_size)
        if not self._tools:
            return
        if self.settings.server_scoring == ServerScoring.MAX:
            self._own_rows = self._encoder.encode([server_own_document(s) for s in self.servers])
            self._summary_rows = self._encoder.encode([tools_summary(s) for s in self.servers])
        else:
            self._server_rows = self._encoder.encode([server_document(s) for s in self.servers])
        self._tool_rows = self._encoder.encode(tool_docs)
        self._flat_rows = self._encoder.encode([flat_document(s, t) for s, t in self._tools])

    @property
    def tool_count(self) -> int:
        return len(self._tools)

    def search(self, tool: str, server: str = "", *, limit: int | None = None) -> Routing:
        """Return the best tools for a request, two-stage: servers first, then their tools.

        `server` is the request's description of the server it wants; empty means "use
        the tool text for both stages".
        """
        key = (RouteMode.TWO_STAGE, tool.strip(), server.strip(), limit or self.settings.top_tools)
        return self.cache.get(key) or self._remember(key, self._search(tool, server, limit))

    def search_flat(self, tool: str, server: str = "", *, limit: int | None = None) -> Routing:
        """Return the best tools for a request by matching it against every tool at once."""
        key = (RouteMode.FLAT, tool.strip(), server.strip(), limit or self.settings.top_tools)
        if (routing := self.cache.get(key)) is not None:
            return routing
        if not self._tools:
            return Routing(RouteMode.FLAT, ())
        routing = self._flat(tool.strip() or server, server.strip(), limit, RouteMode.FLAT)
        return self._remember(key, routing)

    def _remember(self, key: tuple[object, ...], routing: Routing) -> Routing:
        self.cache.put(key, routing)
        return routing

    def _search(self, tool: str, server: str, limit: int | None) -> Routing:
        if not self._tools:
            return Routing(RouteMode.TWO_STAGE, ())
        settings = self.settings
        tool_text, server_text = tool.strip() or server, server.strip() or tool
        tool_query, server_query = self._encode_pair(tool_text, server_text)
        server_scores = self._server_scores(server_query)
        kept = np.argsort(-server_scores, kind="stable")[: settings.top_servers]
        kept = kept[server_scores[kept] >= max(settings.server_threshold, 1e-9)]
        if kept.size == 0:
            return self._flat(tool_text, server_text, limit, RouteMode.FLAT_FALLBACK)
        candidates = np.flatnonzero(np.isin(self._tool_server, kept))
        tool_scores = similarities(self._tool_rows[candidates], tool_query)
        own_server_scores = server_scores[self._tool_server[candidates]]
        combined = self._combine(own_server_scores, tool_scores)
        matches = self._best(candidates, combined, own_server_scores, tool_scores, limit)
        kept_servers = tuple((self.servers[i].name, float(server_scores[i])) for i in kept)
        return Routing(RouteMode.TWO_STAGE, matches, kept_servers)

    def _server_scores(self, query: object) -> np.ndarray:
        if self.settings.server_scoring == ServerScoring.MAX:
            own = similarities(self._own_rows, query)
            return np.maximum(own, similarities(self._summary_rows, query))
        return similarities(self._server_rows, query)

    def _combine(self, server_scores: np.ndarray, tool_scores: np.ndarray) -> np.ndarray:
        """Return the stage-2 scores of tools from their server's and their own scores."""
        settings = self.settings
        if settings.combination == Combination.PRODUCT:
            return server_scores * tool_scores * np.maximum(server_scores, tool_scores)
        combined = settings.server_weight * server_scores + settings.tool_weight * tool_scores
        return combined / (settings.server_weight + settings.tool_weight)

    def _flat(
        self, tool_text: str, server_text: str, limit: int | None, mode: RouteMode
    ) -> Routing:
        text = tool_text if server_text in ("", tool_text) else f"{server_text} {tool_text}"
        scores = similarities(self._flat_rows, self._encoder.encode_queries([text]))
        everything = np.arange(len(self._tools))
        no_server_scores = np.zeros(len(self._tools))
        return Routing(mode, self._best(everything, scores, no_server_scores, scores, limit))

    def _encode_pair(self, tool_text: str, server_text: str) -> tuple[object, object]:
        if tool_text == server_text:
            query = self._encoder.encode_queries([tool_text])
            return query, query
        rows = self._encoder.encode_queries([tool_text, server_text])
        return rows[0:1], rows[1:2]

    def _best(
        self,
        candidates: np.ndarray,
        scores: np.ndarray,
        server_scores: np.ndarray,
        tool_scores: np.ndarray,
        limit: int | None,
    ) -> tuple[ToolMatch, ...]:
        """Return the `limit` best candidates above min_score, highest score first."""
        limit = limit or self.settings.top_tools
        floor = max(self.settings.min_score or 0.0, 1e-9)
        if len(scores) > limit:
            order = np.argpartition(-scores, limit - 1)[:limit]
            order = order[np.argsort(-scores[order], kind="stable")]
        else:
            order = np.argsort(-scores, kind="stable")
        matches = []
        for i in order:
            if scores[i] < floor:
                break
            server, tool = self._tools[candidates[i]]
            matches.append(
                ToolMatch(
                    server=server.name,
                    tool=tool.name,
                    description=tool.description,
                    score=float(scores[i]),
                    server_score=float(server_scores[i]),
                    tool_score=float(tool_scores[i]),
                )
            )
        return tuple(matches)
