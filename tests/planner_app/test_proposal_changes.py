"""A proposal's change as operations on a rule-set snapshot (planner_app.proposals.changes)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from planner_app.proposals.changes import ChangeError, apply_ops, describe

SNAPSHOT: dict[str, Any] = {
    "capabilities": [{"name": "Summation"}, {"name": "DateTime"}, {"name": "Hashing"}],
    "rules": [
        {"id": 1, "name": "sum-en", "capabilities": ["Summation"], "keywords": ["sum"],
         "patterns": [], "language": "any", "goal": "sum numbers", "priority": 20,
         "enabled": True},
    ],
    "mappings": [{"id": 4, "capability": "Hashing", "tool": "hash_tool", "weight": 0.0}],
}  # fmt: skip
NEW_RULE = {"op": "new_rule", "name": "proposed-summation-zh", "capabilities": ["Summation"],
            "keywords": ["累计"], "language": "zh", "goal": "sum numbers"}  # fmt: skip


def test_each_operation_changes_a_copy_and_leaves_the_snapshot_as_it_was() -> None:
    before = copy.deepcopy(SNAPSHOT)
    after = apply_ops(
        SNAPSHOT,
        [
            {"op": "add_words", "rule": "sum-en", "keywords": ["tally", "sum"], "patterns": []},
            NEW_RULE,
            {"op": "add_mapping", "capability": "DateTime", "tool": "mcp.time.now"},
            {
                "op": "set_mapping_weight",
                "capability": "Hashing",
                "tool": "hash_tool",
                "weight": -5,
            },
        ],  # fmt: skip
    )
    assert before == SNAPSHOT
    assert after["rules"][0]["keywords"] == ["sum", "tally"]  # "sum" is not added twice
    assert after["rules"][1] == {
        "name": "proposed-summation-zh", "capabilities": ["Summation"], "keywords": ["累计"],
        "patterns": [], "language": "zh", "goal": "sum numbers", "priority": 100,
        "enabled": True,
    }  # fmt: skip
    assert after["mappings"] == [
        {"id": 4, "capability": "Hashing", "tool": "hash_tool", "weight": -5.0},
        {"capability": "DateTime", "tool": "mcp.time.now", "weight": 0.0},
    ]
    unmapped = apply_ops(SNAPSHOT, [{"op": "remove_mapping", "capability": "Hashing",
                                     "tool": "hash_tool"}])  # fmt: skip
    assert unmapped["mappings"] == []


def test_a_second_new_rule_proposal_for_the_same_rule_adds_its_words_to_it() -> None:
    """Two proposals of one new rule (two words): the second, applied after, adds its word."""
    first = apply_ops(SNAPSHOT, [NEW_RULE])
    second = apply_ops(first, [{**NEW_RULE, "keywords": ["合计"]}])
    [rule] = [r for r in second["rules"] if r["name"] == "proposed-summation-zh"]
    assert rule["keywords"] == ["累计", "合计"]
    assert apply_ops(first, [NEW_RULE]) == first  # held already: nothing to propose


@pytest.mark.parametrize(
    ("op", "message"),
    [
        ({"op": "drop_table"}, "unknown operation 'drop_table'"),
        ({"op": "add_words", "rule": "gone", "keywords": ["x"]}, "no rule named 'gone'"),
        ({**NEW_RULE, "name": "sum-en", "capabilities": ["DateTime"]},
         "a rule named 'sum-en' exists already, for Summation"),
        ({**NEW_RULE, "capabilities": ["Nothing"]}, "no capability named 'Nothing'"),
        ({"op": "add_mapping", "capability": "Hashing", "tool": "hash_tool"},
         "hash_tool is mapped to Hashing already"),
        ({"op": "set_mapping_weight", "capability": "DateTime", "tool": "hash_tool",
          "weight": 1}, "hash_tool is not mapped to DateTime"),
        ({"op": "remove_mapping", "capability": "DateTime", "tool": "x"},
         "x is not mapped to DateTime"),
    ],
)  # fmt: skip
def test_an_operation_that_does_not_fit_names_why(op: dict[str, Any], message: str) -> None:
    with pytest.raises(ChangeError, match=message):
        apply_ops(SNAPSHOT, [op])


def test_each_operation_reads_as_a_sentence() -> None:
    assert describe({"op": "add_words", "rule": "sum-en", "keywords": ["tally"],
                     "patterns": ["x+"]}) == "add 'tally', '/x+/' to rule sum-en"  # fmt: skip
    assert describe(NEW_RULE) == "new rule proposed-summation-zh (Summation): '累计'"
    assert describe({"op": "add_mapping", "capability": "DateTime", "tool": "t"}) == (
        "map t to DateTime (weight 0)"
    )
    assert describe({"op": "set_mapping_weight", "capability": "H", "tool": "t",
                     "weight": -2.5}) == "weight -2.5 for t in H"  # fmt: skip
    assert describe({"op": "remove_mapping", "capability": "H", "tool": "t"}) == "unmap t from H"
