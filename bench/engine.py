"""Benchmark: the tool engine's own overhead per call, recording included.

Runs the calculator on simple expressions directly and through the engine (look-up,
validation, concurrency limits, timeout, formatting, recording into a fresh database),
and prints the median and p95 overhead per call, and calls per second with 1 and 8
concurrent callers. Aim: under 1 ms median overhead on SQLite.

    .venv/bin/python bench/engine.py [--calls 5000] [--database-url sqlite:///...]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from figures import migrated_site, percentile  # noqa: E402  (bench/ is the script's own folder)

EXPRESSIONS = ["1+1", "100*(100+1)/2", "sqrt(16)+2^10", "gcd(12,18)", "mean(1..10)"]


def time_calls(function, count: int) -> list[float]:
    """Return the wall time of `count` calls of function(i), in milliseconds each."""
    timings = []
    for i in range(count):
        start = time.perf_counter()
        function(i)
        timings.append((time.perf_counter() - start) * 1000)
    return timings


def calls_per_second(function, count: int, callers: int) -> float:
    """Return calls per second with `callers` threads sharing `count` calls."""
    per_caller = count // callers

    def work() -> None:
        for i in range(per_caller):
            function(i)

    threads = [threading.Thread(target=work) for _ in range(callers)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return per_caller * callers / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=5000)
    parser.add_argument("--database-url", default="")
    args = parser.parse_args()

    migrated_site("engine", args.database_url)
    from django.db import connection

    from tools_app.builtins.calculator import calculator
    from tools_app.engine import CallContext
    from tools_app.site_engine import get_engine
    from tools_app.specs import ToolCall
    from traces_app.models import Invocation

    engine = get_engine()
    # One trace per 5 calls, like an agent task; one trace of thousands of identical calls
    # would be a loop, and measure spiral detection instead of the engine.
    contexts = [CallContext(agent="bench") for _ in range(args.calls // 5 + 1)]

    def direct(i: int) -> None:
        calculator(EXPRESSIONS[i % len(EXPRESSIONS)])

    def through_engine(i: int) -> None:
        call = ToolCall("calculator", {"expression": EXPRESSIONS[i % len(EXPRESSIONS)]}, f"c{i}")
        result = engine.execute(call, contexts[i // 5])
        assert result.success, result.text

    through_engine(0)  # warm up: the engine's loop, threads and database connection
    direct_ms = time_calls(direct, args.calls)
    engine_ms = time_calls(through_engine, args.calls)
    single = calls_per_second(through_engine, args.calls, 1)
    eight = calls_per_second(through_engine, args.calls, 8)
    stored = Invocation.objects.filter(agent="bench").count()
    expected = 1 + args.calls * 2 + (args.calls // 8) * 8

    print(f"database: {connection.vendor}, {args.calls} calls per measurement")
    print(
        f"direct call      median {statistics.median(direct_ms):.3f} ms  "
        f"p95 {percentile(direct_ms, 0.95):.3f} ms"
    )
    print(
        f"through engine   median {statistics.median(engine_ms):.3f} ms  "
        f"p95 {percentile(engine_ms, 0.95):.3f} ms"
    )
    median_overhead = statistics.median(engine_ms) - statistics.median(direct_ms)
    p95_overhead = percentile(engine_ms, 0.95) - percentile(direct_ms, 0.95)
    print(
        f"engine overhead  median {median_overhead:.3f} ms  p95 {p95_overhead:.3f} ms"
        "  (recording included)"
    )
    print(f"calls per second: 1 caller {single:,.0f}, 8 callers {eight:,.0f}")
    print(f"records stored: {stored} of {expected} calls")
    engine.close()


if __name__ == "__main__":
    main()
