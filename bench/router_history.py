"""The router benchmark's learned signal: hit@5 with recorded outcomes, by history size.

For each data set, the router (the default settings, the gate off) is measured on each
split with no history and with 1, 5 and 20 recorded outcomes per tool, then with 20 per
tool of which 20% name a wrong tool, and with 5 per tool without the new tool slot. A
set with outcomes of its own (APIBench's training instructions, or --history FILE)
learns from them on both splits; any other learns, on each split, from the other
split's queries (each a success of its expected tools): split by request, never by tool.
"""

from __future__ import annotations

import dataclasses
import functools
import random
import sys
import time
import tracemalloc
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from router_measures import SPLITS, Figures, measure, split_of, with_interval  # noqa: E402

from planner_app.discovery.backends import WordLlamaBackend, semantic_available  # noqa: E402
from planner_app.discovery.catalogue import BenchQuery, Server  # noqa: E402
from planner_app.discovery.learned import LearnedIndex  # noqa: E402
from planner_app.discovery.outcomes import Outcome, OutcomeHistory  # noqa: E402
from planner_app.discovery.router import RouterSettings, ToolRouter  # noqa: E402
from planner_app.discovery.routing import Routing  # noqa: E402

SIZES = (0, 1, 5, 20)
WRONG_SHARE = 0.2
SEED = 24  # fixed: the same data gives the same samples


@dataclass(frozen=True)
class Variant:
    label: str
    per_tool: int
    wrong: float = 0.0
    new_tool_slot: bool = True


VARIANTS = (
    *(Variant(f"{n} per tool", n) for n in SIZES),
    Variant(f"20 per tool, {WRONG_SHARE:.0%} naming a wrong tool", 20, WRONG_SHARE),
    Variant("5 per tool, no new tool slot", 5, new_tool_slot=False),
)


def split_histories(
    queries: Sequence[BenchQuery], own: Sequence[Outcome] | None
) -> dict[str, list[Outcome]]:
    """Return what each split learns from: the set's own outcomes, else the other split's
    queries as successes of their expected tools."""
    if own is not None:
        return {split: list(own) for split in SPLITS}
    learned = {}
    for split in SPLITS:
        other = [q for q in queries if split_of(q) != split]
        learned[split] = [
            Outcome(q.query, e.tool, 0.0, 0.0, source=q.id, server=e.server or "")
            for q in other
            for e in q.expected
        ]
    return learned


def sample(outcomes: Sequence[Outcome], variant: Variant, tools: Sequence[str]) -> list[Outcome]:
    """Return at most variant.per_tool outcomes per tool (a fixed random choice), with
    variant.wrong of them relabelled to another tool of the catalogue."""
    rng = random.Random(SEED)
    by_tool: dict[str, list[Outcome]] = defaultdict(list)
    for outcome in outcomes:
        by_tool[outcome.tool].append(outcome)
    kept = []
    for tool in sorted(by_tool):  # the same draws for every size: 1 of 5 of 20
        group = list(by_tool[tool])
        rng.shuffle(group)
        kept += group[: variant.per_tool]
    wrong = set(rng.sample(range(len(kept)), round(variant.wrong * len(kept))))
    return [
        dataclasses.replace(o, tool=_other(rng, tools, o.tool), server="") if i in wrong else o
        for i, o in enumerate(kept)
    ]


def _other(rng: random.Random, tools: Sequence[str], tool: str) -> str:
    while (pick := rng.choice(tools)) == tool:
        pass
    return pick


@dataclass
class HistoryResult:
    dataset: str
    variant: Variant
    split: str
    figures: Figures
    warm: np.ndarray  # per query: whether an expected tool had outcomes
    build_s: float


def evaluate_history(
    label: str,
    servers: Sequence[Server],
    queries: Sequence[BenchQuery],
    own: Sequence[Outcome] | None,
    settings: RouterSettings,
) -> list[HistoryResult]:
    """Measure every variant on both splits of a data set (the gate off)."""
    semantic = WordLlamaBackend() if semantic_available() else None
    results = []
    for variant in VARIANTS:
        ungated = dataclasses.replace(settings, min_score=0.0, new_tool_slot=variant.new_tool_slot)
        router = ToolRouter(servers, ungated, semantic=semantic)
        tools = sorted({tool.name for server in router.servers for tool in server.tools})
        for split, learned_from in split_histories(queries, own).items():
            outcomes = sample(learned_from, variant, tools) if variant.per_tool else []
            start = time.perf_counter()
            index = router.learned_index(outcomes, now=0.0)
            build_s = time.perf_counter() - start
            measured = tuple(q for q in queries if split_of(q) == split)
            taught = {o.tool for o in outcomes}
            warm = np.array([any(e.tool in taught for e in q.expected) for q in measured])

            search = functools.partial(_route, router, index)
            figures = measure(search, measured)
            results.append(HistoryResult(label, variant, split, figures, warm, build_s))
    return results


def _route(router: ToolRouter, index: LearnedIndex, query: BenchQuery) -> Routing:
    return router.route(query.query, limit=5, learned=index)


def print_history_table(results: list[HistoryResult]) -> None:
    """Print hit@5 and recall@5 with intervals per history variant, and where the hits are."""
    print("\nLearned from recorded outcomes (the gate off; held-out = the split reported):")
    print(
        "| data set | history | split | hit@5 | recall@5 | hit@5, expected tool with history "
        "| hit@5, without | CPU p95 | index built |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in results:
        hits = r.figures.per_query[:, 2]
        warm, cold = hits[r.warm], hits[~r.warm]
        print(
            f"| {r.dataset} | {r.variant.label} | {r.split} | {with_interval(hits)} | "
            f"{with_interval(r.figures.per_query[:, 1])} | {_share(warm)} | {_share(cold)} | "
            f"{r.figures.cpu_p95_ms:.2f} ms | {r.build_s * 1000:.0f} ms |"
        )


def _share(values: np.ndarray) -> str:
    return f"{values.mean():.3f} ({len(values)})" if len(values) else "- (0)"


def scale_figures(servers: Sequence[Server], texts: Sequence[str], outcomes: int) -> str:
    """Return the memory the history and its index take at `outcomes` recorded requests,
    and the CPU p95 per routing with and without them (a request from `texts` each).

    The outcomes are `texts` spread over the catalogue's tools, at most 50 per tool (the
    site's bound), 10% of them failures.
    """
    semantic = WordLlamaBackend() if semantic_available() else None
    router = ToolRouter(servers, RouterSettings(cache_size=0), semantic=semantic)
    tools = [(server.name, tool.name) for server in router.servers for tool in server.tools]
    rng = random.Random(SEED)
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    history = OutcomeHistory(per_tool=50)
    history.add(
        Outcome(
            f"{rng.choice(texts)} #{i}",
            tools[i % len(tools)][1],
            1.0 if rng.random() < 0.1 else 0.0,
            float(i),
            source=f"bench/{i}",
            server=tools[i % len(tools)][0],
        )
        for i in range(outcomes)
    )
    start = time.perf_counter()
    index = router.learned_index(history.outcomes(), now=float(outcomes), version=history.version)
    build_s = time.perf_counter() - start
    memory_mb = (tracemalloc.get_traced_memory()[0] - before) / 2**20
    tracemalloc.stop()
    requests = [rng.choice(texts) for _ in range(300)]
    cpu = {}
    for label, learned in (("without", None), ("with", index)):
        timings = []
        for text in requests:
            start_cpu = time.thread_time()
            router.route(text, limit=5, learned=learned)
            timings.append((time.thread_time() - start_cpu) * 1000)
        cpu[label] = float(np.percentile(timings, 95))
    return (
        f"{len(history):,} outcomes kept of {outcomes:,} recorded, over {router.tool_count:,} "
        f"tools: {memory_mb:.1f} MB for the history and its index (built in {build_s:.1f} s); "
        f"CPU p95 per routing {cpu['with']:.2f} ms with them, {cpu['without']:.2f} ms without"
    )
