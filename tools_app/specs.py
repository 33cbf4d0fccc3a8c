"""Tool contracts and the shapes every path shares: calls, results, errors. No Django here."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

LLM_NAME_PATTERN = re.compile(r"^[a-zA-Z0-9_-]{1,64}\Z")  # \Z: "$" would allow a final "\n"
_UNSAFE_CHARS = re.compile(r"[^a-zA-Z0-9_-]")


class SideEffect(StrEnum):
    READ_ONLY = "read_only"
    WRITE = "write"
    DESTRUCTIVE = "destructive"


class ErrorKind(StrEnum):
    """Why a call failed; the same words as traces_app's records."""

    INVALID_ARGUMENTS = "invalid_arguments"
    NOT_FOUND = "not_found"
    DISABLED = "disabled"
    TIMEOUT = "timeout"
    TOOL_ERROR = "tool_error"
    CANCELLED = "cancelled"
    RATE_LIMITED = "rate_limited"
    PERMISSION_DENIED = "permission_denied"
    UNAVAILABLE = "unavailable"
    INTERNAL = "internal"


# Errors worth another attempt of an idempotent tool: the same call may well work later.
RETRYABLE_ERRORS = frozenset({ErrorKind.TIMEOUT, ErrorKind.UNAVAILABLE, ErrorKind.RATE_LIMITED})


class ToolFailure(Exception):
    """Raised by tool code to fail with a specific error kind and an actionable message."""

    def __init__(self, message: str, kind: ErrorKind = ErrorKind.TOOL_ERROR) -> None:
        super().__init__(message)
        self.kind = kind


def llm_safe_name(name: str) -> str:
    """Return the name an LLM sees: dots become '__', other unsafe characters '_', ≤64 chars."""
    safe = _UNSAFE_CHARS.sub("_", name.replace(".", "__"))
    return safe[:64] or "_"


@dataclass(frozen=True)
class ToolSpec:
    """A tool's full contract: what it takes, returns, costs and may change, and how to run it."""

    name: str
    description: str
    parameters: dict[str, Any]
    function: Callable[..., Any]
    returns: dict[str, Any] = field(default_factory=dict)
    side_effect: SideEffect = SideEffect.READ_ONLY
    idempotent: bool = True
    cost: float = 1.0
    deterministic: bool = True
    composable: bool = True
    timeout_s: float | None = None
    max_retries: int = 2
    max_concurrency: int | None = None
    capabilities: tuple[str, ...] = ()
    ran_on: str = "builtin"
    enabled: bool = True
    # Keys of a result object to show an LLM instead of the whole object: the first one
    # present and not null wins. The whole result is still returned and recorded.
    llm_view: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.name or len(self.name) > 200:
            raise ValueError(f"tool name must be 1 to 200 characters, got {self.name!r}")
        if not isinstance(self.parameters, dict) or self.parameters.get("type") != "object":
            raise ValueError(f"{self.name}: parameters must be a JSON Schema of type 'object'")
        if self.timeout_s is not None and not self.timeout_s > 0:  # NaN too
            raise ValueError(f"{self.name}: timeout_s must be positive")
        if self.max_retries < 0 or (self.max_concurrency is not None and self.max_concurrency < 1):
            raise ValueError(f"{self.name}: max_retries must be >= 0, max_concurrency >= 1")

    @property
    def llm_name(self) -> str:
        return llm_safe_name(self.name)

    @property
    def retryable(self) -> bool:
        """Return whether a failed attempt may run again: idempotent or read-only tools only."""
        return self.idempotent or self.side_effect == SideEffect.READ_ONLY

    def openai_definition(self) -> dict[str, Any]:
        """Return the tool in OpenAI's chat-completions `tools` format."""
        return {
            "type": "function",
            "function": {
                "name": self.llm_name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }

    def anthropic_definition(self) -> dict[str, Any]:
        """Return the tool in Anthropic's Messages API `tools` format."""
        return {
            "name": self.llm_name,
            "description": self.description,
            "input_schema": self.parameters,
        }


@dataclass(frozen=True)
class ToolCall:
    """One call as a model or a planner asked for it; arguments may still be a JSON string."""

    name: str
    arguments: Any = None
    id: str = ""


@dataclass(frozen=True)
class Problem:
    """One thing wrong with the arguments, phrased so a model can fix its next call."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


@dataclass(frozen=True)
class ToolError:
    kind: ErrorKind
    message: str
    problems: tuple[Problem, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        error: dict[str, Any] = {"kind": str(self.kind), "message": self.message}
        if self.problems:
            error["problems"] = [str(problem) for problem in self.problems]
        return error


@dataclass
class ToolResult:
    """The one result shape of every path: success with data, or an error a model can act on."""

    call_id: str
    tool: str
    success: bool
    data: Any = None
    error: ToolError | None = None
    text: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "call_id": self.call_id,
            "tool": self.tool,
            "success": self.success,
            "data": self.data,
            "error": self.error.as_dict() if self.error else None,
            "text": self.text,
            "metadata": self.metadata,
        }
