"""The demo's calculator incident: what makes the planner's preference flip to add and back."""

from __future__ import annotations

from collections import Counter

from traces_app.demo_spans import CALCULATOR_INCIDENT, demo_traces
from traces_app.models import CALLER_FAULTS

TRACES = 10_000


def calls() -> list[tuple[bool, list[dict]]]:
    """Return each trace's tool spans, with whether the trace began in the calculator incident."""
    return [
        (CALCULATOR_INCIDENT[0] <= index / TRACES < CALCULATOR_INCIDENT[1],
         [span for span in trace if span["kind"] == "tool"])
        for index, trace in enumerate(demo_traces(TRACES, seed=3))
    ]  # fmt: skip


def test_the_calculator_fails_by_its_own_fault_only_in_its_incident() -> None:
    own = {True: Counter(), False: Counter()}  # in the incident or not: judged calls, failures
    for in_incident, spans in calls():
        for span in spans:
            if span["tool_name"] != "calculator" or span["error_kind"] in CALLER_FAULTS:
                continue
            own[in_incident]["calls"] += 1
            own[in_incident]["failures"] += span["status"] == "error"
            if span["status"] == "error":
                assert span["error_kind"] == "timeout" and span["latency_ms"] >= 10_000, span
    assert own[False]["calls"] > 1000 and own[False]["failures"] == 0
    assert own[True]["failures"] / own[True]["calls"] > 0.4


def test_the_planner_gives_add_a_call_of_its_own_only_while_the_calculator_is_down() -> None:
    chosen = {True: 0, False: 0}  # planner's add calls that are not a fallback after a failure
    for in_incident, spans in calls():
        for before, span in zip([None, *spans], spans, strict=False):
            if (span["tool_name"], span["chosen_by"]) != ("mcp.demo.add", "planner"):
                continue
            if before is not None and before["status"] == "error":
                continue  # the planner standing in for a failed call
            chosen[in_incident] += 1
    assert chosen[True] > 0 and chosen[False] == 0


def test_adds_failures_are_the_mcp_servers_and_name_the_call() -> None:
    failed = [
        span
        for _, spans in calls()
        for span in spans
        if span["tool_name"] == "mcp.demo.add" and span["status"] == "error"
    ]
    assert {span["error_kind"] for span in failed} == {"unavailable", "timeout"}
    for span in failed:
        if span["error_kind"] == "timeout":
            assert span["error_message"] == "mcp.demo.add did not answer within 20 s (timeout)"
            assert span["latency_ms"] >= 20_000
        else:
            sent = span["arguments"]
            assert f'{{"a": {sent["a"]}, "b": {sent["b"]}}}' in span["error_message"], span
