"""The learned signal: a new request matched to the requests each tool served before. No Django.

Each recorded outcome (planner_app.discovery.outcomes) is a past request, the tool that
served it and how much of it failed. For a new request, a tool's learned score is, per
text signal (TF-IDF over the past requests' own words, and wordllama's embeddings), the
similarity of its closest past success minus that of its closest past failure, each
weighed by its age (an outcome's weight halves every `half_life_s`). The score is
standardised over the tools that have outcomes, and a tool without any gets 0: having a
record is no advantage, only matching requests that worked is, and a record of failing
for requests like this one is a disadvantage.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from planner_app.discovery.backends import Encoder
from planner_app.discovery.outcomes import DEFAULT_HALF_LIFE_S, Outcome
from planner_app.discovery.past_requests import PastRequests

# "A past request like this one": its similarity to the new request reaches this.
LIKE_LEXICAL = 0.3
LIKE_SEMANTIC = 0.8
# What a tool's best past similarity to a request typically is, mean and deviation, per
# signal (measured over the tune halves of StableToolBench, BFCL and APIBench): a few
# tools with outcomes are standardised against this as much as against each other, as
# if PRIOR_TOOLS more tools had these values, so one tool with history is not its own norm.
LEXICAL_PRIOR = (0.03, 0.05)
SEMANTIC_PRIOR = (0.2, 0.1)
PRIOR_TOOLS = 5


@dataclass(frozen=True)
class ToolEvidence:
    """What a tool's past requests say about the new one, for the explanation."""

    succeeded_like: int  # past requests like this one that it served
    failed_like: int  # past requests like this one that it failed
    closest: str  # its past request closest to this one
    closest_similarity: float


@dataclass(frozen=True)
class LearnedScores:
    """The learned signals of one request, over the router's tools (0: no outcomes)."""

    lexical: np.ndarray
    semantic: np.ndarray | None
    has_history: np.ndarray  # bool per tool
    little_history: np.ndarray  # bool per tool: fewer outcomes than the new tool slot asks
    fits: np.ndarray  # bool per tool: a past request like this one succeeded with it (the gate)
    evidence: Any  # Callable[[int], ToolEvidence | None], computed for the tools shown


_BUILDS = itertools.count(1)


class LearnedIndex:
    """Past outcomes in the router's text spaces, grouped by the router's tool positions."""

    def __init__(
        self,
        outcomes: Sequence[Outcome],
        positions: dict[str, list[int]],
        tool_count: int,
        semantic: Encoder | None = None,
        half_life_s: float = DEFAULT_HALF_LIFE_S,
        now: float = 0.0,
        little_history: int = 3,
        version: int = 0,
        previous: PastRequests | None = None,
    ) -> None:
        rows = sorted(
            (
                (position, outcome)
                for outcome in outcomes
                for position in positions.get(_key(outcome), ())
            ),
            key=lambda row: row[0],
        )
        self.tool_count = tool_count
        self.version = version  # the history's, when built
        self.key = next(_BUILDS)  # this index's own number: the routing cache's key
        self.outcome_count = len(rows)
        self.tools_with_history = len({position for position, _ in rows})
        self._texts = [outcome.request for _, outcome in rows]
        position = np.array([p for p, _ in rows], dtype=np.intp)
        failed = np.array([outcome.failed for _, outcome in rows], dtype=np.float32)
        age = np.array([max(now - outcome.at, 0.0) for _, outcome in rows], dtype=np.float64)
        decay = np.exp2(-age / half_life_s).astype(np.float32) if half_life_s > 0 else 1.0
        self._ok = decay * (1 - failed)
        self._failed = decay * failed
        self._is_failure = failed >= 0.5
        # Rows are sorted by tool: each tool's outcomes are one segment.
        self._starts = np.flatnonzero(np.r_[True, position[1:] != position[:-1]]) if rows else []
        self._segment_tool = position[self._starts] if rows else position
        counts = np.bincount(position, minlength=tool_count)
        self.has_history = counts > 0
        self.little_history = counts < little_history
        self._semantic = semantic
        self.requests = PastRequests(self._texts, semantic, previous)
        self._text_row: np.ndarray | slice = np.array(
            [self.requests.row_of[text] for text in self._texts], dtype=np.intp
        )
        if np.array_equal(self._text_row, np.arange(len(self.requests))):
            self._text_row = slice(None)  # every text once, in order: no gathering
        # The failures, a few of the outcomes: their best per tool is taken over them alone.
        self._failures = np.flatnonzero(self._failed > 0)
        self._failure_segments = np.searchsorted(self._starts, self._failures, side="right") - 1

    def __bool__(self) -> bool:
        return self.outcome_count > 0

    def scores(self, text: str, embedding: np.ndarray | None = None) -> LearnedScores | None:
        """Return the learned signals of a request; None without outcomes.

        `embedding` is the request's semantic vector when the caller has it already.
        """
        if not self.outcome_count:
            return None
        lexical = self.requests.lexical(text)[self._text_row]
        semantic = None
        if self._semantic is not None:
            if embedding is None:
                embedding = np.asarray(self._semantic.encode_queries([text]))[0]
            semantic = self.requests.semantic_similarity(embedding)[self._text_row]

        def evidence(tool: int) -> ToolEvidence | None:
            return self._evidence(tool, lexical, semantic)

        like = _like(lexical, semantic) & ~self._is_failure
        fits = np.zeros(self.tool_count, dtype=bool)
        fits[self._segment_tool] = np.logical_or.reduceat(like, self._starts)
        return LearnedScores(
            self._standardised(lexical, LEXICAL_PRIOR),
            None if semantic is None else self._standardised(semantic, SEMANTIC_PRIOR),
            self.has_history,
            self.little_history,
            fits,
            evidence,
        )

    def _standardised(self, similarity: np.ndarray, prior: tuple[float, float]) -> np.ndarray:
        """Return each tool's best success minus best failure, standardised over the tools
        with outcomes (and the prior); 0 for the tools without."""
        best_ok = np.maximum.reduceat(similarity * self._ok, self._starts)
        best_failed = np.zeros(len(best_ok))
        failed = similarity[self._failures] * self._failed[self._failures]
        np.maximum.at(best_failed, self._failure_segments, failed)
        raw = best_ok - best_failed
        (prior_mean, prior_deviation), weight = prior, PRIOR_TOOLS
        mean = (raw.sum() + weight * prior_mean) / (len(raw) + weight)
        spread = ((raw - mean) ** 2).sum() + weight * (
            prior_deviation**2 + (prior_mean - mean) ** 2
        )
        scores = np.zeros(self.tool_count)
        scores[self._segment_tool] = (raw - mean) / np.sqrt(spread / (len(raw) + weight))
        return scores

    def _evidence(
        self, tool: int, lexical: np.ndarray, semantic: np.ndarray | None
    ) -> ToolEvidence | None:
        segment = np.searchsorted(self._segment_tool, tool)
        if segment >= len(self._segment_tool) or self._segment_tool[segment] != tool:
            return None
        start = self._starts[segment]
        end = self._starts[segment + 1] if segment + 1 < len(self._starts) else self.outcome_count
        lex = lexical[start:end]
        near = None if semantic is None else semantic[start:end]
        like = _like(lex, near)
        closeness = lex if near is None else np.maximum(lex, near)
        failure = self._is_failure[start:end]
        weights = self._ok[start:end] - self._failed[start:end]
        closest = int(np.argmax(np.where(weights > 0, closeness, closeness - 2)))
        return ToolEvidence(
            succeeded_like=int((like & ~failure).sum()),
            failed_like=int((like & failure).sum()),
            closest=self._texts[start + closest],
            closest_similarity=float(closeness[closest]),
        )


def _key(outcome: Outcome) -> str:
    """Return how an outcome names its tool in the positions: "server/tool" or "tool"."""
    return f"{outcome.server}/{outcome.tool}" if outcome.server else outcome.tool


def _like(lexical: np.ndarray, semantic: np.ndarray | None) -> np.ndarray:
    """Return which past requests are like the new one, by either signal."""
    like = lexical >= LIKE_LEXICAL
    return like if semantic is None else like | (semantic >= LIKE_SEMANTIC)
