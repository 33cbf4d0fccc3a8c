"""Failure spirals: the pure rule, and detection as spans arrive (ingest API and in-process)."""

from __future__ import annotations

import secrets
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.conftest import make_span
from tools_app import site_engine
from tools_app.engine import CallContext, ToolEngine
from tools_app.registry import ToolRegistry
from tools_app.specs import ErrorKind, SideEffect, ToolCall, ToolSpec
from traces_app.ingest.recording import record_invocations
from traces_app.models import FailureSpiral, Invocation
from traces_app.schemas import InvocationIn
from traces_app.spirals import scanning as spiral_detection
from traces_app.spirals.detection import CallView, SpiralRule, arguments_fingerprint, find_spirals
from traces_app.tasks import rescan_spirals_task

T0 = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=1)
RULE = SpiralRule()


def call(
    tool: str = "search",
    status: str = "error",
    error_kind: str = "timeout",
    arguments: Any = None,
    chosen_by: str = "llm",
    **fields: Any,
) -> CallView:
    """Return a call of `tool`; later calls in a list get later times through `calls`."""
    return CallView(
        span_id=fields.pop("span_id", secrets.token_hex(8)),
        tool_name=tool,
        status=status,
        error_kind=error_kind if status == "error" else "",
        arguments={"q": "x"} if arguments is None else arguments,
        chosen_by=chosen_by,
        **fields,
    )


OK = {"status": "ok"}


@pytest.mark.parametrize(
    ("calls", "expected"),
    [
        pytest.param([call(), call()], [], id="two failures are not a spiral"),
        pytest.param(
            [call(), call(), call()], [("failing", 3, "timeout", "gave_up")], id="three failures"
        ),
        pytest.param(
            [
                call(arguments={"q": "a"}),
                call(arguments={"q": "b"}, error_kind="not_found"),
                call(arguments={"q": "c"}),
            ],
            [],
            id="error kinds differ",
        ),
        pytest.param(
            [call(), call(error_kind="not_found"), call()],
            [("loop", 3, "", "gave_up")],
            id="identical arguments failing differently are a loop",
        ),
        pytest.param(
            [call(arguments={"q": "a"}), call(arguments={"q": "b"}), call(arguments={"q": "c"})],
            [("failing", 3, "timeout", "gave_up")],
            id="near-same arguments: one value changed per step",
        ),
        pytest.param(
            [
                call(arguments={"q": "a", "n": 1}),
                call(arguments={"q": "b", "n": 2}),
                call(arguments={"q": "c", "n": 3}),
            ],
            [],
            id="two values changed per step is a new attempt, not a retry",
        ),
        pytest.param(
            [call(arguments={"q": "a"}), call(arguments={"p": "a"}), call(arguments={"p": "a"})],
            [],
            id="different keys break the run",
        ),
        pytest.param(
            [call(), call(tool="other", **OK), call(), call()],
            [("failing", 3, "timeout", "gave_up")],
            id="another tool in between does not break the run",
        ),
        pytest.param(
            [call(), call(), call(), call(**OK)],
            [("failing", 3, "timeout", "recovered")],
            id="a later success of the same tool recovers",
        ),
        pytest.param(
            [call(), call(), call(), call(tool="calc", chosen_by="planner", **OK)],
            [("failing", 3, "timeout", "planner_fallback")],
            id="a later planner-chosen call is a planner fallback",
        ),
        pytest.param(
            [call(**OK), call(**OK), call(**OK)],
            [("loop", 3, "", "ongoing")],
            id="identical successful calls are a loop",
        ),
        pytest.param(
            [call(**OK), call(**OK), call(**OK), call(arguments={"q": "y"}, **OK)],
            [("loop", 3, "", "repeated")],
            id="a loop of successes then another success is repeated calls, not a recovery",
        ),
        pytest.param(
            [call(), call(error_kind="not_found"), call(), call(arguments={"q": "y"}, **OK)],
            [("loop", 3, "", "recovered")],
            id="a loop of failures then a success recovers",
        ),
        pytest.param(
            [call("job_status", **OK), call("job_status", **OK), call("job_status", **OK)],
            [],
            id="polling an allowed tool is not a loop",
        ),
        pytest.param(
            [call("job_status"), call("job_status"), call("job_status")],
            [("failing", 3, "timeout", "gave_up")],
            id="an allowed tool failing alike is still a spiral",
        ),
        pytest.param(
            [call(arguments={"q": "a"}, **OK), call(arguments={"q": "b"}, **OK), call(**OK)],
            [],
            id="successful calls with changing arguments are fine",
        ),
        pytest.param(
            [call(tool_call_id="c1", attempt=n) for n in (1, 2, 3)],
            [],
            id="an engine retry of one call is one call",
        ),
        pytest.param(
            [call(attempt=n) for n in (1, 2, 3)],
            [],
            id="an engine retry of a call without an id is one call",
        ),
        pytest.param(
            [call(tool_call_id=f"c{i}", attempt=n) for i in (1, 2, 3) for n in (1, 2, 3)],
            [("failing", 3, "timeout", "gave_up")],
            id="three calls that each fail after retries are a spiral",
        ),
        pytest.param(
            [call(tool_call_id="c1") for _ in range(3)],
            [("failing", 3, "timeout", "gave_up")],
            id="a model that reuses its call id still makes new calls",
        ),
        pytest.param(
            [
                call(tool_call_id="c1", attempt=1),
                call(tool_call_id="c1", attempt=3),
                call(tool_call_id="c1", attempt=1),
            ],
            [("failing", 3, "timeout", "gave_up")],
            id="an attempt that does not follow its call's last one is a call of its own",
        ),
        pytest.param(
            [
                call(arguments={"q": "a"}, tool_call_id="c1"),
                call(arguments={"q": "b"}, tool_call_id="c2"),
                call(arguments={"q": "c"}, tool_call_id="c3"),
                call(arguments={"q": "c"}, tool_call_id="c3", attempt=2, **OK),
            ],
            [],
            id="a call whose retry succeeds is a success, so two failures are no spiral",
        ),
    ],
)
def test_find_spirals_table(calls: list[CallView], expected: list[tuple]) -> None:
    rule = SpiralRule(allow_tools=frozenset({"job_status"}))

    found = find_spirals(calls, rule)

    assert [(s.kind, s.attempts, s.error_kind, s.resolution) for s in found] == expected


def test_it_sums_what_a_spiral_wasted_and_what_changed() -> None:
    calls = [
        call(arguments={"q": "a", "n": 1}, tokens=10, latency_ms=100.0, cost_usd=0.01,
             started_at=T0, span_id="s1"),
        call(arguments={"q": "b", "n": 1}, tokens=20, latency_ms=200.0, cost_usd=0.02,
             started_at=T0 + timedelta(seconds=1), span_id="s2"),
        call(arguments={"q": "b", "n": 1}, tokens=30, latency_ms=300.0, cost_usd=0.03,
             started_at=T0 + timedelta(seconds=2), span_id="s3"),
        call(tool="other", tokens=1000, latency_ms=9999.0, **OK),
    ]  # fmt: skip

    (spiral,) = find_spirals(calls, RULE)

    assert (spiral.first_span_id, spiral.last_span_id) == ("s1", "s3")
    assert (spiral.first_index, spiral.last_index) == (0, 2)
    assert spiral.wasted_tokens == 60
    assert spiral.wasted_ms == 600.0
    assert spiral.wasted_cost_usd == pytest.approx(0.06)
    assert spiral.argument_changes == [["q"], []]
    assert spiral.started_at == T0
    assert spiral.ended_at == T0 + timedelta(seconds=2, milliseconds=300)


def test_it_honours_a_higher_threshold() -> None:
    assert find_spirals([call(), call(), call()], SpiralRule(min_repeats=4)) == []


def test_arguments_fingerprint_ignores_key_order_and_tells_values_apart() -> None:
    assert arguments_fingerprint({"a": 1, "b": 2}) == arguments_fingerprint({"b": 2, "a": 1})
    assert arguments_fingerprint({"a": 1}) != arguments_fingerprint({"a": 2})
    assert len(arguments_fingerprint(None)) == 16


def failing_spans(trace_id: str, count: int, start: int = 0) -> list[dict[str, Any]]:
    """Return `count` failing web_search calls of one trace, a second apart."""
    return [
        make_span(
            trace_id=trace_id,
            tool_name="web_search",
            arguments={"query": f"try {i}"},
            status="error",
            error_kind="timeout",
            result=None,
            started_at=(T0 + timedelta(seconds=i)).isoformat(),
            result_tokens=5,
        )
        for i in range(start, start + count)
    ]


def test_it_detects_a_spiral_posted_to_the_ingest_api(api) -> None:
    trace_id = secrets.token_hex(16)

    response = api.post("/invocations", json={"invocations": failing_spans(trace_id, 3)})

    assert response.status_code == 200
    spiral = FailureSpiral.objects.get(trace_id=trace_id)
    assert (spiral.tool_name, spiral.kind, spiral.error_kind) == (
        "web_search",
        "failing",
        "timeout",
    )
    assert (spiral.attempts, spiral.resolution, spiral.wasted_tokens) == (3, "gave_up", 15)
    assert spiral.argument_changes == [["query"], ["query"]]


def test_it_updates_a_spiral_when_another_attempt_arrives(api) -> None:
    trace_id = secrets.token_hex(16)
    api.post("/invocations", json={"invocations": failing_spans(trace_id, 3)})
    detected_at = FailureSpiral.objects.get(trace_id=trace_id).detected_at

    api.post("/invocations", json={"invocations": failing_spans(trace_id, 1, start=3)})

    spiral = FailureSpiral.objects.get(trace_id=trace_id)
    assert spiral.attempts == 4
    assert spiral.detected_at == detected_at


def test_it_marks_a_spiral_recovered_when_a_later_call_succeeds(api) -> None:
    trace_id = secrets.token_hex(16)
    api.post("/invocations", json={"invocations": failing_spans(trace_id, 3)})
    success = make_span(trace_id=trace_id, tool_name="web_search", started_at=at_seconds(10))

    api.post("/invocations", json={"invocations": [success]})

    assert FailureSpiral.objects.get(trace_id=trace_id).resolution == "recovered"


def test_it_labels_a_loop_of_successes_repeated_calls_not_recovered(
    transactional_db, admin_client
) -> None:
    trace_id = secrets.token_hex(16)
    same = [make_span(trace_id=trace_id, tool_name="web_search", arguments={"query": "mcp"},
                      started_at=at_seconds(i)) for i in range(3)]  # fmt: skip
    other = make_span(trace_id=trace_id, tool_name="web_search", arguments={"query": "a2a"},
                      started_at=at_seconds(5))  # fmt: skip
    record_invocations([InvocationIn.model_validate(span) for span in [*same, other]])

    spiral = FailureSpiral.objects.get(trace_id=trace_id)
    assert (spiral.kind, spiral.resolution) == ("loop", "repeated")
    page = admin_client.get(f"/spirals/{spiral.pk}/").content.decode()
    assert ">↻ Repeated calls</span>" in page and "Recovered" not in page
    assert "web_search was called with other arguments" in page


def test_it_creates_no_spiral_for_a_healthy_trace(api) -> None:
    trace_id = secrets.token_hex(16)
    spans = [
        make_span(trace_id=trace_id, arguments={"expression": f"{i}+1"}, started_at=at_seconds(i))
        for i in range(5)
    ]

    api.post("/invocations", json={"invocations": spans})

    assert not FailureSpiral.objects.filter(trace_id=trace_id).exists()


def test_it_creates_no_duplicate_when_a_batch_is_sent_again(api) -> None:
    trace_id = secrets.token_hex(16)
    batch = {"invocations": failing_spans(trace_id, 3)}

    api.post("/invocations", json=batch)
    api.post("/invocations", json=batch)

    assert FailureSpiral.objects.filter(trace_id=trace_id).count() == 1


def test_it_detects_a_loop_recorded_in_process_one_call_at_a_time(transactional_db) -> None:
    trace_id = secrets.token_hex(16)

    for i in range(3):
        span = make_span(trace_id=trace_id, started_at=at_seconds(i))
        record_invocations([InvocationIn.model_validate(span)])

    spiral = FailureSpiral.objects.get(trace_id=trace_id)
    assert (spiral.kind, spiral.attempts, spiral.tool_name) == ("loop", 3, "calculator")


def test_it_detects_failures_recorded_in_process(transactional_db) -> None:
    trace_id = secrets.token_hex(16)

    record_invocations([InvocationIn.model_validate(s) for s in failing_spans(trace_id, 3)])

    assert FailureSpiral.objects.get(trace_id=trace_id).attempts == 3


def test_it_reads_the_threshold_from_settings(transactional_db, settings) -> None:
    settings.ARES_SPIRAL_MIN_REPEATS = 4
    trace_id = secrets.token_hex(16)

    record_invocations([InvocationIn.model_validate(s) for s in failing_spans(trace_id, 3)])

    assert not FailureSpiral.objects.filter(trace_id=trace_id).exists()


def at_seconds(seconds: float) -> str:
    """Return the ISO time `seconds` after T0."""
    return (T0 + timedelta(seconds=seconds)).isoformat()


def test_the_rescan_finds_a_loop_whose_calls_reached_different_processes(
    transactional_db, monkeypatch
) -> None:
    trace_id = secrets.token_hex(16)
    now = datetime.now(UTC)
    for i in range(3):  # each call counted by a "new process" that never saw the others
        monkeypatch.setattr(
            spiral_detection, "_recent_calls", spiral_detection._RecentCalls(size=10)
        )
        span = make_span(trace_id=trace_id, started_at=(now + timedelta(seconds=i)).isoformat())
        record_invocations([InvocationIn.model_validate(span)])
    assert not FailureSpiral.objects.filter(trace_id=trace_id).exists()

    assert rescan_spirals_task.delay().get() == 1

    spiral = FailureSpiral.objects.get(trace_id=trace_id)
    assert (spiral.kind, spiral.attempts, spiral.resolution) == ("loop", 3, "ongoing")


def test_the_rescan_settles_a_loop_that_went_quiet(transactional_db) -> None:
    trace_id = secrets.token_hex(16)
    quiet_since = datetime.now(UTC) - spiral_detection.SPIRAL_QUIET - timedelta(minutes=1)
    for i in range(3):
        started = (quiet_since + timedelta(seconds=i)).isoformat()
        record_invocations(
            [InvocationIn.model_validate(make_span(trace_id=trace_id, started_at=started))]
        )
    assert FailureSpiral.objects.get(trace_id=trace_id).resolution == "ongoing"

    rescan_spirals_task.delay().get()

    # Three successes: a loop of them, not a tool given up on.
    assert FailureSpiral.objects.get(trace_id=trace_id).resolution == "repeated"


def test_the_rescan_settles_a_quiet_loop_with_failures_as_given_up(transactional_db) -> None:
    trace_id = secrets.token_hex(16)
    quiet_since = datetime.now(UTC) - spiral_detection.SPIRAL_QUIET - timedelta(minutes=1)
    statuses = [{"status": "error", "error_kind": "timeout", "result": None}, {}, {}]
    for i, status in enumerate(statuses):
        started = (quiet_since + timedelta(seconds=i)).isoformat()
        span = make_span(trace_id=trace_id, started_at=started, **status)
        record_invocations([InvocationIn.model_validate(span)])
    assert FailureSpiral.objects.get(trace_id=trace_id).resolution == "ongoing"

    rescan_spirals_task.delay().get()

    assert FailureSpiral.objects.get(trace_id=trace_id).resolution == "gave_up"


def test_it_counts_every_attempt_of_a_spiral_s_calls_as_wasted() -> None:
    spans = [
        call(tool_call_id=f"c{i}", attempt=n, tokens=1, latency_ms=10.0,
             started_at=T0 + timedelta(seconds=3 * i + n), span_id=f"s{i}{n}")
        for i in (1, 2, 3)
        for n in (1, 2)
    ]  # fmt: skip

    (spiral,) = find_spirals(spans, RULE)

    assert spiral.attempts == 3  # calls the chooser made
    assert (spiral.first_span_id, spiral.last_span_id) == ("s11", "s32")
    assert (spiral.first_index, spiral.last_index) == (0, 5)
    assert (spiral.wasted_tokens, spiral.wasted_ms) == (6, 60.0)
    assert spiral.ended_at == T0 + timedelta(seconds=11, milliseconds=10)


def slow_engine() -> ToolEngine:
    """Return an engine recording into the database, with a read-only tool that times out."""

    def slow_read(query: str) -> str:
        time.sleep(0.3)
        return query

    spec = ToolSpec(
        "slow_read", "Reads slowly", {"type": "object"}, slow_read,
        side_effect=SideEffect.READ_ONLY, timeout_s=0.05, max_retries=2,
    )  # fmt: skip
    return ToolEngine(ToolRegistry([spec]), recorder=site_engine.record_spans, backoff_base_s=0.01)


@pytest.mark.django_db(transaction=True)
def test_an_engine_retry_of_a_timed_out_read_makes_no_spiral() -> None:
    engine = slow_engine()
    context = CallContext(agent="reader")
    try:
        result = engine.execute(ToolCall("slow_read", {"query": "x"}, "call_1"), context)
    finally:
        engine.close()

    assert result.error.kind == ErrorKind.TIMEOUT and result.metadata["attempts"] == 3
    spans = Invocation.objects.filter(trace_id=context.trace_id).order_by("attempt")
    assert [(s.attempt, s.error_kind) for s in spans] == [(n, "timeout") for n in (1, 2, 3)]
    spiral_detection.detect_spirals(context.trace_id)  # as the rescan would; ingest did already
    assert not FailureSpiral.objects.filter(trace_id=context.trace_id).exists()


@pytest.mark.django_db(transaction=True)
def test_three_calls_that_each_time_out_after_retries_make_a_spiral() -> None:
    engine = slow_engine()
    context = CallContext(agent="reader")
    try:
        for i in range(3):
            engine.execute(ToolCall("slow_read", {"query": "x"}, f"call_{i}"), context)
    finally:
        engine.close()

    assert Invocation.objects.filter(trace_id=context.trace_id).count() == 9
    spiral = FailureSpiral.objects.get(trace_id=context.trace_id)
    assert (spiral.kind, spiral.attempts, spiral.error_kind, spiral.resolution) == (
        "failing", 3, "timeout", "gave_up",
    )  # fmt: skip
