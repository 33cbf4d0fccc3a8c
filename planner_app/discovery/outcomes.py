"""The outcomes the router learns from: which tool served which request, and how it went. No Django.

An outcome is one recorded call of a tool for a request: a trace's request text (or a
step's tool request in a task of several), the tool, and how much of it failed (0: it
succeeded; 1: it failed; between: an ok call whose scores a score rule counts as partly
failed). OutcomeHistory keeps a bounded number per tool, thread-safe; the router matches
a new request against them (planner_app.discovery.learned).
"""

from __future__ import annotations

import math
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
        touched: set[str] = set()
        with self._lock:
            for outcome in outcomes:
                if not outcome.request or not outcome.tool:
                    continue
                if outcome.source:
                    self._drop_source(outcome.source)
                    self._tool_of[outcome.source] = outcome.tool
                self._by_tool.setdefault(outcome.tool, []).append(outcome)
                touched.add(outcome.tool)
                kept += 1
            for tool in touched:
                self._trim(self._by_tool[tool])
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

    def _trim(self, kept: list[Outcome]) -> None:
        """Bring a tool down to per_tool outcomes: the oldest duplicates out first, then the
        oldest."""
        excess = len(kept) - self.per_tool
        if excess <= 0:
            return
        kept.sort(key=lambda outcome: outcome.at)
        same = Counter(_result_key(outcome) for outcome in kept)
        gone: set[int] = set()
        for position, outcome in enumerate(kept):
            if len(gone) < excess and same[_result_key(outcome)] > 1:
                same[_result_key(outcome)] -= 1
                gone.add(position)
        oldest = (position for position in range(len(kept)) if position not in gone)
        while len(gone) < excess:
            gone.add(next(oldest))
        for position in gone:
            self._tool_of.pop(kept[position].source, None)
        kept[:] = [outcome for position, outcome in enumerate(kept) if position not in gone]


def _result_key(outcome: Outcome) -> tuple[str, bool]:
    """Return what makes two outcomes of a tool duplicates: the same request, the same result."""
    return outcome.text_key, outcome.failed >= 0.5


class OutcomeFileError(ValueError):
    """A history file that does not follow the format; the message says where."""


def outcomes_from_dict(data: object) -> list[Outcome]:
    """Return the outcomes of a history in the bench's JSON format (bench/README.md):

        {"outcomes": [{"request": "...", "tool": "...", "server": "...",
                       "outcome": "ok" | "error", "score": 0.8, "at": 1764547200}]}

    `server`, `score` (how good an ok call was judged, 0 to 1: it counts as failed by
    1 - score) and `at` (Unix seconds) may be left out.
    """
    if not isinstance(data, dict) or not isinstance(data.get("outcomes"), list):
        raise OutcomeFileError("a history is an object with an 'outcomes' list")
    return [_outcome(item, f"outcomes[{i}]") for i, item in enumerate(data["outcomes"])]


def _outcome(item: object, where: str) -> Outcome:
    if not isinstance(item, dict):
        raise OutcomeFileError(f"{where}: an outcome is an object")
    for key in ("request", "tool"):
        if not isinstance(item.get(key), str) or not item[key].strip():
            raise OutcomeFileError(f"{where}: {key!r} must be a non-empty string")
    if item.get("outcome") not in ("ok", "error"):
        raise OutcomeFileError(f"{where}: 'outcome' must be 'ok' or 'error'")
    score, at = item.get("score"), item.get("at", 0.0)
    if score is not None and (not _is_number(score) or not 0 <= score <= 1):
        raise OutcomeFileError(f"{where}: 'score' must be a number from 0 to 1")
    if not _is_number(at):
        raise OutcomeFileError(f"{where}: 'at' must be a number of Unix seconds")
    server = item.get("server", "")
    if not isinstance(server, str):
        raise OutcomeFileError(f"{where}: 'server' must be a string")
    failed = 1.0 if item["outcome"] == "error" else 1.0 - (1.0 if score is None else score)
    return Outcome(item["request"], item["tool"], failed, float(at), server=server)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
