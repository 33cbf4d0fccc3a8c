"""The setups of docs/opentelemetry.md, run as written with the real libraries, round-trip exactly.

Each setup (tests/otlp_libraries/setups/, shown verbatim in docs/opentelemetry.md) drives the
real `openai` client or framework against the scripted OpenAI-compatible server, runs two
tools and exports through the library's real OTLP/HTTP exporter to the live server. It runs in
a process of its own (run_setup.py), which also keeps the spans the SDK finished in an
in-memory exporter; every field is then compared with what the REST API returns, and
each LLM span's stored exchange with what the trace page shows of it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from importlib import metadata
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.otlp_libraries.setups.weather import AGENT, REQUEST, SESSION
from tests.planner_app.fake_llm import FakeLlm, calls, say
from traces_app.models import Invocation
from traces_app.timeline import llm_exchange

HERE = Path(__file__).parent
SETUPS = HERE / "setups"
OTEL_PAGE = HERE.parents[1] / "docs" / "opentelemetry.md"
MODEL = "gpt-4o-mini"
# The model's two turns: both tools at once, then the answer; with the usage it reports.
USAGE = [(51, 17), (90, 14)]
ANSWER = "It is 21°C and sunny in Paris, and 1 + 2 = 3."
TOOL_CALLS = {
    "get_weather": ("call_weather", {"city": "Paris"}, 'It is 21°C and "sunny" in Paris'),
    "add": ("call_add", {"a": 1, "b": 2}, 3),
}
DESCRIPTIONS = {"get_weather": "Current weather for a city.", "add": "Add two integers."}


@dataclass(frozen=True)
class Library:
    """One setup: the packages it shows, and what its spans are (span name -> kind)."""

    setup: str
    packages: tuple[str, ...]
    kinds: dict[str, str]
    call_ids: bool = True  # whether its tool spans carry the model's tool call id
    descriptions: bool = True  # whether its tool spans carry the tool's description
    tool_type: str = ""  # the gen_ai.tool.type its tool spans carry
    above_agent: tuple[str, ...] = ()  # spans above the agent's span (workflows)
    llm_tools: bool = True  # whether its LLM spans record the tools offered
    notes: dict[str, Any] = field(default_factory=dict)


LIBRARIES = {
    "openinference-openai": Library(
        "openinference_openai.py",
        ("openinference-instrumentation-openai", "openai"),
        {"ChatCompletion": "llm", "get_weather": "tool", "add": "tool", AGENT: "agent"},
        call_ids=False,
    ),
    "opentelemetry-genai-openai-v2": Library(
        "genai_openai_v2.py",
        ("opentelemetry-instrumentation-openai-v2", "opentelemetry-util-genai", "openai"),
        {
            f"chat {MODEL}": "llm",
            "execute_tool get_weather": "tool",
            "execute_tool add": "tool",
            f"invoke_agent {AGENT}": "agent",
        },
        descriptions=False,
        tool_type="function",
        llm_tools=False,
    ),  # fmt: skip
    "openllmetry-openai": Library(
        "openllmetry_openai.py",
        ("opentelemetry-instrumentation-openai", "openai"),
        {
            "openai.chat": "llm",
            "execute_tool get_weather": "tool",
            "execute_tool add": "tool",
            f"invoke_agent {AGENT}": "agent",
        },
        tool_type="function",
    ),  # fmt: skip
    "traceloop-sdk": Library(
        "traceloop_sdk.py",
        ("traceloop-sdk", "opentelemetry-instrumentation-openai", "openai"),
        {
            "openai.chat": "llm",
            "get_weather.tool": "tool",
            "add.tool": "tool",
            f"{AGENT}.agent": "agent",
        },
        call_ids=False,
        descriptions=False,
    ),  # fmt: skip
    "openai-agents": Library(
        "openai_agents.py",
        ("openai-agents", "openinference-instrumentation-openai-agents", "openai"),
        {
            "generation": "llm",
            "get_weather": "tool",
            "add": "tool",
            "turn": "other",
            AGENT: "agent",
            "Agent workflow": "other",
            "weather workflow": "other",
        },
        call_ids=False,
        above_agent=("Agent workflow", "weather workflow"),
        llm_tools=False,
    ),  # fmt: skip
    "langchain": Library(
        "langchain_agent.py",
        ("langchain", "langchain-openai", "openinference-instrumentation-langchain", "openai"),
        {
            "ChatOpenAI": "llm",
            "model": "other",
            "tools": "other",
            "get_weather": "tool",
            "add": "tool",
            AGENT: "agent",
        },
    ),  # fmt: skip
}


def run_setup(library: Library, ares_url: str, key: str, llm: FakeLlm, tmp: Path) -> dict:
    """Run a setup in a process of its own; return its answer and the spans its SDK finished."""
    output = tmp / "spans.json"
    env = {
        **os.environ,
        "ARES_URL": ares_url,
        "ARES_API_KEY": key,
        "OPENAI_BASE_URL": llm.base_url,
        "OPENAI_API_KEY": "sk-test-not-a-real-key",
        "PYTHONPATH": str(SETUPS),
        "HOME": str(tmp),  # some SDKs write caches under ~
    }
    done = subprocess.run(
        [sys.executable, str(HERE / "run_setup.py"), str(SETUPS / library.setup), str(output)],
        env=env, capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip
    assert done.returncode == 0, f"the setup failed:\n{done.stdout}\n{done.stderr[-4000:]}"
    return json.loads(output.read_text())


def as_datetime(nanoseconds: int) -> datetime:
    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=nanoseconds // 1000)


def mismatches(library: Library, sent: list[dict], trace: dict, stored: list[dict]) -> list[str]:
    """Return every field where the stored spans differ from the spans the SDK finished."""
    found: list[str] = []

    def check(where: str, name: str, expected: Any, actual: Any) -> None:
        if expected != actual:
            found.append(f"{where}: {name}: expected {expected!r}, stored {actual!r}")

    by_id = {span["span_id"]: span for span in stored}
    check("trace", "spans stored", sorted(s["span_id"] for s in sent), sorted(by_id))
    llm_turn = 0
    for span in sorted(sent, key=lambda span: span["start"]):
        where = span["name"]
        row = by_id.get(span["span_id"])
        if row is None:
            continue
        kind = library.kinds.get(span["name"], "(a span the test does not know)")
        check(where, "kind", kind, row["kind"])
        check(where, "parent", span["parent_span_id"], row["parent_span_id"])
        check(where, "start", as_datetime(span["start"]), datetime.fromisoformat(row["started_at"]))
        latency = (span["end"] - span["start"]) / 1e6
        if abs(latency - row["latency_ms"]) > 1e-3:
            found.append(f"{where}: latency: expected {latency} ms, stored {row['latency_ms']}")
        check(where, "status", "error" if span["status"] == "ERROR" else "ok", row["status"])
        if span["name"] not in library.above_agent:
            check(where, "agent", AGENT, row["agent"])
        if kind == "tool":
            tool = row["tool_name"]
            call_id, arguments, result = TOOL_CALLS.get(tool, ("?", None, None))
            check(where, "tool name", True, tool in TOOL_CALLS and tool in span["name"])
            check(where, "call id", call_id if library.call_ids else "", row["tool_call_id"])
            check(where, "arguments", arguments, row["arguments"])
            check(where, "result", result, row["result"])
            description = DESCRIPTIONS.get(tool, "") if library.descriptions else ""
            check(where, "tool description", description, row["tool_description"])
            check(where, "tool type", library.tool_type, row["tool_type"])
        elif kind == "llm":
            check(where, "model", MODEL, row["model"])
            found.extend(f"{where}: {problem}" for problem in exchange_problems(
                library, row, first_turn=llm_turn == 0
            ))  # fmt: skip
            expected_tokens = USAGE[llm_turn] if llm_turn < len(USAGE) else None
            check(where, "tokens", expected_tokens, (row["input_tokens"], row["output_tokens"]))
            llm_turn += 1
    check("trace", "agent", AGENT, trace["agent"])
    check("trace", "session", SESSION, trace["session_id"])
    check("trace", "request text", REQUEST, trace["request_text"])
    check("trace", "tool calls", 2, trace["tool_calls"])
    check("trace", "llm calls", 2, trace["llm_calls"])
    check("trace", "tokens", tuple(map(sum, zip(*USAGE, strict=True))),
          (trace["input_tokens"], trace["output_tokens"]))  # fmt: skip
    return found


def exchange_problems(library: Library, row: dict, first_turn: bool) -> list[str]:
    """Return what the trace view would miss of an LLM span: messages, tools, output."""
    exchange = llm_exchange(Invocation(arguments=row["arguments"], result=row["result"]))
    problems = []
    users = [message.content for message in exchange.messages if message.role == "user"]
    if users[:1] != [REQUEST]:
        problems.append(f"input messages: the user's request not first, got {users[:1]}")
    if library.llm_tools and set(exchange.tools) != set(TOOL_CALLS):
        problems.append(f"tools offered: expected {sorted(TOOL_CALLS)}, got {exchange.tools}")
    if first_turn:
        called = sorted(call.split("(")[0] for call in exchange.tool_calls)
        if called != sorted(TOOL_CALLS):
            problems.append(f"output: expected calls of {sorted(TOOL_CALLS)}, got {called}")
    elif exchange.output != ANSWER:
        problems.append(f"output: expected {ANSWER!r}, got {exchange.output!r}")
    return problems


@pytest.mark.parametrize("name", LIBRARIES)
def test_a_library_round_trips_every_field(name, live_server, make_key, tmp_path, capsys):
    library = LIBRARIES[name]
    llm = FakeLlm(model=MODEL).start()
    try:
        llm.script(
            calls(*((tool, arguments, call_id)
                    for tool, (call_id, arguments, _) in TOOL_CALLS.items()),
                  usage=_usage(*USAGE[0])),
            say(ANSWER, usage=_usage(*USAGE[1])),
        )  # fmt: skip
        started = time.monotonic()
        ran = run_setup(library, live_server.url, make_key("report"), llm, tmp_path)
        seconds = time.monotonic() - started
    finally:
        llm.stop()
    assert ran["answer"] == ANSWER
    sent = ran["spans"]
    trace_ids = {span["trace_id"] for span in sent}
    assert len(trace_ids) == 1, f"the run made {len(trace_ids)} traces"

    headers = {"Authorization": f"Bearer {make_key('read')}"}
    with httpx.Client(base_url=f"{live_server.url}/api/v1", headers=headers) as api:
        body = api.get(f"/traces/{trace_ids.pop()}")
    assert body.status_code == 200, body.text
    trace = body.json()
    found = mismatches(library, sent, trace, trace["spans"])

    versions = ", ".join(f"{p} {metadata.version(p)}" for p in library.packages)
    with capsys.disabled():
        print(f"\n{name} ({versions}): sent {len(sent)} spans, stored {len(trace['spans'])}, "
              f"{len(found)} field mismatches, {seconds:.1f} s")  # fmt: skip
    assert not found, "\n".join(found)


def _usage(prompt: int, completion: int) -> dict[str, int]:
    return {"prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": prompt + completion}  # fmt: skip


@pytest.mark.parametrize("name", LIBRARIES)
def test_the_docs_show_each_setup_as_the_tests_run_it(name):
    setup = (SETUPS / LIBRARIES[name].setup).read_text()
    page = OTEL_PAGE.read_text()
    assert setup in page, f"docs/opentelemetry.md lacks {LIBRARIES[name].setup} as it is"


def test_the_docs_show_the_tools_the_setups_import():
    assert (SETUPS / "weather.py").read_text() in OTEL_PAGE.read_text()
