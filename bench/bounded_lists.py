"""Time the traces list's totals on an existing database: all matches summed, or capped.

Before issue 27 the traces page summed every trace that matched its filters in the range
on each load; now it counts up to COUNT_LIMIT (views._trace_totals). This script runs
both on the same database and filters, read-only (no page load, so no rollup recount),
and prints each one's median and p95 time in ms, and the figures each shows.

    DATABASE_URL=postgres://ares:ares@127.0.0.1:5432/ares_pages_1000000 \\
        .venv/bin/python bench/bounded_lists.py [--hours 24] [--repeat 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from figures import percentile  # noqa: E402  (bench/ is the script's folder)

FILTERS: list[dict[str, str]] = [
    {},
    {"tool": "web_search", "match": "exact"},
    {"tool": "web_search", "match": "exact", "status": "error"},
    {"q": "timeout"},
]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hours", type=int, default=24, help="the range: the last N hours")
    parser.add_argument("--repeat", type=int, default=5, help="runs of each query")
    return parser.parse_args()


def timed(run: Callable[[], Any], repeat: int) -> tuple[float, float, Any]:
    """Return the median and p95 ms of `repeat` runs, and the last run's result."""
    times, result = [], None
    for _ in range(repeat):
        started = time.perf_counter()
        result = run()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times), percentile(times, 0.95), result


def main() -> None:
    args = parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ares_site.settings")
    os.environ.setdefault("SECRET_KEY", "bench-only")
    import django

    django.setup()
    from django.db.models import Count, Q, Sum

    from traces_app import views
    from traces_app.forms import TraceFilterForm
    from traces_app.models import Trace
    from traces_app.rollups.ranges import TimeRange

    latest = Trace.objects.order_by("-started_at").values_list("started_at", flat=True).first()
    if latest is None:
        sys.exit("the database holds no traces")
    time_range = TimeRange(latest - timedelta(hours=args.hours), latest, "bench")
    print(f"range: the {args.hours} hours up to the newest trace ({latest:%Y-%m-%d %H:%M} UTC)")
    print(f"{'filter':<60} {'all summed':>18} {'capped (now)':>18}  figures now")
    every = {  # what the page summed before
        "traces": Count("pk"),
        "failed": Count("pk", filter=Q(status="error")),
        "stopped": Count("pk", filter=Q(status="stopped")),
        "input_tokens": Sum("input_tokens", default=0),
        "output_tokens": Sum("output_tokens", default=0),
        "cost_usd": Sum("cost_usd", default=0.0),
    }
    for params in FILTERS:
        form = TraceFilterForm(params)
        matching = form.filter(Trace.objects.all(), time_range)
        old = timed(lambda m=matching: m.order_by().aggregate(**every), args.repeat)
        new = timed(lambda m=matching, f=form: views._trace_totals(m, f, time_range), args.repeat)
        shown = new[2]
        traces = shown["traces"] if shown["traces_exact"] else f">{shown['limit']}"
        print(
            f"{str(params or 'none'):<60} {old[0]:>8.0f} / {old[1]:>6.0f} ms "
            f"{new[0]:>8.0f} / {new[1]:>6.0f} ms  {traces} traces ({shown['basis']})"
        )


if __name__ == "__main__":
    main()
