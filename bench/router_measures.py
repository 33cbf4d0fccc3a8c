"""What the router benchmark measures on a query set: recall, hit rate, latency, schema tokens.

Also the fixed tune/held-out split of the queries and the bootstrap intervals that
bench/router.py prints beside each figure.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from figures import percentile  # noqa: E402  (bench/ is the script's own folder)

from planner_app.discovery.catalogue import BenchQuery, Server  # noqa: E402
from planner_app.discovery.router import Routing  # noqa: E402
from planner_app.discovery.text import analyze  # noqa: E402


@dataclass
class Figures:
    recall_1: float
    recall_5: float
    hit_1: float
    hit_5: float
    p50_ms: float
    p95_ms: float
    cpu_p95_ms: float
    fallbacks: int
    complete_5: int  # queries with every expected tool in the top 5
    schema_tokens: float  # per query: the estimated schema tokens of the tools returned
    # Per query, for confidence intervals and the gate: recall@1, recall@5, hit@5, and
    # the best fit score and semantic score among the 5 returned (what the gate reads);
    # then whether a miss returned a near namesake of an expected tool (near_namesake).
    per_query: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros((0, 6)))


def measure(
    search: Callable[[BenchQuery], Routing],
    queries: tuple[BenchQuery, ...],
    schema_tokens: dict[str, int] | None = None,
) -> Figures:
    """Run every query through `search` and return its recall, hit rate and latency."""
    rows = []
    timings, cpu_timings = [], []
    fallbacks = complete = tokens = 0
    for query in queries:
        start, cpu_start = time.perf_counter(), time.thread_time()
        routing = search(query)
        timings.append((time.perf_counter() - start) * 1000)
        cpu_timings.append((time.thread_time() - cpu_start) * 1000)
        fallbacks += routing.mode == "flat_fallback"
        tokens += sum((schema_tokens or {}).get(m.tool, 0) for m in routing.matches[:5])
        found = {}
        for k in (1, 5):
            top = routing.matches[:k]
            found[k] = sum(any(e.matches(m.server, m.tool) for m in top) for e in query.expected)
        complete += found[5] == len(query.expected)
        best = max((m.fit_score for m in routing.matches[:5]), default=0.0)
        share = [found[k] / len(query.expected) for k in (1, 5)]
        semantic = max((m.semantic_score or 0.0 for m in routing.matches[:5]), default=0.0)
        namesake = not found[5] and near_namesake(routing, query)
        rows.append((*share, found[5] > 0, best, found[1] > 0, semantic, namesake))
    table = np.array(rows, dtype=np.float64)
    return Figures(
        table[:, 0].mean(),
        table[:, 1].mean(),
        table[:, 4].mean(),
        table[:, 2].mean(),
        percentile(timings, 0.5),
        percentile(timings, 0.95),
        percentile(cpu_timings, 0.95),
        fallbacks,
        complete,
        tokens / len(queries),
        table[:, [0, 1, 2, 3, 5, 6]],
    )


def near_namesake(routing: Routing, query: BenchQuery) -> bool:
    """Return whether a returned tool's name shares at least half its words with an
    expected tool's (`hotel.book` for `book_hotel`, `Generate QR Code` for `Qr Code Gen`).

    A rough count of misses that are near duplicates the request cannot tell apart: the
    data sets expect one of several tools that do the same thing.
    """
    returned = [set(analyze(match.tool)) for match in routing.matches[:5]]
    expected = [set(analyze(e.tool)) for e in query.expected]
    return any(len(a & b) >= 0.5 * len(a | b) for a in returned for b in expected if a | b)


def ceiling(queries: Sequence[BenchQuery]) -> tuple[float, float]:
    """Return the highest recall@1 and recall@5 any router can get: min(k, |E|) / |E|."""
    sizes = np.array([len(q.expected) for q in queries], dtype=np.float64)
    return float(np.mean(1 / sizes)), float(np.mean(np.minimum(5, sizes) / sizes))


def interval(values: np.ndarray, resamples: int = 2000) -> tuple[float, float]:
    """Return the 95% bootstrap percentile interval of the mean of per-query values."""
    rng = np.random.default_rng(14)  # fixed: the same data gives the same interval
    picks = rng.integers(0, len(values), size=(resamples, len(values)))
    means = values[picks].mean(axis=1)
    return float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def with_interval(values: np.ndarray) -> str:
    low, high = interval(values)
    return f"{values.mean():.3f} [{low:.3f}, {high:.3f}]"


def by_query(search: Callable[..., Routing]) -> Callable[[BenchQuery], Routing]:
    """Return a search of the query's whole text, as both the server and the tool text."""
    return lambda query: search(query.query, limit=5)


def by_tool_request(search: Callable[..., Routing]) -> Callable[[BenchQuery], Routing]:
    """Return a search of the <tool_request> an agent in active mode would write."""

    def run(query: BenchQuery) -> Routing:
        if query.tool_request is None:
            raise ValueError(f"query {query.id} has no tool_request: the active strategy needs one")
        server, tool = query.tool_request
        return search(tool, server, limit=5)

    return run


def schema_tokens(servers: Sequence[Server]) -> dict[str, int]:
    """Return each tool's estimated schema tokens: its OpenAI definition, 4 characters a token.

    The catalogue format has no parameter schemas: each parameter counts as a string with
    its description.
    """
    tokens = {}
    for server in servers:
        for tool in server.tools:
            properties = {
                name: {"type": "string", "description": text} if text else {"type": "string"}
                for name, text in tool.parameters
            }
            definition = {
                "type": "function",
                "function": {
                    "name": tool.name,
                    "description": tool.description,
                    "parameters": {"type": "object", "properties": properties},
                },
            }
            tokens[tool.name] = (len(json.dumps(definition)) + 3) // 4
    return tokens


SPLITS = ("tune", "held-out")


def split_of(query: BenchQuery) -> str:
    """Return the query's split, from a hash of its id: the same on every run and machine."""
    digest = hashlib.sha256(query.id.encode()).digest()[0]
    return SPLITS[digest % 2]
