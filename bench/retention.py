"""Time one day's retention on a copy of a bench database, with the disk it takes before and after.

Makes `--copy` as a file copy of `--source` (default ares_pages_10000000, filled by
`bench/pages.py --sizes 1000000,10000000 --fill copy --keep`: ten days of 1M spans), then,
in a child process on the copy, sets ARES_RETENTION_DAYS so that the oldest UTC day of
spans is past retention (the cutoff falls in the next day: the single-table layout also
deletes that day's first hours; the partitioned one drops whole days only) and times
`purge_past_retention()`, what the periodic job runs (and, apart, its partition drops).
Prints the spans, traces and rollup calls before and after, the seconds, and the bytes of
the span table (every partition, with indexes and TOAST: pg_total_relation_size) and of
the trace table, before, after, and with `--vacuum` after a plain VACUUM (ANALYZE) of both.
With `--all`, every span is put past retention instead, for a database filled up to now
(`pages.py`'s 1M one: a day of spans over two UTC days): the retention's clock is moved
ahead so that the newest span's day is past. The migrations are not run unless
`--migrate`: the copy is measured on whatever layout and schema the source has. The copy is
dropped afterwards unless `--keep`.

    .venv/bin/python bench/retention.py [--source ares_pages_10000000] [--vacuum] [--all]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import sql

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

AIM_SECONDS = 1.0
DROP_SQL = "DROP DATABASE IF EXISTS {} WITH (FORCE)"
SIZES_SQL = """
    SELECT
        coalesce(
            (SELECT sum(pg_total_relation_size(relid))::bigint
             FROM pg_partition_tree('traces_app_invocation'::regclass)),
            pg_total_relation_size('traces_app_invocation'::regclass)
        ),
        pg_total_relation_size('traces_app_trace'::regclass)
"""


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--postgres-url",
        default=os.environ.get("BENCH_POSTGRES_URL", "postgres://ares:ares@127.0.0.1:5432/ares"),
        help="server holding the source database",
    )
    parser.add_argument("--source", default="ares_pages_10000000", help="database to copy")
    parser.add_argument("--copy", default="ares_retention_bench", help="name of the copy")
    parser.add_argument("--keep", action="store_true", help="keep the copy afterwards")
    parser.add_argument("--vacuum", action="store_true", help="also time a plain VACUUM after")
    parser.add_argument("--all", action="store_true", help="put every span past retention")
    parser.add_argument("--migrate", action="store_true", help="migrate the copy before")
    parser.add_argument("--child", help=argparse.SUPPRESS)  # the copy's URL, run in a child
    return parser.parse_args()


def measure(database_url: str, vacuum: bool, every_span: bool = False) -> dict[str, object]:
    """In this process: purge the oldest day past retention on the database; return figures."""
    os.environ["DATABASE_URL"] = database_url
    os.environ.setdefault("SECRET_KEY", "bench-only")
    os.environ["DJANGO_SETTINGS_MODULE"] = "ares_site.settings"
    os.environ.pop("CELERY_BROKER_URL", None)
    import django

    django.setup()
    from django.conf import settings
    from django.db import connection
    from django.utils import timezone

    from traces_app.rollups.retention import purge_past_retention

    figures: dict[str, object] = {"before": counts(connection)}
    with connection.cursor() as cursor:
        cursor.execute("SELECT min(started_at), max(started_at) FROM traces_app_invocation")
        oldest, newest = cursor.fetchone()
    next_day = (oldest + timedelta(days=1)).replace(hour=0, minute=0, second=0, microsecond=0)
    if every_span:  # the newest span's day past: the cutoff an hour into the next
        next_day = (newest + timedelta(days=1)).replace(hour=0, minute=0, second=0, microsecond=0)
        ahead = next_day + timedelta(days=1, hours=1) - timezone.now()
        _move_retention_clock(ahead)
        figures["clock_ahead_hours"] = round(ahead / timedelta(hours=1), 1)
        days = 1
    else:
        days = (timezone.now() - next_day) // timedelta(days=1)
    if days < 1:
        raise SystemExit(f"the oldest span ({oldest}) is within a day: nothing to purge")
    settings.ARES_RETENTION_DAYS = days
    figures.update(oldest=oldest.isoformat(), retention_days=days)
    drop_seconds = _time_partition_drops()
    started = time.perf_counter()
    purged = purge_past_retention()
    figures["seconds"] = time.perf_counter() - started
    figures["drop_seconds"] = sum(drop_seconds)
    figures["purged"] = {"spans": purged.spans, "traces": purged.traces, "scores": purged.scores}
    figures["after"] = counts(connection)
    if vacuum:
        started = time.perf_counter()
        with connection.cursor() as cursor:
            cursor.execute("VACUUM (ANALYZE) traces_app_invocation, traces_app_trace")
        figures["vacuum_seconds"] = time.perf_counter() - started
        figures["after_vacuum"] = counts(connection)
    return figures


def _move_retention_clock(ahead: timedelta) -> None:
    """Run the retention's clock `ahead` of this one (its cutoff and horizon move with it)."""
    from types import SimpleNamespace

    from django.utils import timezone

    from traces_app.rollups import retention

    retention.timezone = SimpleNamespace(now=lambda: timezone.now() + max(ahead, timedelta()))


def _time_partition_drops() -> list[float]:
    """Time the retention's partition drops (partitioned layout), apart from the trace rows."""
    from traces_app.rollups import retention

    seconds: list[float] = []
    drop = getattr(retention, "drop_partitions_before", None)
    if drop is None:
        return seconds

    def timed(*args: object, **kwargs: object) -> object:
        started = time.perf_counter()
        try:
            return drop(*args, **kwargs)
        finally:
            seconds.append(time.perf_counter() - started)

    retention.drop_partitions_before = timed
    return seconds


def counts(connection: object) -> dict[str, int]:
    """Return the rows and bytes of the span and trace tables and the rollups' total calls."""
    with connection.cursor() as cursor:
        cursor.execute(SIZES_SQL)
        span_bytes, trace_bytes = cursor.fetchone()
        cursor.execute(
            "SELECT (SELECT count(*) FROM traces_app_invocation), "
            "(SELECT count(*) FROM traces_app_trace), "
            "(SELECT coalesce(sum(calls), 0)::bigint FROM traces_app_toolrollup), "
            "(SELECT coalesce(sum(calls), 0)::bigint FROM traces_app_spanrollup)"
        )
        spans, traces, tool_calls, span_calls = cursor.fetchone()
    return {
        "spans": spans, "traces": traces, "span_bytes": span_bytes, "trace_bytes": trace_bytes,
        "tool_rollup_calls": tool_calls, "span_rollup_calls": span_calls,
    }  # fmt: skip


def copy_database(server_url: str, source: str, name: str) -> tuple[str, float]:
    """Drop `name` if it exists, make it a file copy of `source`; return its URL and seconds."""
    parts = urlsplit(server_url)
    admin_url = urlunsplit(parts._replace(scheme="postgresql", path="/postgres"))
    with psycopg.connect(admin_url, autocommit=True, connect_timeout=5) as admin:
        admin.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )
        started = time.perf_counter()
        admin.execute(
            sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                sql.Identifier(name), sql.Identifier(source)
            )
        )
        seconds = time.perf_counter() - started
    return urlunsplit(parts._replace(path=f"/{name}")), seconds


def drop_database(server_url: str, name: str) -> None:
    parts = urlsplit(server_url)
    admin_url = urlunsplit(parts._replace(scheme="postgresql", path="/postgres"))
    with psycopg.connect(admin_url, autocommit=True, connect_timeout=5) as admin:
        admin.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )


def report(source: str, copy_seconds: float, figures: dict) -> None:
    before, after = figures["before"], figures["after"]
    mb = 1024 * 1024
    purged = figures["purged"]
    verdict = "under" if figures["seconds"] < AIM_SECONDS else "OVER"
    print(f"\n### retention on a copy of {source} (copied in {copy_seconds:.0f} s)\n")
    print(
        f"oldest span {figures['oldest']}, ARES_RETENTION_DAYS={figures['retention_days']}"
        + (
            f" (the retention's clock {figures['clock_ahead_hours']} h ahead)"
            if "clock_ahead_hours" in figures
            else ""
        )
        + ": "
        f"purged {purged['spans']:,} spans and {purged['traces']:,} traces "
        f"({purged['scores']:,} scores) in {figures['seconds']:.2f} s "
        f"({verdict} the {AIM_SECONDS:g} s aim), of which dropping day partitions "
        f"{figures['drop_seconds']:.3f} s"
    )
    print("\n| | spans | traces | span table MB | trace table MB | rollup calls (tool / span) |")
    print("|---|---|---|---|---|---|")
    rows = [("before", before), ("after", after)]
    if "after_vacuum" in figures:
        rows.append((f"after VACUUM ({figures['vacuum_seconds']:.0f} s)", figures["after_vacuum"]))
    for label, row in rows:
        print(
            f"| {label} | {row['spans']:,} | {row['traces']:,} | {row['span_bytes'] / mb:,.0f} | "
            f"{row['trace_bytes'] / mb:,.0f} | {row['tool_rollup_calls']:,} / "
            f"{row['span_rollup_calls']:,} |"
        )


def main() -> int:
    args = parse_args()
    if args.child:
        print(json.dumps(measure(args.child, args.vacuum, args.all)))
        return 0
    url, copy_seconds = copy_database(args.postgres_url, args.source, args.copy)
    try:
        if args.migrate:
            subprocess.run(
                [sys.executable, "manage.py", "migrate", "-v0"],
                cwd=ROOT, env={**os.environ, "DATABASE_URL": url}, check=True,
            )  # fmt: skip
        options = ["--vacuum"] * args.vacuum + ["--all"] * args.all
        done = subprocess.run(
            [sys.executable, __file__, "--child", url, *options],
            cwd=ROOT, stdout=subprocess.PIPE, text=True, check=True,
        )  # fmt: skip
    finally:
        if not args.keep:
            drop_database(args.postgres_url, args.copy)
    report(args.source, copy_seconds, json.loads(done.stdout))
    return 0


if __name__ == "__main__":
    sys.exit(main())
