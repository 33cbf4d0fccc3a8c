"""Time GET /api/v1/traces?include=spans: 50 traces of 5 spans, median and p95, SQL apart.

For each database a child process migrates a fresh one (a temporary SQLite file, or a new
PostgreSQL database on the server of `--postgres-url`), records `--traces` traces of 5
spans each over the last `--hours` hours with the ingest function itself
(traces_app.ingest.recording.record_invocations, batches of 1,000 spans): an LLM turn, a
tool call, another turn, a second tool call and a last turn, with arguments and results of
a few hundred bytes (text, numbers, unicode, nested lists), a failure now and then. It
then requests the page the way an agent does (an API key with the read scope, Django's
test client in the same process: the whole request, middleware and auth included, no
network) `--repeat` times after `--warmup` unmeasured ones, and prints the median and p95
of the request's time; of its queries' time in the database and the driver (executing
them, timed by connection.execute_wrapper, and fetching their rows); of the rest
(building and serializing the answer); and the CPU time of the request's thread, which
other work on the same cores moves much less than the elapsed time (with PostgreSQL it
leaves out the server's own CPU). `--profile` then prints where `--repeat` more requests
spend their time (cProfile, the top functions by own time, or `--profile-sort
cumulative`). Aim (issue 28): at most 14 ms a request on a quiet machine.

    .venv/bin/python bench/trace_list_reads.py [--database sqlite|postgres|both]
        [--traces 3000] [--repeat 100] [--postgres-url postgres://.../ares_c_bench] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from figures import percentile, postgres_database  # noqa: E402  (bench/ is the script's folder)

AIM_MS = 14.0
PATH = "/api/v1/traces?include=spans&limit=50"
TOOLS = ["web_search", "calculator", "crm_lookup", "fetch_url", "sql_query"]
AGENTS = ["research-bot", "support-agent", "data-analyst", "math-tutor"]
WORDS = ["the", "flight", "fare", "hotel", "Zürich", "café", "naïve", "東京", "price", "report"]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--traces", type=int, default=3000, help="traces of 5 spans to record")
    parser.add_argument("--hours", type=int, default=36, help="the hours they start over")
    parser.add_argument("--repeat", type=int, default=100, help="measured requests")
    parser.add_argument("--warmup", type=int, default=10, help="requests before measuring")
    parser.add_argument("--path", default=PATH, help="the request (default: %(default)s)")
    parser.add_argument("--profile", action="store_true", help="also print a cProfile of it")
    parser.add_argument("--profile-sort", default="tottime", help="tottime, cumulative, ...")
    parser.add_argument(
        "--postgres-url",
        default=os.environ.get(
            "BENCH_POSTGRES_URL", "postgres://ares:ares@127.0.0.1:5432/ares_trace_reads"
        ),
        help="the PostgreSQL database to create (its name: the URL's path)",
    )
    parser.add_argument(
        "--keep", action="store_true",
        help="keep the databases (PostgreSQL: the URL's, SQLite: var/bench-trace-reads.sqlite3) "
        "and reuse them next run when they hold the traces",
    )  # fmt: skip
    parser.add_argument("--child", help=argparse.SUPPRESS)  # database URL, run in a child
    return parser.parse_args()


def _text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words))


def trace_spans(rng: random.Random, start: datetime) -> list[dict[str, Any]]:
    """Return one trace's 5 spans in the ingest API's shape: LLM, tool, LLM, tool, LLM."""
    trace_id, agent = secrets.token_hex(16), rng.choice(AGENTS)
    request = f"{_text(rng, 8)} for {rng.randint(2, 9)} people?"
    spans: list[dict[str, Any]] = []
    moment = start
    for index in range(5):
        common = {
            "trace_id": trace_id,
            "span_id": secrets.token_hex(8),
            "agent": agent,
            "request_text": request,
            "started_at": moment.isoformat(),
            "status": "ok",
        }
        if index % 2 == 0:  # an LLM turn
            span = {
                **common, "kind": "llm", "model": "gpt-4o-mini",
                "latency_ms": round(rng.uniform(200, 1500), 3),
                "input_tokens": rng.randint(200, 3000), "output_tokens": rng.randint(10, 400),
                "cost_usd": round(rng.uniform(0, 0.01), 6),
                "result": {"content": _text(rng, 30)} if index == 4 else None,
            }  # fmt: skip
        else:
            tool = rng.choice(TOOLS)
            failed = rng.random() < 0.08
            span = {
                **common, "kind": "tool", "tool_name": tool, "chosen_by": "llm",
                "tool_call_id": f"call_{secrets.token_hex(6)}",
                "arguments": {"query": _text(rng, 12), "limit": rng.randint(1, 20),
                              "filters": {"min": rng.uniform(0, 100), "tags": WORDS[:4]}},
                "result": None if failed else {
                    "items": [{"title": _text(rng, 6), "score": rng.random(),
                               "snippet": _text(rng, 14)} for _ in range(3)],
                    "total": rng.randint(3, 500)},
                "latency_ms": round(rng.lognormvariate(4.5, 0.8), 3),
                "result_tokens": rng.randint(50, 400),
                "status": "error" if failed else "ok",
                "error_kind": "timeout" if failed else "",
                "error_message": f"{tool} timed out after 30 s" if failed else "",
            }  # fmt: skip
        spans.append(span)
        moment += timedelta(milliseconds=span["latency_ms"] + rng.uniform(1, 50))
    return spans


def record_traces(count: int, hours: int) -> None:
    """Record `count` traces of 5 spans over the last `hours` hours, through ingest."""
    from traces_app.ingest.recording import record_invocations
    from traces_app.rollups.recount import recount_all_marked_rollups
    from traces_app.schemas import InvocationFromDict

    rng = random.Random(28)
    now = datetime.now(UTC) - timedelta(minutes=5)
    batch: list[Any] = []
    for number in range(count):
        start = now - timedelta(hours=hours) * (1 - number / count)
        batch += [InvocationFromDict.model_validate(span) for span in trace_spans(rng, start)]
        if len(batch) >= 1000 or number == count - 1:
            record_invocations(batch)
            batch = []
    recount_all_marked_rollups()


@contextmanager
def timed_queries(spent: list[float]) -> Iterator[None]:
    """Add the seconds the block's queries take to spent[0]: executing and fetching the rows.

    Both: SQLite runs much of a query while its rows are fetched, and psycopg converts
    the rows it fetches (timestamps, numbers) in the driver.
    """
    from django.db import connection
    from django.db.backends.utils import CursorWrapper

    def timer(execute: Callable, sql: str, params: Any, many: bool, context: Any) -> Any:
        started = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            spent[0] += time.perf_counter() - started

    def timed_fetch(name: str) -> Callable:
        def fetch(self: CursorWrapper, *args: Any) -> Any:
            started = time.perf_counter()
            try:
                return getattr(self.cursor, name)(*args)
            finally:
                spent[0] += time.perf_counter() - started

        return fetch

    names = ("fetchone", "fetchmany", "fetchall")
    for name in names:  # CursorWrapper hands these to the driver's cursor by __getattr__
        setattr(CursorWrapper, name, timed_fetch(name))
    try:
        with connection.execute_wrapper(timer):
            yield
    finally:
        for name in names:
            delattr(CursorWrapper, name)


def run_child(
    database_url: str, traces: int, hours: int, path: str, repeat: int, warmup: int, profile: str
) -> dict[str, Any]:
    """In this process: fill the database if needed, then time the request; return the figures.

    `profile`: also profile it, sorted so ("" for no profile).
    """
    os.environ.update(
        DATABASE_URL=database_url,
        ALLOWED_HOSTS="testserver",
        DJANGO_SETTINGS_MODULE="ares_site.settings",
        ARES_VAR_DIR=os.environ.get("ARES_VAR_DIR") or tempfile.mkdtemp(prefix="ares-bench-"),
    )
    os.environ.setdefault("SECRET_KEY", secrets.token_urlsafe(32))
    os.environ.pop("CELERY_BROKER_URL", None)
    import django

    django.setup()
    from django.core.management import call_command
    from django.test import Client

    from traces_app.models import ApiKey, Trace

    call_command("migrate", verbosity=0)
    if Trace.objects.count() < traces:
        started = time.perf_counter()
        call_command("flush", interactive=False, verbosity=0)
        record_traces(traces, hours)
        seconds = time.perf_counter() - started
        print(f"  recorded {traces:,} traces of 5 spans in {seconds:.0f} s", file=sys.stderr)
    _, raw_key = ApiKey.objects.issue("bench trace reads", ["read"])
    client = Client(headers={"Authorization": f"Bearer {raw_key}"})
    for _ in range(warmup):
        response = client.get(path)
        assert response.status_code == 200, response.content[:500]
    body = response.json()
    spans = sum(len(item.get("spans") or []) for item in body["items"])
    totals, queries, cpu = [], [], []
    for _ in range(repeat):
        spent = [0.0]
        with timed_queries(spent):
            started, used = time.perf_counter(), time.thread_time()
            client.get(path)
            totals.append((time.perf_counter() - started) * 1000)
            cpu.append((time.thread_time() - used) * 1000)
        queries.append(spent[0] * 1000)
    figures = {
        "traces": len(body["items"]),
        "spans": spans,
        "bytes": len(response.content),
        "total": totals,
        "sql": queries,
        "cpu": cpu,
    }
    if profile:
        figures["profile"] = profiled(client, path, repeat, profile)
    return figures


def profiled(client: Any, path: str, repeat: int, sort: str) -> str:
    """Return the top functions over `repeat` requests (cProfile), by own time or `sort`."""
    import cProfile
    import io
    import pstats

    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(repeat):
        client.get(path)
    profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats(sort).print_stats(40)
    return out.getvalue()


def measure(database_url: str, args: argparse.Namespace) -> dict[str, Any]:
    """Run one database in a child process (Django is set up once per process)."""
    done = subprocess.run(
        [sys.executable, __file__, "--child", database_url, "--traces", str(args.traces),
         "--hours", str(args.hours), "--path", args.path, "--repeat", str(args.repeat),
         "--warmup", str(args.warmup),
         *(["--profile", "--profile-sort", args.profile_sort] if args.profile else [])],
        cwd=ROOT, stdout=subprocess.PIPE, text=True, check=True,
    )  # fmt: skip
    return json.loads(done.stdout)


def print_figures(database: str, figures: dict[str, Any]) -> None:
    total, sql = figures["total"], figures["sql"]
    rest = [whole - query for whole, query in zip(total, sql, strict=True)]
    print(
        f"{database}: {figures['traces']} traces, {figures['spans']} spans, "
        f"{figures['bytes']:,} bytes, {len(total)} requests"
    )
    rows = (("total", total), ("SQL", sql), ("rest", rest), ("CPU", figures["cpu"]))
    for label, values in rows:
        print(
            f"  {label:<5} median {statistics.median(values):6.2f} ms   "
            f"p95 {percentile(values, 0.95):6.2f} ms   min {min(values):6.2f} ms"
        )
    verdict = "within" if statistics.median(total) <= AIM_MS else "over"
    print(f"  median {verdict} the aim of {AIM_MS:g} ms")
    if "profile" in figures:
        print(figures["profile"])


def main() -> int:
    args = parse_args()
    if args.child:
        profile = args.profile_sort if args.profile else ""
        figures = run_child(
            args.child, args.traces, args.hours, args.path, args.repeat, args.warmup, profile
        )
        print(json.dumps(figures))
        return 0
    folder = ROOT / "var" if args.keep else Path(tempfile.mkdtemp(prefix="ares-bench-reads-"))
    folder.mkdir(exist_ok=True)
    if args.database in ("sqlite", "both"):
        print_figures("SQLite", measure(f"sqlite:///{folder / 'bench-trace-reads.sqlite3'}", args))
    if args.database in ("postgres", "both"):
        name = urlsplit(args.postgres_url).path.lstrip("/")
        with postgres_database(args.postgres_url, name, keep=args.keep) as url:
            if url is not None:
                print_figures("PostgreSQL", measure(url, args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
