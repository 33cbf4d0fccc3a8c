"""The agent loop's replay guard: a tool that changes things never runs twice alike.

No Django. A call of a tool with side effects counts as run, by tool and arguments, from
the moment it is let through (so a twin later in the same turn is refused too) until it
fails in a way that means it never ran.
"""

from __future__ import annotations

from tools_app.specs import ErrorKind, ToolCall, ToolResult, ToolSpec
from traces_app.spirals.detection import arguments_fingerprint

# Failures that mean the tool never ran: a call refused this way had no side effects.
NOT_RUN = frozenset(
    {ErrorKind.INVALID_ARGUMENTS, ErrorKind.NOT_FOUND, ErrorKind.DISABLED,
     ErrorKind.PERMISSION_DENIED, ErrorKind.CANCELLED}
)  # fmt: skip


class ReplayGuard:
    """Remember the calls with side effects a task let through, by tool and arguments."""

    def __init__(self) -> None:
        self.let_through: dict[tuple[str, str], str] = {}  # (tool, arguments) -> call id

    def refusal(self, spec: ToolSpec, call: ToolCall) -> str:
        """Return why the call would change things a second time, or "" (it may run)."""
        if spec.retryable:
            return ""
        key = (spec.name, arguments_fingerprint(call.arguments))
        if key not in self.let_through:
            self.let_through[key] = call.id
            return ""
        return (
            f"not run again: {spec.name} changes things and already ran with these "
            f"arguments in this task (call {self.let_through[key]}); change the arguments "
            "if a second change is really wanted"
        )

    def forget_unrun(
        self, spec: ToolSpec | None, call: ToolCall, result: ToolResult | None
    ) -> None:
        """Forget a call that failed without running: a corrected call may run."""
        if spec is None or spec.retryable or result is None:
            return
        if not result.success and result.error.kind in NOT_RUN:
            self.let_through.pop((spec.name, arguments_fingerprint(call.arguments)), None)
