"""Benchmark read latency under ingest load: page and API p50/p95 idle, then under 8 ingest clients.

Starts the production server (gunicorn with ares_site/gunicorn.conf.py, as bench/ingest.py
does) on a throwaway database (SQLite in a temp dir, or a new PostgreSQL database), loads
`--seed-spans` demo spans, logs a staff user in, and runs `--readers` reader threads that
cycle through the overview, the traces list, a trace's detail page and GET /api/v1/traces.
Each round measures the reads for `--idle-seconds` with nothing else running, then while
`--clients` clients post `--ingest-spans` new spans in pre-encoded batches of 1,000
(bench/ingest_load.py; every span must be answered `accepted`). It prints each round's
p50/p95 of pages and API reads idle and under load, the ingest spans/s, and the median and
spread (min-max) over the rounds. Aim: page p95 under load at most twice the idle figure,
ingest at or above 10,000 spans/s.

    .venv/bin/python bench/reads_under_ingest.py [--database sqlite|postgres|both]
        [--rounds 3] [--server-env GUNICORN_THREADS=1 ...]

--server-env sets a variable of the server (repeatable): how the options compared in
docs/operations.md ("Reads under ingest load") were run.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import secrets
import signal
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from figures import percentile, postgres_database  # noqa: E402  (bench/ is the script's folder)
from ingest import free_port, gunicorn, manage, server_env  # noqa: E402
from ingest_load import BenchError, encode_batches, post_all  # noqa: E402

AIM_RATIO = 2.0
AIM_SPANS_PER_SECOND = 10_000


@dataclass
class Round:
    """One round's read latencies (ms) by kind, idle and under load, and the ingest rate."""

    idle: dict[str, list[float]] = field(default_factory=dict)
    loaded: dict[str, list[float]] = field(default_factory=dict)
    spans_per_second: float = 0.0

    def figure(self, phase: str, kind: str, fraction: float) -> float:
        """Return a percentile of one phase's reads of one kind (page or api); nan if none."""
        times = getattr(self, phase).get(kind)
        return percentile(times, fraction) if times else math.nan

    def ratio(self, kind: str) -> float:
        """Return p95 under load over p95 idle."""
        return self.figure("loaded", kind, 0.95) / self.figure("idle", kind, 0.95)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--seed-spans", type=int, default=10_000, help="spans loaded first")
    parser.add_argument("--ingest-spans", type=int, default=30_000, help="spans per round")
    parser.add_argument("--clients", type=int, default=8, help="concurrent ingest clients")
    parser.add_argument("--readers", type=int, default=2, help="concurrent reader threads")
    parser.add_argument("--think", type=float, default=0.1, help="seconds between reads")
    parser.add_argument("--idle-seconds", type=float, default=8.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--server-env", action="append", default=[], metavar="NAME=VALUE",
        help="an environment variable for the server (repeatable)",
    )  # fmt: skip
    parser.add_argument(
        "--postgres-url",
        default=os.environ.get("BENCH_POSTGRES_URL", "postgres://ares:ares@127.0.0.1:5432/ares"),
        help="server and credentials; the database name is a prefix for a throwaway one",
    )
    args = parser.parse_args()
    for pair in args.server_env:
        if not re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", pair):
            parser.error(f"--server-env wants NAME=VALUE, got {pair!r}")
    return args


def site_env(database_url: str, folder: str, args: argparse.Namespace) -> dict[str, str]:
    """Return the server's environment: bench/ingest.py's, a var/ folder, --server-env."""
    env = {**server_env(database_url, None), "ARES_VAR_DIR": folder}
    env.update(pair.split("=", 1) for pair in args.server_env)
    return env


def log_in(http: httpx.Client, username: str, password: str) -> None:
    """Log the client in as staff through the console's login form."""
    form = http.get("/login/")
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form.text)
    if token is None:
        raise BenchError(f"no CSRF token on the login page (HTTP {form.status_code})")
    done = http.post(
        "/login/",
        data={"username": username, "password": password, "csrfmiddlewaretoken": token[1]},
        headers={"Referer": str(http.base_url)},
    )
    if done.status_code != 302:
        raise BenchError(f"login failed: HTTP {done.status_code}")


def read_targets(api: httpx.Client) -> list[tuple[str, str]]:
    """Return (kind, path) of the reads: three pages and the API's traces list."""
    listed = api.get("/api/v1/traces", params={"limit": 50})
    if listed.status_code != 200 or not listed.json()["items"]:
        raise BenchError(f"GET /api/v1/traces: HTTP {listed.status_code}, or no traces")
    trace_id = listed.json()["items"][0]["trace_id"]
    return [
        ("page", "/"),
        ("page", "/traces/"),
        ("page", f"/traces/{trace_id}/"),
        ("api", "/api/v1/traces?limit=50"),
    ]


def get_once_more_on_reset(
    http: httpx.Client, path: str, times: dict[str, list[float]]
) -> httpx.Response:
    """GET the path; send it again once if the server closed the kept-alive connection.

    A browser does the same: gunicorn closes a kept-alive connection after `keepalive`
    seconds, and may do so as a request arrives on it. Each retry is counted in
    times["resets"] and reported; its time counts in the read's.
    """
    try:
        return http.get(path)
    except (httpx.ReadError, httpx.RemoteProtocolError):
        times.setdefault("resets", []).append(1.0)
        return http.get(path)


def path_label(path: str) -> str:
    """Return the read's name in the figures: its path, any trace's id as <id>."""
    return re.sub(r"/traces/[^/]+/", "/traces/<id>/", path)


def read_until(
    stop: threading.Event, port: int, login: tuple[str, str], key: str, think: float,
    times: dict[str, list[float]], errors: list[str], ready: threading.Barrier,
) -> None:  # fmt: skip
    """Log in, wait for the other readers, then read every target in turn until `stop`."""
    base = f"http://127.0.0.1:{port}"
    with (
        httpx.Client(base_url=base, timeout=120) as page,
        httpx.Client(base_url=base, timeout=120, headers={"Authorization": f"Bearer {key}"}) as api,
    ):
        log_in(page, *login)
        targets = read_targets(api)
        ready.wait()
        while not stop.is_set():
            for kind, path in targets:
                started = time.perf_counter()
                response = get_once_more_on_reset(api if kind == "api" else page, path, times)
                elapsed = (time.perf_counter() - started) * 1000
                if response.status_code != 200:
                    errors.append(f"GET {path}: HTTP {response.status_code}")
                    return
                times.setdefault(kind, []).append(elapsed)
                times.setdefault(path_label(path), []).append(elapsed)
                if stop.wait(think):
                    return


def measure_reads(
    port: int, login: tuple[str, str], key: str, args: argparse.Namespace,
    until: threading.Event, start: Callable[[], None],
) -> dict[str, list[float]]:  # fmt: skip
    """Log the readers in, call `start`, read until `until` is set; return the ms by kind."""
    times: dict[str, list[float]] = {}
    errors: list[str] = []
    ready = threading.Barrier(args.readers + 1, action=start)
    readers = [
        threading.Thread(
            target=read_until,
            args=(until, port, login, key, args.think, times, errors, ready),
            daemon=True,
        )
        for _ in range(args.readers)
    ]
    for reader in readers:
        reader.start()
    ready.wait()
    for reader in readers:
        reader.join()
    if errors:
        raise BenchError(errors[0])
    return times


def run_round(
    port: int, login: tuple[str, str], key: str, args: argparse.Namespace, seed: int
) -> Round:
    """Measure the reads idle, then under the ingest of a fresh set of spans."""
    batches = encode_batches(args.ingest_spans, seed, compress=False)
    result = Round()
    idle = threading.Event()
    timer = threading.Timer(args.idle_seconds, idle.set)
    timer.daemon = True
    result.idle = measure_reads(port, login, key, args, idle, timer.start)
    loaded = threading.Event()
    outcome: list[float | BenchError] = []

    def ingest() -> None:
        try:
            outcome.append(post_all(port, key, batches, args.clients, time.monotonic() + 900))
        except BenchError as exc:
            outcome.append(exc)
        finally:
            loaded.set()

    sender = threading.Thread(target=ingest, daemon=True)
    result.loaded = measure_reads(port, login, key, args, loaded, sender.start)
    sender.join()
    if isinstance(outcome[0], BenchError):
        raise outcome[0]
    result.spans_per_second = args.ingest_spans / outcome[0]
    return result


def bench_site(name: str, database_url: str, folder: str, args: argparse.Namespace) -> list[Round]:
    """Prepare the database, start the server, and run the rounds."""
    env = site_env(database_url, folder, args)
    manage(env, "migrate", "--noinput")
    manage(env, "ares_demo", "--invocations", str(args.seed_spans))
    admin = re.search(r"Admin login: (\S+) / (\S+)", manage(env, "ensure_admin"))
    if admin is None:
        raise BenchError("ensure_admin printed no login")
    key = manage(env, "create_api_key", "--name", "bench", "--scopes", "report,read").strip()
    rounds = []
    port = free_port()
    with gunicorn(env, port):
        for number in range(args.rounds):
            rounds.append(run_round(port, (admin[1], admin[2]), key, args, seed=100 + number))
            print_round(name, number + 1, rounds[-1])
    return rounds


def bench_sqlite(args: argparse.Namespace) -> list[Round]:
    with tempfile.TemporaryDirectory(prefix="ares-bench-reads-") as folder:
        return bench_site("sqlite", f"sqlite:///{folder}/bench.sqlite3", folder, args)


def bench_postgres(args: argparse.Namespace) -> list[Round]:
    prefix = args.postgres_url.rsplit("/", 1)[-1] or "ares_bench"
    # A fresh name per run, so the bench can never touch a database someone else uses.
    name = f"{prefix}_reads_{os.getpid()}_{secrets.token_hex(3)}"
    with (
        postgres_database(args.postgres_url, name) as url,
        tempfile.TemporaryDirectory(prefix="ares-bench-reads-") as folder,
    ):
        return [] if url is None else bench_site("postgres", url, folder, args)


def print_round(name: str, number: int, r: Round) -> None:
    cells = [
        f"{r.figure(phase, kind, q):6.0f}"
        for phase in ("idle", "loaded")
        for kind in ("page", "api")
        for q in (0.5, 0.95)
    ]
    print(
        f"{name:<8} round {number}: idle page/api p50 p95 {' '.join(cells[:4])} ms | "
        f"under ingest {' '.join(cells[4:])} ms | page p95 x{r.ratio('page'):.1f} "
        f"api p95 x{r.ratio('api'):.1f} | {r.spans_per_second:,.0f} spans/s "
        f"({len(r.loaded.get('page', []))} page reads under load, "
        f"{len(r.idle.get('resets', [])) + len(r.loaded.get('resets', []))} resets)"
    )


def spread(values: list[float], unit: str = "") -> str:
    """Return 'median (min-max)' of the values."""
    return f"{statistics.median(values):.0f}{unit} ({min(values):.0f}-{max(values):.0f})"


def print_summary(name: str, rounds: list[Round]) -> bool:
    """Print the medians over the rounds with their spread; return whether the aims hold."""
    print(f"\n{name}: median (min-max) over {len(rounds)} rounds")
    for phase, label in (("idle", "idle"), ("loaded", "under ingest")):
        for kind in ("page", "api"):
            p50 = [r.figure(phase, kind, 0.5) for r in rounds]
            p95 = [r.figure(phase, kind, 0.95) for r in rounds]
            print(f"  {kind:<4} {label:<12} p50 {spread(p50, ' ms'):<20} p95 {spread(p95, ' ms')}")
    for label in ("/", "/traces/", "/traces/<id>/", "/api/v1/traces?limit=50"):
        p95 = [(r.figure("idle", label, 0.95), r.figure("loaded", label, 0.95)) for r in rounds]
        idle, loaded = (statistics.median(phase) for phase in zip(*p95, strict=True))
        print(f"  {label:<24} p95 idle {idle:6.0f} ms, under ingest {loaded:6.0f} ms")
    ratios = [r.ratio("page") for r in rounds]
    rates = [r.spans_per_second for r in rounds]
    ratio = statistics.median(ratios)
    rate = statistics.median(rates)
    print(
        f"  page p95 under ingest / idle: x{ratio:.2f} ({min(ratios):.2f}-{max(ratios):.2f}), "
        f"aim <= x{AIM_RATIO:.0f}; api x{statistics.median(r.ratio('api') for r in rounds):.2f}"
    )
    print(f"  ingest: {spread(rates, ' spans/s')}, aim >= {AIM_SPANS_PER_SECOND:,}")
    return ratio <= AIM_RATIO and rate >= AIM_SPANS_PER_SECOND


def main() -> int:
    args = parse_args()
    # Ctrl-C and kill both unwind through the finally blocks that stop the server and
    # drop the database; a shell starts background jobs with SIGINT ignored.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, lambda number, frame: sys.exit(128 + number))
    if args.server_env:
        print("server environment:", " ".join(args.server_env))
    results: dict[str, list[Round]] = {}
    for name, bench in (("sqlite", bench_sqlite), ("postgres", bench_postgres)):
        if args.database in (name, "both"):
            try:
                results[name] = bench(args)
            except BenchError as exc:
                print(f"{name}: FAILED: {exc}")
                return 1
    held = [print_summary(name, rounds) for name, rounds in results.items() if rounds]
    return 0 if held and all(held) else 1


if __name__ == "__main__":
    sys.exit(main())
