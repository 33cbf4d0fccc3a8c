"""Benchmark the dashboard pages: median and p95 server time at each size (spans), same run.

For each database and size, a child process migrates a fresh database (a temporary SQLite
file, or a new PostgreSQL database), fills it with `manage.py ares_demo --invocations N`
(or, `--fill copy`, one day recorded so and copied to earlier days: bench/day_copies.py),
logs in as staff and renders every page `--repeat` times through Django's test client
(the whole request: middleware, queries, templates). It prints one table per database and
each page's largest/smallest p95 ratio. Aim: no page over 500 ms p95 at any size, and each
page at the largest size within 2x of the same page at the smallest.

    .venv/bin/python bench/pages.py [--database sqlite|postgres|both] [--sizes 10000,1000000]
    .venv/bin/python bench/pages.py --database postgres --sizes 1000000,10000000 \\
        --fill copy --keep      # issue 27: 1M and 10M spans (10 days of 1M)
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from figures import percentile, postgres_database  # noqa: E402  (bench/ is the script's folder)

AIM_P95_MS = 500.0
AIM_RATIO = 2.0


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--sizes", default="10000,1000000", help="comma-separated span counts")
    parser.add_argument("--repeat", type=int, default=20, help="renders per page")
    parser.add_argument(
        "--postgres-url",
        default=os.environ.get("BENCH_POSTGRES_URL", "postgres://ares:ares@127.0.0.1:5432/ares"),
        help="server to create the bench databases on",
    )
    parser.add_argument(
        "--keep", action="store_true",
        help="keep the databases (named ares_pages_<size> / var/bench-pages-<size>.sqlite3) "
        "and reuse them next run instead of generating the data again",
    )  # fmt: skip
    parser.add_argument(
        "--fill", choices=["demo", "copy"], default="demo",
        help="demo: record every span with manage.py ares_demo (hours at 10M); copy: record "
        "--copy-unit spans (one day) with ares_demo, then copy that day to earlier days in "
        "SQL (bench/day_copies.py); with --keep, a new database starts as a copy of "
        "ares_pages_<copy-unit> when that exists",
    )  # fmt: skip
    parser.add_argument("--copy-unit", type=int, default=1_000_000, help="spans per copied day")
    parser.add_argument("--child", help=argparse.SUPPRESS)  # database URL, run in a child
    parser.add_argument("--size", type=int, help=argparse.SUPPRESS)
    return parser.parse_args()


def pages() -> list[tuple[str, str]]:
    """Return (label, path) of every page to render, picked from the data in the database."""
    from django.urls import NoReverseMatch, reverse

    from traces_app.models import FailureSpiral, Trace

    spiral = FailureSpiral.objects.order_by("-started_at").first()
    trace = Trace.objects.filter(tool_calls__gte=3).order_by("-started_at").first()
    session = Trace.objects.exclude(session_id="").order_by("-started_at").first()
    wanted = [
        ("overview", "overview", [], ""),
        ("overview 7 days", "overview", [], "?range=7d"),
        ("traces", "traces", [], ""),
        ("traces by tool+status", "traces", [], "?tool=web_search&status=error"),
        ("traces by request text", "traces", [], "?q=Shanghai"),
        ("trace detail", "trace-detail", [trace.pk if trace else ""], ""),
        ("tools", "tools", [], ""),
        ("tools 7 days", "tools", [], "?range=7d"),
        ("tool detail", "tool-detail", ["calculator"], ""),
        ("evidence", "evidence", [], ""),
        ("spirals", "spirals", [], ""),
        ("spiral detail", "spiral-detail", [spiral.pk if spiral else 0], ""),
        ("chains", "chains", [], ""),
        ("chains 7 days", "chains", [], "?range=7d"),
        ("sessions", "sessions", [], ""),
        ("monitors", "monitors", [], ""),
        ("sessions 7 days", "sessions", [], "?range=7d"),
        ("session detail", "session-detail", [session.session_id if session else "-"], ""),
    ]
    found = []
    for label, name, args, query in wanted:
        try:
            found.append((label, reverse(name, args=args) + query))
        except NoReverseMatch:
            print(f"  {label}: no page named {name!r} (yet), skipped", file=sys.stderr)
    capability = _first_capability()
    if capability:
        path = reverse("evidence-capability", args=[capability])
        found.append((f"evidence for {capability}", path))
    return found


def _first_capability() -> str:
    from django.urls import NoReverseMatch, reverse

    from planner_app.models import CapabilityMapping

    try:
        reverse("evidence-capability", args=["x"])
    except NoReverseMatch:
        return ""
    mapping = CapabilityMapping.objects.select_related("capability").first()
    return mapping.capability.name if mapping else ""


def record_demo(size: int) -> None:
    """Empty the database and record `size` demo spans over the last day."""
    from django.core.management import call_command

    call_command("flush", interactive=False, verbosity=0)
    call_command("ares_demo", invocations=size, seed=1, stdout=sys.stderr)


def run_child(
    database_url: str, size: int, repeat: int, fill: str = "demo", unit: int = 1_000_000
) -> dict[str, list[float]]:
    """In this process: fill the database if needed, then time every page; return ms per page."""
    os.environ["DATABASE_URL"] = database_url
    os.environ.setdefault("SECRET_KEY", secrets.token_urlsafe(32))
    os.environ["ALLOWED_HOSTS"] = "testserver"
    os.environ["DJANGO_SETTINGS_MODULE"] = "ares_site.settings"
    os.environ.pop("CELERY_BROKER_URL", None)
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.test import Client

    from traces_app.models import Invocation

    call_command("migrate", verbosity=0)
    held = Invocation.objects.count()
    if held < size:
        started = time.perf_counter()
        if fill == "copy" and size > unit:
            if held < unit:
                record_demo(unit)
            from day_copies import copy_days

            copy_days(size, unit)
        else:
            record_demo(size)
        seconds = time.perf_counter() - started
        print(f"  generated {size:,} spans in {seconds:.0f} s", file=sys.stderr)
    if repeat == 0:
        return {}
    user, _ = get_user_model().objects.get_or_create(
        username="bench", defaults={"is_staff": True, "is_superuser": True}
    )
    client = Client()
    client.force_login(user)
    timings: dict[str, list[float]] = {}
    for label, path in pages():
        response = client.get(path)  # warm-up: caches, the planner's rule set, templates
        if response.status_code != 200:
            print(f"  {label}: {path} answered {response.status_code}, skipped", file=sys.stderr)
            continue
        samples = []
        for _ in range(repeat):
            started = time.perf_counter()
            client.get(path)
            samples.append((time.perf_counter() - started) * 1000)
        timings[label] = samples
    return timings


def measure(
    database_url: str, size: int, repeat: int, fill: str = "demo", unit: int = 1_000_000
) -> dict[str, list[float]]:
    """Run one database and size in a child process (Django is set up once per process)."""
    done = subprocess.run(
        [sys.executable, __file__, "--child", database_url, "--size", str(size),
         "--repeat", str(repeat), "--fill", fill, "--copy-unit", str(unit)],
        cwd=ROOT, stdout=subprocess.PIPE, text=True, check=True,
    )  # fmt: skip
    return json.loads(done.stdout)


def copy_database(server_url: str, source: str, name: str) -> None:
    """Create database `name` as a file copy of `source`, unless `name` exists or `source` not."""
    import psycopg
    from psycopg import sql

    parts = urlsplit(server_url)
    admin_url = urlunsplit(parts._replace(scheme="postgresql", path="/postgres"))
    with psycopg.connect(admin_url, autocommit=True, connect_timeout=5) as admin:
        found = {
            row[0]
            for row in admin.execute(
                "SELECT datname FROM pg_database WHERE datname IN (%s, %s)", [source, name]
            )
        }
        if name in found or source not in found:
            return
        started = time.perf_counter()
        admin.execute(
            sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                sql.Identifier(name), sql.Identifier(source)
            )
        )
        seconds = time.perf_counter() - started
        print(f"  {name} made as a copy of {source} in {seconds:.0f} s", file=sys.stderr)


def print_table(database: str, results: dict[int, dict[str, list[float]]]) -> None:
    sizes = sorted(results)
    header = " | ".join(f"{size:,} median / p95 ms" for size in sizes)
    print(f"\n### {database}\n\n| page | {header} | p95 ratio |")
    print("|---" * (len(sizes) + 2) + "|")
    labels = list(dict.fromkeys(label for size in sizes for label in results[size]))
    for label in labels:
        cells, p95s = [], []
        for size in sizes:
            samples = results[size].get(label)
            if samples is None:
                cells.append("n/a")
                continue
            p95 = percentile(samples, 0.95)
            p95s.append(p95)
            flag = " (over aim)" if p95 > AIM_P95_MS else ""
            cells.append(f"{statistics.median(samples):.1f} / {p95:.1f}{flag}")
        ratio = "n/a"
        if len(p95s) > 1 and p95s[0]:
            over = p95s[-1] / p95s[0] > AIM_RATIO
            ratio = f"{p95s[-1] / p95s[0]:.2f}x{f' (over {AIM_RATIO:g}x)' if over else ''}"
        print(f"| {label} | {' | '.join(cells)} | {ratio} |")
    print(
        f"\nAims: p95 under {AIM_P95_MS:.0f} ms at every size, and the largest size's p95 "
        f"at most {AIM_RATIO:g}x the smallest's; figures that miss one are marked."
    )


def main() -> int:
    args = parse_args()
    if args.child:
        timings = run_child(args.child, args.size, args.repeat, args.fill, args.copy_unit)
        print(json.dumps(timings))
        return 0
    sizes = [int(size) for size in args.sizes.split(",")]
    folder = ROOT / "var" if args.keep else Path(tempfile.mkdtemp(prefix="ares-bench-pages-"))
    for database in ("sqlite", "postgres"):
        if args.database not in (database, "both"):
            continue
        results: dict[int, dict[str, list[float]]] = {}
        for size in sizes:
            print(f"{database}, {size:,} spans:", file=sys.stderr)
            if database == "sqlite":
                url = f"sqlite:///{folder / f'bench-pages-{size}.sqlite3'}"
                results[size] = measure(url, size, args.repeat)
                continue
            name = f"ares_pages_{size}" if args.keep else f"ares_pages_{size}_{os.getpid()}"
            if args.keep and args.fill == "copy" and size > args.copy_unit:
                copy_database(args.postgres_url, f"ares_pages_{args.copy_unit}", name)
            with postgres_database(args.postgres_url, name, keep=args.keep) as url:
                if url is None:
                    break
                results[size] = measure(url, size, args.repeat, args.fill, args.copy_unit)
        if results:
            print_table(database, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
