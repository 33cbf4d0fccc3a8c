"""The execution engine with real (small) tools: validation, limits, timeouts, retries, order."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tools_app.engine import CallContext, ToolEngine
from tools_app.registry import ToolRegistry
from tools_app.specs import ErrorKind, SideEffect, ToolCall, ToolFailure, ToolSpec

NUMBERS = {
    "type": "object",
    "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
    "required": ["a", "b"],
    "additionalProperties": False,
}
ANY = {"type": "object"}


class Recorder:
    """Collects the spans the engine records, as traces_app would store them."""

    def __init__(self) -> None:
        self.spans: list[dict[str, Any]] = []

    def __call__(self, spans: list[dict[str, Any]]) -> None:
        self.spans.extend(spans)


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
def calls() -> list[dict[str, Any]]:
    """The arguments each test tool was really called with."""
    return []


@pytest.fixture
def engine(recorder: Recorder, calls: list[dict[str, Any]]) -> Iterator[ToolEngine]:
    def add(a: int, b: int) -> dict[str, int]:
        calls.append({"a": a, "b": b})
        return {"sum": a + b}

    def explode() -> None:
        raise RuntimeError("disk on fire")

    def refuse() -> None:
        raise ToolFailure("quota exhausted", ErrorKind.RATE_LIMITED)

    async def nap(seconds: float) -> str:
        await asyncio.sleep(seconds)
        return f"slept {seconds}"

    registry = ToolRegistry(
        [
            ToolSpec("add", "Add two integers", NUMBERS, add),
            ToolSpec("explode", "Always raises", ANY, explode),
            ToolSpec("refuse", "Fails with a kind", ANY, refuse, max_retries=0),
            ToolSpec("nap", "Sleeps", {"type": "object"}, nap, timeout_s=0.2, max_retries=1),
            ToolSpec("off", "Disabled", ANY, add, enabled=False),
        ]
    )
    engine = ToolEngine(registry, recorder=recorder, backoff_base_s=0.01)
    yield engine
    engine.close()


def test_it_runs_a_valid_call_and_records_it(engine: ToolEngine, recorder: Recorder) -> None:
    context = CallContext(agent="math-tutor", chosen_by="planner", request_text="add them")
    result = engine.execute(ToolCall("add", {"a": 2, "b": 3}, "call_1"), context)
    assert result.success and result.data == {"sum": 5}
    assert result.call_id == "call_1"
    assert result.text == 'add returned: {"sum": 5}'
    [span] = recorder.spans
    assert span["trace_id"] == context.trace_id
    assert (span["tool_name"], span["tool_call_id"], span["status"]) == ("add", "call_1", "ok")
    assert (span["chosen_by"], span["ran_on"], span["agent"]) == (
        "planner",
        "builtin",
        "math-tutor",
    )
    assert span["arguments"] == {"a": 2, "b": 3} and span["result"] == {"sum": 5}


def test_it_decodes_json_string_arguments_and_reports_coercions(
    engine: ToolEngine, calls: list, recorder: Recorder
) -> None:
    result = engine.execute(ToolCall("add", '{"a": "2", "b": 3.0}'))
    assert result.success and result.data == {"sum": 5}
    assert calls == [{"a": 2, "b": 3}]
    coercions = ['a: string "2" -> integer 2', "b: number 3.0 -> integer 3"]
    assert result.metadata["coercions"] == coercions
    # The record keeps what the model sent, and what was fixed.
    [span] = recorder.spans
    assert (span["arguments"], span["coercions"]) == ({"a": "2", "b": 3.0}, coercions)


def test_it_refuses_invalid_arguments_before_running_the_tool(
    engine: ToolEngine, calls: list, recorder: Recorder
) -> None:
    result = engine.execute(ToolCall("add", {"a": "two"}, "c"))
    assert not result.success and calls == []
    assert result.error.kind == ErrorKind.INVALID_ARGUMENTS
    assert [str(p) for p in result.error.problems] == [
        'a: expected integer, got string "two"',
        "b: required but missing",
    ]
    assert "a: expected integer" in result.text
    assert recorder.spans[0]["error_kind"] == "invalid_arguments"


def test_it_says_where_invalid_json_arguments_broke(engine: ToolEngine) -> None:
    result = engine.execute(ToolCall("add", '{"a": 1, "b": }'))
    assert result.error.kind == ErrorKind.INVALID_ARGUMENTS
    assert "not valid JSON" in result.text and "column 15" in result.text


def test_it_turns_an_unknown_tool_into_a_recorded_error(
    engine: ToolEngine, recorder: Recorder
) -> None:
    result = engine.execute(ToolCall("subtract", {}, "c"))
    assert result.error.kind == ErrorKind.NOT_FOUND
    assert "available: add, explode, nap, refuse" in result.error.message
    assert recorder.spans[0]["tool_name"] == "subtract"


def test_it_refuses_a_disabled_tool(engine: ToolEngine, calls: list) -> None:
    result = engine.execute(ToolCall("off", {"a": 1, "b": 1}))
    assert result.error.kind == ErrorKind.DISABLED and calls == []


@pytest.mark.parametrize("allowed", [set(), {"nap"}])
def test_it_enforces_the_allow_list_when_the_call_arrives(
    engine: ToolEngine, calls: list, allowed: set
) -> None:
    context = CallContext(agent="restricted", allowed_tools=allowed)
    result = engine.execute(ToolCall("add", {"a": 1, "b": 1}), context)
    assert result.error.kind == ErrorKind.PERMISSION_DENIED and calls == []
    assert "restricted is not allowed to call 'add'" in result.error.message


def test_it_turns_a_raising_tool_into_a_tool_error(engine: ToolEngine) -> None:
    result = engine.execute(ToolCall("explode", {}))
    assert result.error.kind == ErrorKind.TOOL_ERROR
    assert result.error.message == "RuntimeError: disk on fire"
    assert result.metadata["attempts"] == 1  # a tool error is not worth retrying


def test_it_keeps_the_kind_a_tool_fails_with(engine: ToolEngine) -> None:
    result = engine.execute(ToolCall("refuse", {}))
    assert (result.error.kind, result.error.message) == (ErrorKind.RATE_LIMITED, "quota exhausted")


def test_it_times_out_and_retries_an_idempotent_tool(
    engine: ToolEngine, recorder: Recorder
) -> None:
    result = engine.execute(ToolCall("nap", {"seconds": 5}))
    assert result.error.kind == ErrorKind.TIMEOUT
    assert result.error.message == "nap timed out after 0.2 s"
    assert [span["attempt"] for span in recorder.spans] == [1, 2]
    assert {span["error_kind"] for span in recorder.spans} == {"timeout"}


def _flaky_engine(
    failures: int, *, side_effect: SideEffect, idempotent: bool, recorder: Recorder
) -> tuple[ToolEngine, list[int]]:
    attempts: list[int] = []

    def flaky() -> str:
        attempts.append(len(attempts) + 1)
        if len(attempts) <= failures:
            raise ToolFailure("service unavailable", ErrorKind.UNAVAILABLE)
        return "ok"

    spec = ToolSpec(
        "flaky", "Fails first", ANY, flaky, side_effect=side_effect, idempotent=idempotent
    )
    return ToolEngine(ToolRegistry([spec]), recorder=recorder, backoff_base_s=0.01), attempts


def test_it_retries_retryable_errors_until_success(recorder: Recorder) -> None:
    engine, attempts = _flaky_engine(
        2, side_effect=SideEffect.READ_ONLY, idempotent=True, recorder=recorder
    )
    result = engine.execute(ToolCall("flaky", {}))
    assert result.success and attempts == [1, 2, 3]
    assert [(s["attempt"], s["status"]) for s in recorder.spans] == [
        (1, "error"), (2, "error"), (3, "ok"),
    ]  # fmt: skip
    engine.close()


def test_it_never_retries_a_non_idempotent_write(recorder: Recorder) -> None:
    engine, attempts = _flaky_engine(
        1, side_effect=SideEffect.WRITE, idempotent=False, recorder=recorder
    )
    result = engine.execute(ToolCall("flaky", {}))
    assert not result.success and attempts == [1]
    engine.close()


def test_it_limits_a_tools_concurrency_and_queues_the_rest(recorder: Recorder) -> None:
    lock = threading.Lock()
    state = {"running": 0, "peak": 0}
    pair = threading.Barrier(2, timeout=10)  # proves two really run at once

    def busy(n: int) -> int:
        with lock:
            state["running"] += 1
            state["peak"] = max(state["peak"], state["running"])
        pair.wait()
        time.sleep(0.01)
        with lock:
            state["running"] -= 1
        return n

    spec = ToolSpec(
        "busy", "Busy", {"type": "object", "properties": {"n": {"type": "integer"}}}, busy,
        max_concurrency=2,
    )  # fmt: skip
    engine = ToolEngine(ToolRegistry([spec]), recorder=recorder)
    results = engine.execute_many(
        [ToolCall("busy", {"n": n}, f"c{n}") for n in range(10)], max_parallel=10
    )
    assert [r.data for r in results] == list(range(10))
    assert state["peak"] == 2
    engine.close()


def test_it_backs_off_without_holding_the_tools_slot(recorder: Recorder) -> None:
    order: list[str] = []
    first_failed = threading.Event()

    def once(who: str) -> str:
        order.append(who)
        if who == "first" and order.count("first") == 1:
            first_failed.set()
            raise ToolFailure("try later", ErrorKind.UNAVAILABLE)
        return who

    schema = {"type": "object", "properties": {"who": {"type": "string"}}}
    spec = ToolSpec("once", "One at a time", schema, once, max_concurrency=1)
    engine = ToolEngine(ToolRegistry([spec]), recorder=recorder, backoff_base_s=1.0)

    async def both() -> list[Any]:
        first = asyncio.create_task(engine.execute_async(ToolCall("once", {"who": "first"})))
        await asyncio.get_running_loop().run_in_executor(None, first_failed.wait)
        second = await engine.execute_async(ToolCall("once", {"who": "second"}))
        return [await first, second]

    first, second = asyncio.run(both())
    assert first.success and second.success
    # The second call ran while the first was waiting to retry.
    assert order == ["first", "second", "first"]
    engine.close()


def test_it_returns_parallel_results_in_call_order_with_their_ids(engine: ToolEngine) -> None:
    calls = [
        ToolCall("nap", {"seconds": 0.15}, "slow"),
        ToolCall("add", {"a": 1, "b": 2}, "fast"),
        ToolCall("nap", {"seconds": 0.01}, "quick"),
    ]
    results = engine.execute_many(calls)
    assert [r.call_id for r in results] == ["slow", "fast", "quick"]
    assert [r.data for r in results] == ["slept 0.15", {"sum": 3}, "slept 0.01"]


def test_it_keeps_other_results_when_one_call_fails_or_times_out(engine: ToolEngine) -> None:
    calls = [
        ToolCall("nap", {"seconds": 5}, "hangs"),
        ToolCall("explode", {}, "raises"),
        ToolCall("add", {"a": 1, "b": 1}, "works"),
        ToolCall("missing", {}, "unknown"),
    ]
    results = engine.execute_many(calls)
    kinds = [r.error.kind if r.error else None for r in results]
    assert kinds == [ErrorKind.TIMEOUT, ErrorKind.TOOL_ERROR, None, ErrorKind.NOT_FOUND]
    assert results[2].data == {"sum": 2}


def test_it_stops_after_an_error_when_asked(engine: ToolEngine, calls: list) -> None:
    results = engine.execute_many(
        [ToolCall("explode", {}, "1"), ToolCall("add", {"a": 1, "b": 1}, "2")],
        max_parallel=1,
        stop_on_error=True,
    )
    assert results[1].error.kind == ErrorKind.CANCELLED and calls == []


def test_it_serves_async_callers(engine: ToolEngine) -> None:
    async def call() -> Any:
        return await engine.execute_async(ToolCall("nap", {"seconds": 0.01}))

    assert asyncio.run(call()).data == "slept 0.01"


def test_it_keeps_a_good_result_when_recording_fails() -> None:
    def broken_recorder(spans: list) -> None:
        raise ConnectionError("database down")

    spec = ToolSpec("add", "Add", NUMBERS, lambda a, b: a + b)
    engine = ToolEngine(ToolRegistry([spec]), recorder=broken_recorder)
    assert engine.execute(ToolCall("add", {"a": 1, "b": 2})).data == 3
    engine.close()
