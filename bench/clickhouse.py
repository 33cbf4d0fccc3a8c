"""Try the ClickHouse span store of docs/scale.md on real ClickHouse (chdb, in-process).

Reads the spans and traces of a PostgreSQL bench database (read-only: a `bench/pages.py
--keep` database, `ares_pages_1000000` by default) into a CSV export, loads it into a
chdb session with the schema of docs/scale.md (spans partitioned by day, TTL, codecs,
materialized views for the hourly tool rollups and the trace totals), and prints:

- bytes per span on disk in both stores (ClickHouse from system.parts, PostgreSQL from
  pg_total_relation_size),
- load speed (one bulk insert from the export; then ingest-shaped batches of 1,000 spans
  through the materialized views),
- what inserting a batch again does (ReplacingMergeTree, FINAL, the views),
- median and p95 of `--repeat` runs of the reads the pages make, each on ClickHouse and
  the equivalent SQL on PostgreSQL, with their answers' sizes side by side.

    .venv/bin/pip install -e '.[bench]'        # chdb: ClickHouse 26.x in-process
    .venv/bin/python bench/clickhouse.py [--postgres-url URL] [--repeat 15] [--export DIR]

Needs only the bench extra: nothing in the site or its tests imports chdb.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

import psycopg

try:
    from figures import percentile  # run as a script: its folder, bench/, is on the path
except ImportError:  # imported as bench.clickhouse (the docs test reads its schema)
    from bench.figures import percentile

SPAN_COLUMNS = (
    "trace_id, span_id, parent_span_id, kind, tool_name, tool_call_id, chosen_by, ran_on, "
    "agent, model, coalesce(arguments::text, '') AS arguments, "
    "coalesce(result::text, '') AS result, status, error_kind, error_message, started_at, "
    "latency_ms, input_tokens, output_tokens, result_tokens, cost_usd, attempt, "
    "coercions::text AS coercions, received_at, coalesce(agent_awaits, '') AS agent_awaits, "
    "names_agent, tool_description, tool_type, result_reduction, result_tokens_dropped"
)
TRACE_COLUMNS = "trace_id, agent, session_id, request_text, dialect, started_at, updated_at"
BATCH_SPANS = 1_000
SEARCH_TEXT = "Shanghai"
FILTER_TOOL = "web_search"
SERIES_TOOL = "calculator"


def schema(retention_days: int) -> list[str]:
    """Return the DDL of docs/scale.md: spans, trace headers, and the two rollup views."""
    ttl = f"INTERVAL {retention_days} DAY"
    return [
        f"""CREATE TABLE spans (
    trace_id UInt128 CODEC(ZSTD(1)),
    span_id UInt64 CODEC(ZSTD(1)),
    parent_span_id UInt64 CODEC(ZSTD(1)),
    kind LowCardinality(String),
    tool_name LowCardinality(String),
    tool_call_id String CODEC(ZSTD(3)),
    chosen_by LowCardinality(String),
    ran_on LowCardinality(String),
    agent LowCardinality(String),
    model LowCardinality(String),
    arguments String CODEC(ZSTD(3)),
    result String CODEC(ZSTD(3)),
    status LowCardinality(String),
    error_kind LowCardinality(String),
    error_message String CODEC(ZSTD(3)),
    started_at DateTime64(6, 'UTC') CODEC(Delta, ZSTD(1)),
    latency_ms Float64 CODEC(ZSTD(1)),
    input_tokens UInt32 CODEC(T64, ZSTD(1)),
    output_tokens UInt32 CODEC(T64, ZSTD(1)),
    result_tokens UInt32 CODEC(T64, ZSTD(1)),
    cost_usd Float64 CODEC(ZSTD(1)),
    attempt UInt16 CODEC(T64, ZSTD(1)),
    coercions String CODEC(ZSTD(3)),
    received_at DateTime64(6, 'UTC') CODEC(Delta, ZSTD(1)),
    agent_awaits String CODEC(ZSTD(1)),
    names_agent LowCardinality(String),
    tool_description String CODEC(ZSTD(3)),
    tool_type LowCardinality(String),
    result_reduction LowCardinality(String),
    result_tokens_dropped UInt32 CODEC(T64, ZSTD(1))
) ENGINE = ReplacingMergeTree(received_at)
PARTITION BY toDate(started_at)
ORDER BY (trace_id, span_id)
TTL toDate(started_at) + {ttl}
SETTINGS ttl_only_drop_parts = 1""",
        f"""CREATE TABLE traces (
    trace_id UInt128 CODEC(ZSTD(1)),
    agent LowCardinality(String),
    session_id String CODEC(ZSTD(1)),
    request_text String CODEC(ZSTD(3)),
    dialect LowCardinality(String),
    started_at DateTime64(6, 'UTC') CODEC(Delta, ZSTD(1)),
    updated_at DateTime64(6, 'UTC') CODEC(Delta, ZSTD(1))
) ENGINE = ReplacingMergeTree(updated_at)
PARTITION BY toDate(started_at)
ORDER BY trace_id
TTL toDate(started_at) + {ttl}
SETTINGS ttl_only_drop_parts = 1""",
        f"""CREATE TABLE trace_totals (
    day Date,
    trace_id UInt128,
    first_start SimpleAggregateFunction(min, DateTime64(6, 'UTC')),
    last_end SimpleAggregateFunction(max, DateTime64(6, 'UTC')),
    span_count SimpleAggregateFunction(sum, UInt64),
    tool_calls SimpleAggregateFunction(sum, UInt64),
    llm_calls SimpleAggregateFunction(sum, UInt64),
    failed_calls SimpleAggregateFunction(sum, UInt64),
    stopped_calls SimpleAggregateFunction(sum, UInt64),
    input_tokens SimpleAggregateFunction(sum, UInt64),
    output_tokens SimpleAggregateFunction(sum, UInt64),
    cost_usd SimpleAggregateFunction(sum, Float64),
    tool_latency_ms SimpleAggregateFunction(sum, Float64),
    tools SimpleAggregateFunction(groupUniqArrayArray, Array(String)) CODEC(ZSTD(1))
) ENGINE = AggregatingMergeTree
PARTITION BY day
ORDER BY (day, trace_id)
TTL day + {ttl}
SETTINGS ttl_only_drop_parts = 1""",
        """CREATE MATERIALIZED VIEW trace_totals_mv TO trace_totals AS
SELECT toDate(started_at) AS day, trace_id,
    min(started_at) AS first_start,
    max(started_at + toIntervalMicrosecond(toInt64(latency_ms * 1000))) AS last_end,
    count() AS span_count,
    countIf(kind = 'tool') AS tool_calls,
    countIf(kind = 'llm') AS llm_calls,
    countIf(status = 'error') AS failed_calls,
    countIf(status = 'stopped') AS stopped_calls,
    sum(input_tokens) AS input_tokens,
    sum(output_tokens) AS output_tokens,
    sum(cost_usd) AS cost_usd,
    sumIf(latency_ms, kind = 'tool') AS tool_latency_ms,
    groupUniqArrayIf(tool_name, tool_name != '') AS tools
FROM spans GROUP BY day, trace_id""",
        # Rollups have no TTL: they outlive the spans, as on PostgreSQL.
        """CREATE TABLE tool_hourly (
    tool_name LowCardinality(String),
    hour DateTime('UTC'),
    calls SimpleAggregateFunction(sum, UInt64),
    failures SimpleAggregateFunction(sum, UInt64),
    stopped SimpleAggregateFunction(sum, UInt64),
    latency_sum_ms SimpleAggregateFunction(sum, Float64),
    latency AggregateFunction(quantilesTDigest(0.5, 0.95), Float64),
    input_tokens SimpleAggregateFunction(sum, UInt64),
    output_tokens SimpleAggregateFunction(sum, UInt64),
    result_tokens SimpleAggregateFunction(sum, UInt64),
    cost_usd SimpleAggregateFunction(sum, Float64)
) ENGINE = AggregatingMergeTree
PARTITION BY toYYYYMM(hour)
ORDER BY (tool_name, hour)""",
        """CREATE MATERIALIZED VIEW tool_hourly_mv TO tool_hourly AS
SELECT tool_name, toStartOfHour(started_at) AS hour,
    count() AS calls,
    countIf(status = 'error') AS failures,
    countIf(status = 'stopped') AS stopped,
    sum(latency_ms) AS latency_sum_ms,
    quantilesTDigestState(0.5, 0.95)(latency_ms) AS latency,
    sum(input_tokens) AS input_tokens,
    sum(output_tokens) AS output_tokens,
    sum(result_tokens) AS result_tokens,
    sum(cost_usd) AS cost_usd
FROM spans WHERE kind = 'tool' GROUP BY tool_name, hour""",
    ]


@dataclass
class Window:
    """The pages' default 30-day range, ending an hour after the newest span, and one trace."""

    since: datetime
    until: datetime
    trace_id: str
    trace_since: datetime
    trace_until: datetime

    def literal(self, moment: datetime) -> str:
        return f"toDateTime64('{moment:%Y-%m-%d %H:%M:%S.%f}', 6, 'UTC')"


class ClickHouse:
    """A chdb session in a folder of its own; query() raises on a ClickHouse error."""

    def __init__(self, path: str) -> None:
        from chdb import session  # the bench extra: imported here so --help works without it

        self.session = session.Session(path)

    def query(self, sql: str, fmt: str = "TabSeparated") -> str:
        result = self.session.query(sql, fmt)
        return result.bytes().decode()

    def rows(self, sql: str) -> list[list[str]]:
        return [line.split("\t") for line in self.query(sql).splitlines()]

    def value(self, sql: str) -> float:
        return float(self.query(sql).strip())


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--postgres-url",
        default=os.environ.get(
            "BENCH_POSTGRES_URL", "postgres://ares:ares@127.0.0.1:5432/ares_pages_1000000"
        ),
        help="the PostgreSQL database to read the spans from and time (read-only)",
    )
    parser.add_argument("--repeat", type=int, default=15, help="runs of every read")
    parser.add_argument(
        "--export", help="folder of the CSV export (made there unless it holds one already)"
    )
    parser.add_argument("--store", help="folder of the chdb session (default: a temporary one)")
    parser.add_argument("--batch-spans", type=int, default=100_000, help="spans sent in batches")
    return parser.parse_args()


def export(conn: psycopg.Connection, folder: Path) -> tuple[Path, Path]:
    """Write the spans and the trace headers as CSV files (kept for the next run)."""
    folder.mkdir(parents=True, exist_ok=True)
    files = []
    for name, table, columns in (
        ("spans.csv", "traces_app_invocation", SPAN_COLUMNS),
        ("traces.csv", "traces_app_trace", TRACE_COLUMNS),
    ):
        path = folder / name
        files.append(path)
        if path.exists():
            continue
        started = time.perf_counter()
        copy_sql = f"COPY (SELECT {columns} FROM {table}) TO STDOUT WITH (FORMAT csv, HEADER)"
        with path.with_suffix(".part").open("wb") as out, conn.cursor().copy(copy_sql) as copy:
            for chunk in copy:
                out.write(chunk)
        path.with_suffix(".part").rename(path)
        print(f"exported {table} to {path} in {time.perf_counter() - started:.1f} s")
    return files[0], files[1]


def retention_covering(conn: psycopg.Connection) -> int:
    """Return a retention in days that keeps every exported span (TTL would drop older)."""
    oldest = conn.execute("SELECT min(started_at) FROM traces_app_invocation").fetchone()[0]
    age = (datetime.now(oldest.tzinfo) - oldest).days + 2
    return max(30, age)


def load(ch: ClickHouse, spans_csv: Path, traces_csv: Path) -> tuple[int, float]:
    """Insert the export into the spans and traces tables; return (spans, seconds)."""
    settings = "SETTINGS date_time_input_format = 'best_effort'"
    started = time.perf_counter()
    ch.query(
        f"INSERT INTO spans SELECT * REPLACE ({binary_id('trace_id')} AS trace_id, "
        f"{binary_id('span_id', 'UInt64')} AS span_id, "
        f"{binary_id('parent_span_id', 'UInt64')} AS parent_span_id) "
        f"FROM file('{spans_csv}', CSVWithNames, '{_structure(ch, 'spans')}') {settings}"
    )
    seconds = time.perf_counter() - started
    ch.query(
        f"INSERT INTO traces SELECT * REPLACE ({binary_id('trace_id')} AS trace_id) "
        f"FROM file('{traces_csv}', CSVWithNames, '{_structure(ch, 'traces')}') {settings}"
    )
    return int(ch.value("SELECT count() FROM spans")), seconds


def _structure(ch: ClickHouse, table: str) -> str:
    """Return a table's columns as a file() structure ("name Type, ...")."""
    rows = ch.rows(
        f"SELECT name, type FROM system.columns WHERE table = '{table}' "
        "AND database = currentDatabase() ORDER BY position"
    )
    # The export's ids are hex text; load() turns them into numbers.
    rows = [
        [name, "String" if name.endswith("_id") and kind.startswith("UInt") else kind]
        for name, kind in rows
    ]
    by_name = {name: kind for name, kind in rows}
    if table == "traces":  # the export's column order
        return ", ".join(f"{name} {by_name[name]}" for name in TRACE_COLUMNS.split(", "))
    return ", ".join(f"{name} {kind}" for name, kind in rows)


def store_sizes(ch: ClickHouse) -> dict[str, tuple[int, int, int]]:
    """Return (rows, bytes on disk, parts) of every table of the current database."""
    rows = ch.rows(
        "SELECT table, sum(rows), sum(bytes_on_disk), count() FROM system.parts "
        "WHERE active AND database = currentDatabase() GROUP BY table ORDER BY table"
    )
    return {table: (int(n), int(size), int(parts)) for table, n, size, parts in rows}


def column_sizes(ch: ClickHouse, spans: int) -> list[tuple[str, float]]:
    """Return the spans table's compressed bytes per span, by column, largest first."""
    rows = ch.rows(
        "SELECT name, data_compressed_bytes FROM system.columns "
        "WHERE database = currentDatabase() AND table = 'spans' "
        "ORDER BY data_compressed_bytes DESC"
    )
    return [(name, int(size) / spans) for name, size in rows]


def postgres_sizes(conn: psycopg.Connection) -> dict[str, int]:
    """Return the PostgreSQL bytes (heap, TOAST, indexes) of the span and trace tables."""
    # The table and, when it is partitioned, its partitions.
    sql = (
        "SELECT coalesce(sum(pg_total_relation_size(relid)), 0), "
        "coalesce(sum(pg_indexes_size(relid)), 0) FROM (SELECT %s::regclass AS relid "
        "UNION SELECT relid FROM pg_partition_tree(%s::regclass)) AS tree"
    )
    sizes = {}
    for table in ("traces_app_invocation", "traces_app_trace"):
        total, indexes = conn.execute(sql, [table, table]).fetchone()
        sizes[table] = int(total)
        sizes[f"{table} indexes"] = int(indexes)
    return sizes


def send_batches(ch: ClickHouse, count: int, retention: int) -> tuple[int, float, int]:
    """Send `count` spans again, as ingest would, into a second database with the same schema.

    The batches are JSONEachRow bodies of BATCH_SPANS rows, made before the clock starts;
    every INSERT fires both views. Returns (spans, seconds, parts made).
    """
    ch.query("CREATE DATABASE probe")
    ch.query("USE probe")
    for ddl in schema(retention):
        ch.query(ddl)
    body = ch.query(f"SELECT * FROM ares.spans ORDER BY started_at LIMIT {count}", "JSONEachRow")
    lines = body.splitlines()
    batches = ["\n".join(lines[i : i + BATCH_SPANS]) for i in range(0, len(lines), BATCH_SPANS)]
    started = time.perf_counter()
    for batch in batches:
        ch.query(f"INSERT INTO spans FORMAT JSONEachRow\n{batch}")
    seconds = time.perf_counter() - started
    parts = int(ch.value("SELECT count() FROM system.parts WHERE active AND database = 'probe'"))
    return len(lines), seconds, parts


def send_again(ch: ClickHouse) -> dict[str, float]:
    """Insert the probe's first batch a second time and count what each read then sees."""
    before = ch.value("SELECT count() FROM spans")
    ch.query(f"INSERT INTO spans SELECT * FROM spans ORDER BY started_at LIMIT {BATCH_SPANS}")
    return {
        "rows before": before,
        "rows stored": ch.value("SELECT count() FROM spans"),
        "rows with FINAL": ch.value("SELECT count() FROM spans FINAL"),
        "trace totals span_count": ch.value("SELECT sum(span_count) FROM trace_totals"),
    }


PAGE_ROWS = 51  # a page of 50 and one more, to know whether there is a next page


def trace_conditions(w: Window) -> dict[str, str]:
    """Return each list's condition on trace_totals rows (semi-joins on trace_id)."""
    since, until = w.literal(w.since), w.literal(w.until)
    days = f"day >= toDate({since}) AND day <= toDate({until})"
    in_range = f"started_at >= {since} AND started_at < {until}"
    holding = f"SELECT trace_id FROM trace_totals WHERE {days}"
    text = f"ILIKE '%{SEARCH_TEXT}%'"
    return {
        "traces, 30 days": "",
        "traces, tool+error": (
            f"AND trace_id IN ({holding} AND has(tools, '{FILTER_TOOL}')) "
            f"AND trace_id IN ({holding} AND failed_calls > 0)"
        ),
        "traces, text search": (
            f"AND trace_id IN (SELECT trace_id FROM traces WHERE {in_range} "
            f"AND request_text {text} UNION DISTINCT SELECT trace_id FROM spans "
            f"WHERE {in_range} AND (error_message {text} OR arguments {text} "
            f"OR tool_name {text}))"
        ),
    }


def list_summary(w: Window, condition: str) -> str:
    """Return the SQL of a list's totals: traces, failed, stopped, tokens, cost.

    Row-level (uniqExact and sums over the view's rows), no GROUP BY trace_id: a trace
    split over days or unmerged parts is still counted once.
    """
    since, until = w.literal(w.since), w.literal(w.until)
    return (
        "SELECT uniqExact(trace_id), uniqExactIf(trace_id, failed_calls > 0), "
        "uniqExactIf(trace_id, stopped_calls > 0) - uniqExactIf(trace_id, "
        "stopped_calls > 0 AND failed_calls > 0), sum(input_tokens), sum(output_tokens), "
        f"sum(cost_usd) FROM trace_totals WHERE day >= toDate({since}) "
        f"AND day <= toDate({until}) AND first_start >= {since} AND first_start < {until} "
        f"{condition}"
    )


def newest_page(ch: ClickHouse, w: Window, condition: str) -> list[list[str]]:
    """Return the newest PAGE_ROWS traces passing `condition`, exactly, grouping only a few.

    Newest first needs each trace's start, the min over its rows (a trace can have one
    row per day and per unmerged part), and grouping every trace of 30 days grows with the
    range. So the newest rows are taken first (a top-N of one column, no grouping) and
    only their traces are summed: a trace that started after the last row taken has all
    its rows among them. When fewer than a page did, four times as many rows are taken.
    """
    since, until = w.literal(w.since), w.literal(w.until)
    since_text = f"{w.since:%Y-%m-%d %H:%M:%S.%f}"
    limit = 4 * PAGE_ROWS
    while True:
        newest = ch.rows(
            f"SELECT trace_id, toString(first_start) FROM trace_totals "
            f"WHERE day >= toDate({since}) AND day <= toDate({until}) "
            f"AND first_start >= {since} AND first_start < {until} {condition} "
            f"ORDER BY first_start DESC LIMIT {limit}"
        )
        page = _page_of(ch, w, sorted({trace_id for trace_id, _ in newest}))
        if len(newest) < limit:  # the whole range was taken
            return [row for row in page if row[1] >= since_text]
        settled = [row for row in page if row[1] > newest[-1][1]]
        if len(settled) >= PAGE_ROWS:
            return settled
        limit *= 4


def _page_of(ch: ClickHouse, w: Window, ids: list[str]) -> list[list[str]]:
    """Return the exact totals of these traces, newest first, a page at most, with headers."""
    if not ids:
        return []
    since, until = w.literal(w.since), w.literal(w.until)
    page = ch.rows(
        "SELECT trace_id, toString(min(first_start)) AS started, max(last_end), "
        "sum(span_count), sum(failed_calls), sum(input_tokens), sum(output_tokens), "
        f"sum(cost_usd) FROM trace_totals WHERE day >= toDate({since}) "
        f"AND day <= toDate({until}) AND trace_id IN ({_listed(ids)}) GROUP BY trace_id "
        f"ORDER BY started DESC, trace_id DESC LIMIT {PAGE_ROWS}"
    )
    headers = {
        row[0]: row[1:]
        for row in ch.rows(
            "SELECT trace_id, agent, session_id, request_text FROM traces "
            f"WHERE trace_id IN ({_listed([row[0] for row in page])}) "
            "ORDER BY updated_at DESC LIMIT 1 BY trace_id"
        )
    }
    return [row + headers.get(row[0], ["", "", ""]) for row in page]


def _listed(ids: list[str]) -> str:
    # As text: a literal past UInt64 would be read as a Float64.
    return ", ".join(f"toUInt128('{trace_id}')" for trace_id in ids)


def binary_id(expression: str, width: str = "UInt128") -> str:
    """Return the ClickHouse expression of a hex trace (or, UInt64, span) id as stored.

    Ids are kept as numbers (UInt128, UInt64), not their hex text: half the bytes, and
    hashing them for a count or a semi-join was 3.5 times faster than FixedString(32).
    The hex comes back with lower(hex(reinterpretAsFixedString(id))).
    """
    return f"reinterpretAs{width}(unhex({expression}))"


def drop_oldest_day(ch: ClickHouse) -> tuple[str, int, float]:
    """Drop the oldest day of spans, as retention would; return (day, bytes freed, ms)."""
    day, size = ch.rows(
        "SELECT partition, sum(bytes_on_disk) FROM system.parts WHERE active "
        "AND database = currentDatabase() AND table = 'spans' "
        "GROUP BY partition ORDER BY partition LIMIT 1"
    )[0]
    started = time.perf_counter()
    for table in ("spans", "traces", "trace_totals"):
        ch.query(f"ALTER TABLE {table} DROP PARTITION '{day}'")
    return day, int(size), (time.perf_counter() - started) * 1000


def clickhouse_reads(ch: ClickHouse, w: Window) -> dict[str, Callable[[], int]]:
    """Return each read a page makes on ClickHouse, as a call that returns its rows."""
    since, until = w.literal(w.since), w.literal(w.until)
    in_range = f"started_at >= {since} AND started_at < {until}"
    first, last = w.literal(w.trace_since), w.literal(w.trace_until)
    bounds = f"started_at >= {first} AND started_at <= {last}"
    hours = f"hour >= toStartOfHour({since}) AND hour < {until}"

    def listing(condition: str) -> Callable[[], int]:
        def run() -> int:
            return len(newest_page(ch, w, condition)) + len(ch.rows(list_summary(w, condition)))

        return run

    reads = {name: listing(condition) for name, condition in trace_conditions(w).items()}
    statements = {
        # The newest copy of each span: a span sent again is stored once after merges.
        "a trace's spans": f"SELECT * FROM spans WHERE trace_id = {binary_id(repr(w.trace_id))} "
        f"AND {bounds} "
        "ORDER BY started_at, span_id, received_at DESC LIMIT 1 BY span_id",
        "tool stats, raw spans": "SELECT tool_name, count(), countIf(status = 'error'), "
        f"quantiles(0.5, 0.95)(latency_ms) FROM spans WHERE kind = 'tool' AND {in_range} "
        "GROUP BY tool_name ORDER BY tool_name",
        "tool stats, hourly rollup": "SELECT tool_name, sum(calls), sum(failures), "
        "sum(latency_sum_ms) / sum(calls), quantilesTDigestMerge(0.5, 0.95)(latency) "
        f"FROM tool_hourly WHERE {hours} GROUP BY tool_name ORDER BY tool_name",
        "one tool's hours, rollup": "SELECT hour, sum(calls), sum(failures) FROM tool_hourly "
        f"WHERE tool_name = '{SERIES_TOOL}' AND {hours} GROUP BY hour ORDER BY hour",
    }
    for name, sql in statements.items():
        reads[name] = lambda sql=sql: len(ch.rows(sql))
    return reads


def postgres_reads(w: Window) -> dict[str, list[tuple[str, list]]]:
    """Return the PostgreSQL SQL (what the site's ORM sends) of the same reads."""
    columns = (
        "trace_id, agent, session_id, request_text, started_at, ended_at, status, span_count, "
        "failed_calls, input_tokens, output_tokens, cost_usd"
    )
    in_range = "t.started_at >= %s AND t.started_at < %s"

    def listing(where: str = "", extra: list | None = None) -> list[tuple[str, list]]:
        params = [w.since, w.until, *(extra or [])]
        page = (
            f"SELECT {columns} FROM traces_app_trace t WHERE {in_range} {where} "
            "ORDER BY t.started_at DESC, t.trace_id DESC LIMIT 51"
        )
        summary = (
            "SELECT count(*), count(*) FILTER (WHERE status = 'error'), "
            "count(*) FILTER (WHERE status = 'stopped'), coalesce(sum(input_tokens), 0), "
            "coalesce(sum(output_tokens), 0), coalesce(sum(cost_usd), 0) "
            f"FROM traces_app_trace t WHERE {in_range} {where}"
        )
        return [(page, params), (summary, params)]

    holding = (
        "AND t.status = 'error' AND EXISTS (SELECT 1 FROM traces_app_invocation i "
        "WHERE i.trace_id = t.trace_id AND i.tool_name = %s)"
    )
    like = f"%{SEARCH_TEXT}%"
    search = (
        "AND (t.trace_id IN (SELECT trace_id FROM traces_app_trace WHERE "
        "UPPER(request_text) LIKE UPPER(%s) AND started_at >= %s) OR t.trace_id IN "
        "(SELECT trace_id FROM traces_app_invocation WHERE (UPPER(error_message) LIKE UPPER(%s) "
        "OR UPPER(arguments::text) LIKE UPPER(%s)) AND started_at >= %s))"
    )
    in_range_raw = "started_at >= %s AND started_at < %s"
    hours = "bucket_start >= date_trunc('hour', %s::timestamptz) AND bucket_start < %s"
    return {
        "traces, 30 days": listing(),
        "traces, tool+error": listing(holding, [FILTER_TOOL]),
        "traces, text search": listing(search, [like, w.since, like, like, w.since]),
        "a trace's spans": [
            (
                "SELECT * FROM traces_app_invocation WHERE trace_id = %s "
                "AND started_at >= %s AND started_at <= %s ORDER BY started_at, id",
                [w.trace_id, w.trace_since, w.trace_until],
            )
        ],
        "tool stats, raw spans": [
            (
                "SELECT tool_name, count(*), count(*) FILTER (WHERE status = 'error'), "
                "percentile_cont(ARRAY[0.5, 0.95]) WITHIN GROUP (ORDER BY latency_ms) "
                f"FROM traces_app_invocation WHERE kind = 'tool' AND {in_range_raw} "
                "GROUP BY tool_name ORDER BY tool_name",
                [w.since, w.until],
            )
        ],
        # The site merges these rows' latency histograms in Python (not timed here).
        "tool stats, hourly rollup": [
            (
                "SELECT tool_name, bucket_start, calls, failures, latency_sum_ms, "
                f"latency_histogram FROM traces_app_toolrollup WHERE {hours}",
                [w.since, w.until],
            )
        ],
        "one tool's hours, rollup": [
            (
                "SELECT bucket_start, calls, failures FROM traces_app_toolrollup "
                f"WHERE tool_name = %s AND {hours} ORDER BY bucket_start",
                [SERIES_TOOL, w.since, w.until],
            )
        ],
    }


@dataclass
class Timing:
    """Wall-clock median and p95 of a read's runs, its mean CPU time, and its rows."""

    median: float
    p95: float
    cpu: float
    rows: int


def timed(run: Callable[[], int], repeat: int, cpu_seconds: Callable[[], float]) -> Timing:
    """Time `repeat` runs after one warm-up: wall clock each, and CPU over all of them.

    CPU time moves far less than wall time when other work shares the cores.
    """
    rows = run()
    times = []
    cpu_before = cpu_seconds()
    for _ in range(repeat):
        started = time.perf_counter()
        run()
        times.append((time.perf_counter() - started) * 1000)
    cpu = (cpu_seconds() - cpu_before) * 1000 / repeat
    return Timing(statistics.median(times), percentile(times, 0.95), cpu, rows)


def backend_cpu(conn: psycopg.Connection) -> Callable[[], float]:
    """Return a reader of the CPU seconds this connection's PostgreSQL backend has used.

    From /proc, so only for a server on this machine (else NaN). In 10 ms ticks: summed
    over the repeats. Parallel workers would escape it, so the session runs without them.
    """
    stat = Path(f"/proc/{conn.info.backend_pid}/stat")
    ticks = os.sysconf("SC_CLK_TCK")

    def read() -> float:
        if not stat.exists():
            return float("nan")
        fields = stat.read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / ticks  # utime, stime

    return read


def run_postgres(conn: psycopg.Connection, statements: list[tuple[str, list]]) -> Callable[[], int]:
    def run() -> int:
        return sum(len(conn.execute(sql, params).fetchall()) for sql, params in statements)

    return run


def share_niceness(conn: psycopg.Connection) -> None:
    """Give this connection's PostgreSQL backend the script's niceness, when it runs here.

    Under `nice` the in-process ClickHouse would otherwise be timed at a lower priority
    than the PostgreSQL it is compared with.
    """
    ours = os.getpriority(os.PRIO_PROCESS, 0)
    if ours <= 0 or conn.info.host not in ("127.0.0.1", "localhost", "::1"):
        return
    try:
        os.setpriority(os.PRIO_PROCESS, conn.info.backend_pid, ours)
        print(f"PostgreSQL backend {conn.info.backend_pid} set to niceness {ours}, as this script")
    except OSError as exc:
        print(f"PostgreSQL backend kept its priority ({exc}): the comparison favours it")


def window_of(conn: psycopg.Connection) -> Window:
    """Return the 30 days up to an hour after the newest span, and the trace with most spans."""
    newest = conn.execute("SELECT max(started_at) FROM traces_app_invocation").fetchone()[0]
    until = newest + timedelta(hours=1)
    trace_id, started, ended = conn.execute(
        "SELECT trace_id, started_at, ended_at FROM traces_app_trace "
        "ORDER BY span_count DESC, trace_id LIMIT 1"
    ).fetchone()
    return Window(until - timedelta(days=30), until, trace_id, started, ended)


def answer_counts(
    ch: ClickHouse, conn: psycopg.Connection, w: Window
) -> list[tuple[str, int, int]]:
    """Return how many traces each list counts in both stores (the two must agree)."""
    found = []
    pg_reads = postgres_reads(w)
    for name, condition in trace_conditions(w).items():
        in_ch = int(ch.rows(list_summary(w, condition))[0][0])
        sql, params = pg_reads[name][1]
        in_pg = conn.execute(sql, params).fetchone()[0]
        found.append((name, in_ch, in_pg))
    return found


def print_sizes(ch: ClickHouse, conn: psycopg.Connection, spans: int) -> None:
    sizes = store_sizes(ch)
    print("\nClickHouse on disk (active parts, after OPTIMIZE ... FINAL):")
    for table, (rows, size, parts) in sizes.items():
        print(f"  {table:14} {rows:>10,} rows {size / 1e6:>9.1f} MB {parts:>4} parts")
    span_bytes = sizes["spans"][1] / spans
    with_views = sum(size for _, size, _ in sizes.values()) / spans
    print(f"  bytes per span: {span_bytes:.0f} (spans table), {with_views:.0f} (all tables)")
    largest = ", ".join(f"{name} {size:.1f}" for name, size in column_sizes(ch, spans)[:8])
    print(f"  largest columns, bytes per span: {largest}")
    pg = postgres_sizes(conn)
    span_total, trace_total = pg["traces_app_invocation"], pg["traces_app_trace"]
    print("PostgreSQL on disk (heap + TOAST + indexes):")
    print(
        f"  traces_app_invocation {span_total / 1e6:.0f} MB "
        f"({pg['traces_app_invocation indexes'] / 1e6:.0f} MB indexes), "
        f"traces_app_trace {trace_total / 1e6:.0f} MB"
    )
    print(
        f"  bytes per span: {span_total / spans:.0f} (span table), "
        f"{(span_total + trace_total) / spans:.0f} (with traces)"
    )


def print_reads(ch: ClickHouse, conn: psycopg.Connection, w: Window, repeat: int) -> None:
    ch_reads, pg_reads = clickhouse_reads(ch, w), postgres_reads(w)
    window = f"{w.since:%Y-%m-%d} .. {w.until:%Y-%m-%d %H:%M}"
    load = ", ".join(f"{value:.1f}" for value in os.getloadavg())
    print(f"\nReads, ms over {repeat} runs (window {window}; load average {load}):")
    print(
        f"  {'read':28} {'CH median':>9} {'p95':>7} {'CPU':>7}"
        f" {'PG median':>10} {'p95':>7} {'CPU':>7}  rows"
    )
    conn.execute("SET max_parallel_workers_per_gather = 0")  # its CPU is then all in the backend
    pg_cpu = backend_cpu(conn)
    for name, run in ch_reads.items():
        in_ch = timed(run, repeat, time.process_time)  # chdb's threads are this process's
        in_pg = timed(run_postgres(conn, pg_reads[name]), repeat, pg_cpu)
        print(
            f"  {name:28} {in_ch.median:>9.1f} {in_ch.p95:>7.1f} {in_ch.cpu:>7.1f}"
            f" {in_pg.median:>10.1f} {in_pg.p95:>7.1f} {in_pg.cpu:>7.1f}"
            f"  {in_ch.rows}/{in_pg.rows}"
        )


def main() -> int:
    args = parse_args()
    try:
        import chdb
    except ImportError:
        print("chdb is not installed: .venv/bin/pip install -e '.[bench]'")
        return 2
    conn = psycopg.connect(
        args.postgres_url, autocommit=True, options="-c default_transaction_read_only=on"
    )
    share_niceness(conn)
    export_dir = Path(args.export or tempfile.mkdtemp(prefix="ares-ch-export-"))
    store = args.store or tempfile.mkdtemp(prefix="ares-chdb-")
    try:
        spans_csv, traces_csv = export(conn, export_dir)
        retention = retention_covering(conn)
        ch = ClickHouse(store)
        print(f"ClickHouse {ch.query('SELECT version()').strip()} (chdb {chdb.__version__})")
        ch.query("DROP DATABASE IF EXISTS ares")
        ch.query("DROP DATABASE IF EXISTS probe")
        ch.query("CREATE DATABASE ares")
        ch.query("USE ares")
        for ddl in schema(retention):
            ch.query(ddl)
        spans, seconds = load(ch, spans_csv, traces_csv)
        print(f"bulk load: {spans:,} spans in {seconds:.1f} s = {spans / seconds:,.0f} spans/s")
        started = time.perf_counter()
        for table in ("spans", "traces", "trace_totals", "tool_hourly"):
            ch.query(f"OPTIMIZE TABLE {table} FINAL")
        print(f"OPTIMIZE ... FINAL of the four tables: {time.perf_counter() - started:.1f} s")
        print_sizes(ch, conn, spans)
        window = window_of(conn)
        print("\nTraces counted by each list (ClickHouse / PostgreSQL):")
        for name, in_ch, in_pg in answer_counts(ch, conn, window):
            print(f"  {name:28} {in_ch:>8,} / {in_pg:,}")
        print_reads(ch, conn, window, args.repeat)
        sent, seconds, parts = send_batches(ch, args.batch_spans, retention)
        print(
            f"\ningest-shaped: {sent:,} spans in batches of {BATCH_SPANS:,} (JSONEachRow, "
            f"both views firing): {sent / seconds:,.0f} spans/s, {parts} active parts after"
        )
        again = ", ".join(f"{name} {value:,.0f}" for name, value in send_again(ch).items())
        print(f"one batch sent again: {again}")
        ch.query("USE ares")
        day, size, ms = drop_oldest_day(ch)
        print(f"retention: day {day} dropped ({size / 1e6:.1f} MB of spans) in {ms:.0f} ms")
    finally:
        conn.close()
        if not args.store:
            shutil.rmtree(store, ignore_errors=True)
        if not args.export:
            shutil.rmtree(export_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
