"""Spiral detection for a batch's traces at once finds what detection one trace at a time does."""

from __future__ import annotations

import random
import secrets
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from tests.conftest import make_span
from traces_app.ingest.recording import record_invocations
from traces_app.models import FailureSpiral
from traces_app.models.spiral_records import SPIRAL_VIEW_FIELDS
from traces_app.schemas import InvocationIn
from traces_app.spirals.scanning import (
    SPIRAL_WINDOW,
    detect_spirals,
    detect_spirals_in_traces,
)

pytestmark = pytest.mark.django_db

T0 = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=2)
Spans = list[dict[str, Any]]


def tool(trace_id: str, second: float, **fields: Any) -> dict[str, Any]:
    """Return a tool span of the trace `second` seconds after T0."""
    return make_span(
        trace_id=trace_id, started_at=(T0 + timedelta(seconds=second)).isoformat(), **fields
    )


def failure(trace_id: str, second: float, **fields: Any) -> dict[str, Any]:
    fields = {"tool_name": "web_search", "arguments": {"query": f"try {second}"}, **fields}
    return tool(trace_id, second, status="error", error_kind="timeout", result=None, **fields)


def llm(trace_id: str, second: float, **fields: Any) -> dict[str, Any]:
    fields = {"input_tokens": 100, "output_tokens": 20, "latency_ms": 400.0, **fields}
    return tool(trace_id, second, kind="llm", tool_name="", chosen_by=None, ran_on=None,
                model="gpt-4o", **fields)  # fmt: skip


def failing_then_more(trace_id: str, rng: random.Random) -> tuple[Spans, Spans]:
    """A failing spiral, stored; then more failures extend it."""
    first = [failure(trace_id, i) for i in range(3)]
    return first, [failure(trace_id, 3 + i) for i in range(rng.randint(1, 3))]


def failing_then_recovered(trace_id: str, rng: random.Random) -> tuple[Spans, Spans]:
    first = [failure(trace_id, i) for i in range(rng.randint(3, 5))]
    return first, [tool(trace_id, 10, tool_name="web_search")]


def loop_of_successes(trace_id: str, rng: random.Random) -> tuple[Spans, Spans]:
    repeats = rng.randint(3, 6)
    return [tool(trace_id, i) for i in range(repeats)], [tool(trace_id, repeats, tool_name="x")]


def late_earlier_failure(trace_id: str, rng: random.Random) -> tuple[Spans, Spans]:
    """A stored spiral whose first span changes: a failure that started before it arrives."""
    return [failure(trace_id, 10 + i) for i in range(3)], [failure(trace_id, 5)]


def turns_of_a_model(trace_id: str, rng: random.Random) -> tuple[Spans, Spans]:
    """Failures each asked for by an LLM turn, two turns at one instant, some by the planner."""
    spans = []
    for i in range(rng.randint(3, 5)):
        spans.append(llm(trace_id, 10 * i, input_tokens=rng.randint(1, 500)))
        spans.append(llm(trace_id, 10 * i, input_tokens=rng.randint(1, 500)))  # same start
        chooser = "planner" if i == 1 else "llm"
        spans.append(failure(trace_id, 10 * i + 1, chosen_by=chooser))
        spans.append(failure(trace_id, 10 * i + 1.5))  # two calls of one turn
    return spans[: len(spans) // 2], spans[len(spans) // 2 :]


def turns_after_the_calls(trace_id: str, rng: random.Random) -> tuple[Spans, Spans]:
    """More LLM turns after a trace's last tool call than the window reads: not its turns."""
    spans = [
        span for i in range(3) for span in (llm(trace_id, 2 * i), failure(trace_id, 2 * i + 1))
    ]
    chat = [llm(trace_id, 100 + i, input_tokens=rng.randint(1, 500)) for i in range(SPIRAL_WINDOW)]
    return spans, chat


def engine_retries(trace_id: str, rng: random.Random) -> tuple[Spans, Spans]:
    spans = [
        failure(trace_id, 3 * i + n, tool_call_id=f"c{i}", attempt=n, arguments={"q": "x"})
        for i in range(3)
        for n in (1, 2)
    ]
    return spans[:3], spans[3:]


def longer_than_the_window(trace_id: str, rng: random.Random) -> tuple[Spans, Spans]:
    """A spiral stored, then so many calls it is out of the window read: it is kept."""
    healthy = [tool(trace_id, 10 + i, arguments={"n": i}) for i in range(SPIRAL_WINDOW)]
    fetches = [failure(trace_id, 500 + i, tool_name="fetch") for i in range(3)]
    return [failure(trace_id, i) for i in range(3)], healthy + fetches


def healthy(trace_id: str, rng: random.Random) -> tuple[Spans, Spans]:
    calls = [tool(trace_id, i, arguments={"n": i}) for i in range(rng.randint(1, 6))]
    return calls, [llm(trace_id, 100)]


SCENARIOS: list[Callable[[str, random.Random], tuple[Spans, Spans]]] = [
    failing_then_more, failing_then_recovered, loop_of_successes, late_earlier_failure,
    turns_of_a_model, turns_after_the_calls, engine_retries, longer_than_the_window, healthy,
]  # fmt: skip


def store(spans: Spans) -> None:
    record_invocations([InvocationIn.model_validate(span) for span in spans])


@pytest.fixture
def traces_to_detect(settings: Any) -> list[str]:
    """Store traces of every scenario: their first spans detected, the rest not yet."""
    rng = random.Random(28)
    later: Spans = []
    trace_ids = []
    for index in range(len(SCENARIOS) * 4):
        trace_id = secrets.token_hex(16)
        first, rest = SCENARIOS[index % len(SCENARIOS)](trace_id, rng)
        store(first)  # ingest detects their spirals: those are stored before the rest
        later += rest
        trace_ids.append(trace_id)
    settings.ARES_SPIRAL_MIN_REPEATS = 1000  # ingest leaves the later spans undetected
    store(later)
    settings.ARES_SPIRAL_MIN_REPEATS = 3
    return trace_ids


def spiral_rows(known: set[tuple[str, str, str]] | None = None) -> list[tuple[Any, ...]]:
    """Return every stored spiral's fields but the moment its row was written.

    With `known`, the detected_at of a spiral not among them (a new one) is left out.
    """
    rows = []
    fields = ["trace_id", *SPIRAL_VIEW_FIELDS, "detected_at"]
    for row in FailureSpiral.objects.values_list(*fields):
        if known is not None and key(row) not in known:
            row = (*row[:-1], None)
        rows.append(row)
    return sorted(rows, key=repr)


def key(row: tuple[Any, ...]) -> tuple[str, str, str]:
    """Return a spiral row's (trace, tool, first span)."""
    return row[0], row[1], row[5]


def detected(detect: Callable[[list[str]], None], trace_ids: list[str]) -> list[tuple[Any, ...]]:
    """Return the spirals stored after `detect`, then undo what it wrote."""
    known = {key(row) for row in spiral_rows()}
    with transaction.atomic():
        detect(trace_ids)
        rows = spiral_rows(known)
        transaction.set_rollback(True)
    return rows


def one_at_a_time(trace_ids: list[str]) -> None:
    for trace_id in trace_ids:
        detect_spirals(trace_id)


def test_a_batch_stores_the_spirals_that_one_trace_at_a_time_does(traces_to_detect) -> None:
    stored = spiral_rows()

    per_trace = detected(one_at_a_time, traces_to_detect)
    batched = detected(detect_spirals_in_traces, traces_to_detect)

    assert batched == per_trace
    before, after = {key(row): row for row in stored}, {key(row): row for row in per_trace}
    assert {(row[2], row[9]) for row in per_trace} >= {  # (kind, resolution)
        ("failing", "gave_up"), ("failing", "recovered"), ("loop", "ongoing"),
    }  # fmt: skip
    assert any(after[k][4] > before[k][4] for k in before.keys() & after.keys())  # extended
    assert before.keys() - after.keys()  # replaced: a late span started a spiral earlier
    assert after.keys() - before.keys()  # new ones


def test_a_batch_keeps_what_each_trace_stored_when_nothing_new_came(traces_to_detect) -> None:
    one_at_a_time(traces_to_detect)
    stored = spiral_rows()

    assert detected(detect_spirals_in_traces, traces_to_detect) == stored


def queries_to_detect(trace_ids: list[str]) -> int:
    """Return how many queries detect_spirals_in_traces makes, the test's savepoint aside."""
    with CaptureQueriesContext(connection) as queries, transaction.atomic():
        detect_spirals_in_traces(trace_ids)
        transaction.set_rollback(True)
    savepoints = ("SAVEPOINT", "RELEASE SAVEPOINT", "ROLLBACK TO SAVEPOINT")
    return sum(not query["sql"].startswith(savepoints) for query in queries.captured_queries)


def test_a_batch_s_queries_do_not_grow_with_its_traces(traces_to_detect) -> None:
    few = traces_to_detect[: len(SCENARIOS)]

    # The traces' bounds, tool calls, LLM turns; the spirals' upsert, look-up, stale delete.
    assert queries_to_detect(traces_to_detect) == queries_to_detect(few) == 6
