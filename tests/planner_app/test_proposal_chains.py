"""Workflow proposals: recurring tool chains in recorded traces become workflows that run.

The first tests build traces from real tool results (the engine, no database); the
site tests record real spans through the engine and the ingest API, read them back as
traffic, save the proposal as a Workflow row and run it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from planner_app.proposals import chains
from planner_app.proposals.chains import propose_workflows
from planner_app.proposals.traffic import Call, Served
from planner_app.workflows.graph import validate_workflow, workflow_from_json
from tools_app.configured_builtins import builtin_specs
from tools_app.engine import ToolEngine
from tools_app.registry import ToolRegistry
from tools_app.specs import ToolCall

START = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
DATES = ["2024-03-10", "2025-01-28", "2023-07-04", "2024-12-30", "2026-02-14"]
DATE_CHAIN = ("datetime", "string_utils", "hash_tool")


@pytest.fixture(scope="module")
def engine() -> Iterator[ToolEngine]:
    """A real engine over the built-in tools, recording nothing."""
    engine = ToolEngine(ToolRegistry(builtin_specs()))
    yield engine
    engine.close()


class Recorder:
    """Make traces of real tool calls, as the traffic reader would return them."""

    def __init__(self, engine: ToolEngine) -> None:
        self.engine, self.traces = engine, 0

    def call(self, tool: str, arguments: dict[str, Any], chosen_by: str = "llm") -> Call:
        result = self.engine.execute(ToolCall(tool, arguments, "call"))
        at = START + timedelta(minutes=self.traces)
        return Call(tool, chosen_by, result.success, arguments, result.data, at)

    def trace(self, request: str, calls: list[Call]) -> Served:
        self.traces += 1
        at = START + timedelta(minutes=self.traces)
        return Served(f"{self.traces:032x}", request, at, tuple(calls))

    def date_chain(self, date: str, *, noise: bool = False, chosen_by: str = "llm") -> Served:
        """datetime adds 5 days, string_utils drops the dashes, hash_tool hashes the result."""
        moved = self.call("datetime", {"operation": "add", "datetime": date, "days": 5}, chosen_by)
        calls = [moved]
        if noise:
            calls.append(self.call("calculator", {"expression": "17 * 23"}, chosen_by))
        digits = self.call(
            "string_utils",
            {"operation": "replace", "text": moved.result["date"], "old": "-", "new": ""},
            chosen_by,
        )
        calls.append(digits)
        if noise:
            calls.append(self.call("string_utils", {"operation": "upper", "text": "noise"}))
        calls.append(
            self.call("hash_tool", {"operation": "sha256", "text": digits.result["result"]})
        )
        return self.trace(f"a code for {date} plus five days", calls)


@pytest.fixture
def recorder(engine: ToolEngine) -> Recorder:
    return Recorder(engine)


@pytest.fixture(scope="module")
def registry(engine: ToolEngine) -> ToolRegistry:
    return engine.registry


def only(candidates: list[Any]) -> Any:
    assert len(candidates) == 1, [candidate.key for candidate in candidates]
    return candidates[0]


def test_it_proposes_a_recurring_chain_with_its_data_flow(
    recorder: Recorder, registry: ToolRegistry
) -> None:
    traffic = [recorder.date_chain(date) for date in DATES[:4]]
    candidate = only(propose_workflows(traffic, registry))
    assert (candidate.kind, candidate.key) == (
        "workflow",
        "workflow:datetime>string_utils>hash_tool",
    )
    assert candidate.target == "datetime-string_utils-hash_tool"
    steps = candidate.workflow["steps"]
    assert [step["tool"] for step in steps] == list(DATE_CHAIN)
    assert steps[1]["arguments"] == {
        "operation": "replace", "text": "{$s1.date}", "old": "-", "new": "",
    }  # fmt: skip
    assert steps[2]["arguments"] == {"operation": "sha256", "text": "{$s2.result}"}
    assert "name" not in candidate.workflow
    workflow = workflow_from_json({**candidate.workflow, "name": candidate.target})
    assert validate_workflow(workflow, registry) == []
    assert candidate.backtest["traces"] == 4 and candidate.backtest["explained"] == 4
    links = candidate.backtest["links"]
    assert [(link["step"], link["argument"], link["held"]) for link in links] == [
        ("s2", "text", 4), ("s3", "text", 4),
    ]  # fmt: skip
    # The date varied and came from no output: an input, holding the newest value.
    [varied] = candidate.backtest["inputs"]
    assert (varied["step"], varied["argument"], varied["distinct"]) == ("s1", "datetime", 4)
    assert steps[0]["arguments"]["datetime"] == DATES[3]
    assert "s1.datetime" in candidate.why
    assert [served.trace_id for served in candidate.evidence] == [
        served.trace_id for served in reversed(traffic)
    ]


def test_it_proposes_nothing_for_chains_seen_fewer_than_three_times(
    recorder: Recorder, registry: ToolRegistry
) -> None:
    traffic = [recorder.date_chain(date) for date in DATES[:2]]
    traffic.append(
        recorder.trace(
            "one-off", [recorder.call("string_utils", {"operation": "upper", "text": "abc"})]
        )
    )
    assert propose_workflows(traffic, registry) == []


def test_it_finds_the_chain_through_calls_between_its_steps(
    recorder: Recorder, registry: ToolRegistry
) -> None:
    traffic = [recorder.date_chain(date, noise=index % 2 == 0) for index, date in enumerate(DATES)]
    candidate = only(propose_workflows(traffic, registry))
    assert [step["tool"] for step in candidate.workflow["steps"]] == list(DATE_CHAIN)
    assert candidate.backtest["traces"] == 5 and candidate.backtest["explained"] == 5


def test_unrelated_calls_in_the_same_order_are_no_chain(
    recorder: Recorder, registry: ToolRegistry
) -> None:
    """Calls that share no data are not a chain, however often they come in that order."""
    traffic = [
        recorder.trace(
            f"two things {n}",
            [
                recorder.call("calculator", {"expression": f"{n} * 1000 + 7"}),
                recorder.call("string_utils", {"operation": "upper", "text": f"word {n}"}),
                recorder.call("hash_tool", {"operation": "md5", "text": f"other {n}"}),
            ],
        )
        for n in range(11, 16)
    ]
    assert propose_workflows(traffic, registry) == []


@pytest.mark.parametrize("chosen_by", ["planner", "workflow"])
def test_it_leaves_out_calls_a_planner_or_workflow_chose(
    recorder: Recorder, registry: ToolRegistry, chosen_by: str
) -> None:
    """A workflow's own runs must not propose it again, nor the planner's plans."""
    traffic = [recorder.date_chain(date, chosen_by=chosen_by) for date in DATES]
    assert propose_workflows(traffic, registry) == []


def test_it_leaves_out_failed_calls(recorder: Recorder, registry: ToolRegistry) -> None:
    traffic = []
    for date in DATES[:4]:
        served = recorder.date_chain(date)
        failed = recorder.call("hash_tool", {"operation": "base64_decode", "text": "%%%"})
        assert not failed.ok
        traffic.append(Served(served.trace_id, served.request, served.at, (*served.calls, failed)))
    candidate = only(propose_workflows(traffic, registry))
    assert [step["tool"] for step in candidate.workflow["steps"]] == list(DATE_CHAIN)


def test_it_interpolates_an_output_inside_longer_text(
    recorder: Recorder, registry: ToolRegistry
) -> None:
    traffic = []
    for price in (12.5, 40.25, 7.75):
        document = json.dumps({"order": {"price": price, "currency": "EUR"}})
        found = recorder.call(
            "json_tools", {"operation": "query", "text": document, "pointer": "/order/price"}
        )
        total = recorder.call(
            "calculator", {"expression": f"{json.dumps(found.result['value'])} * 3"}
        )
        label = recorder.call(
            "hash_tool", {"operation": "md5", "text": f"total:{json.dumps(total.result['result'])}"}
        )
        traffic.append(recorder.trace(f"label for {price}", [found, total, label]))
    candidate = only(propose_workflows(traffic, registry))
    steps = candidate.workflow["steps"]
    assert steps[1]["arguments"] == {"expression": "{$s1.value} * 3"}
    assert steps[2]["arguments"] == {"operation": "md5", "text": "total:{$s2.result}"}
    assert candidate.backtest["explained"] == 3


def test_it_keeps_the_most_common_value_of_a_constant(
    recorder: Recorder, registry: ToolRegistry
) -> None:
    """An argument that came from no output holds the value it had most often."""
    traffic = []
    for index, date in enumerate(DATES):
        served = recorder.date_chain(date)
        if index == len(DATES) - 1:  # the newest uses md5 once; sha256 is the common one
            digits = served.calls[1]
            odd = recorder.call("hash_tool", {"operation": "md5", "text": digits.result["result"]})
            served = Served(served.trace_id, served.request, served.at, (*served.calls[:2], odd))
        traffic.append(served)
    candidate = only(propose_workflows(traffic, registry))
    assert candidate.workflow["steps"][2]["arguments"]["operation"] == "sha256"
    assert {item["argument"] for item in candidate.backtest["inputs"]} == {"datetime", "operation"}


def test_a_reference_whose_types_do_not_fit_is_dropped(registry: ToolRegistry) -> None:
    """An outside agent said it passed a number as text: no reference, so no chain."""
    traffic = []
    for n in (1234, 5678, 9012):
        total = Call("calculator", "external", True, {"expression": f"{n}+0"},
                     {"result": n, "expression": f"{n}+0"}, START)  # fmt: skip
        shout = Call("string_utils", "external", True, {"operation": "upper", "text": n},
                     {"operation": "upper", "result": str(n)}, START)  # fmt: skip
        traffic.append(Served(f"{n:032x}", "shout", START, (total, shout)))
    [(tools, found)] = chains.recurring_chains(traffic).items()
    flow = chains.data_flow(tools, found, registry)
    assert flow.links == []
    [dropped] = flow.dropped
    assert (dropped["step"], dropped["argument"], dropped["reference"]) == (
        "s2",
        "text",
        "{$s1.result}",
    )
    assert "expects string" in dropped["problem"]
    assert propose_workflows(traffic, registry) == []


def test_it_proposes_nothing_for_a_tool_the_registry_does_not_have(registry: ToolRegistry) -> None:
    traffic = []
    for n in range(3):
        found = Call("crm.lookup", "external", True, {"email": f"user{n}@example.com"},
                     {"customer_id": f"cust-{n}-xyz"}, START)  # fmt: skip
        hashed = Call("hash_tool", "external", True,
                      {"operation": "sha256", "text": f"cust-{n}-xyz"},
                      {"result": f"digest-{n}"}, START)  # fmt: skip
        traffic.append(Served(f"{n:032x}", "look up", START, (found, hashed)))
    assert list(chains.recurring_chains(traffic)) == [("crm.lookup", "hash_tool")]
    assert propose_workflows(traffic, registry) == []


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(None, id="null"),
        pytest.param(True, id="true"),
        pytest.param(0, id="zero"),
        pytest.param(7, id="a small whole number"),
        pytest.param("ok", id="a short string"),
        pytest.param("   ", id="blank"),
        pytest.param([], id="an empty list"),
        pytest.param({"a": 1}, id="an object of small numbers"),
    ],
)
def test_values_that_say_little_never_link_two_calls(value: Any, registry: ToolRegistry) -> None:
    traffic = [
        Served(f"{n:032x}", "r", START, (
            Call("json_tools", "llm", True,
                 {"operation": "query", "text": f'{{"n": {n}}}', "pointer": "/n"},
                 {"operation": "query", "value": value}, START),
            Call("string_utils", "llm", True, {"operation": "upper", "text": value, "items": [n]},
                 {"operation": "upper", "result": "x"}, START),
        ))
        for n in range(4)
    ]  # fmt: skip
    assert chains.recurring_chains(traffic) == {}


def test_a_number_links_only_as_a_whole_number_in_text(registry: ToolRegistry) -> None:
    """37 is not in "1375 + 2", nor 37.5 in "37.55 * 2"; it is in "37 + 2"."""

    def pair(result: float, expression: str) -> Served:
        first = Call("calculator", "llm", True, {"expression": "x"}, {"result": result}, START)
        second = Call("calculator", "llm", True, {"expression": expression}, {"result": 1}, START)
        return Served("0" * 32, "r", START, (first, second))

    assert chains._chains_of(pair(37, "1375 + 2")) == {}
    assert chains._chains_of(pair(37.5, "37.55 * 2")) == {}
    assert list(chains._chains_of(pair(37, "37 + 2"))) == [("calculator", "calculator")]
    assert list(chains._chains_of(pair(37, "(37) + 2."))) == [("calculator", "calculator")]
    assert list(chains._chains_of(pair(37, "合计37元"))) == [("calculator", "calculator")]
    assert chains._chains_of(pair(37, "x37")) == {}


def test_an_echo_of_the_producers_own_arguments_is_no_link() -> None:
    """Both calls got the text from the user; the first only echoed it back."""
    first = Call(
        "calculator",
        "llm",
        True,
        {"expression": "12*12"},
        {"result": 144, "expression": "12*12"},
        START,
    )
    second = Call(
        "hash_tool", "llm", True, {"operation": "md5", "text": "12*12"}, {"result": "d"}, START
    )
    assert chains._chains_of(Served("0" * 32, "r", START, (first, second))) == {}


def test_a_longer_chain_hides_its_parts_seen_as_often(
    recorder: Recorder, registry: ToolRegistry
) -> None:
    traffic = [recorder.date_chain(date) for date in DATES[:3]]
    assert {("datetime", "string_utils"), ("string_utils", "hash_tool")} <= set(
        chains.recurring_chains(traffic)
    )
    keys = [candidate.key for candidate in propose_workflows(traffic, registry)]
    assert keys == ["workflow:datetime>string_utils>hash_tool"]


def test_a_part_seen_more_often_than_the_whole_is_proposed_too(
    recorder: Recorder, registry: ToolRegistry
) -> None:
    traffic = [recorder.date_chain(date) for date in DATES[:3]]
    for text in ("alpha-beta", "gamma-delta", "epsilon-zeta", "eta-theta"):
        digits = recorder.call(
            "string_utils", {"operation": "replace", "text": text, "old": "-", "new": ""}
        )
        hashed = recorder.call(
            "hash_tool", {"operation": "sha256", "text": digits.result["result"]}
        )
        traffic.append(recorder.trace(f"hash {text}", [digits, hashed]))
    keys = [candidate.key for candidate in propose_workflows(traffic, registry)]
    assert keys == ["workflow:string_utils>hash_tool", "workflow:datetime>string_utils>hash_tool"]


def test_a_recorded_value_that_reads_as_a_reference_is_not_proposed(
    recorder: Recorder, registry: ToolRegistry
) -> None:
    traffic = []
    for date in DATES[:3]:
        served = recorder.date_chain(date)
        moved, digits, _ = served.calls
        hashed = recorder.call(
            "hash_tool", {"operation": "sha256", "text": digits.result["result"]}
        )
        trick = recorder.call(
            "string_utils",
            {
                "operation": "replace",
                "text": hashed.result["result"],
                "old": "{$s1.date}",
                "new": "x",
            },
        )
        traffic.append(
            Served(served.trace_id, served.request, served.at, (moved, digits, hashed, trick))
        )
    keys = [candidate.key for candidate in propose_workflows(traffic, registry)]
    assert "workflow:datetime>string_utils>hash_tool>string_utils" not in keys
    assert keys == ["workflow:datetime>string_utils>hash_tool"]


def test_a_big_dense_trace_is_read_within_its_bounds(
    recorder: Recorder, registry: ToolRegistry
) -> None:
    """Every call feeding every later one: the chains read stay within the caps."""
    calls = tuple(
        Call("string_utils", "llm", True,
             {"operation": "join", "items": [f"value-{i}" for i in range(n)]},
             {"operation": "join", "result": f"value-{n}"}, START)
        for n in range(300)
    )  # fmt: skip
    found = chains._chains_of(Served("0" * 32, "big", START, calls))
    assert set(found) == {("string_utils",) * length for length in range(2, chains.MAX_LENGTH + 1)}


def test_long_tool_names_make_bounded_names_and_keys() -> None:
    tools = tuple(f"mcp.server_{n}/{'x' * 80}" for n in range(5))
    name, key = chains.workflow_name(tools), chains.proposal_key(tools)
    assert len(name) <= 100 and len(key) <= 300
    assert name != chains.workflow_name(tools[::-1])
    assert key.startswith("workflow:mcp.server_0/")
    assert "/" not in name


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


# The site: spans recorded by the engine and the ingest API, read back, saved and run --------


def record_date_chain(date: str, agent: str = "code-agent") -> str:
    """Make the date chain's three calls through the site's engine, as an LLM agent would."""
    from tools_app.engine import CallContext
    from tools_app.site_engine import get_engine

    engine = get_engine()
    context = CallContext(agent=agent, chosen_by="llm", request_text=f"the code for {date} + 5")
    moved = engine.execute(
        ToolCall("datetime", {"operation": "add", "datetime": date, "days": 5}, "c1"), context
    )
    engine.execute(ToolCall("calculator", {"expression": "2 ** 16"}, "noise"), context)
    digits = engine.execute(
        ToolCall("string_utils", {"operation": "replace", "text": moved.data["date"],
                                  "old": "-", "new": ""}, "c2"), context,
    )  # fmt: skip
    engine.execute(
        ToolCall("hash_tool", {"operation": "sha256", "text": digits.data["result"]}, "c3"), context
    )
    return context.trace_id


DOCUMENTED = {"steps": [
    {"id": "s1", "tool": "datetime",
     "arguments": {"operation": "add", "datetime": "2024-02-26", "days": 5}},
    {"id": "s2", "tool": "string_utils",
     "arguments": {"operation": "replace", "text": "{$s1.date}", "old": "-", "new": ""}},
    {"id": "s3", "tool": "hash_tool", "arguments": {"operation": "sha256", "text": "{$s2.result}"}},
]}  # fmt: skip


def test_the_documented_workflow_is_the_one_proposed() -> None:
    text = (Path(__file__).resolve().parents[2] / "docs" / "proposals.md").read_text()
    block = text.split("## Workflow proposals", 1)[1].split("```json\n", 1)[1].split("```", 1)[0]
    assert json.loads(block) == {"name": "datetime-string_utils-hash_tool", **DOCUMENTED}


def saved_run(candidate: Any) -> Any:
    """Save the proposal's workflow as apply_proposal does, run it here, and return the run."""
    from planner_app.models import Workflow
    from planner_app.tasks import start_run

    workflow = Workflow(name=candidate.target, description=candidate.title,
                        definition=candidate.workflow)  # fmt: skip
    workflow.full_clean()
    workflow.save()
    return start_run(workflow, background=False)


def run_arguments(run: Any) -> list[tuple[str, dict[str, Any], Any]]:
    """Return the tool, arguments and result of each span the run recorded, in order."""
    from traces_app.models import Invocation

    spans = Invocation.objects.filter(trace_id=run.trace_id).order_by("started_at", "span_id")
    return [(span.tool_name, span.arguments, span.result) for span in spans]


@pytest.mark.django_db(transaction=True)
def test_a_chain_recorded_by_the_engine_is_proposed_saved_and_run(default_rules: None) -> None:
    from planner_app.proposals.traffic import recorded_traffic
    from tools_app.site_engine import get_engine

    for date in DATES[:3]:
        record_date_chain(date)
    record_date_chain("2024-02-26")  # the newest: 2024-03-02 after five days
    candidate = only(propose_workflows(recorded_traffic(), get_engine().registry))
    assert candidate.key == "workflow:datetime>string_utils>hash_tool"
    assert candidate.backtest["explained"] == 4
    assert candidate.workflow == DOCUMENTED  # docs/proposals.md shows it
    run = saved_run(candidate)
    assert run.status == "success", run.progress
    # The same data flow: each step got the output of the one before, as the agent did.
    [(_, moved_args, moved), (_, digits_args, digits), (_, hashed_args, hashed)] = run_arguments(
        run
    )
    assert moved_args == {"operation": "add", "datetime": "2024-02-26", "days": 5}
    assert digits_args["text"] == moved["date"] == "2024-03-02"
    assert hashed_args["text"] == digits["result"] == "20240302"
    assert hashed["result"] == sha256("20240302")


@pytest.mark.django_db(transaction=True)
def test_a_proposed_workflows_own_runs_propose_nothing_more(default_rules: None) -> None:
    from planner_app.proposals.traffic import recorded_traffic
    from tools_app.site_engine import get_engine

    for date in DATES[:3]:
        record_date_chain(date)
    candidate = only(propose_workflows(recorded_traffic(), get_engine().registry))
    run = saved_run(candidate)
    for _ in range(3):
        run = saved_run_again(run)
    traffic = recorded_traffic()
    assert sum(served.request == candidate.title for served in traffic) == 4
    # Three agent traces still make the one proposal; four workflow runs add nothing.
    again = only(propose_workflows(traffic, get_engine().registry))
    assert again.key == candidate.key and again.backtest["traces"] == 3


def saved_run_again(run: Any) -> Any:
    from planner_app.tasks import start_run

    return start_run(run.workflow, background=False)


def report_chain(api: Any, price: float, at: datetime, engine: ToolEngine) -> None:
    """An outside agent reports its three calls (real results) through the ingest API."""
    trace_id = hashlib.md5(str(price).encode()).hexdigest()
    document = json.dumps({"order": {"price": price, "currency": "EUR"}})
    steps = [("json_tools", {"operation": "query", "text": document, "pointer": "/order/price"})]
    spans = []
    for index in range(3):
        tool, arguments = steps[index]
        result = engine.execute(ToolCall(tool, arguments, f"call_{index}")).data
        spans.append({
            "trace_id": trace_id, "span_id": f"{index + 1:016x}", "kind": "tool",
            "tool_name": tool, "tool_call_id": f"call_{index}", "chosen_by": "external",
            "agent": "pricing-bot", "request_text": f"label the order at {price}",
            "arguments": arguments, "result": result, "status": "ok",
            "started_at": (at + timedelta(seconds=index)).isoformat(), "latency_ms": 2.5,
        })  # fmt: skip
        if index == 0:
            steps.append(("calculator", {"expression": f"{json.dumps(result['value'])} * 3"}))
        elif index == 1:
            text = f"total:{json.dumps(result['result'])}"
            steps.append(("hash_tool", {"operation": "md5", "text": text}))
    response = api.post("/invocations", json={"invocations": spans})
    assert response.status_code == 200 and response.json()["accepted"] == 3, response.text


@pytest.mark.django_db(transaction=True)
def test_a_chain_reported_through_the_ingest_api_is_proposed_and_runs(
    api: Any, engine: ToolEngine, default_rules: None
) -> None:
    from planner_app.proposals.traffic import recorded_traffic
    from tools_app.site_engine import get_engine

    now = datetime.now(UTC).replace(microsecond=0)
    for minutes, price in enumerate((12.5, 40.25, 7.75)):
        report_chain(api, price, now - timedelta(minutes=10 - minutes), engine)
    candidate = only(propose_workflows(recorded_traffic(), get_engine().registry))
    assert candidate.key == "workflow:json_tools>calculator>hash_tool"
    steps = candidate.workflow["steps"]
    assert steps[1]["arguments"] == {"expression": "{$s1.value} * 3"}
    assert steps[2]["arguments"] == {"operation": "md5", "text": "total:{$s2.result}"}
    assert [item["argument"] for item in candidate.backtest["inputs"]] == ["text"]
    run = saved_run(candidate)
    assert run.status == "success", run.progress
    [(_, _, found), (_, total_args, total), (_, label_args, label)] = run_arguments(run)
    assert found["value"] == 7.75  # the newest order's document
    assert total_args == {"expression": "7.75 * 3"} and total["result"] == 23.25
    assert label_args["text"] == "total:23.25"
    assert label["result"] == hashlib.md5(b"total:23.25").hexdigest()


@pytest.mark.django_db(transaction=True)
def test_the_store_keeps_a_workflow_proposal_that_applies_as_a_workflow_that_runs(
    default_rules: None,
) -> None:
    from planner_app.models import Proposal
    from planner_app.proposals.store import apply_proposal, refresh_proposals
    from planner_app.tasks import start_run

    for date in DATES[:3]:
        record_date_chain(date)
    refresh_proposals()
    proposal = Proposal.objects.get(kind="workflow")
    assert proposal.key == "workflow:datetime>string_utils>hash_tool"
    assert proposal.evidence_count == 3
    assert [entry["tools"] for entry in proposal.evidence] == [
        ["datetime", "calculator", "string_utils", "hash_tool"]
    ] * 3
    assert proposal.backtest["explained"] == 3
    applied = apply_proposal(proposal.pk)
    assert applied.workflow.name == "datetime-string_utils-hash_tool"
    assert applied.workflow.definition == proposal.workflow_definition
    run = start_run(applied.workflow, background=False)
    assert run.status == "success", run.progress
    *_, (_, _, hashed) = run_arguments(run)
    assert hashed["result"] == sha256("20230709")  # the newest: 2023-07-04 + 5 days


@pytest.mark.django_db(transaction=True)
def test_a_chain_a_saved_workflow_runs_already_is_not_proposed_again(
    default_rules: None,
) -> None:
    """Agents still running a saved workflow's chain by hand get no second copy of it."""
    from planner_app.models import Proposal, Workflow
    from planner_app.proposals.store import refresh_proposals

    for date in DATES[:3]:
        record_date_chain(date)
    refresh_proposals()
    definition = Proposal.objects.get(kind="workflow").workflow_definition
    Proposal.objects.all().delete()
    saved = Workflow.objects.create(name="dates by hand", definition=definition)
    refresh_proposals()
    assert not Proposal.objects.filter(kind="workflow").exists()
    saved.delete()
    refresh_proposals()
    assert Proposal.objects.get(kind="workflow").key == "workflow:datetime>string_utils>hash_tool"


def test_a_link_that_holds_in_most_traces_is_kept_and_counted(
    recorder: Recorder, registry: ToolRegistry
) -> None:
    """In one of four traces the agent hashed the dashed date: that trace is not explained."""
    traffic = []
    for index, date in enumerate(DATES[:4]):
        served = recorder.date_chain(date)
        if index == 0:
            moved, digits, _ = served.calls
            typed = recorder.call(
                "hash_tool", {"operation": "sha256", "text": moved.result["date"]}
            )
            served = Served(served.trace_id, served.request, served.at, (moved, digits, typed))
        traffic.append(served)
    candidate = only(propose_workflows(traffic, registry))
    assert candidate.workflow["steps"][2]["arguments"]["text"] == "{$s2.result}"
    links = {link["step"]: link["held"] for link in candidate.backtest["links"]}
    assert links == {"s2": 4, "s3": 3}
    assert (candidate.backtest["traces"], candidate.backtest["explained"]) == (4, 3)


def test_a_chain_whose_traces_disagree_on_the_data_flow_is_not_proposed(
    recorder: Recorder, registry: ToolRegistry
) -> None:
    """Each trace hashed a different output of the datetime call: no link recurs."""
    traffic = []
    for date, field in zip(DATES[:3], ("date", "datetime", "weekday"), strict=True):
        moved = recorder.call("datetime", {"operation": "add", "datetime": date, "days": 5})
        hashed = recorder.call("hash_tool", {"operation": "sha256", "text": moved.result[field]})
        traffic.append(recorder.trace(f"hash {date}", [moved, hashed]))
    assert list(chains.recurring_chains(traffic)) == [("datetime", "hash_tool")]
    assert propose_workflows(traffic, registry) == []


def test_a_chain_seen_often_is_read_from_its_newest_traces(
    recorder: Recorder, registry: ToolRegistry, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(chains, "FLOW_TRACES", 3)
    traffic = [recorder.date_chain(date) for date in DATES]
    candidate = only(propose_workflows(traffic, registry))
    assert candidate.backtest["traces"] == 5 and len(candidate.evidence) == 5
    assert (candidate.backtest["read"], candidate.backtest["explained"]) == (3, 3)
    [varied] = candidate.backtest["inputs"]
    assert sorted(varied["examples"]) == sorted(DATES[2:])  # the newest three
    assert "holds in 3 of the newest 3 of them" in candidate.why
    assert candidate.title == "New workflow: datetime → string_utils → hash_tool"
