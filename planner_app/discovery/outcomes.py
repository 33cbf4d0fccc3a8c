"""The outcomes the router learns from: which tool served which request, and how it went. No Django.

An outcome is one recorded call of a tool for a request: a trace's request text (or a
step's tool request in a task of several), the tool, and how much of it failed (0: it
succeeded; 1: it failed; between: an ok call whose scores a score rule counts as partly
failed). OutcomeHistory keeps a bounded number per tool, thread-safe; the router matches
a new request against them (planner_app.discovery.learned).
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

# At most this many outcomes per tool (ARES_ROUTER_HISTORY_PER_TOOL): 20 recorded requests
# per tool already lift hit@5 past 0.9 on held-out data (bench/README.md, "--history").
DEFAULT_PER_TOOL = 50
DAY_S = 86_400.0
# An outcome's weight halves every this many seconds (ARES_ROUTER_HISTORY_HALF_LIFE_DAYS).
DEFAULT_HALF_LIFE_S = 30 * DAY_S
MAX_REQUEST_CHARS = 1_000  # what of a request is kept: its start names what it asks


@dataclass(frozen=True)
class Outcome:
    """One recorded call of a tool for a request."""

    request: str
    tool: str
    failed: float = 0.0  # 0 succeeded, 1 failed; an ok call its scores count failed: between
    at: float = 0.0  # when it was recorded, in Unix seconds
    source: str = ""  # where ("trace_id/span_id"): a source counts once, its latest outcome
    server: str = ""  # the tool's server, when its name alone is ambiguous ("": any)

    def __post_init__(self) -> None:
        if not 0.0 <= self.failed <= 1.0:
            raise ValueError(f"an outcome's failed share is between 0 and 1, not {self.failed}")
        object.__setattr__(self, "request", " ".join(self.request.split())[:MAX_REQUEST_CHARS])

    @property
    def text_key(self) -> str:
        return self.request.casefold()


class OutcomeHistory:
    """The outcomes per tool, at most `per_tool` each: duplicates out first, then the oldest.

    A tool's requests repeated word for word (an agent retrying, a loop) teach nothing
    new: when a tool is full, the older of two outcomes with the same request and the same
    result goes first; with none, the oldest. `version` grows with every change, so a
    router knows when to rebuild what it matched on.
    """

    def __init__(self, per_tool: int = DEFAULT_PER_TOOL) -> None:
        if per_tool < 1:
            raise ValueError("per_tool must be at least 1")
        self.per_tool = per_tool
        self.version = 0
        self._by_tool: dict[str, list[Outcome]] = {}
        self._tool_of: dict[str, str] = {}  # source -> tool, for replacing a source's outcome
        self._lock = threading.Lock()

    def __len__(self) -> int:
        with self._lock:
            return sum(len(kept) for kept in self._by_tool.values())

    def add(self, outcomes: Iterable[Outcome]) -> int:
        """Keep these outcomes (a source seen before: its new outcome replaces the old one).

        Return how many were kept; an outcome without a request or a tool is not.
        """
        kept = 0
        with self._lock:
            for outcome in outcomes:
                if not outcome.request or not outcome.tool:
                    continue
                if outcome.source:
                    self._drop_source(outcome.source)
                    self._tool_of[outcome.source] = outcome.tool
                tool = self._by_tool.setdefault(outcome.tool, [])
                tool.append(outcome)
                if len(tool) > self.per_tool:
                    self._evict(tool)
                kept += 1
            if kept:
                self.version += 1
        return kept

    def remove(self, sources: Iterable[str]) -> int:
        """Forget the outcomes of these sources (a purged trace's calls); return how many."""
        with self._lock:
            removed = sum(self._drop_source(source) for source in sources)
            if removed:
                self.version += 1
        return removed

    def replace(self, outcomes: Iterable[Outcome]) -> None:
        """Forget everything and keep these outcomes instead (a full reload)."""
        with self._lock:
            self._by_tool.clear()
            self._tool_of.clear()
            self.version += 1
        self.add(outcomes)

    def forget_tool(self, tool: str) -> None:
        """Forget every outcome of a tool."""
        with self._lock:
            for outcome in self._by_tool.pop(tool, []):
                self._tool_of.pop(outcome.source, None)
            self.version += 1

    def outcomes(self) -> list[Outcome]:
        """Return every kept outcome, tool by tool, oldest first within a tool."""
        with self._lock:
            return [outcome for kept in self._by_tool.values() for outcome in kept]

    def counts(self) -> dict[str, int]:
        """Return how many outcomes each tool has."""
        with self._lock:
            return {tool: len(kept) for tool, kept in self._by_tool.items()}

    def _drop_source(self, source: str) -> int:
        tool = self._tool_of.pop(source, None)
        if tool is None:
            return 0
        kept = self._by_tool.get(tool, [])
        before = len(kept)
        kept[:] = [outcome for outcome in kept if outcome.source != source]
        if not kept:
            self._by_tool.pop(tool, None)
        return before - len(kept)

    def _evict(self, kept: list[Outcome]) -> None:
        """Drop one outcome of a full tool: the oldest of a duplicate, else the oldest."""
        kept.sort(key=lambda outcome: outcome.at)
        same = Counter(_result_key(outcome) for outcome in kept)
        position = next((i for i, o in enumerate(kept) if same[_result_key(o)] > 1), 0)
        gone = kept.pop(position)
        if gone.source:
            self._tool_of.pop(gone.source, None)


def _result_key(outcome: Outcome) -> tuple[str, bool]:
    """Return what makes two outcomes of a tool duplicates: the same request, the same result."""
    return outcome.text_key, outcome.failed >= 0.5
