"""The engine honours its caller's stop signal: calls not started, running ones abandoned."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import pytest

from tests.tools_app.test_engine import Recorder
from tools_app.engine import CallContext, ToolEngine
from tools_app.registry import ToolRegistry
from tools_app.specs import ErrorKind, SideEffect, ToolCall, ToolFailure, ToolSpec

ANY = {"type": "object"}


class SlowTool:
    """A tool that runs for 5 s (well inside its 30 s timeout) and says when it starts and ends."""

    def __init__(self) -> None:
        self.started, self.finished = threading.Event(), threading.Event()
        self.release = threading.Event()  # ends the sleep early once the test is over
        self.calls = 0

    def sync(self) -> str:
        self.calls += 1
        self.started.set()
        self.release.wait(5)
        self.finished.set()
        return "done"

    async def coroutine(self) -> str:
        self.calls += 1
        self.started.set()
        await asyncio.sleep(5)
        self.finished.set()
        return "done"


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
def slow() -> Iterator[SlowTool]:
    tool = SlowTool()
    yield tool
    tool.release.set()


class FlakyTool:
    """A tool that fails in a retryable way, its task stopped while it fails."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.calls = 0

    def __call__(self) -> None:
        self.calls += 1
        self.stop.set()  # the operator presses Stop while this attempt fails
        raise ToolFailure("the backend is restarting", ErrorKind.UNAVAILABLE)


@pytest.fixture
def flaky() -> FlakyTool:
    return FlakyTool()


@pytest.fixture
def engine(recorder: Recorder, slow: SlowTool, flaky: FlakyTool) -> Iterator[ToolEngine]:
    registry = ToolRegistry(
        [
            ToolSpec("add", "Add", ANY, lambda a=1, b=1: a + b),
            ToolSpec("slow", "Sleeps 5 s", ANY, slow.sync, timeout_s=30, max_retries=2),
            ToolSpec("slow_async", "Sleeps 5 s", ANY, slow.coroutine, timeout_s=30),
            ToolSpec(
                "slow_write",
                "Writes for 5 s",
                ANY,
                slow.sync,
                timeout_s=30,
                side_effect=SideEffect.WRITE,
                idempotent=True,
                max_retries=2,
            ),  # fmt: skip
            ToolSpec("flaky", "Unavailable", ANY, flaky, max_retries=3),
        ]
    )
    engine = ToolEngine(registry, recorder=recorder, backoff_base_s=0.01)
    yield engine
    engine.close()


def stop_when(started: threading.Event, stop: threading.Event) -> threading.Thread:
    """Set stop from another thread as soon as the tool has started."""

    def press() -> None:
        if started.wait(10):
            stop.set()

    thread = threading.Thread(target=press, daemon=True)
    thread.start()
    return thread


def test_a_call_of_a_stopped_task_is_not_run_and_is_recorded_cancelled(
    engine: ToolEngine, recorder: Recorder, slow: SlowTool
) -> None:
    stop = threading.Event()
    stop.set()
    result = engine.execute(ToolCall("slow", {}, "call_1"), CallContext(stop=stop))
    assert not result.success
    assert result.error.kind is ErrorKind.CANCELLED
    assert result.error.message == "not run: the task was stopped"
    assert slow.calls == 0
    [span] = recorder.spans
    assert (span["tool_name"], span["status"], span["error_kind"]) == (
        "slow",
        "stopped",
        "cancelled",
    )


def test_a_stopped_turn_runs_none_of_its_calls(engine: ToolEngine, recorder: Recorder) -> None:
    stop = threading.Event()
    stop.set()
    calls = [ToolCall("add", {"a": 1, "b": 2}, "c1"), ToolCall("add", {}, "c2")]
    results = engine.execute_many(calls, CallContext(stop=stop))
    assert [(r.call_id, r.error.kind) for r in results] == [
        ("c1", ErrorKind.CANCELLED),
        ("c2", ErrorKind.CANCELLED),
    ]
    assert sorted(span["tool_call_id"] for span in recorder.spans) == ["c1", "c2"]


@pytest.mark.parametrize("tool", ["slow", "slow_async"])
def test_a_running_call_is_abandoned_when_its_task_is_stopped(
    engine: ToolEngine, recorder: Recorder, slow: SlowTool, tool: str
) -> None:
    stop = threading.Event()
    stop_when(slow.started, stop)
    result = engine.execute(ToolCall(tool, {}, "call_1"), CallContext(stop=stop))
    assert not slow.finished.is_set()  # returned while the tool was still sleeping
    assert result.error.kind is ErrorKind.CANCELLED
    assert result.error.message == "stopped while running: the task was stopped"
    assert result.metadata["attempts"] == 1  # slow may retry twice, but not after a stop
    assert slow.calls == 1
    [span] = recorder.spans
    assert (span["status"], span["error_kind"], span["attempt"]) == ("stopped", "cancelled", 1)


def test_a_call_that_changes_things_is_let_finish_and_recorded_as_it_ended(
    engine: ToolEngine, recorder: Recorder, slow: SlowTool
) -> None:
    stop = threading.Event()
    stop_when(slow.started, stop)
    # The write ends only once the task was stopped: the engine must wait it out.
    threading.Thread(target=lambda: stop.wait(10) and slow.release.set(), daemon=True).start()
    result = engine.execute(ToolCall("slow_write", {}, "call_1"), CallContext(stop=stop))
    assert stop.is_set() and slow.finished.is_set()  # waited for, not abandoned
    assert result.success and result.data == "done"
    [span] = recorder.spans
    assert (span["status"], span["attempt"]) == ("ok", 1)


def test_a_failed_attempt_is_not_retried_once_the_task_is_stopped(
    engine: ToolEngine, recorder: Recorder, flaky: FlakyTool
) -> None:
    result = engine.execute(ToolCall("flaky", {}, "call_1"), CallContext(stop=flaky.stop))
    assert result.error.kind is ErrorKind.UNAVAILABLE  # the attempt's own failure
    assert flaky.calls == 1  # three retries allowed, none made
    assert result.metadata["attempts"] == 1
    assert len(recorder.spans) == 1


def test_a_call_without_a_stop_signal_runs_as_before(engine: ToolEngine) -> None:
    context = CallContext()
    assert context.stop is None and not context.stopped
    result = engine.execute(ToolCall("add", {"a": 2, "b": 3}, "call_1"), context)
    assert result.success and result.data == 5


def test_the_stop_signal_is_no_part_of_a_context_comparison() -> None:
    assert CallContext(trace_id="t", stop=threading.Event()) == CallContext(trace_id="t")
