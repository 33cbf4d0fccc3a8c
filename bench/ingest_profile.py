"""Profile span ingest in-process: the share of server CPU each part of the code takes.

bench/ingest.py --profile runs this in a child process on a fresh database after each
timed run: the same workload (demo spans, the same batches) goes through Django's full
request path (middleware, authentication, the REST or OTLP view) in this process, while
a CPU-time timer (ITIMER_PROF, every millisecond of CPU) samples the Python stack.
Each sample is given to one part:

- a part that owns its SQL too, if any frame of the stack is in it: spiral detection,
  rollup marks (and the recount, when it runs inline), agent attribution;
- otherwise the innermost frame that names a part: JSON (encoding and decoding,
  bound_json's measuring, the rows' JSON parameter), redaction, validation (pydantic
  and the schemas), OTLP mapping (protobuf decoding and the dialects), ORM/SQL (Django's
  db layer, the drivers, the bulk insert);
- else other (Django's request handling, the views' own code, recording's bookkeeping).

Only this process's CPU is sampled: a PostgreSQL server's own CPU is not in the shares
(bench/ingest.py prints it beside gunicorn's).

    DATABASE_URL=... SECRET_KEY=... .venv/bin/python bench/ingest_profile.py --mode rest
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import signal
import sys
import time
from collections import Counter
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from django.test import Client

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# Parts that own their SQL: checked over the whole stack, in this order.
OWNING_PARTS = [
    ("spiral detection", ("traces_app/spirals/",)),
    ("rollup marks", ("traces_app/rollups/",)),
    ("agent attribution", ("traces_app/ingest/agent_attribution.py",)),
]
# The other parts: the innermost frame that matches one decides.
FRAME_PARTS = [
    ("JSON", ("/json/", "bound_json", "rows_as_json", "read_json_body", "batch_response")),
    ("redaction", ("traces_app/ingest/redaction.py",)),
    ("validation", ("/pydantic/", "/pydantic_core/", "traces_app/schemas.py", "http/validation")),
    (
        "OTLP mapping",
        (
            "traces_app/ingest/otlp_",
            "/google/protobuf/",
            "/opentelemetry/proto/",
        ),
    ),
    ("ORM/SQL", ("/django/db/", "/psycopg", "/sqlite3/", "insert_ignoring_conflicts")),
]
PARTS = [name for name, _ in OWNING_PARTS + FRAME_PARTS] + ["other"]


class StackSampler:
    """Count, per part, the samples a CPU-time timer takes of the main thread's stack."""

    def __init__(self, interval_s: float = 0.001) -> None:
        self.interval_s = interval_s
        self.parts: Counter[str] = Counter()
        self.functions: Counter[str] = Counter()

    def __enter__(self) -> StackSampler:
        signal.signal(signal.SIGPROF, self._sample)
        signal.setitimer(signal.ITIMER_PROF, self.interval_s, self.interval_s)
        return self

    def __exit__(self, *exc: object) -> None:
        signal.setitimer(signal.ITIMER_PROF, 0, 0)
        signal.signal(signal.SIGPROF, signal.SIG_DFL)

    def _sample(self, signum: int, frame: FrameType | None) -> None:
        if frame is not None and frame.f_code.co_filename == __file__:
            return  # the timer went off in the sampler's own code
        stack = []
        while frame is not None:
            code = frame.f_code
            stack.append(f"{code.co_filename}:{code.co_name}")
            frame = frame.f_back
        self.parts[part_of(stack)] += 1
        if stack:
            ours = next((where for where in stack if "/traces_app/" in where), "")
            called_from = f" <- {ours.replace(str(ROOT) + '/', '')}" if ours != stack[0] else ""
            self.functions[stack[0].replace(str(ROOT) + "/", "") + called_from] += 1


def part_of(stack: list[str]) -> str:
    """Return the part a sampled stack (innermost frame first) belongs to."""
    for name, needles in OWNING_PARTS:
        if any(needle in where for where in stack for needle in needles):
            return name
    for where in stack:
        for name, needles in FRAME_PARTS:
            if any(needle in where for needle in needles):
                return name
    return "other"


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=["rest", "otlp"], default="rest")
    parser.add_argument("--invocations", type=int, default=50_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--long-results", action="store_true")
    parser.add_argument("--agent-spans", action="store_true")
    parser.add_argument(
        "--top",
        type=int,
        default=0,
        help="also list the N busiest functions (and our innermost frame calling each)",
    )
    return parser.parse_args()


def request_bodies(args: argparse.Namespace) -> tuple[str, str, list[tuple[int, bytes]]]:
    """Return the path, content type and (span count, body) of the timed run's batches."""
    from ingest_load import OTLP_BATCH_SIZE, prepare

    load_args = argparse.Namespace(**vars(args), gzip=False)
    workload = prepare(args.mode, load_args)
    if args.mode == "rest":
        return "/api/v1/invocations", "application/json", workload.items
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    spans = workload.items
    chunks = [
        spans[start : start + OTLP_BATCH_SIZE] for start in range(0, len(spans), OTLP_BATCH_SIZE)
    ]
    bodies = [(len(chunk), encode_spans(chunk).SerializePartialToString()) for chunk in chunks]
    return "/v1/traces", "application/x-protobuf", bodies


def main() -> int:
    args = parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ares_site.settings")
    import django

    django.setup()
    from django.core.management import call_command
    from django.test import Client

    call_command("migrate", "--noinput", verbosity=0)
    key = create_api_key_text()
    path, content_type, bodies = request_bodies(args)
    client = Client(HTTP_HOST="127.0.0.1", HTTP_AUTHORIZATION=f"Bearer {key}")
    # As gunicorn's workers are before their first request (ares_site/gunicorn.conf.py):
    # the imports done, the start-up objects frozen. A first batch imports what ingest
    # imports on first use; it is sent untimed (its spans are then duplicates).
    send(client, path, bodies[0][1], content_type)
    gc.freeze()
    started = time.process_time()
    with StackSampler() as sampler:
        for _, body in bodies[1:]:
            send(client, path, body, content_type)
    cpu_s = time.process_time() - started
    spans = sum(count for count, _ in bodies[1:])
    total = sum(sampler.parts.values()) or 1
    shares = {part: 100 * sampler.parts[part] / total for part in PARTS}
    print(json.dumps({"cpu_ms_per_span": cpu_s * 1000 / spans, "samples": total, "shares": shares}))
    for where, count in sampler.functions.most_common(args.top):
        print(f"{100 * count / total:5.1f}% {where}", file=sys.stderr)
    return 0


def send(client: Client, path: str, body: bytes, content_type: str) -> None:
    """Post one batch; fail unless it was answered 200."""
    response = client.generic("POST", path, body, content_type=content_type)
    if response.status_code != 200:
        raise SystemExit(f"{path}: HTTP {response.status_code}: {response.content[:300]}")


def create_api_key_text() -> str:
    """Return a new API key that may report spans."""
    from io import StringIO

    from django.core.management import call_command

    out = StringIO()
    call_command("create_api_key", "--name", "profile", "--scopes", "report", stdout=out)
    return out.getvalue().strip()


if __name__ == "__main__":
    sys.exit(main())
