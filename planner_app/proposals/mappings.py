"""Mapping proposals: which tool should serve a capability, learned from who served its requests.

A request's capability is what the current rules make of it (the backtester's intent),
so these proposals cover requests the rules understand but plan with the wrong tool, or
can't resolve to a tool at all. Two kinds:

- a registered tool that keeps serving a capability's requests successfully, called by
  someone other than the planner (an LLM, an outside agent), but not mapped to it:
  map it (add_mapping);
- a mapped tool that keeps failing on a capability's requests where another tool then
  succeeds in the same trace: a negative weight, the smallest of WEIGHT_STEPS under which
  the backtest plans those requests with another tool, or, when it never succeeded at
  all, unmap it (remove_mapping).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from planner_app.backtest import Choice
from planner_app.pipeline.ruleset import RuleSet
from planner_app.proposals.candidates import Backtester, Candidate, summary
from planner_app.proposals.traffic import Served
from tools_app.registry import ToolRegistry

MIN_SUPPORT = 3  # requests behind a mapping proposal, at least
MIN_SUCCESS = 0.8  # share of a tool's calls on the capability's requests that worked
MIN_FAILURE = 0.5  # share of a mapped tool's calls on them that failed
WEIGHT_STEPS = (-1.0, -2.0, -5.0, -10.0, -20.0)


@dataclass
class _Record:
    """One tool's calls on one capability's requests."""

    served: list[Served] = field(default_factory=list)  # requests it answered (not the planner)
    ok: int = 0
    failed: int = 0
    beaten: list[Served] = field(default_factory=list)  # it failed, then another tool worked
    beaten_by: Counter[str] = field(default_factory=Counter)


def propose_mappings(
    traffic: Sequence[Served], backtester: Backtester, ruleset: RuleSet, registry: ToolRegistry
) -> list[Candidate]:
    """Return the mapping proposals the traffic supports, each backtested."""
    mapped = {(m.capability, m.tool): m.weight for m in ruleset.mappings}
    records = _records(traffic, backtester, mapped)
    candidates = []
    for (capability, tool), record in sorted(records.items()):
        if (capability, tool) in mapped:
            found = _demotion(capability, tool, record, mapped, backtester)
        else:
            found = _addition(capability, tool, record, registry, backtester)
        if found is not None:
            candidates.append(found)
    return candidates


def _records(
    traffic: Sequence[Served], backtester: Backtester, mapped: dict[tuple[str, str], float]
) -> dict[tuple[str, str], _Record]:
    """Return each (capability, tool)'s record on the requests the rules give that capability."""
    records: dict[tuple[str, str], _Record] = defaultdict(_Record)
    for served in traffic:
        if not served.calls:
            continue
        choice = backtester.choice(served.request)
        if not choice.capabilities:
            continue  # the rules don't understand it: a rule proposal's business
        for call in served.calls:
            for capability in _capabilities_of(call.tool, choice, mapped):
                record = records[(capability, call.tool)]
                record.ok += call.ok
                record.failed += not call.ok
        answer = served.served_by()
        # When a mapped tool worked, it answered the request; a later call did something else.
        answered = any(c.ok and _maps(c.tool, choice, mapped) for c in served.calls)
        if answer is not None and not answered:
            records[(_capability_served(choice), answer.tool)].served.append(served)
        _note_beaten(served, choice, mapped, records)
    return records


def _capabilities_of(tool: str, choice: Choice, mapped: dict[tuple[str, str], float]) -> list[str]:
    """Return the capabilities a call counts for: those its tool is mapped to, else the answer's."""
    mine = [c for c in choice.capabilities if (c, tool) in mapped]
    return mine or [_capability_served(choice)]


def _maps(tool: str, choice: Choice, mapped: dict[tuple[str, str], float]) -> bool:
    return any((capability, tool) in mapped for capability in choice.capabilities)


def _capability_served(choice: Choice) -> str:
    """Return the capability an answering call served: the last one (what the answer is)."""
    return choice.capabilities[-1]


def _note_beaten(
    served: Served,
    choice: Choice,
    mapped: dict[tuple[str, str], float],
    records: dict[tuple[str, str], _Record],
) -> None:
    """Record each mapped tool that failed on the request before another tool worked."""
    for position, call in enumerate(served.calls):
        if call.ok:
            continue
        later = [c.tool for c in served.calls[position + 1 :] if c.ok and c.tool != call.tool]
        if not later:
            continue
        for capability in choice.capabilities:
            if (capability, call.tool) in mapped:
                record = records[(capability, call.tool)]
                if not record.beaten or record.beaten[-1] is not served:
                    record.beaten.append(served)
                    record.beaten_by[later[-1]] += 1


def _addition(
    capability: str,
    tool: str,
    record: _Record,
    registry: ToolRegistry,
    backtester: Backtester,
) -> Candidate | None:
    """Return "map `tool` to `capability`" when it keeps serving the capability's requests."""
    calls = record.ok + record.failed
    if tool not in registry or len(record.served) < MIN_SUPPORT or not calls:
        return None
    if record.ok / calls < MIN_SUCCESS:
        return None
    ops = [{"op": "add_mapping", "capability": capability, "tool": tool, "weight": 0.0}]
    return Candidate(
        kind="mapping",
        key=f"mapping:{capability}:{tool}:add",
        title=f"Map {tool} to {capability}",
        target=capability,
        why=(
            f"{tool} served {len(record.served)} requests the rules read as {capability} "
            f"(not chosen by the planner) and worked in {record.ok} of its {calls} calls "
            f"on them, but it is not mapped to {capability}."
        ),
        evidence=list(record.served),
        ops=ops,
        backtest=_backtest(ops, capability, backtester),
    )


def _demotion(
    capability: str,
    tool: str,
    record: _Record,
    mapped: dict[tuple[str, str], float],
    backtester: Backtester,
) -> Candidate | None:
    """Return a lower weight, or unmapping, for a mapped tool others keep succeeding after."""
    calls = record.ok + record.failed
    if len(record.beaten) < MIN_SUPPORT or not calls or record.failed / calls < MIN_FAILURE:
        return None
    rival, _ = record.beaten_by.most_common(1)[0]
    why = (
        f"{tool} failed in {record.failed} of its {calls} calls on requests the rules read "
        f"as {capability}; in {len(record.beaten)} of them another tool then worked "
        f"(mostly {rival})."
    )
    requests = [served.request for served in record.beaten]
    base = {"capability": capability, "tool": tool}
    if record.ok == 0:
        ops = [{"op": "remove_mapping", **base}]
        return Candidate(
            "mapping", f"mapping:{capability}:{tool}:remove", f"Unmap {tool} from {capability}",
            capability, why + " It never worked on them.", list(record.beaten), ops,
            backtest=_backtest(ops, capability, backtester),
        )  # fmt: skip
    current = mapped[(capability, tool)]
    for step in WEIGHT_STEPS:
        ops = [{"op": "set_mapping_weight", **base, "weight": current + step}]
        report = backtester.run(ops, requests=requests)
        if any(tool not in change.after.tools for change in report.changes):
            return Candidate(
                "mapping", f"mapping:{capability}:{tool}:weight",
                f"Lower {tool}'s weight in {capability} to {current + step:g}", capability,
                why + f" At weight {current + step:g} the planner picks another tool for them.",
                list(record.beaten), ops, backtest=_backtest(ops, capability, backtester),
            )  # fmt: skip
    return None


def _backtest(ops: list[dict[str, Any]], capability: str, backtester: Backtester) -> dict[str, Any]:
    """Return the backtest of a mapping change on every recorded request.

    A mapping takes part only in finding the tools of its capability, so only the requests
    whose plan needs that capability are planned again; the rest can't change.
    """
    needing = [r for r in backtester.requests if capability in backtester.choice(r).capabilities]
    report = backtester.run(ops, requests=needing)
    report.total = len(backtester.requests)
    return summary(report)
