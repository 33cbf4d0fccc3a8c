"""Recorded traffic, mapping proposals, and the proposals' store: refresh, apply, dismiss."""

from __future__ import annotations

import secrets
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import connection
from django.test import Client

from planner_app import ruleset_versions
from planner_app.models import (
    Agent,
    CapabilityMapping,
    Proposal,
    RuleSetVersion,
    Workflow,
)
from planner_app.proposals import store, traffic
from planner_app.proposals.changes import ChangeError
from planner_app.proposals.store import (
    AlreadyDecided,
    RulesChanged,
    WorkflowInvalid,
    apply_proposal,
    dismiss_proposal,
    refresh_proposals,
)
from planner_app.proposals.traffic import recorded_traffic
from planner_app.services import plan_request
from tests.conftest import ROOT, make_span, subprocess_env
from tests.planner_app.conftest import in_site_registry
from tests.planner_app.fake_llm import FakeLlm, call, say
from tools_app.specs import ToolSpec
from traces_app.ingest.recording import record_invocation

NO_ARGUMENTS = {"type": "object", "properties": {}}
UUID_REQUESTS = ["give me a uuid", "a new uuid please", "uuid for my record", "one uuid, thanks"]


def record(request: str, *calls: dict[str, Any], at: datetime | None = None) -> str:
    """Record a trace: its request and its tool calls in order; return its trace id."""
    trace_id = secrets.token_hex(16)
    start = at or datetime.now(UTC) - timedelta(minutes=5)
    for position, fields in enumerate(calls):
        started = (start + timedelta(seconds=position)).isoformat()
        span = make_span(trace_id=trace_id, started_at=started, **fields)
        if position == 0:
            span["request_text"] = request
        record_invocation(**span)
    return trace_id


def uuid_call(**fields: Any) -> dict[str, Any]:
    return {"tool_name": "make_uuid", "arguments": {}, "result": {"id": "4f1c"}, **fields}


@pytest.fixture
def uuid_tool() -> Iterator[None]:
    """A tool that makes ids, in the site's registry and mapped to nothing."""
    spec = ToolSpec("make_uuid", "Make a UUID.", NO_ARGUMENTS, lambda: {"id": "4f1c"})
    yield from in_site_registry([spec])


def served_uuids(count: int = 3) -> None:
    for request in UUID_REQUESTS[:count]:
        record(request, uuid_call())


def the_proposal(key: str = "mapping:IDGeneration:make_uuid:add") -> Proposal:
    return Proposal.objects.get(key=key)


def newest_version() -> int:
    return ruleset_versions.latest_number()


# Recorded traffic -------------------------------------------------------------------------


@pytest.mark.django_db
def test_it_reads_the_newest_requests_with_their_calls_in_order() -> None:
    old = datetime.now(UTC) - timedelta(hours=2)
    failed = {"tool_name": "hash_tool", "status": "error", "error_kind": "tool_error"}
    first = record("hash it", failed, {"tool_name": "calculator"}, at=old)
    stopped = record("stop me", {"tool_name": "calculator", "status": "stopped"})
    record_invocation(**make_span())  # a trace with no request text
    found = recorded_traffic()
    assert [served.trace_id for served in found] == [stopped, first]
    assert found[0].calls == ()  # the stopped call neither worked nor failed
    assert found[1].tools == ("hash_tool", "calculator")
    assert [call.ok for call in found[1].calls] == [False, True]
    assert found[1].served_by().tool == "calculator" and found[1].request == "hash it"
    assert [s.trace_id for s in recorded_traffic(limit=1)] == [stopped]
    assert recorded_traffic(since=datetime.now(UTC) - timedelta(hours=1))[0].trace_id == stopped
    assert [s.trace_id for s in recorded_traffic(since=datetime.now(UTC))] == []


@pytest.mark.django_db
def test_it_reads_traffic_in_bounded_chunks(
    monkeypatch: pytest.MonkeyPatch, django_assert_max_num_queries: Callable[..., Any]
) -> None:
    monkeypatch.setattr(traffic, "TRACES_PER_QUERY", 2)
    monkeypatch.setattr(traffic, "CALLS_PER_TRACE", 3)
    long = record("a long session", *({"tool_name": f"tool_{i}"} for i in range(5)))
    short = [record(f"request {i}", {"tool_name": "calculator"}) for i in range(5)]
    with django_assert_max_num_queries(1 + 1 + 3):  # traces; the long one; 5 short in 3
        found = {served.trace_id: served for served in recorded_traffic()}
    assert found[long].tools == ("tool_0", "tool_1", "tool_2")  # cut at CALLS_PER_TRACE
    assert all(found[trace_id].tools == ("calculator",) for trace_id in short)


# Mapping proposals ------------------------------------------------------------------------


@pytest.mark.django_db
def test_it_proposes_mapping_a_tool_that_keeps_serving_a_capability(
    default_rules: None, uuid_tool: None
) -> None:
    served_uuids(3)
    report = refresh_proposals()
    assert (report.created, report.traffic) == (1, 3)
    proposal = the_proposal()
    assert (proposal.kind, proposal.status, proposal.target) == ("mapping", "open", "IDGeneration")
    assert proposal.title == "Map make_uuid to IDGeneration"
    assert proposal.ops == [
        {"op": "add_mapping", "capability": "IDGeneration", "tool": "make_uuid", "weight": 0.0}
    ]
    assert proposal.evidence_count == 3 and proposal.ruleset_version == newest_version()
    assert {entry["request"] for entry in proposal.evidence} == set(UUID_REQUESTS[:3])
    assert proposal.evidence[0]["served_by"] == "make_uuid"
    assert proposal.backtest["total"] == 3 and "newly_planned" in proposal.backtest


@pytest.mark.django_db
def test_it_proposes_nothing_from_too_few_requests_or_failed_calls(
    default_rules: None, uuid_tool: None
) -> None:
    served_uuids(2)
    record("uuid now", uuid_call(status="error", error_kind="tool_error"))
    assert refresh_proposals().proposed == 0
    assert not Proposal.objects.exists()


@pytest.mark.django_db
def test_it_does_not_propose_a_tool_that_only_followed_the_mapped_one(default_rules: None) -> None:
    for number in range(4):  # the calculator answered; string_utils only formatted it
        upper = {"tool_name": "string_utils", "arguments": {"operation": "upper", "text": "x"}}
        record(f"sum {number} and 2", {"tool_name": "calculator", "chosen_by": "planner"}, upper)
    refresh_proposals()
    assert not Proposal.objects.filter(kind="mapping").exists()


@pytest.fixture
def flaky_hash(default_rules: None) -> Iterator[None]:
    """A hashing tool mapped to Hashing above hash_tool, which never works."""
    spec = ToolSpec("flaky_hash", "Hash text.", {"type": "object", "properties": {
        "text": {"type": "string"}}}, lambda text="": {"digest": "?"})  # fmt: skip
    yield from in_site_registry([spec])


@pytest.mark.django_db
def test_it_proposes_unmapping_a_tool_that_always_fails_where_another_works(
    flaky_hash: None,
) -> None:
    hashing = CapabilityMapping.objects.get(tool="hash_tool", capability__name="Hashing")
    CapabilityMapping.objects.create(capability=hashing.capability, tool="flaky_hash", weight=5)
    for word in ("alpha", "beta", "gamma"):
        record(f"sha256 of {word}",
               {"tool_name": "flaky_hash", "chosen_by": "planner", "status": "error",
                "error_kind": "tool_error"},
               {"tool_name": "hash_tool", "arguments": {"text": word}})  # fmt: skip
    refresh_proposals()
    proposal = the_proposal("mapping:Hashing:flaky_hash:remove")
    assert proposal.ops == [{"op": "remove_mapping", "capability": "Hashing", "tool": "flaky_hash"}]
    assert "never worked" in proposal.why and "mostly hash_tool" in proposal.why
    apply_proposal(proposal.pk)
    assert not CapabilityMapping.objects.filter(tool="flaky_hash").exists()


# Applying, rolling back, dismissing -------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_applying_makes_one_version_that_rolls_back_like_any_edit(
    default_rules: None, uuid_tool: None, django_user_model: Any
) -> None:
    alice = django_user_model.objects.create_user("alice", is_staff=True)
    served_uuids(3)
    refresh_proposals()
    proposal, before = the_proposal(), newest_version()
    applied = apply_proposal(proposal.pk, alice, seen_version=before)
    assert (applied.status, applied.applied_version, applied.decided_by) == ("applied", before + 1,
                                                                             alice)  # fmt: skip
    version = RuleSetVersion.objects.get(number=before + 1)
    assert version.change == f"proposal #{proposal.pk}: map make_uuid to IDGeneration (weight 0)"
    assert version.created_by == alice and RuleSetVersion.objects.count() == before + 1
    assert CapabilityMapping.objects.filter(
        capability__name="IDGeneration", tool="make_uuid"
    ).exists()
    assert "make_uuid" in {m.tool for m in ruleset_versions.current_ruleset().mappings}
    assert plan_request("give me a uuid").explanation["candidates"]["IDGeneration"][0]["tool"] == (
        "make_uuid"
    )
    refresh_proposals()  # the change is in the rules: it stays applied, nothing new
    assert the_proposal().status == "applied" and Proposal.objects.count() == 1
    ruleset_versions.rollback(before, alice)
    assert not CapabilityMapping.objects.filter(tool="make_uuid").exists()
    assert "make_uuid" not in {m.tool for m in ruleset_versions.current_ruleset().mappings}
    assert refresh_proposals().reopened == 1  # rolled back, and the traffic still asks for it
    reopened = the_proposal()
    assert (reopened.status, reopened.applied_version, reopened.decided_by) == ("open", None, None)
    [entry] = reopened.history  # what was decided, and what undid it, stays in sight
    assert (entry["status"], entry["by"], entry["applied_version"]) == ("applied", "alice",
                                                                        before + 1)  # fmt: skip
    assert entry["undone_by"] == {"version": before + 2, "change": f"rolled back to v{before}"}


@pytest.mark.django_db
def test_a_second_apply_says_who_applied_it(
    default_rules: None, uuid_tool: None, django_user_model: Any
) -> None:
    served_uuids(3)
    refresh_proposals()
    proposal = apply_proposal(the_proposal().pk, django_user_model.objects.create_user("bob"))
    count = RuleSetVersion.objects.count()
    with pytest.raises(AlreadyDecided, match=r"already applied by bob at .* as rule-set version v"):
        apply_proposal(proposal.pk)
    with pytest.raises(AlreadyDecided, match="already applied by bob"):
        dismiss_proposal(proposal.pk)
    assert RuleSetVersion.objects.count() == count


@pytest.mark.django_db
def test_it_applies_nothing_when_the_rules_changed_since_the_page(
    default_rules: None, uuid_tool: None
) -> None:
    served_uuids(3)
    refresh_proposals()
    seen = newest_version()
    rule = ruleset_versions.models.IntentRule.objects.get(name="ids")
    rule.keywords = [*rule.keywords, "guid"]
    rule.save()  # someone's edit: a new version
    with pytest.raises(RulesChanged, match=f"now v{seen + 1}.*Nothing was changed"):
        apply_proposal(the_proposal().pk, seen_version=seen)
    assert the_proposal().status == "open" and newest_version() == seen + 1
    assert not CapabilityMapping.objects.filter(tool="make_uuid").exists()


@pytest.mark.django_db
def test_it_applies_nothing_when_the_change_no_longer_fits(
    default_rules: None, uuid_tool: None
) -> None:
    served_uuids(3)
    refresh_proposals()
    ids = ruleset_versions.models.Capability.objects.get(name="IDGeneration")
    CapabilityMapping.objects.create(capability=ids, tool="make_uuid")  # mapped by hand since
    count = RuleSetVersion.objects.count()
    with pytest.raises(ChangeError, match="make_uuid is mapped to IDGeneration already"):
        apply_proposal(the_proposal().pk)
    assert the_proposal().status == "open" and RuleSetVersion.objects.count() == count


@pytest.mark.django_db
def test_a_dismissed_proposal_stays_away_until_its_evidence_grows(
    default_rules: None, uuid_tool: None
) -> None:
    served_uuids(3)
    refresh_proposals()
    dismissed = dismiss_proposal(the_proposal().pk)
    assert (dismissed.status, dismissed.dismissed_evidence) == ("dismissed", 3)
    assert refresh_proposals().reopened == 0 and the_proposal().status == "dismissed"
    with pytest.raises(AlreadyDecided, match="already dismissed by someone without an account"):
        apply_proposal(dismissed.pk)
    record(UUID_REQUESTS[3], uuid_call())  # a fourth request: the evidence grew
    assert refresh_proposals().reopened == 1
    reopened = the_proposal()
    assert (reopened.status, reopened.evidence_count, reopened.decided_at) == ("open", 4, None)


@pytest.mark.django_db
def test_an_open_proposal_the_traffic_no_longer_makes_is_deleted(
    default_rules: None, uuid_tool: None
) -> None:
    served_uuids(3)
    refresh_proposals()
    Proposal.objects.create(kind="mapping", key="mapping:Hashing:gone:add", title="gone")
    Proposal.objects.create(kind="mapping", key="mapping:Hashing:kept:add", title="kept",
                            status="dismissed", dismissed_evidence=3)  # fmt: skip
    report = refresh_proposals()
    assert report.deleted == 1 and report.updated == 1
    assert set(Proposal.objects.values_list("key", flat=True)) == {
        "mapping:IDGeneration:make_uuid:add", "mapping:Hashing:kept:add",
    }  # fmt: skip


# Workflow proposals -----------------------------------------------------------------------


CHAIN = {
    "steps": [
        {"id": "total", "tool": "calculator", "arguments": {"expression": "2+3"}},
        {"id": "shout", "tool": "string_utils",
         "arguments": {"operation": "upper", "text": "total {$total.result}"}},
    ]
}  # fmt: skip


@pytest.mark.django_db
def test_applying_a_workflow_proposal_saves_the_workflow_under_a_free_name(
    default_rules: None,
) -> None:
    Workflow.objects.create(name="calculator-then-string_utils", definition=CHAIN)
    proposal = Proposal.objects.create(
        kind="workflow", key="workflow:calculator>string_utils", title="Save the chain",
        target="calculator-then-string_utils", workflow_definition=CHAIN,
    )  # fmt: skip
    versions = RuleSetVersion.objects.count()
    applied = apply_proposal(proposal.pk)
    assert applied.workflow.name == "calculator-then-string_utils-2"
    assert applied.workflow.definition == CHAIN and RuleSetVersion.objects.count() == versions
    with pytest.raises(AlreadyDecided, match="as workflow 'calculator-then-string_utils-2'"):
        apply_proposal(proposal.pk)


@pytest.mark.django_db
def test_an_invalid_workflow_proposal_is_refused_with_its_problems(default_rules: None) -> None:
    broken = {"steps": [{"id": "a", "tool": "no_such_tool", "arguments": {}}]}
    proposal = Proposal.objects.create(
        kind="workflow", key="workflow:no_such_tool", title="Broken", target="broken",
        workflow_definition=broken,
    )  # fmt: skip
    with pytest.raises(WorkflowInvalid, match="no_such_tool"):
        apply_proposal(proposal.pk)
    assert the_proposal("workflow:no_such_tool").status == "open"
    assert not Workflow.objects.filter(name="broken").exists()


# Two at once ------------------------------------------------------------------------------


def at_once(work: Callable[[], Any], count: int = 2) -> list[Any]:
    """Run `work` in `count` threads released together; return each result or exception."""
    barrier = threading.Barrier(count)
    results: list[Any] = [None] * count

    def run(index: int) -> None:
        barrier.wait()
        try:
            results[index] = work()
        except Exception as exc:  # the test looks at what each thread got
            results[index] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return results


@pytest.mark.django_db(transaction=True)
def test_two_staff_applying_at_once_make_one_version(
    default_rules: None, uuid_tool: None, django_user_model: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    served_uuids(3)
    refresh_proposals()
    pk, before = the_proposal().pk, newest_version()
    users = iter([django_user_model.objects.create_user(n) for n in ("ann", "ben")])
    lock = threading.Lock()
    changing = store.apply_change

    def slow_change(*args: Any, **kwargs: Any) -> Any:
        time.sleep(0.5)  # the first applier holds the locks while the second asks for them
        return changing(*args, **kwargs)

    monkeypatch.setattr(store, "apply_change", slow_change)

    def apply() -> Proposal:
        with lock:
            user = next(users)
        return apply_proposal(pk, user, seen_version=before)

    results = at_once(apply)
    applied = [r for r in results if isinstance(r, Proposal)]
    refused = [r for r in results if isinstance(r, AlreadyDecided)]
    assert (len(applied), len(refused)) == (1, 1), results
    assert f"already applied by {applied[0].decided_by.username}" in str(refused[0])
    assert newest_version() == before + 1
    assert RuleSetVersion.objects.filter(change__startswith=f"proposal #{pk}:").count() == 1
    assert CapabilityMapping.objects.filter(tool="make_uuid").count() == 1


@pytest.mark.django_db(transaction=True)
def test_two_refreshes_at_once_store_each_proposal_once(
    default_rules: None, uuid_tool: None
) -> None:
    served_uuids(3)
    results = at_once(refresh_proposals)
    assert all(isinstance(r, store.RefreshReport) for r in results), results
    assert sorted(r.created for r in results) == [0, 1]
    assert Proposal.objects.filter(key="mapping:IDGeneration:make_uuid:add").count() == 1


# The periodic job -------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_the_periodic_job_refreshes_the_proposals(
    default_rules: None, uuid_tool: None, settings: Any
) -> None:
    from traces_app.tasks import periodic_job_task

    assert settings.ARES_PERIODIC_JOBS["refresh-proposals"] == (
        "planner_app.tasks.refresh_proposals_task", 600.0,
    )  # fmt: skip
    beat = settings.CELERY_BEAT_SCHEDULE["refresh-proposals"]  # the default setup's beat too
    assert (beat["task"], beat["args"]) == ("traces_app.tasks.periodic_job_task",
                                            ["refresh-proposals"])  # fmt: skip
    served_uuids(3)
    result = periodic_job_task.apply(args=["refresh-proposals"]).get()
    assert result.startswith("1 proposed from 3 recorded requests")
    assert the_proposal().status == "open"
    assert periodic_job_task.apply(args=["refresh-proposals"]).get() is None  # period taken


# The worked test: a real MCP server -------------------------------------------------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("llm_settings")
def test_an_mcp_tool_serving_a_capability_unmapped_is_proposed_for_it(
    default_rules: None, time_server: None, fake_llm: FakeLlm, django_user_model: Any
) -> None:
    tool = "mcp.time.get_current_time"
    staff = Client()
    staff.force_login(django_user_model.objects.create_user("ops", is_staff=True))
    Agent.objects.create(name="clock", tools=[tool])
    requests = ["what time is it in Tokyo?", "current time in Paris", "what time is it in Lima?"]
    for request in requests:  # an LLM agent answers each with the MCP tool
        fake_llm.script(call(tool, {"timezone": "UTC"}), say("It is noon."))
        response = staff.post("/sandbox/run", {"agent": "clock", "mode": "llm", "message": request})
        body = b"".join(response.streaming_content).decode()
        assert '"success": true' in body, body
    served = recorded_traffic()
    assert {s.request for s in served} == set(requests)
    assert all(s.served_by().tool == tool and s.served_by().chosen_by == "llm" for s in served)
    refresh_proposals()
    proposal = the_proposal(f"mapping:DateTime:{tool}:add")
    assert proposal.title == f"Map {tool} to DateTime" and proposal.evidence_count == 3
    before = newest_version()
    apply_proposal(proposal.pk, seen_version=before)
    assert tool in {m.tool for m in ruleset_versions.current_ruleset().mappings}
    assert plan_request("what time is it in Tokyo?").explanation["candidates"]["DateTime"]
    assert tool in {c["tool"] for c in plan_request("what time is it?").explanation[
        "candidates"]["DateTime"]}  # fmt: skip
    ruleset_versions.rollback(before)
    assert tool not in {m.tool for m in ruleset_versions.current_ruleset().mappings}


@pytest.mark.django_db(transaction=True)
def test_it_proposes_a_lower_weight_for_a_tool_that_keeps_failing_where_another_works(
    demo_server: None,
) -> None:
    # hash_tool works for Base64 (its record stays good) but fails on sha256 requests,
    # where the demo MCP server's sha256 tool then works.
    for number in range(30):
        record(f"base64 of word{number}", {"tool_name": "hash_tool", "chosen_by": "planner"})
    failed = {"tool_name": "hash_tool", "chosen_by": "planner", "status": "error",
              "error_kind": "tool_error"}  # fmt: skip
    for word in ("alpha", "beta", "gamma"):
        record(f"sha256 of {word}", failed,
               {"tool_name": "mcp.demo.sha256", "arguments": {"text": word}})  # fmt: skip
    record("sha256 of delta", {"tool_name": "hash_tool", "chosen_by": "planner"})  # once it worked
    assert [step.tool for step in plan_request("sha256 of alpha").steps] == ["hash_tool"]
    refresh_proposals()
    proposal = the_proposal("mapping:Hashing:hash_tool:weight")
    [op] = proposal.ops
    assert (op["op"], op["capability"], op["tool"]) == (
        "set_mapping_weight", "Hashing", "hash_tool",
    )  # fmt: skip
    assert op["weight"] < 0 and "mostly mcp.demo.sha256" in proposal.why
    assert proposal.backtest["changed_count"] == 4 and proposal.backtest["total"] == 34
    assert {c["request"] for c in proposal.backtest["changed"]} == {
        "sha256 of alpha", "sha256 of beta", "sha256 of gamma", "sha256 of delta",
    }  # fmt: skip
    change = proposal.backtest["changed"][0]
    assert "hash_tool" in change["before"] and "mcp.demo.sha256" in change["after"]
    apply_proposal(proposal.pk)
    assert [step.tool for step in plan_request("sha256 of alpha").steps] == ["mcp.demo.sha256"]
    assert [step.tool for step in plan_request("base64 of word1").steps] == ["hash_tool"]


@pytest.mark.django_db(transaction=True)
def test_a_rule_proposal_adds_words_and_a_new_rule_in_one_version_that_rolls_back(
    default_rules: None,
) -> None:
    ops = [
        {"op": "add_words", "rule": "sum-en", "keywords": ["tally"], "patterns": []},
        {"op": "new_rule", "name": "proposed-summation", "capabilities": ["Summation"],
         "keywords": ["累计"], "patterns": [], "language": "zh", "goal": "sum numbers"},
    ]  # fmt: skip
    proposal = Proposal.objects.create(kind="rule", key="rule:Summation:tally 累计", ops=ops,
                                       title="Add words", target="Summation")  # fmt: skip
    before = newest_version()
    apply_proposal(proposal.pk, seen_version=before)
    assert newest_version() == before + 1
    rules = {rule.name: rule for rule in ruleset_versions.current_ruleset().rules}
    assert "tally" in rules["sum-en"].keywords
    assert (rules["proposed-summation"].capabilities, rules["proposed-summation"].keywords) == (
        ("Summation",), ("累计",),
    )  # fmt: skip
    new_rule = ruleset_versions.models.IntentRule.objects.get(name="proposed-summation")
    assert [c.name for c in new_rule.capabilities.all()] == ["Summation"]
    matched = plan_request("累计 3 和 4").explanation["rules_matched"]
    assert [match["rule"] for match in matched] == ["proposed-summation"]
    ruleset_versions.rollback(before)
    assert not ruleset_versions.models.IntentRule.objects.filter(name="proposed-summation")
    assert "tally" not in ruleset_versions.models.IntentRule.objects.get(name="sum-en").keywords


REFRESH_WHEN_TOLD = """
import os, sys, time
import django
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ares_site.settings")
django.setup()
from planner_app.proposals.store import refresh_proposals
from tools_app.site_engine import get_engine
get_engine()  # the MCP server's tools registered, as in any process of the site
print("ready", flush=True)
while not os.path.exists(sys.argv[1]):
    time.sleep(0.01)
print("created", refresh_proposals().created, flush=True)
"""


@pytest.mark.django_db(transaction=True)
def test_two_processes_refreshing_at_once_store_each_proposal_once(
    default_rules: None, time_server: None, tmp_path: Any
) -> None:
    tool = "mcp.time.get_current_time"
    for city in ("Tokyo", "Paris", "Lima"):
        record(f"what time is it in {city}?", {"tool_name": tool, "ran_on": "mcp:time",
                                               "arguments": {"timezone": "UTC"}})  # fmt: skip
    go = tmp_path / "go"
    workers = [
        subprocess.Popen([sys.executable, "-c", REFRESH_WHEN_TOLD, str(go)], cwd=ROOT,
                         env=subprocess_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
        for _ in range(2)
    ]  # fmt: skip
    for worker in workers:
        assert worker.stdout.readline().strip() == "ready", worker.stderr.read()
    go.touch()
    outputs = [worker.communicate(timeout=120) for worker in workers]
    assert [worker.returncode for worker in workers] == [0, 0], outputs
    created = sorted(int(out.split("created ")[-1]) for out, _ in outputs)
    assert created == [0, 1]
    assert Proposal.objects.filter(key=f"mapping:DateTime:{tool}:add").count() == 1
