"""Active discovery in the agent loop: serve a reply's `<tool_request>` blocks. No Django.

The model starts with no tools and asks for them; each request goes to the router
(planner_app.discovery), and the tools found, among those the agent may call, are offered
from the next model call on, each once. The loop tells the model the note, records the
round as a `tool_discovery` span and emits it as ToolsDiscovered.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from planner_app.discovery.requests import (
    ToolRequest,
    ToolRequestError,
    TooManyToolRequests,
    parse_tool_requests,
)
from tools_app.registry import ToolRegistry
from tools_app.specs import ToolSpec

SERVED, EXHAUSTED, NONE_ASKED = "served", "exhausted", ""


class Discovered(Protocol):
    """The router's answer to one tool request (planner_app.discovery's Routing)."""

    @property
    def tool_names(self) -> list[str]: ...

    def explain(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class DiscoveryRound:
    """What came of one reply's tool requests: served, exhausted, or none asked ("")."""

    outcome: str
    note: str = ""  # what the model is told, as a user message; "" for nothing
    new: list[ToolSpec] = field(default_factory=list)  # offered from now on
    requests: list[dict[str, str]] = field(default_factory=list)
    routing: list[dict[str, Any]] = field(default_factory=list)
    offered: list[str] = field(default_factory=list)  # every tool the model may call now
    started_at: datetime | None = None  # None: nothing was routed, nothing to record
    clock: float = 0.0  # perf_counter() when routing started

    @property
    def loaded(self) -> list[str]:
        return [spec.name for spec in self.new]


class ToolDiscovery:
    """Route a task's tool requests to tools the agent may call; count requests and loads."""

    def __init__(
        self,
        discover: Callable[[str, str], Discovered],
        allowed: Collection[str],
        registry: ToolRegistry,
    ) -> None:
        self.discover, self.allowed, self.registry = discover, allowed, registry
        self.requests_made = 0
        self.tools_loaded = 0

    def serve(self, text: str, offered: Sequence[ToolSpec]) -> DiscoveryRound:
        """Return what the reply's tool requests found, given the tools offered so far."""
        try:
            requests = parse_tool_requests(text, already_made=self.requests_made)
            over = ""
        except TooManyToolRequests as exc:
            requests, over = exc.allowed, str(exc)
            if not requests:
                return DiscoveryRound(EXHAUSTED)
        except ToolRequestError as exc:
            return DiscoveryRound(SERVED, f"Your tool request could not be read: {exc}")
        if not requests:
            return DiscoveryRound(NONE_ASKED)
        self.requests_made += len(requests)
        started_at, clock = datetime.now(UTC), time.perf_counter()
        names = {spec.name for spec in offered}
        new, found, routing = self._route(requests, names)
        self.tools_loaded += len(new)
        note = discovery_note(requests, new, found, self.registry)
        if over:
            note += f" ({over})"
        asked = [dataclasses.asdict(r) for r in requests]
        return DiscoveryRound(SERVED, note, new, asked, routing, sorted(names), started_at, clock)

    def _route(
        self, requests: list[ToolRequest], offered: set[str]
    ) -> tuple[list[ToolSpec], set[str], list[dict[str, Any]]]:
        """Return the new tools, every callable tool found, and how each request was routed.

        `offered` grows by the new tools: each is loaded once, however often it is found.
        """
        new: list[ToolSpec] = []
        found: set[str] = set()  # callable by this agent, new or loaded before
        routing = []
        for request in requests:
            discovered = self.discover(request.tool, request.server)
            routing.append(discovered.explain())
            for name in discovered.tool_names:
                if name not in self.allowed or name not in self.registry:
                    continue
                found.add(name)
                if name not in offered:
                    new.append(self.registry.get(name))
                    offered.add(name)
        return new, found, routing


def discovery_note(
    requests: list[ToolRequest], new: list[ToolSpec], found: set[str], registry: ToolRegistry
) -> str:
    """Return what the model is told about its requests: the tools loaded, or none found."""
    if not found:
        asked = "; ".join(request.tool for request in requests)
        return f"No tools found for: {asked}. Ask in other words, or answer without."
    listing = "; ".join(f"{spec.llm_name}: {spec.description}" for spec in new)
    note = f"Tools discovered and loaded ({len(new)} new)"
    note += f": {listing}." if new else "."
    before = sorted(found - {spec.name for spec in new})
    if before:
        names = ", ".join(registry.get(name).llm_name for name in before)
        note += f" Already loaded: {names}."
    return f"{note} Call them as tools."
