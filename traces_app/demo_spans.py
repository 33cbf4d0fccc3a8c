"""Realistic spans for demos, tests and benchmarks: agents, tools, failures, spirals, fallbacks.

Traces come in time order over a window before `now`, busier at some hours than others,
in the ingest API's JSON shape. What a trace holds depends on who runs it:

- an LLM agent: an LLM turn, one to four tool calls it chose (an engine retry after a
  timeout now and then), LLM turns between them; sometimes a failed call followed by a
  planner fallback to another tool, a failure spiral (the same call failing three to five
  times with one argument tweaked: it gives up, recovers, or the planner takes over), or
  a loop of identical calls (more of them at the end of the window, still going);
- the planner answering a request with no tool named;
- a saved workflow: its steps, with the planner standing in for a failed step;
- an outside agent reporting its own calls through the API.

One web search incident (most searches fail for a while) shows on the charts. Two tools
compete for sums and arithmetic: the calculator and the `add` tool of the project's demo
MCP server (`mcp.demo.add`, which `manage.py ares_demo` registers and maps to Summation
and Arithmetic). The calculator is the planner's choice, until its incident: for a few
hours early in the window most of its calls time out, the planner prefers `add` and sends
it the sums it can do, then the calculator recovers and leads again. So the evidence pages
show the preference flip twice, and the planner's choice now (on each tool's last calls)
is the calculator's again. The demo server's `sha256` competes with hash_tool for Hashing
and stays second all along. The same seed gives the same ids, so recording twice stores
nothing new.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

Rng = random.Random

MODELS = ["gpt-4o-mini", "llama-3.1-8b-instruct", "qwen2.5-7b-instruct"]
LLM_AGENTS = ["math-tutor", "research-bot", "support-agent", "data-analyst"]
WORKFLOWS = ["workflow:nightly-report", "workflow:invoice-check"]
OUTSIDE_AGENTS = ["crm-assistant", "ops-copilot"]


@dataclass(frozen=True)
class ToolProfile:
    """How a demo tool behaves: where it runs, how fast, how often and how it fails."""

    ran_on: str
    latency_ms: float  # median
    failure_rate: float
    error_kinds: tuple[str, ...]
    make_args: Callable[[Rng], dict[str, Any]]
    make_result: Callable[[Rng], Any]
    cost_usd: float = 0.0  # per call (paid APIs)
    timeout_s: float = 30.0  # the engine's default; a timed-out call takes this long


def _search_results(rng: Rng) -> dict[str, Any]:
    results = [
        {
            "title": f"Result {i}",
            "url": f"https://example.org/{rng.randint(1, 999)}",
            "snippet": "…",
        }
        for i in range(3)
    ]
    return {"count": 3, "results": results}


def _mcp_sum(total: int) -> dict[str, Any]:
    """Return add's MCP result: its structured {a, b, sum}, and the same as text."""
    structured = {"a": total // 2, "b": total - total // 2, "sum": total}
    return _mcp_result(json.dumps(structured), structured)


def _mcp_result(text: str, structured: Any = None) -> dict[str, Any]:
    """Return an MCP result as the client gives it: text, content blocks, structured data.

    A tool that returns a plain value (sha256's str) has it structured as {"result": ...}.
    """
    data = {"result": text} if structured is None else structured
    return {"text": text, "content": [{"type": "text", "text": text}], "structured": data}


def _json_doc(rng: Rng) -> str:
    return f'{{"id": {rng.randint(1, 99)}, "items": [{{"price": {rng.randint(1, 500)}}}]}}'


TOOLS: dict[str, ToolProfile] = {
    # The real calculator refuses every bad expression as invalid_arguments, the caller's
    # fault: only its incident (timeouts, at its own 10 s limit) counts against it.
    "calculator": ToolProfile(
        "builtin", 3.0, 0.03, ("invalid_arguments",),
        lambda r: {"expression": f"{r.randint(2, 999)}*({r.randint(1, 99)}+{r.randint(1, 9)})"},
        lambda r: {"value": r.randint(10, 10**6)}, timeout_s=10.0,
    ),
    # The demo MCP server's add(a, b): slower than the in-process calculator, and MCP tools
    # are never taken as deterministic, so it scores a little below it when both are well.
    "mcp.demo.add": ToolProfile(
        "mcp:demo", 25.0, 0.01, ("unavailable", "timeout"),
        lambda r: {"a": r.randint(1, 5000), "b": r.randint(1, 5000)},
        lambda r: _mcp_sum(r.randint(2, 10_000)), timeout_s=20.0,
    ),
    "datetime": ToolProfile(
        "builtin", 2.0, 0.01, ("invalid_arguments",),
        lambda r: {"operation": "now", "timezone": r.choice(["UTC", "Europe/Paris", "Asia/Tokyo"])},
        lambda r: {"iso": "2026-11-29T12:00:00+00:00"},
    ),
    "hash_tool": ToolProfile(
        "builtin", 1.0, 0.005, ("invalid_arguments",),
        lambda r: {"operation": "sha256", "text": r.choice(["hello", "report.pdf", "42"])},
        lambda r: {"digest": f"{r.getrandbits(256):064x}"},
    ),
    # The demo MCP server's sha256(text): hash_tool's competitor for Hashing, which it never
    # overtakes (slower, and not taken as deterministic), a steady second.
    "mcp.demo.sha256": ToolProfile(
        "mcp:demo", 20.0, 0.01, ("unavailable", "timeout"),
        lambda r: {"text": r.choice(["hello", "report.pdf", "INV-2026-0042"])},
        lambda r: _mcp_result(f"{r.getrandbits(256):064x}"), timeout_s=20.0,
    ),
    "string_utils": ToolProfile(
        "builtin", 1.0, 0.01, ("invalid_arguments",),
        lambda r: {"operation": r.choice(["upper", "length", "reverse"]), "text": "hello world"},
        lambda r: {"result": "HELLO WORLD"},
    ),
    "json_tools": ToolProfile(
        "builtin", 2.0, 0.04, ("invalid_arguments", "tool_error"),
        lambda r: {"operation": "query", "text": _json_doc(r), "pointer": "/items/0/price"},
        lambda r: {"value": r.randint(1, 500)},
    ),
    "web_search": ToolProfile(
        "remote", 450.0, 0.05, ("timeout", "rate_limited", "tool_error"),
        lambda r: {"query": r.choice(["mcp protocol", "django ninja cursor", "tool calling"]),
                   "max_results": 5},
        _search_results, cost_usd=0.004,
    ),
    "http_request": ToolProfile(
        "remote", 250.0, 0.10, ("tool_error", "timeout", "not_found"),
        lambda r: {"method": "GET", "url": f"https://api.example.org/items/{r.randint(1, 500)}",
                   "headers": {"Authorization": "Bearer demo-token-not-real"}},
        lambda r: {"status": 200, "body": '{"id": 1}'},
    ),
    "mcp.time.get_current_time": ToolProfile(
        "mcp:time", 35.0, 0.02, ("tool_error", "timeout"),
        lambda r: {"timezone": r.choice(["Europe/Paris", "Asia/Shanghai", "America/New_York"])},
        lambda r: {"datetime": "2026-11-29T12:00:00+01:00", "is_dst": False},
    ),
    "mcp.time.convert_time": ToolProfile(
        "mcp:time", 40.0, 0.03, ("invalid_arguments",),
        lambda r: {"source_timezone": "UTC", "time": f"{r.randint(0, 23):02d}:00",
                   "target_timezone": r.choice(["Europe/Paris", "Asia/Tokyo"])},
        lambda r: {"target": {"datetime": "2026-11-29T13:00:00+01:00"}},
    ),
    "mcp.files.read_file": ToolProfile(
        "mcp:files", 15.0, 0.07, ("not_found", "tool_error"),
        lambda r: {"path": f"/srv/reports/{r.choice(['q3', 'q4', 'draft'])}.md"},
        lambda r: {"text": "# Report\n…"},
    ),
    # Outside agents report calls of their own tools, run on their side.
    "crm_lookup": ToolProfile(
        "remote", 120.0, 0.04, ("timeout", "not_found"),
        lambda r: {"customer_id": f"C{r.randint(1000, 9999)}"},
        lambda r: {"name": "ACME Ltd", "tier": r.choice(["gold", "silver"])},
    ),
    "ticket_create": ToolProfile(
        "remote", 300.0, 0.06, ("tool_error", "rate_limited"),
        lambda r: {"customer_id": f"C{r.randint(1000, 9999)}", "title": "Refund request",
                   "priority": r.choice(["low", "high"])},
        lambda r: {"ticket": f"T-{r.randint(1, 99999)}"},
    ),
}  # fmt: skip
AGENT_TOOLS = [name for name, tool in TOOLS.items() if name not in ("crm_lookup", "ticket_create")]
AGENT_TOOL_WEIGHTS = [45, 6, 8, 6, 3, 8, 6, 20, 10, 6, 3, 3]
SPIRAL_TOOL_WEIGHTS = [
    weight * TOOLS[name].failure_rate
    for name, weight in zip(AGENT_TOOLS, AGENT_TOOL_WEIGHTS, strict=True)
]
OUTSIDE_TOOLS = ["crm_lookup", "ticket_create", "web_search"]
# What the planner picks when a tool fails: another tool for the same capability.
FALLBACKS = {
    "web_search": "http_request",
    "http_request": "web_search",
    "datetime": "mcp.time.get_current_time",
    "mcp.time.get_current_time": "datetime",
    "mcp.time.convert_time": "datetime",
    "calculator": "mcp.demo.add",
    "mcp.demo.add": "calculator",
    "hash_tool": "mcp.demo.sha256",
    "mcp.demo.sha256": "hash_tool",
    "mcp.files.read_file": "http_request",
}
# What a user asked, by the tool the agent reaches for first: 60 distinct requests, so that
# a backtest of a rule change has a variety of wordings to replan.
REQUESTS_BY_TOOL: dict[str, list[str]] = {
    "calculator": [
        "What is 17% of 2,340 plus the square root of 144?",
        "calculate 12*(7+5)",
        "sum of 1 to 100",
        "What is 2^10 minus 24?",
        "average of 3, 8, 15 and 22",
        "how many ways to choose 3 of 10",
        "gcd of 84 and 126",
        "compute the compound interest on 5000 at 3% for 4 years",
        "what is 7 factorial",
        "total of the invoice lines 120, 75.5 and 19.99",
        "计算 25 乘以 4",
        "1到100的和",
    ],
    "mcp.demo.add": [
        "what is 1250 plus 370",
        "add 48 and 19",
        "12 + 30",
        "sum of 2 and 40",
        "add 2300 to 450",
        "计算 25 加 4",
    ],
    "datetime": [
        "What's the date today?",
        "what time is it in Tokyo",
        "current time in UTC",
        "which weekday is 2026-12-25",
        "add 90 days to 2026-11-30",
        "现在几点",
    ],
    "hash_tool": [
        "Hash 'hello' with sha256",
        "md5 of report.pdf",
        "base64 encode 'user:secret'",
        "sha512 checksum of the release notes",
        "decode the base64 string aGVsbG8=",
    ],
    "mcp.demo.sha256": [
        "sha256 of 'INV-2026-0042'",
        "sha-256 digest of hello",
        "SHA256 hash of the word 'release'",
    ],
    "string_utils": [
        "Upper-case 'hello world' and count its letters",
        "reverse the string 'stressed'",
        "lowercase 'THE QUICK FOX'",
        "trim the spaces around '  padded  '",
        "title case 'quarterly sales report'",
        "length of 'Model Context Protocol'",
    ],
    "json_tools": [
        'validate this JSON: {"a": 1}',
        "pretty print the order JSON",
        "get the price of the first item from the JSON",
        "minify the config JSON",
    ],
    "web_search": [
        "Find recent articles about the Model Context Protocol",
        "search for django ninja cursor pagination",
        "look up the latest Python release",
        "google OpenTelemetry GenAI semantic conventions",
        "find benchmarks of tool calling in small models",
        "搜索 MCP 协议的最新消息",
        "search the weather in Paris tomorrow",
        "find the vLLM docs for tool calling",
    ],
    "http_request": [
        "Fetch item 42 from the inventory API and summarise it",
        "download https://api.example.org/items/7",
        "fetch the status page of the payments API",
        "get https://api.example.org/health",
    ],
    "mcp.time.get_current_time": [
        "What time is it in Shanghai?",
        "current time in New York",
        "is it daytime in Paris now?",
    ],
    "mcp.time.convert_time": [
        "convert 09:00 UTC to Tokyo time",
        "what is 14:00 in Paris when it is 14:00 UTC",
        "when is 18:00 UTC in Sydney",
    ],
    "mcp.files.read_file": [
        "Read the Q4 report and list its open questions",
        "read the draft report and summarise it",
        "open the Q3 report and find the revenue",
    ],
}
OUTSIDE_REQUESTS = [
    "Open a ticket for customer C1234's refund",
    "look up customer C5521 and their tier",
    "raise a high-priority ticket for the failed delivery",
    "is customer C9034 a gold customer?",
    "create a ticket: invoice sent twice",
]
REQUESTS = [text for texts in REQUESTS_BY_TOOL.values() for text in texts] + OUTSIDE_REQUESTS
# Web search's incident: between these fractions of the window most searches fail.
INCIDENT = (0.55, 0.60)
INCIDENT_FAILURE_RATE = 0.6
# The calculator's incident, early in the window (the same fractions of the traffic): most
# of its calls time out, and the planner sends the sums it can hand over to add instead.
# Early, so that by the end each tool's last calls (the planner's evidence window, 200
# by default) are after it, even in the 2,000 spans of `make run`.
CALCULATOR_INCIDENT = (0.15, 0.33)
CALCULATOR_INCIDENT_FAILURE_RATE = 0.6
# Of LLM agents' traces, the shares where something goes wrong (see _Trace.pick_mishap).
MISHAPS = {"failing_spiral": 0.025, "loop": 0.015}
# How often the planner steps in after a call the LLM chose failed, when it has another tool.
FALLBACK_SHARE = 0.6
# In the last dozen traces (about 60 spans), half the agents loop: loops still going when
# the demo ends, whatever its size (a share of the traffic would be hundreds at 1M spans).
LIVE_TRACES = 12
LIVE_SPANS = 60
LIVE_LOOP_SHARE = 0.5
# Traffic per hour swings by this much around its mean over each day.
DAILY_SWING = 0.5


def demo_traces(
    count: int, *, seed: int = 0, now: datetime | None = None, days: float = 1.0
) -> Iterator[list[dict]]:
    """Yield `count` traces, each a list of span dicts, in time order over `days` before `now`."""
    maker = _TraceMaker(seed, now, days)
    for index in range(count):
        yield maker.trace(index / count, live=count - index <= LIVE_TRACES)


def demo_trace_stream(
    spans: int, *, seed: int = 0, now: datetime | None = None, days: float = 1.0
) -> Iterator[list[dict]]:
    """Yield whole traces, in time order over `days` before `now`, until exactly `spans` spans.

    The last trace is cut to fit. Memory stays one trace, whatever `spans` is.
    """
    maker = _TraceMaker(seed, now, days)
    emitted = 0
    while emitted < spans:
        live = spans - emitted <= LIVE_SPANS
        trace = maker.trace(emitted / spans, live=live)[: spans - emitted]
        emitted += len(trace)
        yield trace


def demo_spans(
    count: int, *, seed: int = 0, now: datetime | None = None, days: float = 1.0
) -> list[dict]:
    """Return exactly `count` spans (whole traces but the last), in time order."""
    return [
        span for trace in demo_trace_stream(count, seed=seed, now=now, days=days) for span in trace
    ]


def time_of(fraction: float, days: float) -> float:
    """Return where (0..1 of the window) the traffic's `fraction` has gone by: busier by day.

    The inverse of a daily sine wave of traffic would need solving; warping time instead
    (fraction minus a sine) gives the same swing in closed form, and is monotonic.
    """
    cycles = max(days, 1e-9)
    return fraction - DAILY_SWING * math.sin(2 * math.pi * cycles * fraction) / (
        2 * math.pi * cycles
    )


class _TraceMaker:
    """Make one trace after another from one seeded random stream."""

    def __init__(self, seed: int, now: datetime | None, days: float) -> None:
        self.rng = random.Random(seed)
        now = now or datetime.now(UTC)
        self.start = now - timedelta(days=days)
        # A minute of margin: the last trace's spans must not start in the future.
        self.length = now - timedelta(minutes=1) - self.start
        self.days = days

    def trace(self, fraction: float, live: bool = False) -> list[dict]:
        """Return the trace that starts `fraction` (0..1) of the way through the traffic.

        A live trace is one of the last: an agent in it loops more often.
        """
        rng = self.rng
        start = self.start + self.length * time_of(fraction, self.days)
        start += timedelta(seconds=rng.uniform(0, 5))
        trace = _Trace(
            rng,
            start,
            in_incident=INCIDENT[0] <= fraction < INCIDENT[1],
            calculator_down=CALCULATOR_INCIDENT[0] <= fraction < CALCULATOR_INCIDENT[1],
        )
        draw = rng.random()
        if draw < 0.10:
            trace.workflow()
        elif draw < 0.18:
            trace.outside_agent()
        elif draw < 0.23:
            trace.planner_request()
        else:
            trace.llm_agent(live=live)
        return trace.spans


class _Trace:
    """One trace being written: shared fields, a clock, and its spans so far."""

    def __init__(
        self, rng: Rng, start: datetime, in_incident: bool, calculator_down: bool = False
    ) -> None:
        self.rng = rng
        self.clock = start
        self.in_incident = in_incident
        self.calculator_down = calculator_down
        self.trace_id = _hex(rng, 32)
        self.session_id = f"s-{rng.randint(1, 400)}"
        self.spans: list[dict[str, Any]] = []
        self.agent = ""

    # Who runs the trace.

    def llm_agent(self, live: bool = False) -> None:
        rng = self.rng
        self.agent, model = rng.choice(LLM_AGENTS), rng.choice(MODELS)
        first = self.pick_tool()
        self.llm(model, request=rng.choice(REQUESTS_BY_TOOL[first]))
        mishap = self.pick_mishap(live)
        steps = rng.randint(1, 4)
        mishap_step = rng.randrange(steps)
        for step in range(steps):
            if step and rng.random() < 0.5:
                self.llm(model)
            if step == mishap_step and mishap:
                getattr(self, mishap)()
            else:
                self.llm_call(first if step == 0 else self.pick_tool())
        self.llm(model)

    def planner_request(self) -> None:
        rng = self.rng
        self.agent, model = rng.choice(LLM_AGENTS), rng.choice(MODELS)
        tool = self.pick_tool()
        self.llm(model, request=rng.choice(REQUESTS_BY_TOOL[tool]))
        self.call_with_retry(self.planner_pick(tool), "planner")
        if rng.random() < 0.5:
            self.call_with_retry(self.planner_pick(self.pick_tool()), "planner")
        self.llm(model)

    def workflow(self) -> None:
        rng = self.rng
        self.agent = rng.choice(WORKFLOWS)
        for _ in range(rng.randint(2, 5)):
            tool = self.pick_tool()
            if not self.call_with_retry(tool, "workflow") and tool in FALLBACKS:
                self.call(FALLBACKS[tool], "planner")  # the workflow's per-step fallback

    def outside_agent(self) -> None:
        rng = self.rng
        self.agent, model = rng.choice(OUTSIDE_AGENTS), "claude-3-5-haiku"
        self.llm(model, request=rng.choice(OUTSIDE_REQUESTS))
        for _ in range(rng.randint(1, 3)):
            self.call_with_retry(rng.choice(OUTSIDE_TOOLS), "external")
        self.llm(model)

    # What happens in it.

    def pick_mishap(self, live: bool) -> str:
        """Return what goes wrong in an LLM agent's trace (a method name), or "" for nothing."""
        if live and self.rng.random() < LIVE_LOOP_SHARE:
            return "loop"  # looping right now, so that the demo has active spirals
        draw = self.rng.random()
        for mishap, share in MISHAPS.items():
            if draw < share:
                return mishap
            draw -= share
        return ""

    def pick_tool(self) -> str:
        return self.rng.choices(AGENT_TOOLS, AGENT_TOOL_WEIGHTS)[0]

    def planner_pick(self, tool: str) -> str:
        """Return the tool the planner runs for a request that `tool` can answer.

        A sum of two numbers (add's requests) goes to the leader of the two: the calculator,
        but add while the calculator is down. Other sums and arithmetic stay with the
        calculator whatever its record: add cannot read them, so the planner passes it over.
        A SHA-256 request goes to hash_tool, which leads sha256 all along.
        """
        if tool == "mcp.demo.add" and not self.calculator_down:
            return "calculator"
        if tool == "mcp.demo.sha256":
            return "hash_tool"  # it always leads for Hashing
        return tool

    def llm_call(self, tool: str) -> None:
        """The LLM calls a tool; when it fails, the planner often picks another for the job."""
        failed = not self.call_with_retry(tool, "llm")
        if failed and tool in FALLBACKS and self.rng.random() < FALLBACK_SHARE:
            self.call(FALLBACKS[tool], "planner")

    def call_with_retry(self, tool: str, chosen_by: str) -> bool:
        """Call a tool; the engine retries a timeout or rate limit once, now and then."""
        span = self.call(tool, chosen_by)
        if span["error_kind"] in ("timeout", "rate_limited") and self.rng.random() < 0.5:
            span = self.call(tool, chosen_by, args=span["arguments"], attempt=2, like=span)
        return span["status"] == "ok"

    def failing_spiral(self) -> None:
        """The LLM makes the same failing call three to five times, tweaking one value."""
        rng = self.rng
        tool = rng.choices(AGENT_TOOLS, SPIRAL_TOOL_WEIGHTS)[0]  # flaky tools spiral more
        kind = rng.choice(TOOLS[tool].error_kinds)
        first = TOOLS[tool].make_args(rng)
        key = rng.choice(sorted(first))
        for attempt in range(rng.randint(3, 5)):
            args = {**first, key: _tweak(first[key], attempt)} if attempt else first
            self.call(tool, "llm", args=args, fail=True, error_kind=kind)
        ending = rng.random()
        if ending < 0.35 and tool in FALLBACKS:
            self.call(FALLBACKS[tool], "planner", fail=False)
        elif ending < 0.6:
            self.call(tool, "llm", fail=False)  # recovered
        # else: the agent gives up on the tool

    def loop(self) -> None:
        """The LLM repeats an identical call that keeps answering: a loop."""
        tool = self.pick_tool()
        args = TOOLS[tool].make_args(self.rng)
        for _ in range(self.rng.randint(3, 6)):
            self.call(tool, "llm", args=args, fail=False)

    # Spans.

    def llm(self, model: str, request: str = "") -> None:
        rng = self.rng
        prompt, completion = rng.randint(300, 3000), rng.randint(20, 400)
        span = {
            "trace_id": self.trace_id,
            "span_id": _hex(rng, 16),
            "agent": self.agent,
            "session_id": self.session_id,
            "kind": "llm",
            "model": model,
            "status": "ok",
            "started_at": self.clock.isoformat(),
            "latency_ms": round(rng.lognormvariate(6.5, 0.5), 3),
            "input_tokens": prompt,
            "output_tokens": completion,
            "cost_usd": round(prompt * 1.5e-7 + completion * 6e-7, 8),
        }
        if request:
            span["request_text"] = request
        self.add(span)

    def call(
        self,
        tool: str,
        chosen_by: str,
        *,
        args: dict[str, Any] | None = None,
        fail: bool | None = None,
        error_kind: str = "",
        attempt: int = 1,
        like: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Add a tool span; `fail` None draws failure from the tool's profile."""
        rng = self.rng
        profile = TOOLS[tool]
        if fail is None:
            rate = profile.failure_rate
            if tool == "web_search" and self.in_incident:
                rate = INCIDENT_FAILURE_RATE
            if tool == "calculator" and self.calculator_down:
                rate, error_kind = CALCULATOR_INCIDENT_FAILURE_RATE, error_kind or "timeout"
            fail = rng.random() < rate
        span: dict[str, Any] = {
            "trace_id": self.trace_id,
            "span_id": _hex(rng, 16),
            "agent": self.agent,
            "session_id": self.session_id,
            "kind": "tool",
            "tool_name": tool,
            "tool_call_id": like["tool_call_id"] if like else f"call_{_hex(rng, 12)}",
            "chosen_by": chosen_by,
            "ran_on": profile.ran_on,
            "arguments": args if args is not None else profile.make_args(rng),
            "status": "error" if fail else "ok",
            "started_at": self.clock.isoformat(),
            "latency_ms": round(rng.lognormvariate(0, 0.6) * profile.latency_ms, 3),
            "result_tokens": rng.randint(5, 400),
            "cost_usd": profile.cost_usd,
            "attempt": attempt,
            "error_kind": "",
        }
        if fail:
            kind = error_kind or rng.choice(profile.error_kinds)
            if kind == "timeout":
                span["latency_ms"] = profile.timeout_s * 1000 + rng.uniform(0, 50)
            arguments, message = failure(tool, kind, span["arguments"])
            span.update(
                arguments=arguments,
                error_kind=kind,
                error_message=message,
                result_tokens=rng.randint(5, 40),
            )
        else:
            span["result"] = profile.make_result(rng)
        self.add(span)
        return span

    def add(self, span: dict[str, Any]) -> None:
        self.spans.append(span)
        self.clock += timedelta(milliseconds=span["latency_ms"] + self.rng.uniform(1, 30))


# Arguments an LLM gets wrong, per tool, and what validation says about them (the engine's
# own wording: see tools_app/validation.py).
WRONG_ARGUMENTS: dict[str, tuple[str, Callable[[Any], Any], str]] = {
    # tool: (argument, how it goes wrong, message with {value} for the wrong value)
    "calculator": ("expression", lambda v: _as_number(v), "expected string, got number {value}"),
    "datetime": ("timezone", lambda v: "Mars/Olympus_Mons", "unknown time zone {value!r}"),
    "hash_tool": ("operation", lambda v: "sha3", 'expected one of "md5", "sha1", "sha256", '
                  '"sha512", "base64_encode", "base64_decode", got string "{value}"'),
    "string_utils": ("operation", lambda v: "shout", 'expected one of "upper", "lower", '
                     '"title", "trim", "length", "reverse", ..., got string "{value}"'),
    "json_tools": ("pointer", lambda v: "items[0].price",
                   "a JSON Pointer starts with '/', got string \"{value}\""),
    "mcp.time.convert_time": ("time", lambda v: "25:00", "{value!r} is not a valid HH:MM time"),
}  # fmt: skip


# A tool's own failure that follows from its arguments, for the tools that have one.
FAILING_ARGUMENTS: dict[str, tuple[str, Callable[[Any], Any], str]] = {
    "json_tools": ("pointer", lambda v: "/items/3/price",
                   "no value at {value!r}: items has 1 element"),
}  # fmt: skip


def failure(tool: str, kind: str, arguments: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """Return the arguments of a failed call and an error message that agrees with them.

    An invalid_arguments failure gets arguments that really are invalid; the others name
    the URL, path, customer or expression the call was about.
    """
    spoilers = {"invalid_arguments": WRONG_ARGUMENTS, "tool_error": FAILING_ARGUMENTS}
    if tool in spoilers.get(kind, {}):
        name, spoil, message = spoilers[kind][tool]
        wrong = spoil(arguments.get(name))
        prefix = f"{name}: " if kind == "invalid_arguments" else ""
        return {**arguments, name: wrong}, prefix + message.format(value=wrong)
    if kind == "timeout":
        return arguments, f"{tool} did not answer within {TOOLS[tool].timeout_s:g} s (timeout)"
    if kind == "rate_limited":
        return arguments, f"{tool}: 429 Too Many Requests (retry after 20 s)"
    if kind == "unavailable":
        sent = json.dumps(arguments, ensure_ascii=False)
        return (
            arguments,
            f"the MCP server exited before answering {sent}; it restarts on the next call",
        )
    target = (
        arguments.get("url") or arguments.get("path") or arguments.get("customer_id")
        or arguments.get("expression") or arguments.get("pointer") or arguments.get("query")
        or arguments.get("timezone") or ""
    )  # fmt: skip
    if kind == "not_found":
        return arguments, f"{target}: not found (404)"
    if tool.startswith("mcp."):
        return arguments, f"the MCP server answered an internal error for {target!r}"
    return arguments, f"upstream returned HTTP 502 Bad Gateway for {target!r}"


def _as_number(value: Any) -> Any:
    """Return what an LLM sends when it computed the expression itself: a number."""
    digits = "".join(ch for ch in str(value) if ch.isdigit())
    return int(digits[:6] or 0)


def _tweak(value: Any, attempt: int) -> Any:
    """Return an argument value an agent changed a little between attempts."""
    if isinstance(value, int | float):
        return value + attempt
    if isinstance(value, str):
        return f"{value} (try {attempt + 1})"
    return value


def _hex(rng: Rng, digits: int) -> str:
    return f"{rng.getrandbits(digits * 4):0{digits}x}".replace("0" * digits, "1" * digits)
