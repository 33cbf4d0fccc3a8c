"""Step 3, tool resolution: the registered, enabled tools that can serve each capability."""

from __future__ import annotations

from dataclasses import dataclass

from planner_app.pipeline.ruleset import RuleSet
from tools_app.registry import ToolRegistry
from tools_app.specs import ToolSpec

# The engine refuses a disabled tool, so it is never a candidate; the planner still says
# what it would have run (web_search is disabled until ARES_SEARXNG_URL names a provider).
DISABLED = "registered but disabled"


@dataclass(frozen=True)
class Candidate:
    spec: ToolSpec
    capability: str
    source: str  # "mapping" or "declared"
    mapping_weight: float = 0.0


class ToolResolver:
    """Candidates come from the operator's mappings and from what tools declare.

    Only registered, enabled tools qualify. MCP tools declare no capabilities, so they
    are candidates only when a mapping names them.
    """

    def resolve(
        self, capability: str, registry: ToolRegistry, ruleset: RuleSet
    ) -> tuple[list[Candidate], list[tuple[str, str]]]:
        """Return (candidates, rejected (tool, why)) for one capability."""
        candidates: dict[str, Candidate] = {}
        rejected: list[tuple[str, str]] = []
        enabled = {spec.name: spec for spec in registry.list()}
        for mapping in ruleset.mappings:
            if mapping.capability != capability:
                continue
            spec = enabled.get(mapping.tool)
            if spec is None:
                why = DISABLED if mapping.tool in registry else "mapped but not registered"
                rejected.append((mapping.tool, why))
                continue
            candidates[spec.name] = Candidate(spec, capability, "mapping", mapping.weight)
        for spec in enabled.values():
            if capability in spec.capabilities and spec.name not in candidates:
                candidates[spec.name] = Candidate(spec, capability, "declared")
        return list(candidates.values()), rejected
