"""The planner's first four steps on plain data: analysis, planning, resolution, scoring."""

from __future__ import annotations

import pytest

from planner_app.pipeline.analysis import SemanticAnalyzer
from planner_app.pipeline.planning import CapabilityPlanner
from planner_app.pipeline.resolution import Candidate, ToolResolver
from planner_app.pipeline.ruleset import (
    Capability,
    CapabilityMapping,
    IntentRule,
    RuleSet,
    ScoringWeights,
    ToolProfile,
)
from planner_app.pipeline.scoring import Evidence, Score, ToolScorer
from tools_app.registry import ToolRegistry
from tools_app.specs import SideEffect, ToolSpec

RULES = RuleSet(
    version=1,
    rules=(
        IntentRule("sum-zh", ("Summation",), keywords=("累加", "求和"), priority=10),
        IntentRule("sum-en", ("Summation",), keywords=("sum", "add", "total"), priority=20),
        IntentRule("discrete", ("DiscreteMath",), keywords=("nCr", "factorial"), priority=30),
        IntentRule("power", ("Arithmetic",), patterns=(r"\d\s*\^\s*\d",), priority=40),
        IntentRule("pdf", ("PDFParsing", "TextExtraction"), keywords=("pdf",), priority=50),
        IntentRule("embed", ("Embedding",), keywords=("embed",), priority=60),
        IntentRule("off", ("Hashing",), keywords=("hash",), priority=5, enabled=False),
    ),
    capabilities={
        "Summation": Capability("Summation", subsumes=("Arithmetic",)),
        "TextExtraction": Capability(
            "TextExtraction", subsumes=("PDFParsing",), depends_on=("PDFParsing",)
        ),
        "Embedding": Capability("Embedding", depends_on=("TextExtraction",)),
    },
)
ANALYZER = SemanticAnalyzer()


@pytest.mark.parametrize(
    ("request_text", "capabilities"),
    [
        ("sum the numbers", ("Summation",)),
        ("Sums of squares", ("Summation",)),
        ("give me a summary", ()),
        ("what is my address", ()),
        ("add 2 and 3", ("Summation",)),
        ("NCR of 10 and 3", ("DiscreteMath",)),
        ("从1累加到100", ("Summation",)),
        ("2^10", ("Arithmetic",)),
        ("hash it", ()),  # the rule is disabled
        ("sum then 10 factorial", ("Summation", "DiscreteMath")),
    ],
)
def test_it_matches_whole_words_plurals_chinese_and_patterns(
    request_text: str, capabilities: tuple[str, ...]
) -> None:
    assert ANALYZER.analyze(request_text, RULES).capabilities == capabilities


def test_it_applies_rules_in_priority_order_and_says_what_matched() -> None:
    intent = ANALYZER.analyze("10 factorial, then sum and 求和", RULES)
    assert [m.rule for m in intent.matches] == ["sum-zh", "sum-en", "discrete"]
    assert intent.matches[1].matched == ("sum",)
    assert intent.complexity == "multi"


def test_it_drops_what_another_capability_covers() -> None:
    plan = CapabilityPlanner().plan(("Arithmetic", "Summation"), RULES)
    assert plan.required == ("Summation",)
    assert plan.dropped == (("Arithmetic", "covered by Summation"),)


def test_it_orders_a_chain_by_dependencies() -> None:
    plan = CapabilityPlanner().plan(("Embedding", "TextExtraction"), RULES)
    assert plan.required == ("TextExtraction", "Embedding")
    assert plan.depends_on["Embedding"] == ("TextExtraction",)


def test_it_never_blocks_a_capability_on_one_the_request_does_not_need() -> None:
    plan = CapabilityPlanner().plan(("Embedding",), RULES)
    assert plan.required == ("Embedding",) and plan.depends_on == {"Embedding": ()}


def _tool(name: str, **overrides: object) -> ToolSpec:
    return ToolSpec(name, name, {"type": "object"}, lambda: None, **overrides)


def test_it_resolves_only_registered_enabled_tools_from_mappings_and_declarations() -> None:
    registry = ToolRegistry(
        [
            _tool("calculator", capabilities=("Summation",)),
            _tool("mcp.math.add"),
            _tool("abacus", capabilities=("Summation",), enabled=False),
        ]
    )
    rules = RuleSet(
        version=2,
        mappings=(
            CapabilityMapping("Summation", "mcp.math.add", 1.5),
            CapabilityMapping("Summation", "missing_tool"),
        ),
    )
    candidates, rejected = ToolResolver().resolve("Summation", registry, rules)
    assert {(c.spec.name, c.source, c.mapping_weight) for c in candidates} == {
        ("mcp.math.add", "mapping", 1.5),
        ("calculator", "declared", 0.0),
    }
    assert rejected == [("missing_tool", "mapped but not registered")]


def test_it_leaves_unmapped_mcp_tools_out() -> None:
    registry = ToolRegistry([_tool("mcp.math.add")])
    assert ToolResolver().resolve("Summation", registry, RuleSet(version=1))[0] == []


def _score(
    spec: ToolSpec, evidence: Evidence | None, rules: RuleSet = RULES, weight: float = 0
) -> Score:
    candidate = Candidate(spec, "Summation", "declared", weight)
    return ToolScorer().score(candidate, rules, lambda tool, window: evidence)


def test_it_scores_by_the_documented_formula() -> None:
    spec = _tool("calculator", cost=2.0, deterministic=True, composable=True)
    score = _score(spec, Evidence(samples=50, success_rate=0.9, latency_ms=250))
    assert score.base == pytest.approx(1 / 2 * 10 + 3 + 2)
    assert score.evidence == pytest.approx(0.9 * 20 - 2.5 - 0.1 * 10)
    assert score.penalty == 0
    assert score.final == pytest.approx(10 + 14.5)


def test_it_assumes_95_percent_success_without_evidence() -> None:
    score = _score(_tool("fresh", deterministic=False, composable=False), None)
    assert (score.success_rate, score.samples) == (0.95, 0)
    assert score.evidence == pytest.approx(0.95 * 20 - 0 - 0.05 * 10)


def test_it_penalises_side_effects_and_caps_latency() -> None:
    spec = _tool("writer", side_effect=SideEffect.WRITE, idempotent=False)
    score = _score(spec, Evidence(samples=5, success_rate=1.0, latency_ms=90_000))
    assert score.penalty == 5
    assert score.evidence == pytest.approx(20 - 5)


def test_it_applies_profiles_weights_and_mapping_bonus() -> None:
    rules = RuleSet(
        version=3,
        profiles={"calculator": ToolProfile("calculator", cost=10, side_effects=True)},
        weights=ScoringWeights(side_effects=2.0, cost=20.0),
    )
    score = _score(_tool("calculator"), None, rules, weight=1.25)
    assert score.base == pytest.approx(20 / 10 + 3 + 2)
    assert (score.penalty, score.mapping_weight) == (2.0, 1.25)


CHINESE = RuleSet(
    version=1,
    rules=(
        IntentRule("discrete", ("DiscreteMath",), keywords=("阶乘",), priority=10),
        IntentRule("times", ("Arithmetic",), keywords=("乘", "乘以"), priority=20),
        IntentRule("sum", ("Summation",), keywords=("加到",), priority=30),
        IntentRule("plus", ("Arithmetic",), keywords=("加",), priority=40),
    ),
)


@pytest.mark.parametrize(
    ("request_text", "matched"),
    [
        ("5的阶乘", {"discrete": ("阶乘",)}),
        ("3乘4", {"times": ("乘",)}),
        ("3乘以4", {"times": ("乘以",)}),
        ("5的阶乘乘以2", {"discrete": ("阶乘",), "times": ("乘以",)}),
        ("5的阶乘乘2", {"discrete": ("阶乘",), "times": ("乘",)}),
        ("从1加到10", {"sum": ("加到",)}),
        ("1加2", {"plus": ("加",)}),
    ],
)
def test_a_short_chinese_keyword_never_matches_inside_a_longer_one(
    request_text: str, matched: dict[str, tuple[str, ...]]
) -> None:
    intent = ANALYZER.analyze(request_text, CHINESE)
    assert {m.rule: m.matched for m in intent.matches} == matched


NUMBERS = RuleSet(
    version=1,
    rules=(
        IntentRule("percent", ("Arithmetic",), patterns=(r"\d\s*%",), priority=10),
        IntentRule("five-percent", ("Discount",), keywords=("5%", "5 percent"), priority=20),
        IntentRule("four-hundred", ("Hundreds",), keywords=("400",), priority=30),
        IntentRule("chain", ("Chain",), patterns=(r"\d\s*\*\s*\d",), priority=40),
    ),
)


@pytest.mark.parametrize(
    ("request_text", "matched"),
    [
        ("what is 17% of 2,340", {"percent": ("17%",)}),
        ("take 25% off", {"percent": ("25%",)}),  # "5%" is not in 25%
        ("take 5% off", {"percent": ("5%",), "five-percent": ("5%",)}),
        ("a 1.5 percent fee", {}),  # "5 percent" is not in 1.5 percent
        ("a 5 percent fee", {"five-percent": ("5 percent",)}),
        ("a 5 percent.", {"five-percent": ("5 percent",)}),
        ("a 2.5% fee", {"percent": ("2.5%",)}),
        ("count to 3,400", {}),  # 400 is not a word of 3,400
        ("count 3, 400 and 5", {"four-hundred": ("400",)}),  # a list: 400 is its own number
        ("what is 12*34", {"chain": ("12*34",)}),  # the pattern's match is whole numbers
        ("1,250.5*2", {"chain": ("1,250.5*2",)}),
    ],
)
def test_no_keyword_or_pattern_matches_a_piece_of_a_number(
    request_text: str, matched: dict[str, tuple[str, ...]]
) -> None:
    intent = ANALYZER.analyze(request_text, NUMBERS)
    assert {m.rule: m.matched for m in intent.matches} == matched


def test_it_says_a_mapped_tool_is_disabled() -> None:
    registry = ToolRegistry([_tool("abacus", enabled=False)])
    rules = RuleSet(version=1, mappings=(CapabilityMapping("Summation", "abacus"),))
    assert ToolResolver().resolve("Summation", registry, rules) == (
        [], [("abacus", "registered but disabled")],
    )  # fmt: skip
