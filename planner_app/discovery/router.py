"""The hierarchical tool router: rank servers, then tools inside the best servers (MCP-Zero).

Stage 1 scores every server (a built-in category or an MCP server) against the request's
server text; stage 2 scores the tools of the best `top_servers` (more, until they hold
`min_tools` tools) against its tool text, and ranks them by a combination of the two
scores: by default server_weight * server score + tool_weight * tool score, or MCP-Zero's
(s * t) * max(s, t). When no server reaches `server_threshold`, the router searches all
tools flat instead. Scores are cosine similarities in [0, 1], from one vector space shared
by servers and tools.

A search always returns the best `top_tools`; `min_score` only decides "nothing here fits":
when no returned tool's own lexical score reaches it, the answer is empty. Flat search
ranks by several signals fused: TF-IDF's cosine, BM25 and, with a semantic backend (static
word embeddings), the embedding similarity of the whole request and of its best sentence.
The fusion standardises each signal over the catalogue (z-scores) and sums them with
weights, or sums reciprocal ranks (1 / (rrf_k + rank)); both need no common scale.

Building is one fit and a few sparse encodings, cheap enough to redo whenever tools change;
a router answers a request it has seen from a small cache, which goes with the router
when the index is rebuilt.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

import numpy as np

from planner_app.discovery.backends import (
    Backend,
    Bm25Backend,
    Encoder,
    TfidfBackend,
    by_columns,
    column_similarities,
    similarities,
)
from planner_app.discovery.catalogue import Server, Tool
from planner_app.discovery.learned import LearnedIndex, LearnedScores
from planner_app.discovery.outcomes import DEFAULT_HALF_LIFE_S, Outcome
from planner_app.discovery.routing import (
    DESCRIPTION,
    HISTORY,
    NEW_TOOL_SLOT,
    RouteMode,
    Routing,
    RoutingCache,
    ToolMatch,
    merge_routings,
)
from planner_app.discovery.steps import split_sentences, split_steps


class Combination(StrEnum):
    """How stage 2 ranks a tool from its server's score s and its own score t."""

    WEIGHTED = "weighted"  # (server_weight * s + tool_weight * t) / (server_weight + tool_weight)
    PRODUCT = "product"  # (s * t) * max(s, t): MCP-Zero's; high only when both are high


# The "nothing here fits" gate on the best returned tool's lexical score. bench/router.py
# calibrates it on the tune halves as the highest value that still accepts 99.5% of the
# requests whose top 5 holds a right tool: 0.203 on StableToolBench, 0.147 on BFCL (with
# parameter descriptions indexed, which lengthen documents and lower cosines). The site
# takes a little less than the lower of the two, 0.12: a tool with many described
# parameters (string_utils) scores 0.126 for a plain request for it in the site's tasks.
# The semantic gate: what 99% of the requests answered wrongly on a tune half stay under
# with wordllama fused (0.684 and 0.690 now, 0.642 before): 0.64 keeps more right answers.
DEFAULT_MIN_SCORE = 0.12
DEFAULT_MIN_SEMANTIC_SCORE = 0.64


class Fusion(StrEnum):
    """How the signals' rankings of the same tools become one."""

    # Each signal standardised over the ranked tools (mean 0, deviation 1), summed with
    # its weight; the sum goes through the logistic function, so a score is in (0, 1).
    ZSCORE = "zscore"
    # Reciprocal ranks, weighted: sum of w / (rrf_k + rank).
    RRF = "rrf"


class SearchMode(StrEnum):
    """How ToolRouter.route searches: every tool at once, or servers first."""

    FLAT = "flat"
    TWO_STAGE = "two_stage"


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
    # Two-stage: keep more servers than top_servers until they hold this many tools, so a
    # catalogue of one-tool servers still gives stage 2 enough to choose from (0: don't).
    min_tools: int = 0
    # The gate: when no returned tool's lexical score (its own or its server's similarity
    # to the request) reaches this, nothing fits and nothing is returned. None: the default.
    min_score: float | None = None
    # With a semantic signal, a request also fits when a returned tool's embedding
    # similarity reaches this: a paraphrase shares no word with the tool it wants.
    min_semantic_score: float = DEFAULT_MIN_SEMANTIC_SCORE
    # How signals are fused; z-scores have the best mean hit@5 over the tune halves of
    # StableToolBench and BFCL (bench/README.md), reciprocal ranks were the default before.
    fusion: Fusion = Fusion.ZSCORE
    # Reciprocal-rank fusion's constant; 60 is the value of its paper, not tuned here.
    rrf_k: int = 60
    # The semantic signal's weight in the fusion, TF-IDF's being 1. With z-scores, 1.4 and
    # BM25 at 0.5 have the best mean hit@5 over the two tune halves (BM25 0 to 1 and the
    # semantic weight 0.7 to 3 tried; the whole grid is within 0.6 points). With reciprocal
    # ranks, 0.25 was the best of 1, 0.5 and 0.25.
    semantic_weight: float = 1.4
    # BM25's weight in flat search beside TF-IDF's (0: TF-IDF alone).
    bm25_weight: float = 0.5
    # With a semantic signal, score a tool by the mean of its similarity to the whole
    # request and to the request's closest sentence, not to the whole request alone.
    semantic_sentences: bool = True
    combination: Combination = Combination.WEIGHTED
    server_scoring: ServerScoring = ServerScoring.JOINT
    # Requests remembered with their answers (least recently used first out); 0: none.
    cache_size: int = 256
    # What route() does: flat search (the default: it wins on the tune halves of both
    # public sets, bench/README.md) or two-stage; and whether a request of several steps
    # is routed step by step, the answers merged.
    search: SearchMode = SearchMode.FLAT
    per_step: bool = False  # it loses on both tune halves (bench/README.md)
    # The learned signals' weights beside the description's z-scores (flat search): the
    # past requests' TF-IDF and their wordllama similarity. 1 and 0.25 have the best mean
    # hit@5 over the tune halves of APIBench, StableToolBench and BFCL among the weights
    # that cost no set more than a point against no history (bench/README.md, "--learned").
    history_weight: float = 1.0
    history_semantic_weight: float = 0.25
    history_half_life_s: float = DEFAULT_HALF_LIFE_S
    # No rich-get-richer: with history, the last of the top k goes to the best description
    # match among tools with fewer than `little_history` outcomes, when it is not in already.
    new_tool_slot: bool = True
    little_history: int = 3

    def __post_init__(self) -> None:
        # Frozen: set through object.__setattr__; a bad enum name raises ValueError.
        object.__setattr__(self, "combination", _choice(Combination, self.combination))
        object.__setattr__(self, "server_scoring", _choice(ServerScoring, self.server_scoring))
        object.__setattr__(self, "search", _choice(SearchMode, self.search))
        object.__setattr__(self, "fusion", _choice(Fusion, self.fusion))
        if self.min_score is None:
            object.__setattr__(self, "min_score", DEFAULT_MIN_SCORE)
        if self.server_weight < 0 or self.tool_weight < 0:
            raise ValueError("server_weight and tool_weight must not be negative")
        if self.server_weight + self.tool_weight <= 0:
            raise ValueError("server_weight + tool_weight must be positive")
        if self.top_servers < 1 or self.top_tools < 1:
            raise ValueError("top_servers and top_tools must be at least 1")
        if self.semantic_weight < 0 or self.bm25_weight < 0:
            raise ValueError("semantic_weight and bm25_weight must not be negative")
        if self.history_weight < 0 or self.history_semantic_weight < 0:
            raise ValueError("history_weight and history_semantic_weight must not be negative")
        if self.history_half_life_s <= 0 or self.little_history < 0:
            raise ValueError("history_half_life_s must be positive, little_history not negative")
        if self.min_tools < 0 or self.rrf_k < 1:
            raise ValueError("min_tools must not be negative, rrf_k must be at least 1")
        for name in ("server_threshold", "min_score", "min_semantic_score"):
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


def _top(scores: np.ndarray, limit: int) -> np.ndarray:
    """Return the positions of the `limit` best scores above 0, best first."""
    if len(scores) > limit:
        order = np.argpartition(-scores, limit - 1)[:limit]
        order = order[np.argsort(-scores[order], kind="stable")]
    else:
        order = np.argsort(-scores, kind="stable")
    return order[scores[order] > 0]


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


# What a tool's parameters are about: their names, then the first distinct words of their
# descriptions (letters only: "Default: 10" adds nothing). Distinct, and at most 40, so a
# tool with many parameters and repeated boilerplate ("The ID of the ...") is not
# outweighed by them (chosen on the tune halves: bench/README.md).
_WORD = re.compile(r"[^\W\d_]{2,}")
PARAMETER_WORDS = 40


def parameter_words(tool: Tool) -> str:
    """Return a tool's parameter names, then the first distinct words of their descriptions."""
    words = (word.lower() for _, text in tool.parameters for word in _WORD.findall(text))
    distinct = list(dict.fromkeys(words))[:PARAMETER_WORDS]
    return " ".join([*(name for name, _ in tool.parameters), *distinct])


def tool_document(tool: Tool) -> str:
    """Return the text stage 2 matches a tool on: its name (twice: it is dense), description,
    keywords and parameters."""
    return (
        f"{tool.name} {tool.name} {tool.description} {' '.join(tool.keywords)} "
        f"{parameter_words(tool)}"
    )


def flat_document(server: Server, tool: Tool) -> str:
    """Return the text flat search matches a tool on: the tool's with its server's name."""
    return f"{server.name} {server.description} {tool_document(tool)}"


def reciprocal_rank_fusion(
    k: int, *signals: np.ndarray, weights: Sequence[float] | None = None
) -> np.ndarray:
    """Return each item's fused score: the sum over signals of w / (k + its rank there).

    An item a signal scores 0 or less (no shared term, say) gets nothing from it, so a
    lexical ranking's arbitrary tail does not count. Weights default to 1 each.
    """
    fused = np.zeros(len(signals[0]))
    for scores, weight in zip(signals, weights or [1.0] * len(signals), strict=True):
        ranks = np.empty(len(scores))
        ranks[np.argsort(-scores, kind="stable")] = np.arange(1, len(scores) + 1)
        fused += np.where(scores > 0, weight / (k + ranks), 0.0)
    return fused


def zscore_fusion(
    *signals: np.ndarray,
    weights: Sequence[float] | None = None,
    standardised: np.ndarray | None = None,
) -> np.ndarray:
    """Return each item's fused score: the logistic of the weighted sum of standardised scores.

    A signal is standardised over the items (mean 0, deviation 1); one that scores every
    item alike adds nothing. `standardised` is a term already on that scale (the learned
    signals), added as it is. An item no signal scores above 0 (no shared term and no
    similarity) and that term does not raise gets 0: it is no match.
    """
    total = np.zeros(len(signals[0])) if standardised is None else standardised.copy()
    found = total > 0
    for scores, weight in zip(signals, weights or [1.0] * len(signals), strict=True):
        found |= scores > 0
        deviation = scores.std()
        if weight and deviation > 0:
            total += weight * (scores - scores.mean()) / deviation
    return np.where(found, 1.0 / (1.0 + np.exp(-total)), 0.0)


@dataclass(frozen=True)
class _Ranked:
    """One request's scores over every tool, by the description alone and with history."""

    description: np.ndarray
    scores: np.ndarray
    lexical: np.ndarray
    semantic: np.ndarray | None
    term: np.ndarray  # the learned term
    past: LearnedScores
    own: frozenset[int]  # the tools the description alone returns


class _Index:
    """One signal's encoder and the catalogue's rows in its vector space."""

    def __init__(
        self,
        encoder: Encoder,
        servers: Sequence[Server],
        tools: Sequence[tuple[Server, Tool]],
        scoring: ServerScoring,
    ) -> None:
        self.encoder = encoder
        self.scoring = scoring
        if scoring == ServerScoring.MAX:
            self.own_rows = encoder.encode([server_own_document(s) for s in servers])
            self.summary_rows = encoder.encode([tools_summary(s) for s in servers])
        else:
            self.server_rows = encoder.encode([server_document(s) for s in servers])
        self.tool_rows = encoder.encode([tool_document(tool) for _, tool in tools])
        self.flat_rows = encoder.encode([flat_document(s, t) for s, t in tools])
        self.flat_columns = by_columns(self.flat_rows)

    def server_scores(self, query: object) -> np.ndarray:
        if self.scoring == ServerScoring.MAX:
            own = similarities(self.own_rows, query)
            return np.maximum(own, similarities(self.summary_rows, query))
        return similarities(self.server_rows, query)

    def encode_pair(self, tool_text: str, server_text: str) -> tuple[object, object]:
        if tool_text == server_text:
            query = self.encoder.encode_queries([tool_text])
            return query, query
        rows = self.encoder.encode_queries([tool_text, server_text])
        return rows[0:1], rows[1:2]


class ToolRouter:
    """Find the tools a request asks for in a catalogue of servers, two-stage or flat.

    `backend` is the lexical signal (TF-IDF by default); `semantic`, when given, a second
    signal whose ranking is fused with it (reciprocal rank).
    """

    def __init__(
        self,
        servers: Sequence[Server],
        settings: RouterSettings | None = None,
        backend: Backend | None = None,
        semantic: Backend | None = None,
    ) -> None:
        self.settings = settings or RouterSettings()
        self.backend = backend or TfidfBackend()
        self.semantic = semantic
        self.servers = tuple(server for server in servers if server.tools)
        self._tools = [(server, tool) for server in self.servers for tool in server.tools]
        self._tool_server = np.array(
            [i for i, server in enumerate(self.servers) for _ in server.tools], dtype=np.intp
        )
        self._server_sizes = np.array([len(server.tools) for server in self.servers])
        self.cache = RoutingCache(self.settings.cache_size)
        self._positions = {(s.name, t.name): i for i, (s, t) in enumerate(self._tools)}
        self._semantic: _Index | None = None
        self._bm25: Encoder | None = None  # flat search's second lexical signal
        self._bm25_rows: Any = None
        if not self._tools:
            return
        # The vocabulary comes from the tools and from the servers' own names and descriptions
        # (once each, so a server's name is not discounted for every tool it has).
        tool_docs = [tool_document(tool) for _, tool in self._tools]
        own_docs = [f"{server.name} {server.description}" for server in self.servers]
        scoring = self.settings.server_scoring
        encoder = self.backend.fit(tool_docs + own_docs)
        self._lexical = _Index(encoder, self.servers, self._tools, scoring)
        if self.settings.bm25_weight > 0:
            self._bm25 = Bm25Backend().fit(tool_docs + own_docs)
            self._bm25_rows = by_columns(
                self._bm25.encode([flat_document(s, t) for s, t in self._tools])
            )
        if semantic is not None:
            semantic_encoder = semantic.fit(tool_docs + own_docs)
            self._semantic = _Index(semantic_encoder, self.servers, self._tools, scoring)

    @property
    def tool_count(self) -> int:
        return len(self._tools)

    def learned_index(
        self,
        outcomes: Sequence[Outcome],
        now: float,
        version: int = 0,
        previous: LearnedIndex | None = None,
    ) -> LearnedIndex:
        """Return the past outcomes in this router's text spaces, for route(learned=...).

        An outcome that names its tool without a server counts for every tool of that name.
        `previous` (an earlier index) lends the features of the texts it had.
        """
        positions: dict[str, list[int]] = {}
        for position, (server, tool) in enumerate(self._tools):
            positions.setdefault(tool.name, []).append(position)
            positions.setdefault(f"{server.name}/{tool.name}", []).append(position)
        semantic = self._semantic.encoder if self._semantic is not None else None
        return LearnedIndex(
            outcomes,
            positions,
            len(self._tools),
            semantic,
            half_life_s=self.settings.history_half_life_s,
            now=now,
            little_history=self.settings.little_history,
            version=version,
            previous=previous.requests if previous is not None else None,
        )

    def route(
        self,
        tool: str,
        server: str = "",
        *,
        limit: int | None = None,
        learned: LearnedIndex | None = None,
    ) -> Routing:
        """Return the best tools for a request as the settings say: flat or two-stage, and
        for a request of several steps, each step's best merged with the whole request's.

        The merge takes the whole request's best, then each step's best, then each one's
        second, and so on, skipping tools already taken: every step gets its say in the top
        k, and a request of one step is searched as it is. `learned` (learned_index()) adds
        what past requests say to flat search; two-stage search ignores it.
        """
        if self.settings.search == SearchMode.FLAT:
            search = functools.partial(self.search_flat, learned=learned)
        else:
            search = self.search
        steps = split_steps(tool) if self.settings.per_step else [tool]
        whole = search(tool, server, limit=limit)
        if len(steps) <= 1:
            return whole
        routings = [whole, *(search(step, server, limit=limit) for step in steps)]
        return merge_routings(routings, limit or self.settings.top_tools, tuple(steps))

    def search(self, tool: str, server: str = "", *, limit: int | None = None) -> Routing:
        """Return the best tools for a request, two-stage: servers first, then their tools.

        `server` is the request's description of the server it wants; empty means "use
        the tool text for both stages".
        """
        key = (RouteMode.TWO_STAGE, tool.strip(), server.strip(), limit or self.settings.top_tools)
        return self.cache.get(key) or self._remember(key, self._search(tool, server, limit))

    def search_flat(
        self,
        tool: str,
        server: str = "",
        *,
        limit: int | None = None,
        learned: LearnedIndex | None = None,
    ) -> Routing:
        """Return the best tools for a request by matching it against every tool at once."""
        learned = learned if learned else None  # an index of no outcomes changes nothing
        version = None if learned is None else learned.key
        key = (RouteMode.FLAT, tool.strip(), server.strip(), limit or self.settings.top_tools)
        if (routing := self.cache.get((*key, version))) is not None:
            return routing
        if not self._tools:
            return Routing(RouteMode.FLAT, ())
        text, server_text = tool.strip() or server, server.strip()
        routing = self._flat(text, server_text, limit, RouteMode.FLAT, learned)
        return self._remember((*key, version), routing)

    def _remember(self, key: tuple[object, ...], routing: Routing) -> Routing:
        self.cache.put(key, routing)
        return routing

    def _search(self, tool: str, server: str, limit: int | None) -> Routing:
        if not self._tools:
            return Routing(RouteMode.TWO_STAGE, ())
        tool_text, server_text = tool.strip() or server, server.strip() or tool
        tool_query, server_query = self._lexical.encode_pair(tool_text, server_text)
        server_scores = self._lexical.server_scores(server_query)
        if server_scores.max(initial=0.0) < max(self.settings.server_threshold, 1e-9):
            return self._flat(tool_text, server_text, limit, RouteMode.FLAT_FALLBACK)
        semantic_tool_query = semantic_server_scores = None
        ranking = server_scores
        if self._semantic is not None:
            semantic_tool_query, semantic_server_query = self._semantic.encode_pair(
                tool_text, server_text
            )
            semantic_server_scores = self._semantic.server_scores(semantic_server_query)
            ranking = self._fuse(server_scores, semantic_server_scores)
        kept = self._kept_servers(ranking, server_scores)
        candidates = np.flatnonzero(np.isin(self._tool_server, kept))
        own_servers = self._tool_server[candidates]
        tool_scores = similarities(self._lexical.tool_rows[candidates], tool_query)
        combined = self._combine(server_scores[own_servers], tool_scores)
        semantic_scores = None
        if self._semantic is not None:
            semantic_scores = similarities(
                self._semantic.tool_rows[candidates], semantic_tool_query
            )
            semantic_combined = self._combine(semantic_server_scores[own_servers], semantic_scores)
            combined = self._fuse(combined, semantic_combined)
        matches = self._best(
            candidates, combined, server_scores[own_servers], tool_scores, semantic_scores, limit
        )
        kept_servers = tuple((self.servers[i].name, float(server_scores[i])) for i in kept)
        return Routing(RouteMode.TWO_STAGE, matches, kept_servers)

    def _fuse(self, lexical: np.ndarray, semantic: np.ndarray) -> np.ndarray:
        return self._fuse_all([(lexical, 1.0), (semantic, self.settings.semantic_weight)])

    def _fuse_all(
        self, signals: Sequence[tuple[np.ndarray, float]], learned: np.ndarray | None = None
    ) -> np.ndarray:
        """Return the signals fused, with the learned term (already standardised) if any."""
        scores = [score for score, _ in signals]
        weights = [weight for _, weight in signals]
        if self.settings.fusion == Fusion.RRF:
            if learned is not None:  # ranked like the others: only its positive part counts
                scores, weights = [*scores, learned], [*weights, 1.0]
            return reciprocal_rank_fusion(self.settings.rrf_k, *scores, weights=weights)
        return zscore_fusion(*scores, weights=weights, standardised=learned)

    def _learned_term(self, learned: LearnedScores) -> np.ndarray:
        """Return the weighted sum of a request's learned signals."""
        term = self.settings.history_weight * learned.lexical
        if learned.semantic is not None:
            term = term + self.settings.history_semantic_weight * learned.semantic
        return term

    def _kept_servers(self, ranking: np.ndarray, lexical_scores: np.ndarray) -> np.ndarray:
        """Return stage 1's servers: the best top_servers, more until min_tools are held.

        Without a semantic signal, a server that shares no word with the request is never
        kept (its rank among the zeros would be arbitrary).
        """
        order = np.argsort(-ranking, kind="stable")
        if self._semantic is None:
            order = order[lexical_scores[order] >= max(self.settings.server_threshold, 1e-9)]
        held = np.cumsum(self._server_sizes[order])
        enough = int(np.searchsorted(held, self.settings.min_tools)) + 1
        return order[: max(self.settings.top_servers, enough)]

    def _combine(self, server_scores: np.ndarray, tool_scores: np.ndarray) -> np.ndarray:
        """Return the stage-2 scores of tools from their server's and their own scores."""
        settings = self.settings
        if settings.combination == Combination.PRODUCT:
            return server_scores * tool_scores * np.maximum(server_scores, tool_scores)
        combined = settings.server_weight * server_scores + settings.tool_weight * tool_scores
        return combined / (settings.server_weight + settings.tool_weight)

    def _flat(
        self,
        tool_text: str,
        server_text: str,
        limit: int | None,
        mode: RouteMode,
        learned: LearnedIndex | None = None,
    ) -> Routing:
        text = tool_text if server_text in ("", tool_text) else f"{server_text} {tool_text}"
        query = self._lexical.encoder.encode_queries([text])
        lexical = column_similarities(self._lexical.flat_columns, query)
        signals = [(lexical, 1.0)]
        if self._bm25 is not None:
            bm25 = column_similarities(self._bm25_rows, self._bm25.encode_queries([text]))
            signals.append((bm25, self.settings.bm25_weight))
        semantic = embedding = None
        if self._semantic is not None:
            semantic, embedding = self._semantic_flat(self._semantic, text)
            signals.append((semantic, self.settings.semantic_weight))
        description = lexical if len(signals) == 1 else self._fuse_all(signals)
        everything = np.arange(len(self._tools))
        no_server_scores = np.zeros(len(self._tools))
        own = self._best(everything, description, no_server_scores, lexical, semantic, limit)
        past = learned.scores(text, embedding) if learned is not None else None
        if past is None:
            return Routing(mode, own)
        term = self._learned_term(past)
        scores = self._fuse_all(signals, term)
        matches = self._best(
            everything, scores, no_server_scores, lexical, semantic, limit, past.fits
        )
        own_top = frozenset(self._positions[(m.server, m.tool)] for m in own)
        ranked = _Ranked(description, scores, lexical, semantic, term, past, own_top)
        matches = self._placed(matches, ranked, limit or self.settings.top_tools)
        assert learned is not None
        return Routing(mode, matches, history=(learned.outcome_count, learned.tools_with_history))

    def _placed(
        self, matches: tuple[ToolMatch, ...], ranked: _Ranked, limit: int
    ) -> tuple[ToolMatch, ...]:
        """Return the matches with what placed each, and the new tool slot filled.

        A tool the description alone returns (its top k, past the gate) is placed by its
        description, any other by its past requests. The slot: the best description match
        among tools with little history takes the last place, when it is not in the answer
        already and the description alone returns anything.
        """
        position = self._positions
        placed = [
            self._with_history(match, i, DESCRIPTION if i in ranked.own else HISTORY, ranked)
            for match in matches
            for i in (position[(match.server, match.tool)],)
        ]
        if not (self.settings.new_tool_slot and placed and ranked.own and limit > 1):
            return tuple(placed)
        little = ranked.past.little_history & (ranked.description > 0)
        newcomers = np.where(little, ranked.description, -np.inf)
        best = int(np.argmax(newcomers))
        if not np.isfinite(newcomers[best]) or best in {
            position[(m.server, m.tool)] for m in placed
        }:
            return tuple(placed)
        slot = self._match(
            best, ranked.scores[best], 0.0, ranked.lexical[best], ranked.semantic, best
        )
        return (*placed[: limit - 1], self._with_history(slot, best, NEW_TOOL_SLOT, ranked))

    def _with_history(self, match: ToolMatch, i: int, placed_by: str, ranked: _Ranked) -> ToolMatch:
        """Return the match with its learned term, evidence and what placed it."""
        past = ranked.past
        return replace(
            match,
            placed_by=placed_by,
            history_score=float(ranked.term[i]) if past.has_history[i] else None,
            evidence=past.evidence(i),
        )

    def _semantic_flat(self, index: _Index, text: str) -> tuple[np.ndarray, np.ndarray]:
        """Return every tool's embedding similarity to the request, and the request's vector.

        With semantic_sentences, a similarity is the mean of the tool's similarity to the
        whole request and to its closest sentence.
        """
        sentences = split_sentences(text) if self.settings.semantic_sentences else []
        if len(sentences) <= 1:
            query = np.asarray(index.encoder.encode_queries([text]))
            return similarities(index.flat_rows, query), query[0]
        rows = np.asarray(index.encoder.encode_queries([text, *sentences]))
        each = np.stack([similarities(index.flat_rows, row) for row in rows])
        return 0.5 * each[0] + 0.5 * each[1:].max(axis=0), rows[0]

    def _fits(
        self,
        order: np.ndarray,
        tool_scores: np.ndarray,
        server_scores: np.ndarray,
        semantic_scores: np.ndarray | None,
    ) -> bool:
        """Return whether anything in the answer fits the request (the gate)."""
        fit = np.maximum(tool_scores[order], server_scores[order]).max()
        if fit >= (self.settings.min_score or 0.0):
            return True
        if semantic_scores is None:
            return False
        return bool(semantic_scores[order].max() >= self.settings.min_semantic_score)

    def _best(
        self,
        candidates: np.ndarray,
        scores: np.ndarray,
        server_scores: np.ndarray,
        tool_scores: np.ndarray,
        semantic_scores: np.ndarray | None,
        limit: int | None,
        learned_fits: np.ndarray | None = None,
    ) -> tuple[ToolMatch, ...]:
        """Return the `limit` best candidates, highest score first; none when nothing fits.

        A candidate scoring 0 (no signal found anything in common) is never returned;
        when no returned tool's fit score (ToolMatch.fit_score) reaches min_score, and no
        returned tool served a past request like this one (`learned_fits`), nothing is.
        """
        order = _top(scores, limit or self.settings.top_tools)
        if order.size == 0:
            return ()
        learned_fit = learned_fits is not None and bool(learned_fits[candidates[order]].any())
        if not learned_fit and not self._fits(order, tool_scores, server_scores, semantic_scores):
            return ()
        return tuple(
            self._match(
                candidates[i], scores[i], server_scores[i], tool_scores[i], semantic_scores, i
            )
            for i in order
        )

    def _match(
        self,
        position: int,
        score: float,
        server_score: float,
        tool_score: float,
        semantic_scores: np.ndarray | None,
        i: int,
    ) -> ToolMatch:
        server, tool = self._tools[position]
        return ToolMatch(
            server=server.name,
            tool=tool.name,
            description=tool.description,
            score=float(score),
            server_score=float(server_score),
            tool_score=float(tool_score),
            semantic_score=None if semantic_scores is None else float(semantic_scores[i]),
        )
