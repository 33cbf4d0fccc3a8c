"""Step 2, capability planning: dedupe, subsumption, and dependency order."""

from __future__ import annotations

from dataclasses import dataclass

from planner_app.pipeline.ruleset import Capability, RuleSet


@dataclass(frozen=True)
class CapabilityPlan:
    required: tuple[str, ...]  # in execution order
    dropped: tuple[tuple[str, str], ...]  # (capability, why)
    depends_on: dict[str, tuple[str, ...]]


class CapabilityPlanner:
    """Keep what the request needs, drop what another need covers, order by dependencies.

    Dependencies count only among the capabilities the request needs: "embed this text"
    alone needs Embedding, not the PDF parsing that could come before it.
    """

    def plan(self, capabilities: tuple[str, ...], ruleset: RuleSet) -> CapabilityPlan:
        wanted = list(dict.fromkeys(capabilities))
        dropped = []
        for name in list(wanted):
            coverer = next((other for other in wanted if other != name
                            and name in self._covered_by(other, ruleset)), None)  # fmt: skip
            if coverer is not None:
                wanted.remove(name)
                dropped.append((name, f"covered by {coverer}"))
        depends_on = {
            name: tuple(d for d in self._info(name, ruleset).depends_on if d in wanted)
            for name in wanted
        }
        return CapabilityPlan(tuple(_in_dependency_order(wanted, depends_on)), tuple(dropped),
                              depends_on)  # fmt: skip

    def _info(self, name: str, ruleset: RuleSet) -> Capability:
        return ruleset.capabilities.get(name) or Capability(name)

    def _covered_by(self, name: str, ruleset: RuleSet) -> set[str]:
        """Return every capability `name` subsumes, directly or through others."""
        covered: set[str] = set()
        stack = list(self._info(name, ruleset).subsumes)
        while stack:
            current = stack.pop()
            if current not in covered and current != name:
                covered.add(current)
                stack.extend(self._info(current, ruleset).subsumes)
        return covered


def _in_dependency_order(names: list[str], depends_on: dict[str, tuple[str, ...]]) -> list[str]:
    """Return names with each after what it depends on, else in their given order."""
    ordered: list[str] = []
    visiting: set[str] = set()

    def visit(name: str) -> None:
        if name in ordered or name in visiting:  # a cycle is refused when rules are saved
            return
        visiting.add(name)
        for dependency in depends_on.get(name, ()):
            visit(dependency)
        visiting.discard(name)
        ordered.append(name)

    for name in names:
        visit(name)
    return ordered
