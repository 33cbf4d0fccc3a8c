"""Benchmark: recall and latency of the active-discovery router, flat and two-stage.

    .venv/bin/python bench/router.py                      # StableToolBench and BFCL
    .venv/bin/python bench/router.py --dataset stabletoolbench
    .venv/bin/python bench/router.py --catalogue servers.json --queries queries.json
    .venv/bin/python bench/router.py --export var/router-data   # write the converted JSON

Every data set goes through the same JSON format (bench/README.md, "router.py"): the
public data in ../shared/bench-data/ is converted to it first. For each query, prints
recall@1/@5 (the share of its expected tools in the top 1/5), hit@1/@5 (at least one
expected tool there), the p50/p95 wall time of one search, and its p95 CPU time (which
other work on the machine barely moves). The issue's aim, "recall@5 at least 0.95 at
under 5 ms p95" (a plain TF-IDF baseline "about 0.89"), is read as hit@5: the share of
requests answered with at least one right tool in the 5 returned (bench/README.md says
why); the table labels that column so.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sklearn.feature_extraction.text import TfidfVectorizer

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from figures import percentile  # noqa: E402  (bench/ is the script's own folder)

from planner_app.discovery.backends import TfidfEncoder  # noqa: E402
from planner_app.discovery.catalogue import (  # noqa: E402
    BenchQuery,
    Server,
    catalogue_from_dict,
    load_catalogue,
    load_queries,
    queries_from_dict,
)
from planner_app.discovery.router import RouterSettings, Routing, ToolRouter  # noqa: E402

BENCH_DATA = ROOT.parent / "shared" / "bench-data"
STB_FILES = [
    "G1_category",
    "G1_instruction",
    "G1_tool",
    "G2_category",
    "G2_instruction",
    "G3_instruction",
]
# The categories whose questions come with several functions, one or more of them right.
BFCL_CATEGORIES = ["multiple", "parallel_multiple", "live_multiple"]


def stabletoolbench(folder: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """Return StableToolBench's test queries as (catalogue, queries) in the bench format.

    A RapidAPI "tool" is a server, its APIs are its tools; the catalogue is the union of
    every query's api_list; a query expects its "relevant APIs".
    """
    servers: dict[str, dict[str, Any]] = {}
    queries = []
    for name in STB_FILES:
        for item in json.loads((folder / f"{name}.json").read_text(encoding="utf-8")):
            for api in item["api_list"]:
                server = servers.setdefault(
                    api["tool_name"],
                    {"name": api["tool_name"], "description": api["category_name"], "tools": {}},
                )
                parameters = api["required_parameters"] + api["optional_parameters"]
                server["tools"].setdefault(
                    api["api_name"],
                    {
                        "name": api["api_name"],
                        "description": api["api_description"] or "",
                        "keywords": [parameter["name"] for parameter in parameters],
                    },
                )
            expected = [{"server": s, "tool": t} for s, t in item["relevant APIs"]]
            queries.append(
                {"id": f"{name}/{item['query_id']}", "query": item["query"], "expected": expected}
            )
    for server in servers.values():
        server["tools"] = list(server["tools"].values())
    return {"servers": list(servers.values())}, {"queries": queries}


def _jsonl(path: Path) -> Iterator[dict[str, Any]]:
    with path.open(encoding="utf-8") as lines:
        for line in lines:
            if line.strip():
                yield json.loads(line)


def _user_text(question: list[list[dict[str, str]]]) -> str:
    return " ".join(turn["content"] for turn in question[0] if turn["role"] == "user")


def bfcl(folder: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """Return BFCL's answered categories as (catalogue, queries) in the bench format.

    The functions offered together with a question form a server: each function joins the
    first such set it appears in, named by its functions' shared dotted prefix when they
    have one. A question expects the functions of its gold calls, by name, on any server,
    so a name is one tool: where BFCL repeats a name with another description, the
    first description stays.
    """
    servers: dict[str, dict[str, Any]] = {}
    placed: set[str] = set()
    queries = []
    for category in BFCL_CATEGORIES:
        answers = {
            a["id"]: a for a in _jsonl(folder / "possible_answer" / f"BFCL_v4_{category}.json")
        }
        for item in _jsonl(folder / f"BFCL_v4_{category}.json"):
            new = {f["name"]: f for f in item["function"] if f["name"] not in placed}
            new = list(new.values())
            if new:
                placed.update(f["name"] for f in new)
                name = _unique(_group_name([f["name"] for f in new]), servers)
                servers[name] = {
                    "name": name,
                    "description": "",
                    "tools": [_bfcl_tool(f) for f in new],
                }
            expected = sorted(
                {name for call in answers[item["id"]]["ground_truth"] for name in call}
            )
            queries.append(
                {
                    "id": item["id"],
                    "query": _user_text(item["question"]),
                    "expected": [{"tool": name} for name in expected],
                }
            )
    return {"servers": list(servers.values())}, {"queries": queries}


def _bfcl_tool(function: dict[str, Any]) -> dict[str, Any]:
    properties = function.get("parameters", {}).get("properties", {})
    return {
        "name": function["name"],
        "description": function["description"],
        "keywords": list(properties),
    }


def _group_name(names: list[str]) -> str:
    prefixes = {name.split(".")[0] for name in names if "." in name}
    if len(prefixes) == 1 and all("." in name for name in names):
        return prefixes.pop()
    return " + ".join(sorted(names))


def _unique(name: str, taken: dict[str, Any]) -> str:
    suffix = 2
    candidate = name
    while candidate in taken:
        candidate, suffix = f"{name} ({suffix})", suffix + 1
    return candidate


DATASETS: dict[str, Callable[[Path], tuple[dict[str, Any], dict[str, Any]]]] = {
    "stabletoolbench": lambda data: stabletoolbench(data / "stabletoolbench"),
    "bfcl": lambda data: bfcl(data / "bfcl"),
}


class PlainTfidfEncoder(TfidfEncoder):
    def encode_queries(self, texts: Sequence[str]) -> Any:
        return self.encode(texts)  # plain: requests weighted like documents


class PlainTfidfBackend:
    """The baseline: scikit-learn's TF-IDF with its own tokenizer and English stop words."""

    name = "plain-tfidf"

    def fit(self, documents: Sequence[str]) -> TfidfEncoder:
        return PlainTfidfEncoder(TfidfVectorizer(stop_words="english").fit(documents))


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


def measure(search: Callable[[str], Routing], queries: tuple[BenchQuery, ...]) -> Figures:
    """Run every query through `search` and return its recall, hit rate and latency."""
    recall = {1: 0.0, 5: 0.0}
    hits = {1: 0, 5: 0}
    timings, cpu_timings = [], []
    fallbacks = 0
    for query in queries:
        start, cpu_start = time.perf_counter(), time.thread_time()
        routing = search(query.query)
        timings.append((time.perf_counter() - start) * 1000)
        cpu_timings.append((time.thread_time() - cpu_start) * 1000)
        fallbacks += routing.mode == "flat_fallback"
        for k in (1, 5):
            top = routing.matches[:k]
            found = sum(any(e.matches(m.server, m.tool) for m in top) for e in query.expected)
            recall[k] += found / len(query.expected)
            hits[k] += found > 0
    n = len(queries)
    return Figures(
        recall[1] / n,
        recall[5] / n,
        hits[1] / n,
        hits[5] / n,
        percentile(timings, 0.5),
        percentile(timings, 0.95),
        percentile(cpu_timings, 0.95),
        fallbacks,
    )


def run(
    label: str,
    servers: tuple[Server, ...],
    queries: tuple[BenchQuery, ...],
    settings: RouterSettings,
) -> None:
    start = time.perf_counter()
    router = ToolRouter(servers, settings)
    build_ms = (time.perf_counter() - start) * 1000
    print(
        f"\n{label}: {len(router.servers)} servers, {router.tool_count} tools, "
        f"{len(queries)} queries; index built in {build_ms:.0f} ms"
    )
    print(
        "| search | recall@1 | recall@5 | hit@1 | hit@5 = the issue's recall@5 "
        "| p50 | p95 | CPU p95 |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    router.search("warm up")
    baseline = ToolRouter(servers, settings, PlainTfidfBackend())
    searches = [
        ("baseline: plain TF-IDF, flat", baseline.search_flat),
        ("flat", router.search_flat),
        ("two-stage", router.search),
    ]
    for name, search in searches:
        f = measure(lambda text, search=search: search(text, limit=5), queries)
        note = f" ({f.fallbacks} fell back to flat)" if f.fallbacks else ""
        print(
            f"| {name}{note} | {f.recall_1:.3f} | {f.recall_5:.3f} | {f.hit_1:.3f} | "
            f"{f.hit_5:.3f} | {f.p50_ms:.2f} ms | {f.p95_ms:.2f} ms | {f.cpu_p95_ms:.2f} ms |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", choices=sorted(DATASETS), action="append")
    parser.add_argument("--data", type=Path, default=BENCH_DATA, help="the shared bench-data")
    parser.add_argument("--catalogue", type=Path, help="a catalogue JSON file")
    parser.add_argument("--queries", type=Path, help="a query-set JSON file")
    parser.add_argument("--export", type=Path, help="write the converted data sets here")
    defaults = RouterSettings()
    parser.add_argument("--server-weight", type=float, default=defaults.server_weight)
    parser.add_argument("--tool-weight", type=float, default=defaults.tool_weight)
    parser.add_argument("--top-servers", type=int, default=defaults.top_servers)
    args = parser.parse_args()
    if bool(args.catalogue) != bool(args.queries):
        parser.error("--catalogue and --queries go together")
    settings = RouterSettings(
        server_weight=args.server_weight,
        tool_weight=args.tool_weight,
        top_servers=args.top_servers,
    )
    if args.catalogue:
        run(
            args.catalogue.name,
            load_catalogue(args.catalogue),
            load_queries(args.queries),
            settings,
        )
        return
    for name in args.dataset or sorted(DATASETS, reverse=True):
        catalogue, queries = DATASETS[name](args.data)
        if args.export:
            args.export.mkdir(parents=True, exist_ok=True)
            for kind, data in (("catalogue", catalogue), ("queries", queries)):
                path = args.export / f"{name}-{kind}.json"
                path.write_text(json.dumps(data, ensure_ascii=False, indent=1), encoding="utf-8")
                print(f"wrote {path}")
        run(name, catalogue_from_dict(catalogue), queries_from_dict(queries), settings)


if __name__ == "__main__":
    main()
