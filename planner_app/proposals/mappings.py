"""Mapping proposals: which tool should serve a capability, learned from who served its requests.

A request's capability is what the current rules make of it (the backtester's intent;
the last one when there are several: what the request asks for in the end), so these
proposals cover requests the rules understand but plan with the wrong tool, or can't
resolve to a tool at all. Two kinds:

- a registered tool mapped to no capability and declaring none (an MCP tool, say; a tool
  that declares a capability is a candidate for it already) that worked, called by
  someone other than the planner (an LLM, an outside agent), on at least MIN_SUPPORT and
  at least MIN_SHARE of the capability's requests that no tool mapped to it (or
  declaring it) answered: map it (add_mapping). Agents call other tools beside the one
  that answers (they format, look up, retry elsewhere), so one tool seen on a few of
  them is noise, not a mapping; and a tool of another capability is not proposed for a
  second one: a request of one capability served by another's tool is, far more often,
  a request the rules misread, which a rule change fixes;
- a mapped tool that keeps failing on a capability's requests where another tool then
  succeeds in the same trace: a negative weight, the smallest of WEIGHT_STEPS under which
  the backtest plans those requests with another tool, or, when it never succeeded on
  them at all, unmap it (remove_mapping).
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
MIN_SHARE = 0.5  # share of the capability's unanswered requests the tool worked on
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
    # A tool that declares a capability is its candidate already, as a mapped one is.
    declared = {
        (c, spec.name) for spec in registry.list(enabled_only=False) for c in spec.capabilities
    }
    serving = {**dict.fromkeys(declared, 0.0), **mapped}
    serving_tools = {tool for _, tool in serving}
    records, unanswered = _records(traffic, backtester, serving)
    candidates = []
    for (capability, tool), record in sorted(records.items()):
        if (capability, tool) in mapped:
            found = _demotion(capability, tool, record, mapped, backtester)
        elif tool in registry and tool not in serving_tools:
            found = _addition(capability, tool, record, unanswered[capability], backtester)
        else:
            found = None  # unregistered, or another capability's tool: see the module's note
        if found is not None:
            candidates.append(found)
    return candidates


def _records(
    traffic: Sequence[Served], backtester: Backtester, mapped: dict[tuple[str, str], float]
) -> tuple[dict[tuple[str, str], _Record], Counter[str]]:
    """Return each (capability, tool)'s record on the requests the rules give that capability,
    and per capability how many of its requests no tool mapped to it answered."""
    records: dict[tuple[str, str], _Record] = defaultdict(_Record)
    unanswered: Counter[str] = Counter()
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
        # When a mapped tool worked, it answered the request; a later call did something else.
        if not any(c.ok and _maps(c.tool, choice, mapped) for c in served.calls):
            capability = _capability_served(choice)
            unanswered[capability] += 1
            helpers = {c.tool for c in served.calls if c.ok and c.chosen_by != "planner"}
            for tool in helpers:
                records[(capability, tool)].served.append(served)
        _note_beaten(served, choice, mapped, records)
    return records, unanswered


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
                    record.beaten_by[later[0]] += 1


def _addition(
    capability: str, tool: str, record: _Record, unanswered: int, backtester: Backtester
) -> Candidate | None:
    """Return "map `tool` to `capability`" when it keeps serving the capability's requests."""
    calls = record.ok + record.failed
    served = len(record.served)
    if served < MIN_SUPPORT or not calls or served / unanswered < MIN_SHARE:
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
            f"{tool} worked on {served} of the {unanswered} requests the rules read as "
            f"{capability} that no tool mapped to it answered (called by an LLM or an agent, "
            f"not the planner), and in {record.ok} of its {calls} calls on them; it is mapped "
            "to no capability."
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
