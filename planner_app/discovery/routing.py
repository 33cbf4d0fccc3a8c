"""The router's answers: each tool found with its scores and why, a routing, and their cache.

No Django: planner_app.discovery.router makes them, the agent loop, the pages and the API
read them (Routing.explain() is their JSON form).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from planner_app.discovery.learned import ToolEvidence

# What put a tool in the top k: its description, its past requests, or the new tool slot.
DESCRIPTION, HISTORY, NEW_TOOL_SLOT = "description", "history", "new tool slot"


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
    tool_score: float  # lexical, the gate's
    semantic_score: float | None = None  # the embedding similarity, with a semantic backend
    # What put it in the top k: its description, its past requests, or the new tool slot.
    placed_by: str = DESCRIPTION
    history_score: float | None = None  # the learned signals' term, when it has outcomes
    evidence: ToolEvidence | None = None

    @property
    def fit_score(self) -> float:
        """Return what the "nothing fits" gate reads: the better lexical score, tool or server."""
        return max(self.tool_score, self.server_score)

    @property
    def why(self) -> str:
        """Say which signal put the tool in the answer, and what its past requests say."""
        if self.placed_by == NEW_TOOL_SLOT:
            return "the best description match among tools with little history (the new tool slot)"
        evidence = self.evidence
        past = "no past requests like this one"
        if evidence is not None and (evidence.succeeded_like or evidence.failed_like):
            ok, failed = evidence.succeeded_like, evidence.failed_like
            past = f"{ok} past request{'s' * (ok != 1)} like this one succeeded with it"
            if failed:
                past += f", {failed} failed"
            past += f"; closest: {evidence.closest!r} {evidence.closest_similarity:.2f}"
        if self.placed_by == HISTORY:
            return past
        return f"its description matches the request ({past})"

    def explain(self) -> dict[str, Any]:
        """Return the match as JSON-ready data: its scores, what placed it, and why."""
        explained: dict[str, Any] = {
            "server": self.server,
            "tool": self.tool,
            "score": round(self.score, 4),
            "server_score": round(self.server_score, 4),
            "tool_score": round(self.tool_score, 4),
        }
        if self.semantic_score is not None:
            explained["semantic_score"] = round(self.semantic_score, 4)
        explained["placed_by"] = self.placed_by
        if self.history_score is not None:
            explained["history_score"] = round(self.history_score, 4)
        if self.evidence is not None:
            explained.update(
                succeeded_like=self.evidence.succeeded_like,
                failed_like=self.evidence.failed_like,
                closest=self.evidence.closest,
                closest_similarity=round(self.evidence.closest_similarity, 4),
            )
        explained["why"] = self.why
        return explained


@dataclass(frozen=True)
class Routing:
    """The answer to one request: the tools, best first, and how they were found."""

    mode: RouteMode
    matches: tuple[ToolMatch, ...]
    servers: tuple[tuple[str, float], ...] = ()  # stage 1's kept servers and their scores
    cached: bool = False  # answered from the router's cache
    steps: tuple[str, ...] = ()  # the steps routed one by one, when the request had several
    history: tuple[int, int] | None = None  # (outcomes, tools) learned from, when any

    @property
    def tool_names(self) -> list[str]:
        return [match.tool for match in self.matches]

    def explain(self) -> dict[str, Any]:
        """Return how the tools were found, as JSON-ready data for a trace or a page.

        The mode, stage 1's kept servers with their scores (none when flat), and each tool
        returned with its combined, server and tool score, best first.
        """
        explained: dict[str, Any] = {
            "mode": str(self.mode),
            "cached": self.cached,
            **({"steps": list(self.steps)} if self.steps else {}),
            "servers": [{"server": name, "score": round(score, 4)} for name, score in self.servers],
        }
        if self.history is not None:
            explained["history"] = {"outcomes": self.history[0], "tools": self.history[1]}
        explained["tools"] = [match.explain() for match in self.matches]
        return explained


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


def merge_routings(routings: Sequence[Routing], limit: int, steps: tuple[str, ...]) -> Routing:
    """Return the routings' matches taken in turns, best first, each tool once."""
    taken: dict[tuple[str, str], ToolMatch] = {}
    for rank in range(max(len(routing.matches) for routing in routings)):
        for routing in routings:
            if rank < len(routing.matches) and len(taken) < limit:
                match = routing.matches[rank]
                taken.setdefault((match.server, match.tool), match)
    servers = tuple(dict.fromkeys(server for routing in routings for server in routing.servers))
    return Routing(routings[0].mode, tuple(taken.values()), servers, steps=steps)
