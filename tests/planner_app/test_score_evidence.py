"""Scores feed the planner: calls scored wrong count as failures, as score rules say."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from planner_app import backtest, ruleset_versions, services
from planner_app.models import Capability, CapabilityMapping, ScoreRule
from planner_app.pipeline.extraction import EXTRACTORS
from planner_app.pipeline.ruleset import RuleSet
from planner_app.pipeline.ruleset import ScoreRule as Rule
from tools_app.site_engine import get_engine
from traces_app.models import ScoreDefinition

pytestmark = pytest.mark.django_db(transaction=True)  # rule changes are versions on commit

REQUEST = "sha256 of hello"


@pytest.fixture(autouse=True)
def fresh_evidence(settings: Any) -> None:
    settings.ARES_PLANNER_EVIDENCE_TTL_S = 0


@pytest.fixture
def two_hashers(default_rules: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Hashing served by hash_tool and hasher_b, the same tool under another name."""
    monkeypatch.setitem(EXTRACTORS, "hasher_b", EXTRACTORS["hash_tool"])
    registry = get_engine().registry
    registry.register(dataclasses.replace(registry.get("hash_tool"), name="hasher_b"))
    CapabilityMapping.objects.create(
        capability=Capability.objects.get(name="Hashing"), tool="hasher_b", weight=0
    )
    ScoreDefinition.objects.get_or_create(name="result_correct", defaults={"data_type": "boolean"})
    ScoreDefinition.objects.get_or_create(
        name="helpfulness", defaults={"data_type": "numeric", "min_value": 0, "max_value": 1}
    )
    yield
    registry.unregister("hasher_b")


def record(api: httpx.Client, span: Callable[..., dict], tool: str, count: int) -> list[dict]:
    sent = [span(tool_name=tool, latency_ms=5.0) for _ in range(count)]
    assert api.post("/invocations", json={"invocations": sent}).status_code == 200
    return sent


def send_scores(client: httpx.Client, spans: list[dict], **fields: Any) -> None:
    items = [{"trace_id": s["trace_id"], "span_id": s["span_id"], **fields} for s in spans]
    response = client.post("/scores", json={"scores": items})
    assert response.status_code == 200 and response.json()["accepted"] == len(items)


def ranked() -> list[dict[str, Any]]:
    return services.plan_request(REQUEST).explanation["candidates"]["Hashing"]


def test_calls_scored_wrong_turn_the_planner_to_the_other_tool(
    two_hashers, api, span, live_server, make_key
):
    hash_calls = record(api, span, "hash_tool", 10)
    record(api, span, "hasher_b", 10)
    assert ranked()[0]["tool"] == "hash_tool"
    scorer = httpx.Client(
        base_url=f"{live_server.url}/api/v1",
        headers={"Authorization": f"Bearer {make_key('score')}"},
    )
    send_scores(scorer, hash_calls[:6], name="result_correct", value=False, source="human")
    before_rule = ruleset_versions.current_ruleset()
    assert ranked()[0]["tool"] == "hash_tool"  # no score rule yet: scores alone change nothing

    ScoreRule.objects.create(score_name="result_correct", operator="=", threshold="false")

    candidates = {c["tool"]: c for c in ranked()}
    assert ranked()[0]["tool"] == "hasher_b"
    assert services.plan_request(REQUEST).steps[0].tool == "hasher_b"
    hashing = candidates["hash_tool"]
    assert hashing["scored_failures"] == 6
    # Six of ten ok calls scored wrong: as if they had failed (20 + 10 per call share).
    assert hashing["scores"] == pytest.approx(-0.6 * (20 + 10))
    assert hashing["final"] == pytest.approx(
        hashing["base"] + hashing["evidence"] + hashing["scores"] - hashing["penalty"]
    )
    assert candidates["hasher_b"]["scores"] == 0
    report = backtest.backtest(
        [REQUEST], before_rule, ruleset_versions.current_ruleset(), get_engine().registry,
        services.recent_evidence,
    )  # fmt: skip
    assert report.changed == 1 and "tool" in report.changes[0].aspects


def test_a_weighted_numeric_rule_counts_part_of_a_failure(two_hashers, api, span, live_server,
                                                           make_key):  # fmt: skip
    hash_calls = record(api, span, "hash_tool", 10)
    scorer = httpx.Client(
        base_url=f"{live_server.url}/api/v1",
        headers={"Authorization": f"Bearer {make_key('score')}"},
    )
    send_scores(scorer, hash_calls[:4], name="helpfulness", value=0.1, source="evaluator")
    send_scores(scorer, hash_calls[4:6], name="helpfulness", value=0.9, source="evaluator")

    ScoreRule.objects.create(score_name="helpfulness", operator="<", threshold="0.3", weight=0.5)

    hashing = next(c for c in ranked() if c["tool"] == "hash_tool")
    assert hashing["scored_failures"] == pytest.approx(2.0)  # 4 calls at half a failure


def test_a_rollback_restores_the_score_rules(two_hashers):
    ScoreRule.objects.create(score_name="result_correct", operator="=", threshold="false")
    with_rule = ruleset_versions.record_version("with a score rule").number
    ScoreRule.objects.all().delete()
    ruleset_versions.record_version("without")

    ruleset_versions.rollback(with_rule)

    assert list(ScoreRule.objects.values_list("score_name", "threshold")) == [
        ("result_correct", "false")
    ]
    assert [r.score_name for r in ruleset_versions.current_ruleset().score_rules] == [
        "result_correct"
    ]


@pytest.mark.parametrize(
    ("rule", "value", "label", "matches"),
    [
        (Rule("s", "=", "false"), 0.0, "false", True),
        (Rule("s", "=", "false"), 1.0, "true", False),
        (Rule("s", "<", "0.3"), 0.29, "", True),
        (Rule("s", "<", "0.3"), 0.3, "", False),
        (Rule("s", ">=", "4"), 4.0, "", True),
        (Rule("s", "=", "wrong"), None, "wrong", True),
        (Rule("s", "!=", "right"), None, "partly", True),
        (Rule("s", "<", "wrong"), None, "wrong", False),  # labels compare only with = and !=
        (Rule("s", "=", "false", enabled=False), 0.0, "false", False),
    ],
)
def test_a_score_rule_compares_numbers_and_labels(rule, value, label, matches):
    assert rule.matches(value, label) is matches


def test_a_calls_scores_add_up_to_one_failure_at_most():
    rules = RuleSet(version=1, score_rules=(Rule("a", "=", "false", 0.7), Rule("b", "<", "1")))
    assert rules.score_failure((("a", 0.0, "false"), ("b", 0.5, ""))) == 1.0
    assert rules.score_failure((("a", 0.0, "false"),)) == pytest.approx(0.7)
    assert rules.score_failure((("c", 0.0, "false"),)) == 0.0


@pytest.mark.parametrize(
    ("rule", "problem"),
    [
        (Rule("s", "~", "1"), "operator must be one of"),
        (Rule("s", "=", "1", weight=2), "weight must be between 0 and 1"),
        (Rule("s", "<", "high"), "the threshold must be a number"),
    ],
)
def test_a_score_rule_says_what_is_wrong_with_it(rule, problem):
    assert problem in rule.problem()


def test_the_tool_page_shows_its_calls_scores_and_the_scores_term(
    two_hashers, api, span, live_server, make_key, admin_client
):
    hash_calls = record(api, span, "hash_tool", 10)
    scorer = httpx.Client(
        base_url=f"{live_server.url}/api/v1",
        headers={"Authorization": f"Bearer {make_key('score')}"},
    )
    send_scores(scorer, hash_calls[:3], name="result_correct", value=False)
    send_scores(scorer, hash_calls[3:4], name="result_correct", value=True)
    send_scores(scorer, hash_calls[:2], name="helpfulness", value=0.2)
    ScoreRule.objects.create(score_name="result_correct", operator="=", threshold="false")

    page = admin_client.get("/tools/hash_tool/", {"range": "24h"}).content.decode()
    other = admin_client.get("/tools/hasher_b/", {"range": "24h"}).content.decode()

    table = page[page.index('id="tool-scores"') :]
    assert "result_correct" in table and "1 true, 3 false (25% true)" in table
    assert "helpfulness" in table and "mean 0.2" in table
    assert "scores -9.00 (3 ok calls scored as failed)" in page  # -3/10 * (20 + 10)
    assert 'id="no-tool-scores"' in other
    evidence = admin_client.get("/evidence/Hashing/", {"range": "24h"}).content.decode()
    row = evidence[evidence.index('data-tool="hash_tool"') :]
    assert '<td class="num scores-now">-9.00</td>' in row[: row.index("</tr>")]
    tried = admin_client.get("/planner/try", {"request": REQUEST}).content.decode()
    assert "Final = base + evidence + scores − penalty + mapping weight." in tried
    assert "<td>-9.00</td>" in tried
