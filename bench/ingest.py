"""Benchmark span ingest through the production server: invocations per second and peak memory.

Starts gunicorn on a throwaway database (SQLite file in a temp dir, or a PostgreSQL database
created and dropped here), posts pre-encoded batches from concurrent clients, checks that
every span was accepted and stored exactly once, and prints a table of the figures.

    .venv/bin/python bench/ingest.py [--database sqlite|postgres|both] [--invocations N]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import queue
import secrets
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import httpx
import psycopg
from psycopg import sql

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from traces_app.demo import demo_spans  # noqa: E402  (needs ROOT on sys.path)

BIN = Path(sys.executable).parent
BATCH_SIZE = 1000
DEFAULT_POSTGRES_URL = "postgres://ares:ares@127.0.0.1:5432/ares_bench"


@dataclass
class Result:
    database: str
    invocations: int
    clients: int
    workers: int
    seconds: float
    peak_rss_mb: float

    @property
    def per_second(self) -> float:
        return self.invocations / self.seconds


class BenchError(Exception):
    """The run failed a check: not every span accepted or stored, or the server misbehaved."""


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--invocations", type=int, default=200_000)
    parser.add_argument("--clients", type=int, default=4, help="concurrent HTTP clients")
    parser.add_argument("--workers", type=int, default=None, help="gunicorn workers")
    parser.add_argument(
        "--postgres-url",
        default=os.environ.get("BENCH_POSTGRES_URL", DEFAULT_POSTGRES_URL),
        help="server and credentials; the database name is a prefix for a throwaway one",
    )
    parser.add_argument("--gzip", action="store_true", help="send gzip-compressed bodies")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--time-limit", type=float, default=900, help="seconds one database's run may take"
    )
    return parser.parse_args()


def encode_batches(count: int, seed: int, compress: bool) -> list[tuple[int, bytes]]:
    """Return (span count, body) per batch of `count` demo spans with unique ids."""
    spans = demo_spans(count, seed=seed)
    ids = {(span["trace_id"], span["span_id"]) for span in spans}
    if len(spans) != count or len(ids) != count:
        raise BenchError(f"demo data gave {len(ids)} unique spans, wanted {count}")
    batches = []
    for start in range(0, count, BATCH_SIZE):
        chunk = spans[start : start + BATCH_SIZE]
        body = json.dumps({"invocations": chunk}, separators=(",", ":")).encode()
        batches.append((len(chunk), gzip.compress(body, 1) if compress else body))
    return batches


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


def process_tree(root: int) -> list[int]:
    """Return root and its descendants, read from /proc."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        # The command name may hold spaces and parentheses: fields start after the last ")".
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        parents.setdefault(ppid, []).append(int(entry))
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo.extend(parents.get(pid, []))
    return tree


def rss_bytes(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
                    break
        except OSError:
            continue  # a worker that just exited
    return total


class MemorySampler(threading.Thread):
    """Record the peak summed RSS of a process tree, sampled every `interval` seconds."""

    def __init__(self, root: int, interval: float = 0.1) -> None:
        super().__init__(daemon=True)
        self.root, self.interval = root, interval
        self.peak = 0
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.is_set():
            self.peak = max(self.peak, rss_bytes(process_tree(self.root)))
            self.stopped.wait(self.interval)

    def stop(self) -> int:
        self.stopped.set()
        self.join()
        return self.peak


@contextmanager
def gunicorn(env: dict[str, str], port: int) -> Iterator[subprocess.Popen]:
    """Run the production server until the block ends; stop it whatever happens."""
    command = [
        str(BIN / "gunicorn"),
        "ares_site.wsgi",
        "--config",
        str(ROOT / "ares_site" / "gunicorn.conf.py"),
        "--bind",
        f"127.0.0.1:{port}",
    ]
    server = subprocess.Popen(command, env=env, cwd=ROOT, start_new_session=True)
    try:
        wait_until_ready(server, port)
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


def stop(server: subprocess.Popen) -> None:
    """Stop gunicorn gracefully, then kill its process group if it lingers."""
    if server.poll() is None:
        server.send_signal(signal.SIGTERM)
        with suppress(subprocess.TimeoutExpired):
            server.wait(timeout=15)
    with suppress(ProcessLookupError):
        os.killpg(server.pid, signal.SIGKILL)  # its own session: only what we started
    server.wait()


def post_all(
    port: int, key: str, batches: list[tuple[int, bytes]], clients: int, deadline: float
) -> float:
    """Post every batch from `clients` threads; return the elapsed seconds.

    Raises BenchError unless every response was 200 with all of its spans accepted.
    """
    todo: queue.SimpleQueue[tuple[int, bytes]] = queue.SimpleQueue()
    for batch in batches:
        todo.put(batch)
    errors: list[str] = []
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    if batches and batches[0][1][:2] == b"\x1f\x8b":
        headers["Content-Encoding"] = "gzip"

    def client() -> None:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers=headers) as http:
            while not errors and time.monotonic() < deadline:
                try:
                    size, body = todo.get_nowait()
                except queue.Empty:
                    return
                try:
                    response = http.post("/api/v1/invocations", content=body, timeout=120)
                except httpx.HTTPError as exc:
                    errors.append(f"request failed: {exc!r}")
                    return
                outcome = response.json() if response.status_code == 200 else {}
                if outcome.get("accepted") != size:
                    errors.append(f"HTTP {response.status_code}: {response.text[:300]}")
                    return

    threads = [threading.Thread(target=client) for _ in range(clients)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    if errors:
        raise BenchError(errors[0])
    if not todo.empty():
        raise BenchError("time limit reached before every batch was posted")
    return elapsed


def run_server_bench(
    name: str,
    database_url: str,
    count_rows: Callable[[], tuple[int, int]],
    args: argparse.Namespace,
    batches: list,
) -> Result:
    env = server_env(database_url, args.workers)
    manage(env, "migrate", "--noinput")
    key = manage(env, "create_api_key", "--name", "bench", "--scopes", "report").strip()
    port = free_port()
    deadline = time.monotonic() + args.time_limit
    with gunicorn(env, port) as server:
        sampler = MemorySampler(server.pid)
        sampler.start()
        try:
            seconds = post_all(port, key, batches, args.clients, deadline)
        finally:
            peak = sampler.stop()
        workers = len(process_tree(server.pid)) - 1
    stored, traced = count_rows()
    if stored != args.invocations or traced != args.invocations:
        raise BenchError(
            f"{name}: {stored} spans stored and {traced} counted in trace totals, "
            f"wanted {args.invocations}"
        )
    return Result(name, args.invocations, args.clients, workers, seconds, peak / 2**20)


COUNT_SQL = (
    "SELECT (SELECT count(*) FROM traces_app_invocation),"
    " (SELECT coalesce(sum(span_count), 0) FROM traces_app_trace)"
)


def bench_sqlite(args: argparse.Namespace, batches: list) -> Result:
    with tempfile.TemporaryDirectory(prefix="ares-bench-") as folder:
        path = Path(folder) / "bench.sqlite3"

        def count_rows() -> tuple[int, int]:
            with sqlite3.connect(path) as db:
                return db.execute(COUNT_SQL).fetchone()

        return run_server_bench("sqlite", f"sqlite:///{path}", count_rows, args, batches)


def bench_postgres(args: argparse.Namespace, batches: list) -> Result | None:
    parts = urlsplit(args.postgres_url)
    prefix = parts.path.lstrip("/") or "ares_bench"
    # A fresh name per run, so the bench can never touch a database someone else uses.
    name = f"{prefix}_{os.getpid()}_{secrets.token_hex(4)}"
    admin_url = urlunsplit(parts._replace(scheme="postgresql", path="/postgres"))
    bench_url = urlunsplit(parts._replace(path=f"/{name}"))
    try:
        admin = psycopg.connect(admin_url, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as exc:
        print(f"PostgreSQL at {parts.hostname}:{parts.port or 5432} is unreachable, skipped: {exc}")
        return None
    with admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        try:

            def count_rows() -> tuple[int, int]:
                dsn = urlunsplit(parts._replace(scheme="postgresql", path=f"/{name}"))
                with psycopg.connect(dsn) as db:
                    return db.execute(COUNT_SQL).fetchone()

            return run_server_bench("postgres", bench_url, count_rows, args, batches)
        finally:
            admin.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


def print_table(results: list[Result]) -> None:
    header = f"{'database':<10} {'N':>9} {'clients':>7} {'workers':>7} {'seconds':>8} "
    header += f"{'inv/s':>9} {'peak MB':>8}"
    print(header)
    print("-" * len(header))
    for r in results:
        print(
            f"{r.database:<10} {r.invocations:>9} {r.clients:>7} {r.workers:>7} "
            f"{r.seconds:>8.1f} {r.per_second:>9.0f} {r.peak_rss_mb:>8.0f}"
        )


def main() -> int:
    args = parse_args()
    started = time.perf_counter()
    batches = encode_batches(args.invocations, args.seed, args.gzip)
    print(
        f"{args.invocations} spans in {len(batches)} batches pre-encoded "
        f"in {time.perf_counter() - started:.1f} s"
    )
    results: list[Result] = []
    failed = False
    for database in ("sqlite", "postgres"):
        if args.database not in (database, "both"):
            continue
        try:
            result = (
                bench_sqlite(args, batches)
                if database == "sqlite"
                else bench_postgres(args, batches)
            )
        except BenchError as exc:
            print(f"{database}: FAILED: {exc}")
            failed = True
            continue
        if result:
            print(f"{database}: {result.per_second:.0f} inv/s, peak {result.peak_rss_mb:.0f} MB")
            results.append(result)
    print()
    print_table(results)
    return 1 if failed or not results else 0


if __name__ == "__main__":
    sys.exit(main())
