"""A proposal's change to the rules, as operations on a rule-set snapshot.

Operations name rows by their natural keys (a rule's name, a mapping's capability and
tool), not by ids, so the same change applies to the rules as they are when an operator
applies it, not only as they were when it was proposed:

    {"op": "add_words", "rule": "sum-en", "keywords": ["tally"], "patterns": []}
    {"op": "new_rule", "name": "proposed-summation", "capabilities": ["Summation"],
     "keywords": ["累计"], "patterns": [], "language": "zh", "goal": "sum numbers",
     "priority": 100}
    {"op": "add_mapping", "capability": "DateTime", "tool": "mcp.time.get_current_time",
     "weight": 0.0}
    {"op": "set_mapping_weight", "capability": "Hashing", "tool": "hash_tool", "weight": -5.0}
    {"op": "remove_mapping", "capability": "Hashing", "tool": "hash_tool"}

A workflow proposal's change is not an operation on the rules: it is the workflow's
definition, saved as a Workflow row (see store.py).
"""

from __future__ import annotations

import copy
from typing import Any

OPS = ("add_words", "new_rule", "add_mapping", "set_mapping_weight", "remove_mapping")


class ChangeError(ValueError):
    """An operation that does not fit the rules it is applied to (named in the message)."""


def apply_ops(snapshot: dict[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    """Return a copy of `snapshot` with the operations made in order (ChangeError if one can't)."""
    result = copy.deepcopy(snapshot)
    for op in ops:
        kind = op.get("op")
        if kind not in OPS:
            raise ChangeError(f"unknown operation {kind!r}; known: {', '.join(OPS)}")
        _APPLY[kind](result, op)
    return result


def describe(op: dict[str, Any]) -> str:
    """Return the operation as a short sentence for pages and version notes."""
    kind = op.get("op")
    if kind == "add_words":
        words = [*op.get("keywords", []), *(f"/{p}/" for p in op.get("patterns", []))]
        return f"add {', '.join(repr(w) for w in words)} to rule {op['rule']}"
    if kind == "new_rule":
        words = [*op.get("keywords", []), *(f"/{p}/" for p in op.get("patterns", []))]
        capabilities = ", ".join(op["capabilities"])
        return f"new rule {op['name']} ({capabilities}): {', '.join(repr(w) for w in words)}"
    if kind == "add_mapping":
        return f"map {op['tool']} to {op['capability']} (weight {op.get('weight', 0.0):g})"
    if kind == "set_mapping_weight":
        return f"weight {op['weight']:g} for {op['tool']} in {op['capability']}"
    if kind == "remove_mapping":
        return f"unmap {op['tool']} from {op['capability']}"
    return f"unknown operation {kind!r}"


def _rule(snapshot: dict[str, Any], name: str) -> dict[str, Any]:
    for rule in snapshot["rules"]:
        if rule["name"] == name:
            return rule
    raise ChangeError(f"no rule named {name!r} (renamed or deleted since?)")


def _capability(snapshot: dict[str, Any], name: str) -> None:
    if not any(c["name"] == name for c in snapshot["capabilities"]):
        raise ChangeError(f"no capability named {name!r} (renamed or deleted since?)")


def _mapping(snapshot: dict[str, Any], op: dict[str, Any]) -> dict[str, Any] | None:
    for mapping in snapshot["mappings"]:
        if mapping["capability"] == op["capability"] and mapping["tool"] == op["tool"]:
            return mapping
    return None


def _add_words(snapshot: dict[str, Any], op: dict[str, Any]) -> None:
    rule = _rule(snapshot, op["rule"])
    for field in ("keywords", "patterns"):
        rule[field] = [*rule[field], *(w for w in op.get(field, []) if w not in rule[field])]


def _new_rule(snapshot: dict[str, Any], op: dict[str, Any]) -> None:
    """Add the rule; one of that name for the same capabilities (a proposal applied before
    for another word) gets the words instead."""
    existing = next((rule for rule in snapshot["rules"] if rule["name"] == op["name"]), None)
    if existing is not None:
        if sorted(existing["capabilities"]) != sorted(op["capabilities"]):
            raise ChangeError(
                f"a rule named {op['name']!r} exists already, for "
                f"{', '.join(existing['capabilities']) or 'no capability'}"
            )
        _add_words(snapshot, {**op, "rule": op["name"]})
        return
    for capability in op["capabilities"]:
        _capability(snapshot, capability)
    snapshot["rules"].append(
        {
            "name": op["name"],
            "capabilities": sorted(op["capabilities"]),
            "keywords": list(op.get("keywords", [])),
            "patterns": list(op.get("patterns", [])),
            "language": op.get("language", "any"),
            "goal": op.get("goal", ""),
            "priority": int(op.get("priority", 100)),
            "enabled": True,
        }
    )


def _add_mapping(snapshot: dict[str, Any], op: dict[str, Any]) -> None:
    _capability(snapshot, op["capability"])
    if _mapping(snapshot, op) is not None:
        raise ChangeError(f"{op['tool']} is mapped to {op['capability']} already")
    snapshot["mappings"].append(
        {"capability": op["capability"], "tool": op["tool"], "weight": float(op.get("weight", 0))}
    )


def _set_mapping_weight(snapshot: dict[str, Any], op: dict[str, Any]) -> None:
    mapping = _mapping(snapshot, op)
    if mapping is None:
        raise ChangeError(f"{op['tool']} is not mapped to {op['capability']} (unmapped since?)")
    mapping["weight"] = float(op["weight"])


def _remove_mapping(snapshot: dict[str, Any], op: dict[str, Any]) -> None:
    mapping = _mapping(snapshot, op)
    if mapping is None:
        raise ChangeError(f"{op['tool']} is not mapped to {op['capability']} (unmapped since?)")
    snapshot["mappings"].remove(mapping)


_APPLY = {
    "add_words": _add_words,
    "new_rule": _new_rule,
    "add_mapping": _add_mapping,
    "set_mapping_weight": _set_mapping_weight,
    "remove_mapping": _remove_mapping,
}
