"""Measure what one OTLP export request at the limits costs a worker: CPU and wall time.

Requests at each limit (ARES_OTLP_MAX_SPANS spans; that many spans at
ARES_OTLP_MAX_ATTRIBUTES attribute values each; a body just under
ARES_INGEST_MAX_BODY_BYTES) and requests over them (refused with 413, or the span
alone rejected) are posted to POST /v1/traces in this process, as a worker runs them,
on a throwaway database. Prints, per request, its status, size, and the worker's CPU
and wall time (the median of --repeat runs, each with fresh ids).

    .venv/bin/python bench/otlp_limits.py [--database sqlite|postgres] [--repeat 3]
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import secrets
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from figures import postgres_database  # noqa: E402  (bench/ is the script's own folder)

PROTOBUF, JSON = "application/x-protobuf", "application/json"


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument(
        "--postgres-url",
        default=os.environ.get("BENCH_POSTGRES_URL", "postgres://ares:ares@127.0.0.1:5432/ares"),
        help="server and credentials; the database name is a prefix for a throwaway one",
    )
    parser.add_argument("--repeat", type=int, default=3, help="runs of each request")
    return parser.parse_args()


def text(key: str, value: str) -> KeyValue:
    return KeyValue(key=key, value=AnyValue(string_value=value))


def tool_span(arguments: str = '{"expression": "1+1"}', extra: int = 0, bare: bool = False) -> Span:
    """Return a GenAI tool span with fresh ids, `extra` attributes more than its own three.

    A bare span has no attributes (about 70 bytes): 50,000 of them fit the byte limit.
    """
    now = time.time_ns() - 60 * 10**9
    attributes = [
        text("gen_ai.operation.name", "execute_tool"),
        text("gen_ai.tool.name", "calculator"),
        text("gen_ai.tool.call.arguments", arguments),
    ]
    attributes = [] if bare else attributes
    attributes += [text(f"app.attribute.{index}", "value") for index in range(extra)]
    return Span(
        trace_id=os.urandom(16), span_id=os.urandom(8), name="execute_tool calculator",
        start_time_unix_nano=now, end_time_unix_nano=now + 3_000_000, attributes=attributes,
    )  # fmt: skip


def export(spans: list[Span]) -> ExportTraceServiceRequest:
    resource = Resource(attributes=[text("service.name", "limits-bench")])
    return ExportTraceServiceRequest(
        resource_spans=[ResourceSpans(resource=resource, scope_spans=[ScopeSpans(spans=spans)])]
    )


def as_json(request: ExportTraceServiceRequest) -> bytes:
    """Return the request as OTLP/JSON: protobuf's JSON mapping with hex ids."""
    document = json_format.MessageToDict(request)
    for resource_spans in document["resourceSpans"]:
        for span in resource_spans["scopeSpans"][0]["spans"]:
            for key in ("traceId", "spanId"):
                span[key] = base64.b64decode(span[key]).hex()
    return json.dumps(document).encode()


def cases(max_spans: int, max_attributes: int, max_bytes: int) -> list[tuple[str, Callable]]:
    """Return (label, make (body, content type)) for each request measured."""
    # Arguments that fill a body to just under the byte limit with max_spans spans.
    filler = "x" * (max_bytes // max_spans - 200)
    big = json.dumps({"text": filler})

    def spans(count: int, **kwargs: object) -> Callable[[], tuple[bytes, str]]:
        return lambda: (export([tool_span(**kwargs) for _ in range(count)]).SerializeToString(),
                        PROTOBUF)  # fmt: skip

    def spans_json(count: int, **kwargs: object) -> Callable[[], tuple[bytes, str]]:
        return lambda: (as_json(export([tool_span(**kwargs) for _ in range(count)])), JSON)

    return [
        (f"{max_spans:,} tool spans, protobuf (at the span limit)", spans(max_spans)),
        (f"{max_spans:,} tool spans, OTLP/JSON (at the span limit)", spans_json(max_spans)),
        (
            f"{max_spans:,} spans x {max_attributes} attributes (at both limits)",
            spans(max_spans, extra=max_attributes - 3),
        ),
        (
            f"{max_spans:,} spans, {max_bytes / 2**20:.1f} MB of arguments (at the byte limit)",
            spans(max_spans, arguments=big),
        ),
        (f"{max_spans + 1:,} spans (413)", spans(max_spans + 1)),
        ("50,000 bare spans, protobuf (413)", spans(50_000, bare=True)),
        ("50,000 bare spans, OTLP/JSON (413)", spans_json(50_000, bare=True)),
        ("1 span with 50,000 attributes (rejected alone)", spans(1, extra=50_000)),
    ]


def measure(args: argparse.Namespace) -> None:
    """Post each case --repeat times to /v1/traces in this process; print the figures."""
    import django

    django.setup()
    from django.conf import settings
    from django.core.management import call_command
    from django.test import Client

    from traces_app.models import ApiKey

    call_command("migrate", verbosity=0)
    _, key = ApiKey.objects.issue("otlp-limits-bench", ["report"])
    client = Client(HTTP_HOST="127.0.0.1", HTTP_AUTHORIZATION=f"Bearer {key}")
    client.post("/v1/traces", export([tool_span()]).SerializeToString(), PROTOBUF)  # warm up
    table = cases(
        settings.ARES_OTLP_MAX_SPANS,
        settings.ARES_OTLP_MAX_ATTRIBUTES,
        settings.ARES_INGEST_MAX_BODY_BYTES,
    )
    print(f"{'request':<58} {'status':>6} {'MB':>5} {'CPU s':>6} {'wall s':>6}")
    for label, make in table:
        cpu, wall = [], []
        for _ in range(args.repeat):
            body, content_type = make()
            started_cpu, started = time.process_time(), time.perf_counter()
            response = client.post("/v1/traces", body, content_type)
            cpu.append(time.process_time() - started_cpu)
            wall.append(time.perf_counter() - started)
        print(
            f"{label:<58} {response.status_code:>6} {len(body) / 2**20:>5.1f} "
            f"{statistics.median(cpu):>6.3f} {statistics.median(wall):>6.3f}"
        )
    print(
        f"Median of {args.repeat} runs; CPU is this process's (the worker's), not the database's."
    )


@contextmanager
def database(args: argparse.Namespace) -> Iterator[str | None]:
    """Yield the URL of a throwaway database of the kind asked for."""
    if args.database == "sqlite":
        with tempfile.TemporaryDirectory(prefix="ares-otlp-limits-") as folder:
            yield f"sqlite:///{folder}/bench.sqlite3"
        return
    prefix = args.postgres_url.rsplit("/", 1)[-1] or "ares"
    name = f"{prefix}_otlp_limits_{os.getpid()}_{secrets.token_hex(4)}"
    with postgres_database(args.postgres_url, name) as url:
        yield url


def main() -> int:
    args = parse_args()
    with database(args) as url:
        if url is None:
            return 1
        os.environ.update(
            DATABASE_URL=url, DJANGO_SETTINGS_MODULE="ares_site.settings", DEBUG="0",
            SECRET_KEY=os.environ.get("SECRET_KEY") or secrets.token_urlsafe(32),
            LOG_LEVEL="ERROR",
        )  # fmt: skip
        os.environ.pop("CELERY_BROKER_URL", None)
        print(f"database: {args.database}")
        measure(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
