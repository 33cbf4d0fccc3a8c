"""Step 3, tool resolution: the registered, enabled tools that can serve each capability."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from planner_app.pipeline.ruleset import RuleSet
from tools_app.registry import ToolRegistry
from tools_app.specs import ToolSpec

# The engine refuses a disabled tool, so it is never a candidate; the planner still says
# what it would have run (web_search is disabled until ARES_SEARXNG_URL names a provider).
DISABLED = "registered but disabled"
# A caller with an allow-list (an agent's tools) is planned only what it may call: the
# engine would refuse the rest (permission_denied), so they are passed over, with this why.
NOT_ALLOWED = "the caller may not use it"


@dataclass(frozen=True)
class Candidate:
    spec: ToolSpec
    capability: str
    source: str  # "mapping" or "declared"
    mapping_weight: float = 0.0


class ToolResolver:
    """Candidates come from the operator's mappings and from what tools declare.

    Only registered, enabled tools qualify, and of those only the ones the caller may use
    (`allowed`; None: any). MCP tools declare no capabilities, so they are candidates only
    when a mapping names them.
    """

    def resolve(
        self,
        capability: str,
        registry: ToolRegistry,
        ruleset: RuleSet,
        allowed: Collection[str] | None = None,
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
                rejected.append((mapping.tool, self._why_not(mapping.tool, registry, allowed)))
                continue
            candidates[spec.name] = Candidate(spec, capability, "mapping", mapping.weight)
        for spec in enabled.values():
            if capability in spec.capabilities and spec.name not in candidates:
                candidates[spec.name] = Candidate(spec, capability, "declared")
        if allowed is not None:
            rejected += [(name, NOT_ALLOWED) for name in candidates if name not in allowed]
            candidates = {name: c for name, c in candidates.items() if name in allowed}
        return list(candidates.values()), rejected

    @staticmethod
    def _why_not(tool: str, registry: ToolRegistry, allowed: Collection[str] | None) -> str:
        """Return why a mapped tool that is not enabled is no candidate."""
        if tool not in registry:
            return "mapped but not registered"
        # Turning it on would not help a caller that may not use it anyway.
        return NOT_ALLOWED if allowed is not None and tool not in allowed else DISABLED
