"""Realistic spans for demos, tests and benchmarks: agents, tools, failures, retries."""

from __future__ import annotations

import random
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

AGENTS = ["math-tutor", "research-bot", "support-agent", "data-analyst"]
MODELS = ["gpt-4o-mini", "llama-3.1-8b-instruct", "qwen2.5-7b-instruct"]

# tool name -> (where it ran, typical latency ms, failure rate, argument maker, result maker)
TOOLS: dict[str, tuple[str, float, float, Any, Any]] = {
    "calculator": (
        "builtin", 3.0, 0.04,
        lambda r: {"expression": f"{r.randint(2, 999)}*({r.randint(1, 99)}+{r.randint(1, 9)})"},
        lambda r: {"value": r.randint(10, 10**6)},
    ),
    "web_search": (
        "remote", 420.0, 0.08,
        lambda r: {"query": r.choice(["mcp protocol", "django ninja cursor", "tool calling"]),
                   "max_results": 5},
        lambda r: {"count": 3, "results": [{"title": f"Result {i}", "url": f"https://example.org/{i}",
                                            "snippet": "…"} for i in range(3)]},
    ),
    "hash_tool": (
        "builtin", 1.0, 0.01,
        lambda r: {"algorithm": "sha256", "text": "hello"},
        lambda r: {"digest": "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"},
    ),
    "string_utils": (
        "builtin", 1.0, 0.02,
        lambda r: {"operation": "upper", "text": "hello world"},
        lambda r: {"text": "HELLO WORLD"},
    ),
    "http_get": (
        "remote", 250.0, 0.12,
        lambda r: {"url": f"https://api.example.org/items/{r.randint(1, 500)}",
                   "headers": {"Authorization": "Bearer demo-token-not-real"}},
        lambda r: {"status": 200, "body": "{\"id\": 1}"},
    ),
    "mcp.time.get_current_time": (
        "mcp:time", 35.0, 0.03,
        lambda r: {"timezone": r.choice(["Europe/Paris", "Asia/Shanghai", "America/New_York"])},
        lambda r: {"datetime": "2026-11-29T12:00:00+01:00", "is_dst": False},
    ),
}  # fmt: skip
ERRORS = {
    "timeout": "tool timed out after 30 s",
    "invalid_arguments": "expression: expected string, got number 123",
    "tool_error": "upstream returned HTTP 502",
    "rate_limited": "429 Too Many Requests",
}
REQUESTS = [
    "What is 17% of 2,340 plus the square root of 144?",
    "Find recent articles about the Model Context Protocol",
    "Hash 'hello' with sha256",
    "What time is it in Shanghai?",
    "Upper-case 'hello world' and count its letters",
    "Fetch item 42 from the inventory API and summarise it",
]


def _hex(rng: random.Random, digits: int) -> str:
    return f"{rng.getrandbits(digits * 4):0{digits}x}".replace("0" * digits, "1" * digits)


def demo_traces(count: int, *, seed: int = 0, now: datetime | None = None) -> Iterator[list[dict]]:
    """Yield `count` traces, each a list of span dicts in the ingest API's JSON shape.

    A trace is an LLM call, one to four tool calls (some failing, some retried, now and
    then a spiral of the same failing call), and a final LLM call, spread over the last
    24 hours before `now`.
    """
    rng = random.Random(seed)
    now = now or datetime.now(UTC)
    for _ in range(count):
        yield _demo_trace(rng, now - timedelta(seconds=rng.uniform(60, 24 * 3600)))


def demo_spans(count: int, *, seed: int = 0, now: datetime | None = None) -> list[dict]:
    """Return at least `count` spans (whole traces), cut to exactly `count`."""
    spans: list[dict] = []
    for trace in demo_traces(count, seed=seed, now=now):
        spans.extend(trace)
        if len(spans) >= count:
            break
    return spans[:count]


def _demo_trace(rng: random.Random, start: datetime) -> list[dict]:
    trace_id, agent, model = _hex(rng, 32), rng.choice(AGENTS), rng.choice(MODELS)
    common = {"trace_id": trace_id, "agent": agent, "session_id": f"s-{rng.randint(1, 400)}"}
    clock = start
    spans = [_llm_span(rng, common, clock, model, request=rng.choice(REQUESTS))]
    clock += timedelta(milliseconds=spans[-1]["latency_ms"])
    for _ in range(rng.randint(1, 4)):
        tool = rng.choice(list(TOOLS))
        repeats = 4 if rng.random() < 0.005 else 1  # now and then a failure spiral
        for attempt in range(1, repeats + 1):
            span = _tool_span(rng, common, clock, tool, attempt, force_error=repeats > 1)
            spans.append(span)
            clock += timedelta(milliseconds=span["latency_ms"] + rng.uniform(1, 30))
    spans.append(_llm_span(rng, common, clock, model))
    return spans


def _llm_span(
    rng: random.Random, common: dict, clock: datetime, model: str, request: str = ""
) -> dict[str, Any]:
    prompt, completion = rng.randint(300, 3000), rng.randint(20, 400)
    span = {
        **common,
        "span_id": _hex(rng, 16),
        "kind": "llm",
        "model": model,
        "status": "ok",
        "started_at": clock.isoformat(),
        "latency_ms": round(rng.lognormvariate(6.5, 0.5), 3),
        "input_tokens": prompt,
        "output_tokens": completion,
        "cost_usd": round(prompt * 1.5e-7 + completion * 6e-7, 8),
    }
    if request:
        span["request_text"] = request
    return span


def _tool_span(
    rng: random.Random, common: dict, clock: datetime, tool: str, attempt: int, force_error: bool
) -> dict[str, Any]:
    ran_on, latency, failure_rate, make_args, make_result = TOOLS[tool]
    failed = force_error or rng.random() < failure_rate
    span: dict[str, Any] = {
        **common,
        "span_id": _hex(rng, 16),
        "kind": "tool",
        "tool_name": tool,
        "tool_call_id": f"call_{_hex(rng, 12)}",
        "chosen_by": rng.choices(["llm", "planner", "workflow", "external"], [70, 15, 10, 5])[0],
        "ran_on": ran_on,
        "arguments": make_args(rng),
        "status": "error" if failed else "ok",
        "started_at": clock.isoformat(),
        "latency_ms": round(rng.lognormvariate(0, 0.6) * latency, 3),
        "result_tokens": rng.randint(5, 400),
        "attempt": attempt,
    }
    if failed:
        kind = "timeout" if force_error else rng.choice(list(ERRORS))
        span.update(error_kind=kind, error_message=ERRORS[kind])
    else:
        span["result"] = make_result(rng)
    return span
