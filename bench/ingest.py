"""Benchmark span ingest through the production server: invocations per second and peak memory.

Two ways in: the REST API (POST /api/v1/invocations, pre-encoded JSON batches of 1,000) and
OTLP/HTTP (POST /v1/traces, the same spans in OpenTelemetry GenAI conventions, sent by the
OpenTelemetry SDK's BatchSpanProcessor and OTLP/HTTP protobuf exporter, batches of 512).

Starts gunicorn on a throwaway database (SQLite file in a temp dir, or a PostgreSQL database
created and dropped here), posts pre-encoded batches from concurrent clients, checks that
every span was accepted and stored exactly once, and prints a table of the figures:
spans per second, the server's peak memory (RSS of gunicorn's master and workers) and
its CPU time per 1000 spans (and per span), which tells what the code costs even on a
busy machine.

    .venv/bin/python bench/ingest.py [--database sqlite|postgres|both] [--invocations N]
                                     [--mode rest|otlp|both|scores] [--agent-spans]
                                     [--long-results] [--profile]

With --long-results, every tool result holds a ~300-character snippet of prose (as a
search result's), longer than redaction's quick check of short text.

With --profile, each run is followed by bench/ingest_profile.py on a fresh database: the
same load stored in-process through Django's request path while a CPU-time timer samples
the stack, and the shares of CPU by part (redaction, JSON, validation, OTLP mapping,
ORM/SQL, spiral detection, rollup marks, agent attribution, other) are printed.

With --mode scores, the spans are stored first (untimed), then one score per tool span
(result_correct, from an evaluator, with a client id) is posted to POST /api/v1/scores in
batches of 1,000 and timed: the figures are scores per second; every score must be stored
joined to its span (none pending).

With --agent-spans, each OTLP trace gets an `invoke_agent` root span named after its agent,
exported after the spans below it, which carry no agent (their service is BENCH_SERVICE):
the batch exporter splits some traces so that the agent span comes in a later request, and
the run counts the tool spans that kept the service's name instead of the agent's (0 wanted).
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import httpx
import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from figures import postgres_database  # noqa: E402  (bench/ is the script's own folder)
from ingest_load import BENCH_SERVICE, BenchError, Workload, prepare  # noqa: E402
from server_sampling import ServerSampler, process_tree, read_processes  # noqa: E402

BIN = Path(sys.executable).parent
DEFAULT_POSTGRES_URL = "postgres://ares:ares@127.0.0.1:5432/ares_bench"


@dataclass
class Result:
    database: str
    invocations: int
    clients: int
    workers: int
    seconds: float
    peak_rss_mb: float
    server_cpu_seconds: float
    database_cpu_seconds: float
    client_cpu_seconds: float = 0.0
    tool_spans: int = 0
    unattributed: int | None = None  # --agent-spans: tool spans left with the service's name
    profile: dict | None = None  # --profile: bench/ingest_profile.py's figures

    @property
    def cpu_ms_per_1000(self) -> float:
        """Server CPU (gunicorn and local PostgreSQL backends) per 1000 spans."""
        return self.ms_per_1000(self.server_cpu_seconds + self.database_cpu_seconds)

    def ms_per_1000(self, seconds: float) -> float:
        return seconds * 1e6 / self.invocations

    @property
    def per_second(self) -> float:
        return self.invocations / self.seconds

    @property
    def tool_spans_per_second(self) -> float:
        return self.tool_spans / self.seconds


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument(
        "--mode",
        choices=["rest", "otlp", "both", "scores"],
        default="rest",
        help="the ingest path, or scores (POST /api/v1/scores of the stored spans)",
    )
    parser.add_argument("--invocations", type=int, default=200_000)
    parser.add_argument("--clients", type=int, default=4, help="concurrent HTTP clients")
    parser.add_argument("--workers", type=int, default=None, help="gunicorn workers")
    parser.add_argument(
        "--postgres-url",
        default=os.environ.get("BENCH_POSTGRES_URL", DEFAULT_POSTGRES_URL),
        help="server and credentials; the database name is a prefix for a throwaway one",
    )
    parser.add_argument("--gzip", action="store_true", help="send gzip-compressed bodies")
    parser.add_argument(
        "--agent-spans",
        action="store_true",
        help="OTLP: an agent root span per trace, after its spans, which name no agent",
    )
    parser.add_argument(
        "--long-results",
        action="store_true",
        help="tool results hold a ~300-character snippet: redaction's long-text path",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="after each run, profile the same load in-process (bench/ingest_profile.py) "
        "on a fresh database and print the shares of CPU by part",
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--time-limit", type=float, default=900, help="seconds one database's run may take"
    )
    return parser.parse_args()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def server_env(database_url: str, workers: int | None) -> dict[str, str]:
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "SECRET_KEY": secrets.token_urlsafe(32),
        "DEBUG": "0",
        "LOG_LEVEL": "WARNING",
        "GUNICORN_LOG_LEVEL": "warning",
        # The bench serves no static files; collectstatic's absence is not news.
        "PYTHONWARNINGS": "ignore:No directory at:UserWarning",
        "PYTHONPATH": str(ROOT),
    }
    env.pop("CELERY_BROKER_URL", None)
    if workers:
        env["GUNICORN_WORKERS"] = str(workers)
    return env


def manage(env: dict[str, str], *args: str) -> str:
    """Run a manage.py command for the bench database; return its stdout."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), *args],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if done.returncode != 0:
        raise BenchError(f"manage.py {' '.join(args)} failed:\n{done.stderr[-2000:]}")
    return done.stdout


def gunicorn_command(port: int) -> list[str]:
    """Return the command line of the production server on 127.0.0.1:port."""
    config = str(ROOT / "ares_site" / "gunicorn.conf.py")
    return [
        str(BIN / "gunicorn"),
        "ares_site.wsgi",
        "--config",
        config,
        "--bind",
        f"127.0.0.1:{port}",
    ]


@contextmanager
def gunicorn(env: dict[str, str], port: int) -> Iterator[subprocess.Popen]:
    """Run the production server until the block ends; stop it whatever happens."""
    server = subprocess.Popen(gunicorn_command(port), env=env, cwd=ROOT, start_new_session=True)
    try:
        wait_until_ready(server, port)
        wait_until_idle(server)
        yield server
    finally:
        stop(server)


def wait_until_ready(server: subprocess.Popen, port: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise BenchError(f"gunicorn exited with {server.returncode} while starting")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise BenchError(f"gunicorn did not answer /healthz within {timeout:.0f} s")


def wait_until_idle(server: subprocess.Popen, timeout: float = 60, quiet: float = 0.5) -> None:
    """Wait until gunicorn's processes have used next to no CPU for `quiet` seconds.

    The other workers are still booting (importing Django and the API) when the first
    one answers; timing them then would charge ingest with start-up work.
    """
    deadline = time.monotonic() + timeout
    last_ticks, still_since = -1, time.monotonic()
    while time.monotonic() < deadline:
        processes = read_processes()
        ticks = sum(processes[pid].cpu_ticks for pid in process_tree(processes, server.pid))
        now = time.monotonic()
        if last_ticks < 0 or ticks - last_ticks > 1:  # more than a tick: still busy
            still_since = now
        elif now - still_since >= quiet:
            return
        last_ticks = ticks
        time.sleep(0.1)
    raise BenchError(f"gunicorn's workers were still busy after {timeout:.0f} s")


def stop(server: subprocess.Popen) -> None:
    """Stop gunicorn gracefully, then kill its process group if it lingers."""
    if server.poll() is None:
        server.send_signal(signal.SIGTERM)
        with suppress(subprocess.TimeoutExpired):
            server.wait(timeout=15)
    with suppress(ProcessLookupError):
        os.killpg(server.pid, signal.SIGKILL)  # its own session: only what we started
    server.wait()


def run_server_bench(
    database: str,
    database_url: str,
    count_rows: Callable[[], tuple[int, int, int, int, int]],
    args: argparse.Namespace,
    workload: Workload,
    backends_of: str | None = None,
) -> Result:
    env = server_env(database_url, args.workers)
    manage(env, "migrate", "--noinput")
    key = manage(env, "create_api_key", "--name", "bench", "--scopes", "report,score").strip()
    port = free_port()
    deadline = time.monotonic() + args.time_limit
    with gunicorn(env, port) as server:
        sampler = ServerSampler(server.pid, backends_of)
        sampler.start()
        client_cpu = time.process_time()
        try:
            seconds = workload.send(port, key, args.clients, deadline)
        finally:
            sampler.stop()
        client_cpu = time.process_time() - client_cpu
        workers = len(process_tree(read_processes(), server.pid)) - 1
    stored, traced, unattributed, scores, pending = count_rows()
    name = f"{database}/{workload.mode}"
    if workload.scores is not None and (scores != workload.timed_items or pending):
        raise BenchError(
            f"{name}: {scores} scores stored ({pending} pending), wanted "
            f"{workload.timed_items} joined to their spans"
        )
    if stored != workload.spans or traced != workload.spans:
        raise BenchError(
            f"{name}: {stored} spans stored and {traced} counted in trace totals, "
            f"wanted {workload.spans}"
        )
    if workload.agent_spans and unattributed:
        raise BenchError(
            f"{name}: {unattributed} of {workload.tool_spans} tool spans kept the service's "
            "name instead of their agent span's"
        )
    return Result(
        name,
        workload.timed_items,
        args.clients,
        workers,
        seconds,
        sampler.peak_rss / 2**20,
        sampler.cpu_seconds("gunicorn"),
        sampler.cpu_seconds("postgres"),
        client_cpu,
        workload.tool_spans,
        unattributed if workload.agent_spans else None,
    )


COUNT_SQL = (
    "SELECT (SELECT count(*) FROM traces_app_invocation),"
    " (SELECT coalesce(sum(span_count), 0) FROM traces_app_trace),"
    " (SELECT count(*) FROM traces_app_invocation"
    f"  WHERE kind = 'tool' AND agent = '{BENCH_SERVICE}'),"
    " (SELECT count(*) FROM traces_app_score),"
    " (SELECT count(*) FROM traces_app_score WHERE pending)"
)


def bench_sqlite(args: argparse.Namespace, workload: Workload) -> Result:
    with tempfile.TemporaryDirectory(prefix="ares-bench-") as folder:
        path = Path(folder) / "bench.sqlite3"

        def count_rows() -> tuple[int, int, int, int, int]:
            with sqlite3.connect(path) as db:
                return db.execute(COUNT_SQL).fetchone()

        return run_server_bench("sqlite", f"sqlite:///{path}", count_rows, args, workload)


def bench_postgres(args: argparse.Namespace, workload: Workload) -> Result | None:
    parts = urlsplit(args.postgres_url)
    prefix = parts.path.lstrip("/") or "ares_bench"
    # A fresh name per run, so the bench can never touch a database someone else uses.
    name = f"{prefix}_{os.getpid()}_{secrets.token_hex(4)}"
    with postgres_database(args.postgres_url, name) as bench_url:
        if bench_url is None:
            return None

        def count_rows() -> tuple[int, int, int, int, int]:
            dsn = urlunsplit(parts._replace(scheme="postgresql", path=f"/{name}"))
            with psycopg.connect(dsn) as db:
                return db.execute(COUNT_SQL).fetchone()

        local = parts.hostname in ("127.0.0.1", "localhost", "::1")
        return run_server_bench(
            "postgres", bench_url, count_rows, args, workload, name if local else None
        )


def profile_run(database: str, mode: str, args: argparse.Namespace) -> dict | None:
    """Return bench/ingest_profile.py's figures for the same load, on a fresh database."""
    if database == "sqlite":
        with tempfile.TemporaryDirectory(prefix="ares-profile-") as folder:
            return run_profiler(f"sqlite:///{Path(folder) / 'profile.sqlite3'}", mode, args)
    prefix = urlsplit(args.postgres_url).path.lstrip("/") or "ares_bench"
    name = f"{prefix}_profile_{os.getpid()}_{secrets.token_hex(4)}"
    with postgres_database(args.postgres_url, name) as url:
        return run_profiler(url, mode, args) if url else None


def run_profiler(database_url: str, mode: str, args: argparse.Namespace) -> dict:
    command = [
        sys.executable,
        str(ROOT / "bench" / "ingest_profile.py"),
        *("--mode", mode, "--invocations", str(args.invocations), "--seed", str(args.seed)),
        *(["--long-results"] if args.long_results else []),
        *(["--agent-spans"] if args.agent_spans else []),
    ]
    done = subprocess.run(
        command,
        env=server_env(database_url, None),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=args.time_limit,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        raise BenchError(f"the profile failed:\n{done.stderr[-2000:]}")
    return json.loads(lines[-1])


def print_profiles(results: list[Result]) -> None:
    profiled = [r for r in results if r.profile]
    if not profiled:
        return
    parts = list(profiled[0].profile["shares"])
    header = f"{'share of CPU':<18}" + "".join(f"{r.database:>15}" for r in profiled)
    print()
    print(header)
    print("-" * len(header))
    for part in parts:
        row = "".join(f"{r.profile['shares'][part]:>14.1f}%" for r in profiled)
        print(f"{part:<18}{row}")
    cpu = "".join(f"{r.profile['cpu_ms_per_span']:>15.3f}" for r in profiled)
    print(f"{'CPU ms/span':<18}{cpu}")
    print(
        "Shares of the CPU of one process storing the same load through Django's request "
        "path, sampled every ms of CPU (bench/ingest_profile.py); PostgreSQL's own CPU is "
        "not in them. CPU ms/span there is that process's, sampling included."
    )


def print_table(results: list[Result]) -> None:
    header = f"{'database/mode':<14} {'N':>9} {'clients':>7} {'workers':>7} {'seconds':>8} "
    header += f"{'inv/s':>9} {'peak MB':>8} {'CPU ms/1k':>10} {'ms/span':>8}"
    print(header)
    print("-" * len(header))
    for r in results:
        print(
            f"{r.database:<14} {r.invocations:>9} {r.clients:>7} {r.workers:>7} "
            f"{r.seconds:>8.1f} {r.per_second:>9.0f} {r.peak_rss_mb:>8.0f} "
            f"{r.cpu_ms_per_1000:>10.0f} {r.cpu_ms_per_1000 / 1000:>8.3f}"
        )
    cores = len(os.sched_getaffinity(0))
    print(
        f"CPU ms/1k: server CPU per 1000 spans (gunicorn, and PostgreSQL's backends when "
        f"local). With nothing else running, {cores} cores allow at most "
        f"{cores} x 1e6 / (CPU ms/1k) inv/s."
    )


def main() -> int:
    args = parse_args()
    # Ctrl-C and kill both unwind through the finally blocks that stop the server and
    # drop the database; a shell starts background jobs with SIGINT ignored.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, lambda number, frame: sys.exit(128 + number))
    results: list[Result] = []
    failed = False
    for mode in ("rest", "otlp", "scores"):
        if args.mode not in (mode, "both") or (mode == "scores" and args.mode != "scores"):
            continue
        started = time.perf_counter()
        workload = prepare(mode, args)
        print(
            f"{mode}: {args.invocations} spans ({workload.tool_spans} tool calls) ready "
            f"in {time.perf_counter() - started:.1f} s"
        )
        for database in ("sqlite", "postgres"):
            if args.database not in (database, "both"):
                continue
            try:
                result = (
                    bench_sqlite(args, workload)
                    if database == "sqlite"
                    else bench_postgres(args, workload)
                )
            except BenchError as exc:
                print(f"{database}/{mode}: FAILED: {exc}")
                failed = True
                continue
            if result and args.profile and mode != "scores":
                try:
                    result.profile = profile_run(database, mode, args)
                except BenchError as exc:
                    print(f"{database}/{mode}: profile FAILED: {exc}")
                    failed = True
            if result:
                print_result(result)
                results.append(result)
    print()
    print_table(results)
    print_profiles(results)
    return 1 if failed or not results else 0


def print_result(result: Result) -> None:
    if result.database.endswith("/scores"):
        print(
            f"{result.database}: {result.per_second:.0f} scores/s, peak "
            f"{result.peak_rss_mb:.0f} MB, CPU per 1000 scores: gunicorn "
            f"{result.ms_per_1000(result.server_cpu_seconds):.0f} ms, PostgreSQL "
            f"{result.ms_per_1000(result.database_cpu_seconds):.0f} ms"
        )
        return
    print(
        f"{result.database}: {result.per_second:.0f} inv/s "
        f"({result.tool_spans_per_second:.0f} tool spans/s), peak {result.peak_rss_mb:.0f} MB, "
        f"CPU per 1000 spans: gunicorn {result.ms_per_1000(result.server_cpu_seconds):.0f} ms, "
        f"PostgreSQL {result.ms_per_1000(result.database_cpu_seconds):.0f} ms, "
        f"this client {result.ms_per_1000(result.client_cpu_seconds):.0f} ms"
    )
    if result.unattributed is not None:
        print(
            f"{result.database}: {result.unattributed} of {result.tool_spans} tool spans kept "
            f"the service's name ({BENCH_SERVICE}) instead of their agent span's"
        )


if __name__ == "__main__":
    sys.exit(main())
