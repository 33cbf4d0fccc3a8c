"""Benchmark span ingest through the production server: invocations per second and peak memory.

Two ways in: the REST API (POST /api/v1/invocations, pre-encoded JSON batches of 1,000) and
OTLP/HTTP (POST /v1/traces, the same spans in OpenTelemetry GenAI conventions, sent by the
OpenTelemetry SDK's BatchSpanProcessor and OTLP/HTTP protobuf exporter, batches of 512).

Starts gunicorn on a throwaway database (SQLite file in a temp dir, or a PostgreSQL database
created and dropped here), posts pre-encoded batches from concurrent clients, checks that
every span was accepted and stored exactly once, and prints a table of the figures:
spans per second, the server's peak memory (RSS of gunicorn's master and workers) and
its CPU time per 1000 spans, which tells what the code costs even on a busy machine.

    .venv/bin/python bench/ingest.py [--database sqlite|postgres|both] [--invocations N]
                                     [--mode rest|otlp|both|scores] [--agent-spans]

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
import gzip
import json
import os
import queue
import random
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
from datetime import datetime, timedelta
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import httpx
import psycopg
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExportResult
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, Status, StatusCode, TraceFlags

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from figures import postgres_database  # noqa: E402  (bench/ is the script's own folder)
from server_sampling import ServerSampler, process_tree, read_processes  # noqa: E402

from traces_app.demo_spans import demo_spans  # noqa: E402  (needs ROOT on sys.path)

BIN = Path(sys.executable).parent
BATCH_SIZE = 1000
OTLP_BATCH_SIZE = 512  # the BatchSpanProcessor's default max_export_batch_size
DEFAULT_POSTGRES_URL = "postgres://ares:ares@127.0.0.1:5432/ares_bench"
BENCH_SERVICE = "bench-agents"  # service.name of --agent-spans spans, which name no agent


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


class BenchError(Exception):
    """The run failed a check: not every span accepted or stored, or the server misbehaved."""


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


def demo_readable_spans(count: int, seed: int, agent_spans: bool = False) -> list[ReadableSpan]:
    """Return `count` demo spans as the SDK's finished spans, in OpenTelemetry GenAI conventions.

    The same spans as the REST mode sends (ids, times, tools, tokens), one resource per
    agent (service.name), as the agents' own SDKs would hold them when they end. With
    `agent_spans`, each trace's spans are children of an invoke_agent span that names the
    agent and ends (so comes) after them, and their resource names no agent.
    """
    scope = InstrumentationScope("ares-bench")
    resources: dict[str, Resource] = {}
    rng = random.Random(seed)
    traces: list[list[dict]] = []
    for demo in demo_spans(count, seed=seed):
        if not traces or traces[-1][0]["trace_id"] != demo["trace_id"]:
            traces.append([])
        traces[-1].append(demo)
    spans = []
    for trace in traces:
        service = BENCH_SERVICE if agent_spans else trace[0]["agent"]
        resource = resources.setdefault(service, Resource.create({"service.name": service}))
        agent = invoke_agent_span(trace, rng.getrandbits(63) + 1, resource) if agent_spans else None
        for demo in trace:
            name, attributes = genai_attributes(demo)
            start, end = span_times(demo)
            failed = demo["status"] == "error"
            spans.append(
                ReadableSpan(
                    name=name,
                    context=span_context(demo["trace_id"], int(demo["span_id"], 16)),
                    parent=agent.context if agent else None,
                    resource=resource,
                    attributes=attributes,
                    start_time=start,
                    end_time=end,
                    status=Status(StatusCode.ERROR, demo["error_message"])
                    if failed
                    else Status(StatusCode.OK),
                    instrumentation_scope=scope,
                )
            )
        if agent:
            spans.append(agent)
    return spans


def span_context(trace_id: str, span_id: int) -> SpanContext:
    return SpanContext(
        int(trace_id, 16), span_id, is_remote=False, trace_flags=TraceFlags(TraceFlags.SAMPLED)
    )


def span_times(demo: dict) -> tuple[int, int]:
    """Return a demo span's start and end, in nanoseconds since the epoch."""
    start = nanoseconds(datetime.fromisoformat(demo["started_at"]))
    return start, start + round(demo["latency_ms"] * 1e6)


def invoke_agent_span(trace: list[dict], span_id: int, resource: Resource) -> ReadableSpan:
    """Return an invoke_agent span over a demo trace's spans, naming its agent."""
    times = [span_times(demo) for demo in trace]
    return ReadableSpan(
        name=f"invoke_agent {trace[0]['agent']}",
        context=span_context(trace[0]["trace_id"], span_id),
        resource=resource,
        attributes={
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": trace[0]["agent"],
        },
        start_time=min(start for start, _ in times),
        end_time=max(end for _, end in times),
        status=Status(StatusCode.OK),
        instrumentation_scope=InstrumentationScope("ares-bench"),
    )


def nanoseconds(moment: datetime) -> int:
    return (moment - datetime(1970, 1, 1, tzinfo=moment.tzinfo)) // timedelta(microseconds=1) * 1000


def genai_attributes(demo: dict) -> tuple[str, dict]:
    """Return the span name and GenAI attributes of a demo span."""
    common = {"session.id": demo["session_id"]}
    if demo["kind"] == "llm":
        return f"chat {demo['model']}", {
            **common,
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": demo["model"],
            "gen_ai.usage.input_tokens": demo["input_tokens"],
            "gen_ai.usage.output_tokens": demo["output_tokens"],
        }
    attributes = {
        **common,
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": demo["tool_name"],
        "gen_ai.tool.call.id": demo["tool_call_id"],
        "gen_ai.tool.call.arguments": json.dumps(demo["arguments"]),
    }
    if "result" in demo:
        attributes["gen_ai.tool.call.result"] = json.dumps(demo["result"])
    if demo.get("error_kind"):
        attributes["error.type"] = demo["error_kind"]
    return f"execute_tool {demo['tool_name']}", attributes


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


def post_all(
    port: int,
    key: str,
    batches: list[tuple[int, bytes]],
    clients: int,
    deadline: float,
    path: str = "/api/v1/invocations",
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
                    response = http.post(path, content=body, timeout=120)
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


class CheckedExporter(OTLPSpanExporter):
    """The SDK's OTLP/HTTP exporter, remembering any export that failed."""

    def __init__(self, failures: list[str], **kwargs: object) -> None:
        super().__init__(**kwargs)
        self.failures = failures

    def export(self, spans: object) -> SpanExportResult:
        result = super().export(spans)
        if result != SpanExportResult.SUCCESS:
            self.failures.append(f"an export of {len(spans)} spans failed")
        return result


def export_all(
    port: int, key: str, spans: list[ReadableSpan], clients: int, deadline: float
) -> float:
    """Export every span through `clients` BatchSpanProcessors; return the elapsed seconds.

    Each client is an agent process's SDK: its processor takes ended spans and its
    worker thread exports them in batches of 512, one request at a time, as in production.
    The timed part is the SDK's encoding and the requests, not making the spans.
    """
    failures: list[str] = []
    share = -(-len(spans) // clients)
    slices = [spans[start : start + share] for start in range(0, len(spans), share)]
    processors = [
        BatchSpanProcessor(
            CheckedExporter(
                failures,
                endpoint=f"http://127.0.0.1:{port}/v1/traces",
                headers={"Authorization": f"Bearer {key}"},
                timeout=120,
            ),
            max_queue_size=len(part),
            max_export_batch_size=OTLP_BATCH_SIZE,
        )
        for part in slices
    ]

    def client(processor: BatchSpanProcessor, part: list[ReadableSpan]) -> None:
        for span in part:
            processor.on_end(span)
        remaining_ms = max(0.0, deadline - time.monotonic()) * 1000
        if not processor.force_flush(timeout_millis=int(remaining_ms)):
            failures.append("a processor did not flush in time")

    threads = [
        threading.Thread(target=client, args=pair) for pair in zip(processors, slices, strict=True)
    ]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    for processor in processors:
        processor.shutdown()
    if failures:
        raise BenchError(failures[0])
    return elapsed


@dataclass
class Workload:
    """What one run sends: pre-encoded REST batches, or the SDK's spans for OTLP export."""

    mode: str
    items: list
    tool_spans: int
    spans: int  # what the server must store: the demo spans, and any agent spans
    agent_spans: bool = False
    scores: list[tuple[int, bytes]] | None = None  # scores mode: the timed batches

    def send(self, port: int, key: str, clients: int, deadline: float) -> float:
        """Send everything to the server on `port`; return the elapsed seconds (timed part)."""
        if self.mode == "otlp":
            return export_all(port, key, self.items, clients, deadline)
        if self.scores is not None:
            post_all(port, key, self.items, clients, deadline)
            return post_all(port, key, self.scores, clients, deadline, "/api/v1/scores")
        return post_all(port, key, self.items, clients, deadline)

    @property
    def timed_items(self) -> int:
        """What the figures count: spans, or scores in scores mode."""
        return sum(size for size, _ in self.scores) if self.scores is not None else self.spans


def prepare(mode: str, args: argparse.Namespace) -> Workload:
    """Return the workload of a mode: the same demo spans, encoded for REST or made for OTLP."""
    tools = sum(span["kind"] == "tool" for span in demo_spans(args.invocations, seed=args.seed))
    if mode == "otlp":
        spans = demo_readable_spans(args.invocations, args.seed, args.agent_spans)
        return Workload(mode, spans, tools, len(spans), args.agent_spans)
    batches = encode_batches(args.invocations, args.seed, args.gzip)
    if mode == "scores":
        scores = encode_score_batches(args.invocations, args.seed)
        return Workload(mode, batches, tools, args.invocations, scores=scores)
    return Workload(mode, batches, tools, args.invocations)


def encode_score_batches(count: int, seed: int) -> list[tuple[int, bytes]]:
    """Return (score count, body) per batch: one result_correct score per demo tool span."""
    scores = [
        {"name": "result_correct", "value": index % 5 != 0, "source": "evaluator",
         "trace_id": span["trace_id"], "span_id": span["span_id"],
         "client_id": f"bench-{index}", "comment": "checked against the expected answer"}
        for index, span in enumerate(s for s in demo_spans(count, seed=seed) if s["kind"] == "tool")
    ]  # fmt: skip
    return [
        (len(chunk), json.dumps({"scores": chunk}, separators=(",", ":")).encode())
        for chunk in (
            scores[start : start + BATCH_SIZE] for start in range(0, len(scores), BATCH_SIZE)
        )
    ]


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


def print_table(results: list[Result]) -> None:
    header = f"{'database/mode':<14} {'N':>9} {'clients':>7} {'workers':>7} {'seconds':>8} "
    header += f"{'inv/s':>9} {'peak MB':>8} {'CPU ms/1k':>10}"
    print(header)
    print("-" * len(header))
    for r in results:
        print(
            f"{r.database:<14} {r.invocations:>9} {r.clients:>7} {r.workers:>7} "
            f"{r.seconds:>8.1f} {r.per_second:>9.0f} {r.peak_rss_mb:>8.0f} "
            f"{r.cpu_ms_per_1000:>10.0f}"
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
            if result:
                print_result(result)
                results.append(result)
    print()
    print_table(results)
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
