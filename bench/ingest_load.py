"""The ingest benchmark's load: demo spans encoded for REST, OTLP and scores, and their senders.

bench/ingest.py runs it against the server: pre-encoded JSON batches posted from concurrent
clients (POST /api/v1/invocations, /api/v1/scores), or the SDK's finished spans exported by
one BatchSpanProcessor per client (POST /v1/traces).
"""

from __future__ import annotations

import argparse
import gzip
import json
import queue
import random
import sys
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

import httpx
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExportResult
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, Status, StatusCode, TraceFlags

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from traces_app.demo_spans import demo_spans  # noqa: E402  (needs the project on sys.path)

BATCH_SIZE = 1000
OTLP_BATCH_SIZE = 512  # the BatchSpanProcessor's default max_export_batch_size
BENCH_SERVICE = "bench-agents"  # service.name of --agent-spans spans, which name no agent


class BenchError(Exception):
    """The run failed a check: not every span accepted or stored, or the server misbehaved."""


# What search snippets are made of: prose, a URL now and then, words redaction looks at.
SNIPPET_PROSE = (
    "the protocol lets agents call tools over a session and read their results back as "
    "structured content; a basic client sends one request per call, the server answers "
    "with a token count, a status and the text. See https://example.org/docs/guide for "
    "setup: password rules, key rotation and rate limits apply to every account."
)
SNIPPET_WORDS = SNIPPET_PROSE.split()


def demo_load(count: int, seed: int, long_results: bool = False) -> list[dict]:
    """Return the demo spans a run sends; with long_results, tool results hold a snippet.

    The snippet (about 300 characters of prose, as a search result's) is text longer
    than redaction's quick check takes, so the run measures its long-text path.
    """
    spans = demo_spans(count, seed=seed)
    if long_results:
        rng = random.Random(seed)
        for span in spans:
            if span["kind"] == "tool" and isinstance(span.get("result"), dict):
                span["result"] = {**span["result"], "snippet": snippet(rng)}
    return spans


def snippet(rng: random.Random, length: int = 300) -> str:
    """Return about `length` characters of search-snippet prose."""
    start = rng.randrange(len(SNIPPET_WORDS))
    words: list[str] = []
    while sum(len(word) + 1 for word in words) < length:
        words.append(SNIPPET_WORDS[(start + len(words)) % len(SNIPPET_WORDS)])
    return " ".join(words)


def encode_batches(
    count: int, seed: int, compress: bool, long_results: bool = False
) -> list[tuple[int, bytes]]:
    """Return (span count, body) per batch of `count` demo spans with unique ids."""
    spans = demo_load(count, seed, long_results)
    ids = {(span["trace_id"], span["span_id"]) for span in spans}
    if len(spans) != count or len(ids) != count:
        raise BenchError(f"demo data gave {len(ids)} unique spans, wanted {count}")
    batches = []
    for start in range(0, count, BATCH_SIZE):
        chunk = spans[start : start + BATCH_SIZE]
        body = json.dumps({"invocations": chunk}, separators=(",", ":")).encode()
        batches.append((len(chunk), gzip.compress(body, 1) if compress else body))
    return batches


def demo_readable_spans(
    count: int, seed: int, agent_spans: bool = False, long_results: bool = False
) -> list[ReadableSpan]:
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
    for demo in demo_load(count, seed, long_results):
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
        spans = demo_readable_spans(
            args.invocations, args.seed, args.agent_spans, args.long_results
        )
        return Workload(mode, spans, tools, len(spans), args.agent_spans)
    batches = encode_batches(args.invocations, args.seed, args.gzip, args.long_results)
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
