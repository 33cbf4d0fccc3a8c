"""The demo's competing tools: calculator and the demo MCP server's add, and the flip between them.

The demo server really runs here (a stdio child of this Python), as it does under `make run`.
"""

from __future__ import annotations

import hashlib
import io
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.core.management import call_command
from django.utils import timezone

from planner_app import ruleset_versions
from planner_app.evidence import capability_evidence, capability_overview
from planner_app.models import CapabilityMapping, RuleSetVersion
from planner_app.ruleset_versions import current_ruleset
from planner_app.services import plan_request
from tests.conftest import make_span
from tools_app import site_engine
from tools_app.models import McpServer
from tools_app.specs import ToolCall
from traces_app.ingest.recording import record_invocations
from traces_app.models import Invocation, caller_fault_q
from traces_app.rollups.ranges import parse_range
from traces_app.schemas import InvocationIn

pytestmark = pytest.mark.django_db(transaction=True)

ADD = "mcp.demo.add"
SHA256 = "mcp.demo.sha256"


@pytest.fixture(autouse=True)
def fresh_engine_and_rules(settings: Any, default_rules: None) -> Iterator[None]:
    """See every new row and call at once; stop the demo server's session afterwards."""
    settings.ARES_TOOL_SETTINGS_CHECK_S = 0
    settings.ARES_PLANNER_EVIDENCE_TTL_S = 0
    ruleset_versions._cache.update(ruleset=None, stamp=None, checked_at=0.0)
    yield
    site_engine.shutdown()
    ruleset_versions._cache.update(ruleset=None, stamp=None, checked_at=0.0)


def demo(*args: str) -> str:
    out = io.StringIO()
    call_command("ares_demo", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def demo_mappings() -> set[tuple[str, str]]:
    mappings = CapabilityMapping.objects.filter(tool__startswith="mcp.demo.")
    return set(mappings.values_list("capability__name", "tool"))


def test_ares_demo_registers_the_demo_server_and_maps_its_tools_once() -> None:
    versions = RuleSetVersion.objects.count()
    out = demo("--invocations", "200")
    server = McpServer.objects.get(name="demo")
    assert (server.transport, server.command) == ("stdio", sys.executable)
    assert server.args[:2] == ["-m", "tools_app.mcp_demo_server"]
    assert demo_mappings() == {("Summation", ADD), ("Arithmetic", ADD), ("Hashing", SHA256)}
    assert RuleSetVersion.objects.count() == versions + 1  # every mapping, one version
    answered = next(line for line in out.splitlines() if "answers with tools" in line)
    # The tools that compete, not the server's test tools (fail, sleep, pid, echo).
    assert answered.split("tools ")[1].split(", ") == ["add", "sha256"]
    again = demo("--invocations", "200")
    assert "is registered already" in again
    assert CapabilityMapping.objects.filter(tool__startswith="mcp.demo.").count() == 3
    assert RuleSetVersion.objects.count() == versions + 1


def test_ares_demo_brings_its_own_server_row_up_to_date_and_leaves_an_operators_alone() -> None:
    McpServer.objects.create(name="demo", command="/old/venv/bin/python", args=[
        "-m", "tools_app.mcp_demo_server", "--transport", "stdio", "--tools", "add",
    ])  # fmt: skip
    assert "Updated MCP server 'demo'" in demo("--invocations", "100")
    ours = McpServer.objects.get(name="demo")
    assert ours.command == sys.executable and ours.args[-1] == "add,sha256"
    ours.delete()
    theirs = McpServer.objects.create(name="demo", transport="http", url="http://10.0.0.9/mcp")
    demo("--invocations", "100")
    assert McpServer.objects.get(name="demo").url == theirs.url  # the operator's, untouched


def test_without_the_demo_server_the_site_has_no_mcp_server_nor_mapping() -> None:
    demo("--invocations", "200", "--no-demo-server")
    assert not McpServer.objects.exists()
    assert demo_mappings() == set()
    assert Invocation.objects.count() == 200  # the traces all the same


def test_the_preference_flips_to_add_in_the_calculators_incident_and_back() -> None:
    demo("--invocations", "2000")  # what `make run` loads
    registry, ruleset = site_engine.get_engine().registry, current_ruleset()
    time_range, _ = parse_range({"range": "24h"}, timezone.now())
    for capability in ("Summation", "Arithmetic"):
        found = capability_evidence(capability, ruleset, registry, time_range)
        assert {c.spec.name for c in found.candidates} == {"calculator", ADD}
        assert [(f.before, f.after) for f in found.flips] == [
            ("calculator", ADD), (ADD, "calculator"),
        ]  # fmt: skip
        went, came_back = (flip.bucket_start for flip in found.flips)
        assert came_back - went >= timedelta(hours=2)
        # The pages' buckets agree with the raw spans: the calculator timed out in the
        # bucket where add took over, and never after it got the lead back.
        timeouts = Invocation.objects.for_tool("calculator").filter(error_kind="timeout")
        first_bucket = timeouts.filter(
            started_at__gte=went, started_at__lt=went + time_range.bucket
        )
        index = time_range.bucket_starts().index(went)
        by_kind = found.series["calculator"][index].totals.failures_by_kind
        assert first_bucket.count() == by_kind["timeout"] > 0
        assert not timeouts.filter(started_at__gte=came_back).exists()
        # The score parts over the range count every span of the demo (all inside it), the
        # caller's faults apart, as the raw records do.
        for part in found.parts:
            spans = Invocation.objects.tools().for_tool(part.candidate.spec.name)
            faults = spans.filter(caller_fault_q()).count()
            assert (part.over_range.samples, part.caller_faults) == (spans.count() - faults, faults)
        # The leader of the last bucket is the one the planner picks now.
        overview = {c.name: c for c in capability_overview(ruleset, registry)}
        assert found.leaders[-1] == overview[capability].scores_now[0].tool == "calculator"
    plan = plan_request("what is 1250 plus 370")
    assert [(s.tool, s.arguments) for s in plan.steps] == [
        ("calculator", {"expression": "1250+370"})
    ]


def test_hash_tool_leads_its_competitor_all_day() -> None:
    demo("--invocations", "2000")
    registry, ruleset = site_engine.get_engine().registry, current_ruleset()
    time_range, _ = parse_range({"range": "24h"}, timezone.now())
    found = capability_evidence("Hashing", ruleset, registry, time_range)
    assert {c.spec.name for c in found.candidates} == {"hash_tool", SHA256}
    assert found.flips == [] and set(found.leaders) == {"hash_tool"}
    assert Invocation.objects.for_tool(SHA256).count() > 10  # competing, with calls of its own
    plan = plan_request("sha256 of 'INV-2026-0042'")
    assert [(s.tool, s.fallback_tools) for s in plan.steps] == [("hash_tool", (SHA256,))]


def test_the_demo_servers_sha256_really_runs() -> None:
    demo("--invocations", "200")
    result = site_engine.get_engine().execute(ToolCall(SHA256, {"text": "hello"}))
    assert result.success, result.text
    assert result.data["structured"]["result"] == hashlib.sha256(b"hello").hexdigest()


def calculator_incident_now(calls: int = 60) -> None:
    """Record the calculator timing out on its latest calls, as in the demo's incident."""
    now = datetime.now(UTC)
    spans = [
        make_span(
            tool_name="calculator", status="error", error_kind="timeout", latency_ms=10_000.0,
            error_message="calculator did not answer within 10 s (timeout)",
            started_at=(now - timedelta(seconds=index)).isoformat(),
        )
        for index in range(calls)
    ]  # fmt: skip
    record_invocations([InvocationIn.model_validate(span) for span in spans])


def test_while_add_leads_the_planner_gives_it_the_sums_it_can_do_and_it_runs(
    admin_client: Any,
) -> None:
    demo("--invocations", "2000")
    calculator_incident_now()
    overview = {
        c.name: c for c in capability_overview(current_ruleset(), site_engine.get_engine().registry)
    }
    assert overview["Summation"].scores_now[0].tool == ADD  # the evidence page's leader
    plan = plan_request("what is 1250 plus 370")
    assert [(s.tool, s.arguments, s.fallback_tools) for s in plan.steps] == [
        (ADD, {"a": 1250, "b": 370}, ("calculator",))
    ]
    leader = plan.explanation["candidates"]["Summation"][0]
    assert (leader["tool"], leader["final"]) == (ADD, overview["Summation"].scores_now[0].final)
    response = admin_client.post("/planner/try", {"request": "what is 1250 plus 370"})
    assert response.status_code == 200
    [row] = response.context["results"]
    assert (row["result"].tool, row["result"].success) == (ADD, True)
    assert row["result"].data["structured"] == {"a": 1250, "b": 370, "sum": 1620}
    call = Invocation.objects.for_tool(ADD).get(trace__agent="try-the-planner")
    assert (call.status, call.ran_on, call.chosen_by) == ("ok", "mcp:demo", "planner")


def test_while_add_leads_a_sum_it_cannot_do_goes_to_the_calculator() -> None:
    demo("--invocations", "2000")
    calculator_incident_now()
    plan = plan_request("sum of 3, 4 and 5")
    assert [(s.tool, s.arguments) for s in plan.steps] == [
        ("calculator", {"expression": "sum(3,4,5)"})
    ]
    passed_over = [r for r in plan.explanation["rejected"] if r.get("tool") == ADD]
    assert "not the sum of two whole numbers" in passed_over[0]["why"]
