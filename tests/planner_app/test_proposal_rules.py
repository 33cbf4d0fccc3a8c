"""Rule proposals (planner_app/proposals/rules.py) on the shipped rules, and a rule's new word
read by the calculator's extractor."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from planner_app.pipeline.planner import Planner
from planner_app.pipeline.ruleset import RuleSet
from planner_app.proposals.candidates import Backtester, Candidate
from planner_app.proposals.changes import apply_ops
from planner_app.proposals.rules import accessor_variety, propose_rules, rules_for, words_of
from planner_app.proposals.traffic import Call, Served
from planner_app.ruleset_versions import ruleset_from_snapshot, take_snapshot
from tools_app.site_engine import get_engine

START = datetime(2026, 12, 1, 12, tzinfo=UTC)
# What the planner serves today: a few requests per capability, so that a word that also
# belongs to another capability's requests has something to collide with.
PLANNED = [
    "sum of 2 and 3",
    "add 48 and 19",
    "what is 1250 plus 370",
    "mean of 1, 2, 3",
    "average of 3, 8, 15 and 22",
    "What is 2^10 minus 24?",
    "gcd of 84 and 126",
    "md5 of hello",
    "sha256 of 'INV-2026-0042'",
    "reverse the string 'stressed'",
    "1到100的和",
    "求3和4的和",
    "计算 25 乘以 4",
]


def without(snapshot: dict[str, Any], rule: str, keyword: str) -> dict[str, Any]:
    """Return the snapshot with one keyword taken out of one rule."""
    return apply_ops(snapshot, []) | {
        "rules": [
            r | {"keywords": [k for k in r["keywords"] if k != keyword]} if r["name"] == rule else r
            for r in snapshot["rules"]
        ]
    }


def planned_by(request: str, ruleset: RuleSet, chosen_by: str) -> Call:
    plan = Planner().plan(request, get_engine().registry, ruleset)
    step = plan.steps[0]
    return Call(step.tool, chosen_by, True, step.arguments, None, START)


def traffic(
    ruleset: RuleSet, served: dict[str, tuple[str, dict[str, Any]]], planned: list[str] = PLANNED
) -> list[Served]:
    """Return recorded traffic: `served` answered by an LLM's call, `planned` by the planner."""
    records = []
    for n, (request, (tool, arguments)) in enumerate(served.items()):
        call = Call(tool, "llm", True, arguments, {"value": 1}, START + timedelta(seconds=n))
        records.append(Served(f"llm-{n}", request, call.at, (call,)))
    for n, request in enumerate(planned):
        call = planned_by(request, ruleset, "planner")
        records.append(Served(f"planner-{n}", request, START, (call,)))
    return records


def proposals(snapshot: dict[str, Any], records: list[Served], **options: Any) -> list[Candidate]:
    ruleset = ruleset_from_snapshot(snapshot, 7)
    backtester = Backtester([s.request for s in records], ruleset, snapshot, get_engine().registry)
    return propose_rules(records, backtester, ruleset, **options)


@pytest.fixture
def shipped(default_rules: None) -> dict[str, Any]:
    return take_snapshot()


def calc(expression: str) -> tuple[str, dict[str, Any]]:
    return ("calculator", {"expression": expression})


TALLY = {
    "tally 3 and 4": calc("3+4"),
    "tally 10, 20 and 30": calc("10+20+30"),
    "please tally 7 and 8": calc("7 + 8"),
}


# --- The extractor reads a rule's word as the rule -------------------------------------------


def plan_with(snapshot: dict[str, Any], request: str, ops: list[dict[str, Any]]) -> Any:
    ruleset = ruleset_from_snapshot(apply_ops(snapshot, ops), 0)
    return Planner().plan(request, get_engine().registry, ruleset)


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("request_text", "rule", "word", "found", "expression"),
    [
        ("tally 3 and 4", "sum-en", "tally", "tally", "sum(3,4)"),
        ("Tally 3, 4 and 5", "sum-en", "tally", "Tally", "sum(3,4,5)"),
        ("累计 3 和 4", "sum-zh", "累计", "累计", "sum(3,4)"),
        ("3和4累计", "sum-zh", "累计", "累计", "sum(3,4)"),
        # 累加 is sum-zh's own word, but the extractor saw only its 加 and gave up.
        ("累加 3 和 4", "sum-zh", "累加", "累加", "sum(3,4)"),
    ],
)
def test_a_rules_new_word_plans_the_calculator(
    shipped: dict[str, Any], request_text: str, rule: str, word: str, found: str, expression: str
) -> None:
    reduced = without(shipped, rule, word)
    assert plan_with(reduced, request_text, []).needs_llm
    op = {"op": "add_words", "rule": rule, "keywords": [word]}
    plan = plan_with(reduced, request_text, [op])
    assert [(s.tool, s.capability, s.arguments) for s in plan.steps] == [
        ("calculator", "Summation", {"expression": expression})
    ]
    how = plan.explanation["arguments"]["step_1"]["how"]
    assert how.startswith(f"read {found!r} as ") and f"(rule {rule})" in how


@pytest.mark.django_db
def test_a_word_in_a_rule_of_several_operations_gets_no_reading(shipped: dict[str, Any]) -> None:
    # hashing holds md5, sha1, sha256, sha512: a new word there could mean any of them.
    op = {"op": "add_words", "rule": "hashing", "keywords": ["fingerprint"]}
    plan = plan_with(shipped, "fingerprint hello", [op])
    assert plan.needs_llm and plan.intent.capabilities == ("Hashing",)


@pytest.mark.django_db
@pytest.mark.parametrize(
    "request_text",
    [
        "how much is a dozen times 12",  # "times" is the calculator's word (not min(12))
        "uppercase and reverse hello",  # without "uppercase", string_utils reads a reverse
    ],
)
def test_a_word_the_extractor_reads_is_not_read_as_another(
    shipped: dict[str, Any], request_text: str
) -> None:
    assert plan_with(shipped, request_text, []).needs_llm


# --- Words a rule could take ------------------------------------------------------------------


def test_words_of_keeps_words_and_chinese_substrings() -> None:
    assert words_of("What is the MD5 of the 3 files?") == ["md5", "files"]
    assert words_of("累计 3 和 4") == ["累计"]
    assert words_of("现在几点") == ["现在", "在几", "几点", "现在几", "在几点", "现在几点"]


def test_accessor_variety_tells_a_word_from_a_piece_of_one() -> None:
    texts = ["有多少个字符", "前5个字符", "字符串test", "反转字符串abc"]
    assert accessor_variety("字符", texts) == 3  # 个 or 转 before; end, 串 after
    assert accessor_variety("个字", texts) == 1  # always 符 after


@pytest.mark.django_db
def test_rules_for_lists_the_capabilitys_rules_in_the_words_language(shipped: dict) -> None:
    ruleset = ruleset_from_snapshot(shipped, 1)

    def names(capability: str, word: str) -> list[str]:
        return [rule.name for rule in rules_for(ruleset, capability, word)]

    assert names("Summation", "tally") == ["sum-en"]
    assert names("Summation", "累计") == ["sum-zh", "sum-of-zh"]
    assert names("Arithmetic", "minus") == ["math-words", "arithmetic"]
    assert names("Arithmetic", "计") == ["math-words-zh", "arithmetic"]
    assert names("JSONProcessing", "格式化") == []  # its rules are English: a new rule


# --- Proposals ---------------------------------------------------------------------------------


@pytest.mark.django_db
def test_it_proposes_a_new_word_for_summation_with_its_requests(shipped: dict[str, Any]) -> None:
    records = traffic(ruleset_from_snapshot(shipped, 7), TALLY)
    [candidate] = proposals(shipped, records)
    assert (candidate.kind, candidate.key, candidate.target) == ("rule", "rule:Summation:tally",
                                                                 "Summation")  # fmt: skip
    assert candidate.title == 'Add "tally" to sum-en (Summation)'
    assert candidate.ops == [
        {"op": "add_words", "rule": "sum-en", "keywords": ["tally"], "patterns": []}
    ]
    assert sorted(s.request for s in candidate.evidence) == sorted(TALLY)
    backtest = candidate.backtest
    assert backtest["newly_planned_count"] == 3 and backtest["newly_needs_llm_count"] == 0
    assert sorted(e["request"] for e in backtest["newly_planned"]) == sorted(TALLY)
    assert backtest["other_changes_count"] == 0
    assert "3 recorded request(s)" in candidate.why and "plans 3 of them" in candidate.why


@pytest.mark.django_db
def test_it_proposes_a_chinese_word_for_the_chinese_rule(shipped: dict[str, Any]) -> None:
    served = {"累计 3 和 4": calc("3+4"), "累计5和6": calc("5+6"), "请累计 1、2、3": calc("1+2+3")}
    [candidate] = proposals(shipped, traffic(ruleset_from_snapshot(shipped, 7), served))
    assert candidate.key == "rule:Summation:累计"
    assert candidate.ops[0]["rule"] == "sum-zh"
    assert candidate.backtest["newly_planned_count"] == 3


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("rule", "word", "served", "capability"),
    [
        ("sum-en", "total", {"the total of 3 and 4": calc("sum(3,4)"),
                             "total of 12, 30 and 8": calc("sum(12,30,8)")}, "Summation"),
        ("strings", "uppercase", {
            "uppercase 'hello'": ("string_utils", {"operation": "upper", "text": "hello"}),
            "uppercase the word 'abc'": ("string_utils", {"operation": "upper", "text": "abc"}),
        }, "StringManipulation"),
        ("sum-zh", "累加", {"累加 3 和 4": calc("sum(3,4)"), "把 5、6 累加": calc("sum(5,6)")},
         "Summation"),
    ],
)  # fmt: skip
def test_a_removed_keyword_is_proposed_again(
    shipped: dict[str, Any], rule: str, word: str, served: dict, capability: str
) -> None:
    reduced = without(shipped, rule, word)
    planned = [r for r in PLANNED if r not in served]
    keys = [c.key for c in proposals(reduced, traffic(ruleset_from_snapshot(reduced, 7), served,
                                                      planned))]  # fmt: skip
    assert f"rule:{capability}:{word}" in keys


@pytest.mark.django_db
def test_a_word_other_capabilities_requests_hold_is_not_proposed(shipped: dict) -> None:
    # "report" is in requests the calculator served and in a hash the planner made.
    served = {"report 3 and 4": calc("3+4"), "report 10 and 20": calc("10+20")}
    planned = [*PLANNED, "md5 of report.pdf"]
    records = traffic(ruleset_from_snapshot(shipped, 7), served, planned)
    assert [c.key for c in proposals(shipped, records)] == []


@pytest.mark.django_db
def test_a_word_that_would_plan_another_tools_request_is_not_proposed(shipped: dict) -> None:
    # With "tally" in sum-en, "tally 5 and 6" would go to the calculator; add served it.
    served = {**TALLY, "tally 5 and 6": ("mcp.demo.add", {"a": 5, "b": 6})}
    records = traffic(ruleset_from_snapshot(shipped, 7), served)
    assert [c.key for c in proposals(shipped, records)] == []


@pytest.mark.django_db
def test_one_off_requests_give_nothing(shipped: dict[str, Any]) -> None:
    records = traffic(ruleset_from_snapshot(shipped, 7), {"tally 3 and 4": calc("3+4")})
    assert proposals(shipped, records) == []
    assert [c.key for c in proposals(shipped, records, min_support=1)] == ["rule:Summation:tally"]


@pytest.mark.django_db
def test_it_learns_nothing_from_failed_or_planner_calls(shipped: dict[str, Any]) -> None:
    ruleset = ruleset_from_snapshot(shipped, 7)
    records = []
    for n, request in enumerate(TALLY):
        failed = Call("calculator", "llm", False, {"expression": "3+4"}, None, START)
        records.append(Served(f"t{n}", request, START, (failed,)))
    records += traffic(ruleset, {})
    assert proposals(shipped, records) == []


@pytest.mark.django_db
def test_a_capability_without_a_rule_in_the_words_language_gets_a_new_rule(
    shipped: dict,
) -> None:
    chinese_only = [
        r | {"keywords": ["时间", "日期", "时区", "几点"], "patterns": []}
        if r["name"] == "datetime" else r
        for r in shipped["rules"]
    ]  # fmt: skip
    snapshot = shipped | {"rules": chinese_only}
    served = {
        "clock Tokyo": ("datetime", {"operation": "now", "timezone": "Asia/Tokyo"}),
        "clock in Paris": ("datetime", {"operation": "now", "timezone": "Europe/Paris"}),
    }
    [candidate] = proposals(snapshot, traffic(ruleset_from_snapshot(snapshot, 7), served))
    assert candidate.key == "rule:DateTime:clock"
    assert candidate.ops == [
        {"op": "new_rule", "name": "proposed-datetime-en", "capabilities": ["DateTime"],
         "keywords": ["clock"], "patterns": [], "language": "any",
         "goal": "dates, times and time zones", "priority": 100}
    ]  # fmt: skip
    assert candidate.title == 'New rule proposed-datetime-en for DateTime: "clock"'
    assert candidate.backtest["newly_planned_count"] == 2


@pytest.mark.django_db
def test_it_ignores_what_it_cannot_learn_from(shipped: dict[str, Any]) -> None:
    ruleset = ruleset_from_snapshot(shipped, 7)
    unmapped = Call("mcp.demo.add", "llm", True, {"a": 3, "b": 4}, 7, START)
    records = [
        Served("t1", "tally 3 and 4", START, (unmapped,)),  # a tool no capability maps
        Served("t2", "tally 5 and 6", START, (unmapped,)),
        Served("t3", "   ", START, (Call("calculator", "llm", True, {}, 0, START),)),
        Served("t4", "", START, (Call("calculator", "llm", True, {}, 0, START),)),
        Served("t5", "tally 7 and 8", START, ()),  # nothing served it
        *traffic(ruleset, {}),
    ]
    assert proposals(shipped, records) == []


@pytest.mark.django_db
def test_it_reads_recorded_arguments_given_as_json_text(shipped: dict[str, Any]) -> None:
    # An outside agent may report its call's arguments as a JSON string.
    served = {request: ("calculator", f'{{"expression": "sum({n}, {n + 1})"}}')
              for n, request in ((3, "tally 3 and 4"), (5, "tally 5 and 6"))}  # fmt: skip
    [candidate] = proposals(shipped, traffic(ruleset_from_snapshot(shipped, 7), served))
    assert candidate.key == "rule:Summation:tally"
    assert "2 with the recorded call's arguments" in candidate.why


@pytest.mark.django_db
def test_the_same_request_recorded_twice_counts_once(shipped: dict[str, Any]) -> None:
    ruleset = ruleset_from_snapshot(shipped, 7)
    call = Call("calculator", "llm", True, {"expression": "3+4"}, 7, START)
    twice = [Served(f"t{n}", "tally 3 and 4", START, (call,)) for n in range(5)]
    assert proposals(shipped, [*twice, *traffic(ruleset, {})]) == []
