"""Benchmark the time from a failing span to its notification, on both setups.

Each setup runs as a user would: the default one is `make run`'s (runserver and the beat,
no broker: the beat runs the periodic jobs itself) on SQLite; the Celery one is gunicorn,
the beat and a worker with Redis as the broker, on PostgreSQL. A webhook receiver listens
on loopback. Each trial sends one failing span through POST /api/v1/invocations and waits
for the webhook that says the monitor fired; then it sends a succeeding span after the
window and waits for the one that says it resolved. The monitors are evaluated at the
shipped interval (ARES_MONITORS_EVERY_S, 60 s), so a figure is the wait for the next
evaluation plus the evaluation and the send: expect it to lie between 0 and 60 s and
a little more. Each span is sent at a random moment of the evaluation period (seeded),
so the figures sample the whole wait rather than one phase of it.

    .venv/bin/python bench/alerts.py [--setup default|celery|both] [--trials 3]
        [--postgres-url postgres://...] [--broker redis://127.0.0.1:6379/9]
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import random
import secrets
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
PYTHON = sys.executable
WINDOW_MINUTES = 1
EVERY_S = 60.0  # ARES_MONITORS_EVERY_S as shipped


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--setup", choices=["default", "celery", "both"], default="both")
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument(
        "--postgres-url",
        default=os.environ.get("BENCH_POSTGRES_URL", "postgres://ares:ares@127.0.0.1:5432/ares"),
    )
    parser.add_argument("--broker", default="redis://127.0.0.1:6379/9")
    parser.add_argument("--child", choices=["default", "celery"], help=argparse.SUPPRESS)
    parser.add_argument("--database-url", help=argparse.SUPPRESS)
    return parser.parse_args()


class Receiver(ThreadingHTTPServer):
    """A webhook receiver on loopback: each POST's arrival time and JSON body, in a queue."""

    def __init__(self) -> None:
        self.received: queue.Queue[tuple[float, dict]] = queue.Queue()
        super().__init__(("127.0.0.1", 0), _Handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/hook"


class _Handler(BaseHTTPRequestHandler):
    server: Receiver

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.server.received.put((time.monotonic(), json.loads(body or b"{}")))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        return


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def process(command: list[str], log: Path, env: dict[str, str]) -> Iterator[subprocess.Popen]:
    """Run a command of the site until the block ends, then stop it as a supervisor would."""
    with log.open("w") as out:
        proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            yield proc
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()


def site_processes(setup: str, port: int, folder: Path, env: dict[str, str]) -> ExitStack:
    """Start the processes of a setup; return the stack that stops them."""
    stack = ExitStack()
    manage = [PYTHON, "manage.py"]
    celery = [PYTHON, "-m", "celery", "-A", "ares_site"]
    if setup == "default":
        server = [*manage, "runserver", "--noreload", f"127.0.0.1:{port}"]
    else:
        server = [PYTHON, "-m", "gunicorn", "ares_site.wsgi", "--config",
                  "ares_site/gunicorn.conf.py", "--bind", f"127.0.0.1:{port}"]  # fmt: skip
        worker = [*celery, "worker", "--loglevel=WARNING", "--concurrency=2"]
        stack.enter_context(process(worker, folder / "worker.log", env))
    stack.enter_context(process(server, folder / "server.log", env))
    stack.enter_context(process([*celery, "beat", "--loglevel=WARNING"], folder / "beat.log", env))
    return stack


def wait_for_site(client: httpx.Client, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if client.get(client.base_url.join("/healthz")).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise SystemExit("the site did not start within a minute")


def span(status: str) -> dict:
    """A tool span of the monitored tool that starts now, succeeded or failed."""
    failed = status != "ok"
    return {
        "trace_id": secrets.token_hex(16), "span_id": secrets.token_hex(8), "kind": "tool",
        "tool_name": "bench_tool", "chosen_by": "external", "agent": "bench-agent",
        "arguments": {"n": 1}, "result": None if failed else {"ok": True},
        "status": "error" if failed else "ok", "error_kind": "tool_error" if failed else "",
        "error_message": "bench failure" if failed else "",
        "started_at": datetime.now(UTC).isoformat(), "latency_ms": 5.0,
    }  # fmt: skip


def wait_for_kind(receiver: Receiver, kind: str, seconds: float) -> float | None:
    """Return when a notification of this kind arrived (monotonic), or None after `seconds`."""
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        try:
            at, body = receiver.received.get(timeout=left)
        except queue.Empty:
            return None
        if kind in json.dumps(body):
            return at
    return None


def run_setup(setup: str, database_url: str, trials: int) -> list[tuple[float, float]]:
    """In this process: set the site up, run the trials; return (fired s, resolved s) each."""
    from figures import migrated_site

    folder = Path(migrated_site(f"alerts-{setup}", database_url))
    os.environ["ARES_NOTIFY_ALLOW_PRIVATE"] = "1"
    from planner_app.models import Monitor, NotificationChannel
    from traces_app.models import ApiKey

    receiver = Receiver()
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    channel = NotificationChannel.objects.create(name="bench", kind="webhook", url=receiver.url)
    monitor = Monitor.objects.create(
        name="bench tool errors", metric="error_rate", scope="tool", target="bench_tool",
        threshold=0.5, window_minutes=WINDOW_MINUTES, renotify_minutes=0,
    )  # fmt: skip
    monitor.channels.add(channel)
    _, raw_key = ApiKey.objects.issue("bench", ["report"])
    port = free_port()
    env = {**os.environ, "DEBUG": "0", "ALLOWED_HOSTS": "127.0.0.1"}
    headers = {"Authorization": f"Bearer {raw_key}"}
    figures = []
    rng = random.Random(26)
    client = httpx.Client(base_url=f"http://127.0.0.1:{port}/api/v1", headers=headers, timeout=30)
    with site_processes(setup, port, folder, env), client:
        wait_for_site(client)
        for trial in range(1, trials + 1):
            time.sleep(rng.uniform(0, EVERY_S))  # a random moment of the evaluation period
            sent = time.monotonic()
            client.post("/invocations", json={"invocations": [span("error")]}).raise_for_status()
            fired = wait_for_kind(receiver, "fired", 300)
            # The failing span leaves the window, then a random moment of the period.
            time.sleep(WINDOW_MINUTES * 60 + 1 + rng.uniform(0, EVERY_S))
            healed = time.monotonic()
            client.post("/invocations", json={"invocations": [span("ok")]}).raise_for_status()
            resolved = wait_for_kind(receiver, "resolved", 300)
            if fired is None or resolved is None:
                raise SystemExit(f"trial {trial}: no notification within 300 s (logs in {folder})")
            figures.append((fired - sent, resolved - healed))
            print(f"  trial {trial}: fired after {fired - sent:.1f} s, "
                  f"resolved after {resolved - healed:.1f} s", file=sys.stderr)  # fmt: skip
    return figures


def main() -> int:
    args = parse_args()
    if args.child:
        print(json.dumps(run_setup(args.child, args.database_url or "", args.trials)))
        return 0
    from figures import postgres_database

    print("| setup | trials | span to fired: median / max s | healed to resolved: median / max s |")
    print("|---|---|---|---|")
    for setup in ("default", "celery"):
        if args.setup not in (setup, "both"):
            continue
        with ExitStack() as stack:
            url = ""
            env = {**os.environ}
            if setup == "celery":
                url = stack.enter_context(
                    postgres_database(args.postgres_url, f"ares_alerts_{os.getpid()}")
                )
                if url is None:
                    continue
                env["CELERY_BROKER_URL"] = args.broker
            else:
                env.pop("CELERY_BROKER_URL", None)
            done = subprocess.run(
                [PYTHON, __file__, "--child", setup, "--database-url", url,
                 "--trials", str(args.trials)],
                cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True, check=True,
            )  # fmt: skip
            figures = json.loads(done.stdout)
        fired = [f for f, _ in figures]
        resolved = [r for _, r in figures]
        print(f"| {setup} | {len(figures)} | {statistics.median(fired):.1f} / {max(fired):.1f} "
              f"| {statistics.median(resolved):.1f} / {max(resolved):.1f} |")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
