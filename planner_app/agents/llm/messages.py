"""The one conversation shape the agent loop sees, whatever the vendor's wire format.

Tool calls are tools_app's ToolCall{id, name, arguments}: arguments are a dict when the
model sent an object (or JSON text that decodes to one), and the model's raw text when
it did not, so that the engine answers with a precise `invalid_arguments` result.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from tools_app.specs import ToolCall, ToolSpec


class LlmError(Exception):
    """The LLM endpoint failed: unreachable, refused the request, or answered nonsense."""


class ToolsNotSupported(LlmError):
    """The endpoint or its model does not take tools: ask again without them."""


class LlmNotConfigured(LlmError):
    """No endpoint or model is set: say how to set one."""


@dataclass(frozen=True)
class Message:
    """One turn: system, user, assistant (maybe with tool calls), or a tool's result."""

    role: str
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str = ""  # role "tool": the call this answers
    name: str = ""  # role "tool": the tool's name as the model called it
    is_error: bool = False  # role "tool": the call failed

    def __post_init__(self) -> None:
        if self.role not in ("system", "user", "assistant", "tool"):
            raise ValueError(f"unknown message role {self.role!r}")


@dataclass(frozen=True)
class Usage:
    """Tokens one or more LLM calls took; `estimated` when the endpoint reported none."""

    input_tokens: int = 0
    output_tokens: int = 0
    estimated: bool = False

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.estimated or other.estimated,
        )

    @property
    def total(self) -> int:
        return self.input_tokens + self.output_tokens


@dataclass
class LlmReply:
    """What the model answered: text, tool calls or both, and what it cost."""

    content: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    model: str = ""
    finish_reason: str = ""  # stop, tool_calls, length, or the vendor's word


def decode_arguments(raw: Any) -> Any:
    """Return a call's arguments as a dict when they are (JSON text of) an object, else raw."""
    if raw is None or raw == "":
        return {}
    if isinstance(raw, str):
        try:
            decoded = json.loads(raw)
        except ValueError:
            return raw  # the engine's parser says exactly where the JSON breaks
        return decoded if isinstance(decoded, dict) else raw
    return raw


def encode_arguments(arguments: Any) -> str:
    """Return arguments as the JSON text OpenAI's format carries (raw text stays as sent)."""
    if isinstance(arguments, str):
        return arguments
    return json.dumps(arguments if arguments is not None else {}, ensure_ascii=False)


class ChatModel(Protocol):
    """What the loop needs of a model: one completion for messages and tools."""

    model: str

    def complete(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec] = (), tool_choice: str = "auto"
    ) -> LlmReply: ...
