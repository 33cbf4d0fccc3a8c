"""One call per need: Chinese keywords match whole words, and a plan never repeats a call."""

from __future__ import annotations

import pytest

from planner_app.pipeline.planner import Planner
from planner_app.pipeline.ruleset import CapabilityMapping, IntentRule, RuleSet
from planner_app.services import plan_request
from tools_app.builtins import calculator
from tools_app.builtins.calculator import evaluate
from tools_app.registry import ToolRegistry


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("request_text", "capability", "value"),
    [
        ("5的阶乘", "DiscreteMath", 120),  # 乘 (multiply) inside 阶乘 (factorial)
        ("10的阶乘是多少", "DiscreteMath", 3628800),
        ("十的阶乘", "DiscreteMath", 3628800),
        ("3乘以4", "Arithmetic", 12),
        ("3乘4", "Arithmetic", 12),
        ("根号16", "Arithmetic", 4),
        ("2的10次方", "Arithmetic", 1024),
        ("计算3的平方", "Arithmetic", 9),
        ("3乘以4再除以2", "Arithmetic", 6),
        ("从1加到100", "Summation", 5050),  # 加 inside 加到 (sum up to)
        ("12和18的最大公约数", "NumberTheory", 6),
    ],
)
def test_it_plans_one_step_for_a_chinese_request(
    default_rules: None, request_text: str, capability: str, value: float
) -> None:
    plan = plan_request(request_text)
    [step] = plan.steps
    assert (step.tool, step.capability) == ("calculator", capability)
    assert evaluate(step.arguments["expression"]) == value


@pytest.mark.django_db
def test_a_longer_chinese_keyword_claims_its_characters(default_rules: None) -> None:
    plan = plan_request("5的阶乘")
    assert plan.explanation["rules_matched"] == [
        {"rule": "discrete-math", "matched": ["阶乘"], "capabilities": ["DiscreteMath"]}
    ]


# Two rules that read the same words as different needs, both served by the calculator
# with the same expression: the plan must still call it once.
OVERLAPPING = RuleSet(
    version=1,
    rules=(
        IntentRule("factorial", ("DiscreteMath",), keywords=("factorial",), priority=10),
        IntentRule("maths", ("Arithmetic",), keywords=("factorial",), priority=20),
        IntentRule("sum", ("Summation",), keywords=("sum",), priority=30),
    ),
    mappings=(
        CapabilityMapping("DiscreteMath", "calculator"),
        CapabilityMapping("Arithmetic", "calculator"),
        CapabilityMapping("Summation", "calculator"),
    ),
)


def test_it_never_plans_the_same_call_twice() -> None:
    plan = Planner().plan("10 factorial", ToolRegistry([calculator.SPEC]), OVERLAPPING)
    assert [(s.step_id, s.tool, s.arguments) for s in plan.steps] == [
        ("step_1", "calculator", {"expression": "factorial(10)"})
    ]
    assert plan.explanation["steps_merged"] == [
        {"capability": "Arithmetic", "tool": "calculator", "into": "step_1",
         "why": "the same call as step_1 (for DiscreteMath)"}
    ]  # fmt: skip
    assert list(plan.explanation["arguments"]) == ["step_1"]


def test_it_numbers_the_steps_it_keeps_without_gaps() -> None:
    plan = Planner().plan("10 factorial", ToolRegistry([calculator.SPEC]), OVERLAPPING)
    assert plan.reason == "step_1: calculator for DiscreteMath"
    assert not plan.needs_llm and not plan.is_multi_step
