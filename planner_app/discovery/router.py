"""The hierarchical tool router: rank servers, then tools inside the best servers (MCP-Zero).

Stage 1 scores every server (a built-in category or an MCP server) against the request's
server text; stage 2 scores the tools of the best `top_servers` against its tool text, and
ranks them by server_weight * server score + tool_weight * tool score. When no server
reaches `server_threshold`, the router searches all tools flat instead. Scores are cosine
similarities in [0, 1], from one vector space shared by servers and tools.

Building is one fit and three sparse encodings, cheap enough to redo whenever tools change.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

import numpy as np

from planner_app.discovery.backends import Backend, TfidfBackend, similarities
from planner_app.discovery.catalogue import Server, Tool


@dataclass(frozen=True)
class RouterSettings:
    """How the two stages combine and how much each keeps."""

    server_weight: float = 0.3
    tool_weight: float = 0.7
    top_servers: int = 3
    top_tools: int = 5
    # Below this stage-1 score a server is no match; with no match at all, search flat.
    server_threshold: float = 0.05
    # Tools scoring below this (combined, or tool score when flat) are not returned.
    min_score: float = 0.0

    def __post_init__(self) -> None:
        if self.server_weight < 0 or self.tool_weight < 0:
            raise ValueError("server_weight and tool_weight must not be negative")
        if self.server_weight + self.tool_weight <= 0:
            raise ValueError("server_weight + tool_weight must be positive")
        if self.top_servers < 1 or self.top_tools < 1:
            raise ValueError("top_servers and top_tools must be at least 1")
        for name in ("server_threshold", "min_score"):
            if not 0 <= getattr(self, name) <= 1:
                raise ValueError(f"{name} must be between 0 and 1")


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

    @property
    def tool_names(self) -> list[str]:
        return [match.tool for match in self.matches]


def server_document(server: Server) -> str:
    """Return the text stage 1 matches a server on: its name, description and tools."""
    tools = " ".join(f"{tool.name} {tool.description}" for tool in server.tools)
    return f"{server.name} {server.name} {server.description} {tools}"


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
        if self._tools:
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
        if not self._tools:
            return Routing(RouteMode.TWO_STAGE, ())
        settings = self.settings
        tool_text, server_text = tool.strip() or server, server.strip() or tool
        tool_query, server_query = self._encode_pair(tool_text, server_text)
        server_scores = similarities(self._server_rows, server_query)
        kept = np.argsort(-server_scores, kind="stable")[: settings.top_servers]
        kept = kept[server_scores[kept] >= max(settings.server_threshold, 1e-9)]
        if kept.size == 0:
            return self._flat(tool_text, server_text, limit, RouteMode.FLAT_FALLBACK)
        candidates = np.flatnonzero(np.isin(self._tool_server, kept))
        tool_scores = similarities(self._tool_rows[candidates], tool_query)
        own_server_scores = server_scores[self._tool_server[candidates]]
        combined = settings.server_weight * own_server_scores + settings.tool_weight * tool_scores
        combined /= settings.server_weight + settings.tool_weight
        matches = self._best(candidates, combined, own_server_scores, tool_scores, limit)
        kept_servers = tuple((self.servers[i].name, float(server_scores[i])) for i in kept)
        return Routing(RouteMode.TWO_STAGE, matches, kept_servers)

    def search_flat(self, tool: str, server: str = "", *, limit: int | None = None) -> Routing:
        """Return the best tools for a request by matching it against every tool at once."""
        if not self._tools:
            return Routing(RouteMode.FLAT, ())
        return self._flat(tool.strip() or server, server.strip(), limit, RouteMode.FLAT)

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
        floor = max(self.settings.min_score, 1e-9)
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
