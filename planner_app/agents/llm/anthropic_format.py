"""Anthropic Messages format <-> the loop's messages.

Differences from OpenAI's that the loop never sees: the system prompt is a top-level
field; a tool call is a `tool_use` content block whose `input` is already an object;
results go back as `tool_result` blocks in the next *user* message, all of one turn's
results in one message; usage is `input_tokens` / `output_tokens`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from planner_app.agents.llm.messages import LlmReply, Message, Usage, decode_arguments
from tools_app.specs import ToolCall, ToolSpec

_STOP_REASONS = {"end_turn": "stop", "tool_use": "tool_calls", "max_tokens": "length"}


def request_body(messages: Sequence[Message], tools: Sequence[ToolSpec] = ()) -> dict[str, Any]:
    """Return {system, messages, tools} for the Messages API."""
    system = "\n\n".join(m.content for m in messages if m.role == "system" and m.content)
    turns: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "system":
            continue
        if message.role == "tool":
            block = {
                "type": "tool_result",
                "tool_use_id": message.tool_call_id,
                "content": message.content,
                "is_error": message.is_error,
            }
            if turns and turns[-1]["role"] == "user" and _is_results(turns[-1]):
                turns[-1]["content"].append(block)
            else:
                turns.append({"role": "user", "content": [block]})
        elif message.role == "assistant":
            blocks: list[dict[str, Any]] = []
            if message.content:
                blocks.append({"type": "text", "text": message.content})
            for call in message.tool_calls:
                arguments = decode_arguments(call.arguments)
                blocks.append(
                    {
                        "type": "tool_use",
                        "id": call.id,
                        "name": call.name,
                        "input": arguments if isinstance(arguments, dict) else {},
                    }
                )
            turns.append({"role": "assistant", "content": blocks})
        else:
            turns.append({"role": "user", "content": message.content})
    body: dict[str, Any] = {"messages": turns}
    if system:
        body["system"] = system
    if tools:
        body["tools"] = [spec.anthropic_definition() for spec in tools]
    return body


def reply_from_response(payload: dict[str, Any]) -> LlmReply:
    """Return the reply in a Messages API response body."""
    blocks = payload.get("content")
    if not isinstance(blocks, list):
        raise ValueError("the response has no content blocks")
    text = "".join(b.get("text", "") for b in blocks if b.get("type") == "text")
    calls = [
        ToolCall(
            name=b.get("name") or "",
            arguments=b.get("input"),
            id=b.get("id") or f"toolu_{index + 1}",
        )
        for index, b in enumerate(blocks)
        if b.get("type") == "tool_use"
    ]
    usage = payload.get("usage")
    return LlmReply(
        content=text,
        tool_calls=calls,
        usage=Usage(int(usage.get("input_tokens") or 0), int(usage.get("output_tokens") or 0))
        if usage
        else Usage(estimated=True),
        model=payload.get("model") or "",
        finish_reason=_STOP_REASONS.get(payload.get("stop_reason") or "", "stop"),
    )


def messages_from_request(body: dict[str, Any]) -> list[Message]:
    """Return the loop's messages for a Messages API request body (a client's history)."""
    messages = [Message("system", body["system"])] if body.get("system") else []
    for turn in body.get("messages") or []:
        content = turn.get("content")
        if isinstance(content, str):
            messages.append(Message(turn["role"], content))
            continue
        text = "".join(b.get("text", "") for b in content if b.get("type") == "text")
        calls = tuple(
            ToolCall(b.get("name") or "", b.get("input"), b.get("id") or "")
            for b in content
            if b.get("type") == "tool_use"
        )
        results = [b for b in content if b.get("type") == "tool_result"]
        for block in results:
            messages.append(
                Message(
                    "tool",
                    _result_text(block.get("content")),
                    tool_call_id=block.get("tool_use_id") or "",
                    is_error=bool(block.get("is_error")),
                )
            )
        if text or calls or not results:
            messages.append(Message(turn["role"], text, tool_calls=calls))
    return messages


def _is_results(turn: dict[str, Any]) -> bool:
    content = turn["content"]
    return isinstance(content, list) and all(b.get("type") == "tool_result" for b in content)


def _result_text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(b.get("text", "") for b in content if isinstance(b, dict))
    return content or ""
