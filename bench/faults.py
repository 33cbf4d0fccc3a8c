"""Fault suite: ingest under kill -9, whole-server restarts and a database outage, then audit.

Starts gunicorn (2 workers) on a throwaway database, sends N demo spans in batches from
retrying clients (a lost answer or a 5xx/429/503 is retried with the same batch, as a
real exporter does), and meanwhile kills the workers with SIGKILL mid-request every few seconds,
restarts the whole server once, and on PostgreSQL makes the database unreachable for
--outage seconds (a real `pg_ctl stop -m immediate` with --pg-data, else by refusing
connections to the bench database and ending its sessions). Then it loads the tools
page once, as an operator would, and compares:

- raw spans with what was sent (stored exactly once: no loss, no duplicate row),
- every trace's totals with its spans,
- the hourly tool and span rollups with the raw spans (`check_rollups --dry-run`),
- per-tool statistics of the REST API with the rollups the pages read,

and prints the figures. It exits 1 if any of them disagree. Finally it measures how long
after an ingest answer a new span shows on the tools page (with --broker, through a real
Celery worker and beat; without, pages recount before rendering).

    .venv/bin/python bench/faults.py [--database sqlite|postgres|both] [--spans N]
        [--short] [--postgres-url URL] [--pg-data DIR] [--broker redis://...]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import secrets
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import psycopg
from figures import postgres_database
from ingest import (
    BIN,
    DEFAULT_POSTGRES_URL,
    ROOT,
    free_port,
    gunicorn_command,
    manage,
    server_env,
    wait_until_ready,
)
from ingest_load import BenchError
from server_sampling import process_tree, read_processes

from traces_app.demo_spans import demo_spans

BATCH_SIZE = 200
RETRYABLE = {429, 500, 502, 503, 504}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--spans", type=int, default=50_000)
    parser.add_argument("--short", action="store_true", help="CI's form: 6,000 spans, 4 kills")
    parser.add_argument("--kills", type=int, default=13, help="workers killed with SIGKILL")
    parser.add_argument("--kill-every", type=float, default=2.0, help="seconds between faults")
    parser.add_argument("--outage", type=float, default=10.0, help="database outage, seconds")
    parser.add_argument(
        "--postgres-url", default=os.environ.get("BENCH_POSTGRES_URL", DEFAULT_POSTGRES_URL)
    )
    parser.add_argument("--pg-data", help="the PostgreSQL data directory, for a real stop/start")
    parser.add_argument("--broker", default=os.environ.get("BENCH_BROKER_URL"))
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    if args.short:
        args.spans, args.kills, args.kill_every, args.outage = 6000, 4, 1.5, 5.0
    return args


@dataclass
class Sent:
    """What the retrying clients saw."""

    accepted: int = 0
    duplicates: int = 0
    retries: int = 0
    errors: list[str] = field(default_factory=list)


@dataclass
class Faults:
    kills: int = 0
    restarts: int = 0
    outages: int = 0


class Server:
    """gunicorn with 2 workers, which this bench kills and restarts."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env, self.port = env, free_port()
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        command = gunicorn_command(self.port)
        self.process = subprocess.Popen(command, env=self.env, cwd=ROOT, start_new_session=True)
        wait_until_ready(self.process, self.port)

    def workers(self) -> list[int]:
        assert self.process is not None
        return process_tree(read_processes(), self.process.pid)[1:]

    def kill_workers(self) -> bool:
        """SIGKILL every worker (one of them is mid-request); the master starts new ones."""
        workers = self.workers()
        for pid in workers:
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return bool(workers)

    def kill(self) -> None:
        """SIGKILL the master and its workers at once: a machine losing the server."""
        if self.process is not None:
            with suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            with suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=15)
        self.kill()


def send_all(
    port_of: Callable[[], int], key: str, spans: list[dict], clients: int, duration: float
) -> Sent:
    """Send every batch from `clients` threads, spread over `duration` seconds at least.

    Each batch is retried until it is answered, as an exporter with retries does.
    """
    batches = [spans[i : i + BATCH_SIZE] for i in range(0, len(spans), BATCH_SIZE)]
    lock, sent, started = threading.Lock(), Sent(), time.monotonic()
    headers = {"Authorization": f"Bearer {key}"}

    def client(mine: list[tuple[int, list[dict]]]) -> None:
        for number, batch in mine:
            time.sleep(max(0.0, started + duration * number / len(batches) - time.monotonic()))
            body = {"invocations": batch}
            for attempt in range(400):
                try:
                    url = f"http://127.0.0.1:{port_of()}/api/v1/invocations"
                    with IN_FLIGHT:
                        response = httpx.post(url, json=body, headers=headers, timeout=30)
                except httpx.HTTPError:
                    response = None
                if response is not None and response.status_code == 200:
                    outcome = response.json()
                    with lock:
                        sent.accepted += outcome["accepted"]
                        sent.duplicates += outcome["duplicates"]
                        if outcome["rejected"]:
                            sent.errors.append(f"rejected: {response.text[:300]}")
                    break
                if response is not None and response.status_code not in RETRYABLE:
                    with lock:
                        sent.errors.append(f"HTTP {response.status_code}: {response.text[:300]}")
                    break
                with lock:
                    sent.retries += 1
                time.sleep(min(0.05 * 2 ** min(attempt, 5), 1.0))
            else:
                with lock:
                    sent.errors.append("a batch was never answered")

    numbered = list(enumerate(batches))
    threads = [
        threading.Thread(target=client, args=(numbered[i::clients],)) for i in range(clients)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sent


class InFlight:
    """How many requests are on their way now, so that a fault can land in the middle of one."""

    def __init__(self) -> None:
        self.count, self.lock = 0, threading.Condition()

    def __enter__(self) -> None:
        with self.lock:
            self.count += 1
            self.lock.notify_all()

    def __exit__(self, *exc: object) -> None:
        with self.lock:
            self.count -= 1

    def land_inside_one(self, rng: random.Random, tries: int = 100) -> None:
        """Return at a random moment while a request is on its way (or after `tries`)."""
        for _ in range(tries):
            with self.lock:
                self.lock.wait_for(lambda: self.count > 0, timeout=2.0)
            time.sleep(rng.uniform(0.0, 0.02))  # parsing, writing or answering
            if self.count > 0:
                return


IN_FLIGHT = InFlight()


def fault_plan(args: argparse.Namespace, with_outage: bool) -> list[str]:
    """Return the faults in order: kills, with a whole-server restart and an outage among them."""
    plan = ["kill"] * args.kills
    plan.insert(len(plan) // 3, "restart")
    if with_outage:
        plan.insert(2 * len(plan) // 3, "outage")
    return plan


@contextmanager
def chaos(
    server: Server, args: argparse.Namespace, plan: list[str], database_url: str | None
) -> Iterator[Faults]:
    """Inflict the planned faults, one every args.kill_every seconds, until the block ends."""
    faults, done, rng = Faults(), threading.Event(), random.Random(args.seed)

    def run() -> None:
        for fault in plan:
            if done.wait(args.kill_every):
                return
            IN_FLIGHT.land_inside_one(rng)
            if fault == "restart":
                server.kill()
                server.start()
                faults.restarts += 1
            elif fault == "outage" and database_url:
                database_outage(database_url, args)
                faults.outages += 1
            elif server.kill_workers():
                faults.kills += 1

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield faults
    finally:
        done.set()
        thread.join()


def database_outage(database_url: str, args: argparse.Namespace) -> None:
    """Make PostgreSQL unreachable for args.outage seconds."""
    if args.pg_data:
        pg_ctl = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"))[-1]
        # Start it again as it was started: postmaster.opts holds that command line.
        started_as = shlex.split(Path(args.pg_data, "postmaster.opts").read_text())
        options, log = shlex.join(started_as[1:]), str(Path(args.pg_data, "faults-restart.log"))
        runner = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        subprocess.run(
            [*runner, str(pg_ctl), "-D", args.pg_data, "-m", "immediate", "stop"],
            check=True,
            capture_output=True,
        )
        time.sleep(args.outage)
        subprocess.run(
            [*runner, str(pg_ctl), "-D", args.pg_data, "-w", "-o", options, "-l", log, "start"],
            check=True,
            capture_output=True,
        )
        return
    name = urlsplit(database_url).path.lstrip("/")
    admin_url = database_url.replace(f"/{name}", "/postgres").replace(
        "postgres://", "postgresql://"
    )
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", [name]
        )
        time.sleep(args.outage)
        admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')


AUDIT = """
import json
from datetime import timedelta
from django.db.models import Count, F, Sum
from django.utils import timezone
from traces_app.models import Invocation, RollupMark, SpanRollup, ToolRollup, Trace
tools = Invocation.objects.tools().values_list("tool_name")
tools_raw = dict(tools.annotate(n=Count("pk")).order_by())
rolled = dict(ToolRollup.objects.values_list("tool_name").annotate(n=Sum("calls")).order_by())
now = timezone.now()
window = (now - timedelta(days=3), now + timedelta(hours=2))
stats = {row["tool_name"]: row["calls"] for row in Invocation.objects.tool_stats(*window)}
counted = Trace.objects.annotate(actual=Count("invocations"))
print(json.dumps({
    "raw_spans": Invocation.objects.count(),
    "distinct_spans": Invocation.objects.values("trace_id", "span_id").distinct().count(),
    "trace_span_total": Trace.objects.aggregate(n=Sum("span_count"))["n"] or 0,
    "traces_off": counted.exclude(span_count=F("actual")).count(),
    "tool_spans_raw": sum(tools_raw.values()),
    "tool_rollup_calls": sum(rolled.values()),
    "span_rollup_calls": SpanRollup.objects.aggregate(n=Sum("calls"))["n"] or 0,
    "tools_off": sorted(name for name in tools_raw.keys() | rolled.keys() | stats.keys()
                        if not tools_raw.get(name, 0) == rolled.get(name, 0) == stats.get(name, 0)),
    "marks_pending": RollupMark.objects.count(),
}))
"""


def audit(env: dict[str, str]) -> dict:
    return json.loads(manage(env, "shell", "-c", AUDIT).strip().splitlines()[-1])


def staff_client(env: dict[str, str], port: int) -> httpx.Client:
    """Log in through the admin login page with a fresh superuser, as an operator would."""
    login = manage(env, "ensure_admin", "--username", "faults")
    password = login.strip().rsplit(" / ", 1)[1]
    client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60)
    form = client.get("/admin/login/").text
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form).group(1)
    client.post(
        "/admin/login/",
        data={"username": "faults", "password": password, "csrfmiddlewaretoken": token},
    )
    return client


def freshness(server: Server, key: str, staff: httpx.Client, probes: int = 5) -> list[float]:
    """Return, per probe, seconds from an ingest answer to the tools page listing the span."""
    seconds = []
    for probe in range(probes):
        tool = f"fresh_probe_{probe}_{secrets.token_hex(3)}"
        span = demo_span_now(tool)
        response = httpx.post(
            f"http://127.0.0.1:{server.port}/api/v1/invocations",
            json={"invocations": [span]},
            headers={"Authorization": f"Bearer {key}"},
            timeout=30,
        )
        answered = time.perf_counter()
        if response.status_code != 200 or response.json()["accepted"] != 1:
            raise BenchError(f"probe not accepted: {response.text[:300]}")
        while tool not in staff.get("/tools/?range=1h").text:
            if time.perf_counter() - answered > 60:
                raise BenchError(f"{tool} was not on the tools page after 60 s")
            time.sleep(0.05)
        seconds.append(time.perf_counter() - answered)
    return seconds


def demo_span_now(tool: str) -> dict:
    return {
        "trace_id": secrets.token_hex(16),
        "span_id": secrets.token_hex(8),
        "kind": "tool",
        "tool_name": tool,
        "status": "ok",
        "latency_ms": 5.0,
        "started_at": datetime.now(UTC).isoformat(),
    }


@contextmanager
def celery_worker(env: dict[str, str]) -> Iterator[None]:
    """Run a Celery worker with its beat for the bench database (beat state in ARES_VAR_DIR)."""
    worker = subprocess.Popen(
        [
            str(BIN / "celery"),
            "-A",
            "ares_site",
            "worker",
            "-B",
            "--schedule",
            f"{env['ARES_VAR_DIR']}/celerybeat-schedule",
            "--pool=solo",
            "--loglevel=WARNING",
        ],
        env=env,
        cwd=ROOT,
        start_new_session=True,
    )
    try:
        time.sleep(5)  # connect to the broker, start the beat
        yield
    finally:
        with suppress(ProcessLookupError):
            os.killpg(worker.pid, signal.SIGTERM)
        with suppress(subprocess.TimeoutExpired):
            worker.wait(timeout=15)
        with suppress(ProcessLookupError):
            os.killpg(worker.pid, signal.SIGKILL)


def run(database: str, database_url: str, args: argparse.Namespace, var_dir: str) -> bool:
    env = {**server_env(database_url, workers=2), "ARES_VAR_DIR": var_dir}
    # The faults are on purpose: their error logs (a killed worker, the database gone)
    # would bury the figures.
    env.update(LOG_LEVEL="CRITICAL", GUNICORN_LOG_LEVEL="critical")
    manage(env, "migrate", "--noinput")
    key = manage(env, "create_api_key", "--name", "faults", "--scopes", "report,read").strip()
    spans = demo_spans(args.spans, seed=args.seed, now=datetime.now(UTC), days=1.0)
    server = Server(env)
    server.start()
    started = time.monotonic()
    try:
        outage_url = database_url if database == "postgresql" else None
        plan = fault_plan(args, with_outage=outage_url is not None)
        # Long enough for every planned fault to land while spans are still coming.
        duration = len(plan) * (args.kill_every + 0.5) + args.outage + 5
        with chaos(server, args, plan, outage_url) as faults:
            sent = send_all(lambda: server.port, key, spans, args.clients, duration)
        seconds = time.monotonic() - started
        before_page = audit(env)
        staff = staff_client(env, server.port)
        assert staff.get("/tools/").status_code == 200  # what an operator opens next
        after = audit(env)
        checked = (
            manage(
                env,
                "check_rollups",
                "--dry-run",
                "--since",
                (datetime.now(UTC) - timedelta(days=2)).isoformat(),
            )
            .strip()
            .splitlines()[-1]
        )
        fresh_inline = freshness(server, key, staff)
    finally:
        server.stop()
    fresh_broker = None
    if args.broker:
        broker_env = {**env, "CELERY_BROKER_URL": args.broker}
        server = Server(broker_env)
        with celery_worker(broker_env):
            server.start()
            try:
                fresh_broker = freshness(server, key, staff_client(broker_env, server.port))
            finally:
                server.stop()
    print_figures(
        database,
        args,
        sent,
        faults,
        seconds,
        before_page,
        after,
        checked,
        fresh_inline,
        fresh_broker,
    )
    return agrees(args.spans, sent, after, checked)


def agrees(count: int, sent: Sent, after: dict, checked: str) -> bool:
    problems = list(sent.errors[:3])
    if sent.accepted + sent.duplicates != count:  # each batch answered once, at the end
        problems.append(f"{sent.accepted} + {sent.duplicates} duplicates answered of {count}")
    if not after["raw_spans"] == after["distinct_spans"] == after["trace_span_total"] == count:
        problems.append("raw spans, distinct spans and trace totals differ from the count sent")
    if after["traces_off"] or after["tools_off"]:
        problems.append(f"{after['traces_off']} traces and tools {after['tools_off']} disagree")
    if after["tool_spans_raw"] != after["tool_rollup_calls"]:
        problems.append("tool rollups differ from the raw tool spans")
    if after["span_rollup_calls"] != after["raw_spans"]:
        problems.append("span rollups differ from the raw spans")
    if "nothing to repair" not in checked:
        problems.append(f"check_rollups: {checked}")
    for problem in problems:
        print(f"  DISAGREES: {problem}")
    return not problems


def print_figures(
    database: str,
    args: argparse.Namespace,
    sent: Sent,
    faults: Faults,
    seconds: float,
    before: dict,
    after: dict,
    checked: str,
    fresh_inline: list[float],
    fresh_broker: list[float] | None,
) -> None:
    def ms(values: list[float] | None) -> str:
        if not values:
            return "not measured (no --broker)"
        median = sorted(values)[len(values) // 2]
        return f"median {median * 1000:.0f} ms, max {max(values) * 1000:.0f} ms"

    print(
        f"\n== {database}: {args.spans:,} spans sent in batches of {BATCH_SIZE} by "
        f"{args.clients} retrying clients, {seconds:.1f} s"
    )
    print(
        f"faults: workers killed (SIGKILL) {faults.kills} times, "
        f"{faults.restarts} server restarts, "
        f"{faults.outages} database outages of {args.outage:.0f} s; {sent.retries} retries"
    )
    print(
        f"answers: {sent.accepted:,} accepted, "
        f"{sent.duplicates:,} duplicates (resent after a lost answer)"
    )
    print(
        f"stored: {after['raw_spans']:,} raw spans, {after['distinct_spans']:,} distinct, "
        f"trace totals {after['trace_span_total']:,}, {after['traces_off']} traces off"
    )
    print(
        f"rollups before the first page load: {before['tool_rollup_calls']:,} tool calls "
        f"({before['marks_pending']} marks pending); after: {after['tool_rollup_calls']:,} "
        f"of {after['tool_spans_raw']:,} raw tool spans, span rollups "
        f"{after['span_rollup_calls']:,}; per-tool stats off: {after['tools_off'] or 'none'}"
    )
    print(f"check_rollups: {checked}")
    print(
        f"ingest answer -> tools page shows the span: inline {ms(fresh_inline)}; "
        f"with a broker {ms(fresh_broker)}"
    )


def main() -> int:
    args = parse_args()
    ok = True
    with tempfile.TemporaryDirectory(prefix="ares-faults-") as temp:
        if args.database in ("sqlite", "both"):
            ok &= run("sqlite", f"sqlite:///{temp}/faults.sqlite3", args, temp)
        if args.database in ("postgres", "both"):
            name = f"ares_faults_{secrets.token_hex(4)}"
            with postgres_database(args.postgres_url, name) as url:
                if url is not None:
                    ok &= run("postgresql", url, args, temp)
    print("\nall figures agree" if ok else "\nSOME FIGURES DISAGREE")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
