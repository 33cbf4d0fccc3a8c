"""Proposal rows as the store writes them, for the page, API and admin tests."""

from __future__ import annotations

import secrets
from typing import Any

from django.utils import timezone

from planner_app import ruleset_versions
from planner_app.models import Proposal

HOSTILE = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">'


def evidence(request: str, tool: str = "calculator") -> dict[str, Any]:
    """Return one entry of Proposal.evidence: a request an LLM served with `tool`."""
    return {
        "trace_id": secrets.token_hex(16),
        "request": request,
        "at": timezone.now().isoformat(),
        "tools": [tool],
        "served_by": tool,
        "chosen_by": "llm",
    }


def backtest(newly_planned: list[str], breaks: list[str] = (), total: int = 10) -> dict[str, Any]:
    """Return a backtest summary (candidates.summary's shape) with these requests labelled."""

    def entry(request: str, kind: str, before: str, after: str) -> dict[str, str]:
        return {"request": request, "kind": kind, "before": before, "after": after,
                "before_intent": "", "after_intent": "Summation"}  # fmt: skip

    return {
        "before_version": ruleset_versions.latest_number(),
        "total": total,
        "changed_count": len(newly_planned) + len(breaks),
        "newly_planned_count": len(newly_planned),
        "newly_needs_llm_count": len(breaks),
        "other_changes_count": 0,
        "newly_planned": [
            entry(r, "newly planned", "needs the LLM", "calculator") for r in newly_planned
        ],
        "newly_needs_llm": [
            entry(r, "newly needs the LLM", "calculator", "needs the LLM") for r in breaks
        ],  # fmt: skip
        "changed": [],
    }


def make_proposal(word: str = "tally", **overrides: Any) -> Proposal:
    """Store an open rule proposal adding `word` to sum-en, backtested on the current rules."""
    requests = [f"{word} 3 and 4", f"{word} 10 and 20"]
    fields: dict[str, Any] = {
        "kind": Proposal.Kind.RULE,
        "key": f"rule:Summation:{word}",
        "title": f'Add "{word}" to sum-en (Summation)',
        "target": "Summation",
        "why": f"{len(requests)} requests the rules could not plan; an LLM served them with "
        "the calculator",
        "ops": [{"op": "add_words", "rule": "sum-en", "keywords": [word], "patterns": []}],
        "evidence": [evidence(r) for r in requests],
        "evidence_count": len(requests),
        "backtest": backtest(requests),
        "ruleset_version": ruleset_versions.latest_number(),
    }
    fields.update(overrides)
    return Proposal.objects.create(**fields)
