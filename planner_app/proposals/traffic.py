"""Recorded traffic as the proposals read it: each request and the tool calls that served it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any


@dataclass(frozen=True)
class Call:
    """One recorded tool call: which tool, who chose it, whether it worked, and its data."""

    tool: str
    chosen_by: str  # traces_app.models.ChosenBy: llm, planner, workflow, external ("" unknown)
    ok: bool
    arguments: Any
    result: Any
    at: datetime
    span_id: str = ""


@dataclass(frozen=True)
class Served:
    """A recorded request (a trace with a request text) and its tool calls in order."""

    trace_id: str
    request: str
    at: datetime
    calls: tuple[Call, ...]

    @property
    def tools(self) -> tuple[str, ...]:
        """Return the tools called, in order."""
        return tuple(call.tool for call in self.calls)

    def served_by(self) -> Call | None:
        """Return the last successful call the planner did not choose, if any.

        That is the call that answered a request the planner left to someone else (an
        LLM, an outside agent): what a rule or mapping proposal learns from.
        """
        for call in reversed(self.calls):
            if call.ok and call.chosen_by != "planner":
                return call
        return None
