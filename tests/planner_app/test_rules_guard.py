"""The guard: off by default, rolls back a version that made the planner worse, once."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.db import connection

from planner_app import bridge, rules_guard, ruleset_versions
from planner_app.bridge import BridgeResult
from planner_app.models import Capability, CapabilityMapping, RuleSetVersion
from planner_app.pipeline.extraction import DEMO_ADD_TOOL
from planner_app.rules_guard import guard_newest_version, judge
from tests.conftest import ROOT, subprocess_env
from tests.planner_app.conftest import in_site_registry
from tests.planner_app.version_traffic import make_version, record_request
from tools_app.engine import CallContext
from tools_app.specs import ToolSpec
from traces_app.tasks import periodic_job_task

NOW = datetime.now(UTC).replace(microsecond=0)
N = 10


@pytest.fixture(autouse=True)
def nothing_settled() -> Iterator[None]:
    """Forget the verdicts another test's database settled (versions share numbers)."""
    rules_guard._settled.clear()
    yield
    rules_guard._settled.clear()


@pytest.fixture
def guard_on(settings: Any) -> None:
    settings.ARES_PLANNER_GUARD = True
    settings.ARES_PLANNER_GUARD_REQUESTS = N
    settings.ARES_PLANNER_GUARD_MARGIN = 0.10


def _traffic(since: datetime, shapes: list[str]) -> None:
    """Record one request per shape, a minute apart from `since` on."""
    for i, shape in enumerate(shapes):
        record_request(since + timedelta(minutes=i), "add 3 and 4", shape)


def _a_worse_version() -> RuleSetVersion:
    """v1 at -10 h, N good planned requests, then v2 at -2 h with half of N failing."""
    RuleSetVersion.objects.filter(number=1).update(created_at=NOW - timedelta(hours=10))
    _traffic(NOW - timedelta(hours=6), ["planner ok"] * N)
    version = make_version("add tally", NOW - timedelta(hours=2), add_sum_word="tally")
    _traffic(version.created_at, ["planner ok", "planner failed"] * (N // 2))
    return version


@pytest.mark.django_db(transaction=True)  # the job closes its connections, as the beat's
def test_the_guard_is_off_by_default_and_does_nothing(default_rules: None) -> None:
    assert django_settings.ARES_PLANNER_GUARD is False  # the shipped default (no env here)
    _a_worse_version()
    newest = ruleset_versions.latest_number()
    assert guard_newest_version() is None
    assert periodic_job_task.apply(args=["guard-rule-versions"]).get() == "the guard is off"
    assert ruleset_versions.latest_number() == newest


def test_it_rolls_back_a_version_that_made_the_planner_worse(
    guard_on: None, admin_client: Any, default_rules: None
) -> None:
    version = _a_worse_version()
    v1 = RuleSetVersion.objects.get(number=1)

    verdict = guard_newest_version()

    assert verdict is not None and verdict.decision == rules_guard.ROLLED_BACK
    assert (verdict.after.part, verdict.after.whole) == (N // 2, N)
    assert (verdict.before.part, verdict.before.whole) == (N, N)
    made = RuleSetVersion.objects.order_by("-number").first()
    assert made.number == version.number + 1 == verdict.rolled_back_as
    assert made.change.startswith(f"guard: rolled back v{version.number}: planner success 50.0%")
    assert "a fall of 50.0 points, more than the margin of 10.0" in made.change
    assert ruleset_versions.diff(v1.snapshot, made.snapshot) == []  # v1's rules again
    assert "tally" not in ruleset_versions.current_ruleset().word_index
    # Where the operator looks: the overview, the list of versions, the versions' pages.
    for url in ("/", "/admin/planner_app/rulesetversion/", f"/planner/versions/{made.number}/"):
        html = admin_client.get(url).content.decode()
        assert "The guard rolled the planner&#x27;s rules back" in html or (
            "The guard rolled the planner's rules back" in html
        ), url
        assert f"rolled back v{version.number}: planner success 50.0%" in html, url
        assert f'href="/planner/versions/{version.number}/"' in html, url
    page = admin_client.get(f"/planner/versions/{version.number}/").content.decode()
    assert 'data-decision="rolled back"' in page and f"as v{made.number}:" in page


def test_it_fires_once_per_version(guard_on: None, default_rules: None) -> None:
    _a_worse_version()
    assert guard_newest_version().decision == rules_guard.ROLLED_BACK
    numbers = ruleset_versions.latest_number()
    again = guard_newest_version()
    assert again.decision == rules_guard.NOT_JUDGED and "the guard's own rollback" in again.why
    assert ruleset_versions.latest_number() == numbers


def test_it_keeps_a_version_that_did_as_well(guard_on: None, default_rules: None) -> None:
    RuleSetVersion.objects.filter(number=1).update(created_at=NOW - timedelta(hours=10))
    _traffic(NOW - timedelta(hours=6), ["planner ok"] * (N - 1) + ["planner failed"])
    version = make_version("v2", NOW - timedelta(hours=2))
    # 80% after vs 90% before: a fall of 10 points, not more than the margin.
    _traffic(version.created_at, ["planner ok"] * (N - 2) + ["planner failed"] * 2)
    verdict = guard_newest_version()
    assert verdict.decision == rules_guard.KEPT, verdict.why
    assert "after vs before -10.0 points, within the margin of 10.0" in verdict.why
    assert ruleset_versions.latest_number() == version.number


def test_it_waits_for_n_planned_requests_and_never_rolls_back_on_fewer(
    guard_on: None, default_rules: None
) -> None:
    RuleSetVersion.objects.filter(number=1).update(created_at=NOW - timedelta(hours=10))
    _traffic(NOW - timedelta(hours=6), ["planner ok"] * N)
    version = make_version("v2", NOW - timedelta(hours=2))
    # All failed, but only N - 1 planned ones (requests the planner did not plan don't count).
    _traffic(version.created_at, ["planner failed"] * (N - 1) + ["llm only"] * 5)
    verdict = guard_newest_version()
    assert verdict.decision == rules_guard.WAITING
    assert verdict.why == f"{N - 1} of the {N} planned requests it judges on have been " \
                          f"recorded since v{version.number}"  # fmt: skip
    assert ruleset_versions.latest_number() == version.number


def test_it_decides_nothing_with_too_little_before(guard_on: None, default_rules: None) -> None:
    RuleSetVersion.objects.filter(number=1).update(created_at=NOW - timedelta(hours=10))
    _traffic(NOW - timedelta(hours=6), ["planner ok"] * (N - 1))
    version = make_version("v2", NOW - timedelta(hours=2))
    _traffic(version.created_at, ["planner failed"] * N)
    verdict = guard_newest_version()
    assert verdict.decision == rules_guard.TOO_LITTLE_BEFORE
    assert ruleset_versions.latest_number() == version.number


def test_it_judges_only_the_first_n_after_and_the_last_n_before(
    guard_on: None, default_rules: None
) -> None:
    RuleSetVersion.objects.filter(number=1).update(created_at=NOW - timedelta(hours=20))
    _traffic(NOW - timedelta(hours=15), ["planner failed"] * N)  # older than the last N
    _traffic(NOW - timedelta(hours=6), ["planner ok"] * N)
    version = make_version("v2", NOW - timedelta(hours=3))
    _traffic(version.created_at, ["planner ok"] * N)
    _traffic(version.created_at + timedelta(hours=1), ["planner failed"] * N)  # after the first N
    verdict = judge(version, N, 0.10)
    assert verdict.decision == rules_guard.KEPT
    assert (verdict.before.part, verdict.after.part) == (N, N)


def test_it_does_not_judge_an_operators_rollback(guard_on: None, default_rules: None) -> None:
    _a_worse_version()
    RuleSetVersion.objects.filter(number=1).update(created_at=NOW - timedelta(hours=10))
    made = ruleset_versions.rollback(2)  # the operator's own, now the newest
    RuleSetVersion.objects.filter(pk=made.pk).update(created_at=NOW - timedelta(hours=1))
    verdict = guard_newest_version()
    assert verdict.decision == rules_guard.NOT_JUDGED and "an operator's undo" in verdict.why
    assert ruleset_versions.latest_number() == made.number


@pytest.mark.django_db(transaction=True)
def test_the_periodic_job_runs_the_guard(guard_on: None, default_rules: None) -> None:
    assert django_settings.ARES_PERIODIC_JOBS["guard-rule-versions"][0] == (
        "planner_app.tasks.guard_rule_versions_task"
    )
    version = _a_worse_version()
    assert periodic_job_task.apply(args=["guard-rule-versions"]).get() == (
        f"v{version.number}: rolled back"
    )
    assert RuleSetVersion.objects.order_by("-number").first().change.startswith("guard: ")


@pytest.mark.django_db(transaction=True)
def test_two_guards_at_once_roll_back_once(guard_on: None, default_rules: None) -> None:
    version = _a_worse_version()
    start = threading.Barrier(2)
    verdicts: list[Any] = []

    def guard() -> None:
        try:
            start.wait()
            verdicts.append(guard_newest_version())
        finally:
            connection.close()

    threads = [threading.Thread(target=guard) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    decisions = sorted(verdict.decision for verdict in verdicts)
    assert decisions.count(rules_guard.ROLLED_BACK) == 1, decisions
    # The other one found the rules changed under the lock, or judged the guard's version.
    assert set(decisions) - {rules_guard.ROLLED_BACK} <= {rules_guard.SUPERSEDED,
                                                          rules_guard.NOT_JUDGED}  # fmt: skip
    assert ruleset_versions.latest_number() == version.number + 1
    assert RuleSetVersion.objects.filter(change__startswith="guard: ").count() == 1


GUARD_ONCE = (
    "import json; from planner_app.rules_guard import guard_newest_version; "
    "verdict = guard_newest_version(); print(json.dumps(verdict.decision))"
)


@pytest.mark.django_db(transaction=True)
def test_two_processes_guarding_at_once_roll_back_once(default_rules: None) -> None:
    """Two real processes of the site, started together, each running the guard."""
    version = _a_worse_version()
    env = subprocess_env(ARES_PLANNER_GUARD="1", ARES_PLANNER_GUARD_REQUESTS=str(N),
                         ARES_PLANNER_GUARD_MARGIN="0.10")  # fmt: skip
    command = [sys.executable, "manage.py", "shell", "-c", GUARD_ONCE]
    processes = [subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for _ in range(2)]  # fmt: skip
    outputs = [process.communicate(timeout=120) for process in processes]
    assert all(process.returncode == 0 for process in processes), outputs
    decisions = sorted(json.loads(out.strip().splitlines()[-1]) for out, _ in outputs)
    assert decisions.count(rules_guard.ROLLED_BACK) == 1, decisions
    assert ruleset_versions.latest_number() == version.number + 1
    assert RuleSetVersion.objects.filter(change__startswith="guard: ").count() == 1


def _broken_adder(a: int = 0, b: int = 0) -> int:
    raise RuntimeError("the adder is broken")


ADDER = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
         "required": ["a", "b"]}  # fmt: skip


@pytest.fixture
def broken_adder() -> Iterator[None]:
    """The demo MCP server's add gone bad: a tool of that name (so the planner's extractor
    for it reads the request's two numbers) that always fails."""
    yield from in_site_registry([ToolSpec(DEMO_ADD_TOOL, "Add two integers.", ADDER,
                                          _broken_adder)])  # fmt: skip


@pytest.mark.django_db(transaction=True)
def test_a_real_edit_that_breaks_plans_is_rolled_back_and_the_planner_works_again(
    guard_on: None, default_rules: None, broken_adder: None
) -> None:
    """Through the Bridge and the engine: the spans are what the planner really did."""

    def plan_and_run() -> BridgeResult:
        return bridge.execute(None, None, "add 3 and 4", CallContext(agent="guard-test"))

    assert all(plan_and_run().results[0].tool == "calculator" for _ in range(N))  # v1 adds
    with ruleset_versions.editing():  # the operator prefers the other adder for Summation
        summation = Capability.objects.get(name="Summation")
        CapabilityMapping.objects.create(capability=summation, tool=DEMO_ADD_TOOL, weight=10)
    broken = ruleset_versions.latest_number()
    outcomes = [plan_and_run() for _ in range(N)]
    assert {(o.results[0].tool, o.success) for o in outcomes} == {(DEMO_ADD_TOOL, False)}

    verdict = guard_newest_version()

    assert verdict.decision == rules_guard.ROLLED_BACK, verdict.why
    assert (verdict.before.part, verdict.after.part) == (N, 0)
    assert ruleset_versions.latest_number() == broken + 1
    outcome = plan_and_run()
    assert outcome.success and outcome.results[0].tool == "calculator"
