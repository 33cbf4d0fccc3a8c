"""OpenAI chat-completions format <-> the loop's messages: requests, replies, stream chunks.

`arguments` arrives as a JSON string (a double decode); streamed tool calls arrive in
pieces keyed by `index`, their id and name in the first piece, the arguments spread
over the rest. Local servers (Ollama, llama.cpp) sometimes leave ids out: they get
`call_<n>` so that every result can name its call.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from planner_app.agents.llm.messages import (
    LlmReply,
    Message,
    Usage,
    decode_arguments,
    encode_arguments,
)
from tools_app.specs import ToolCall, ToolSpec


def request_messages(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """Return the messages in OpenAI's `messages` format."""
    payload = []
    for message in messages:
        if message.role == "tool":
            payload.append(
                {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.content}
            )
        elif message.role == "assistant" and message.tool_calls:
            payload.append(
                {
                    "role": "assistant",
                    "content": message.content or None,
                    "tool_calls": [
                        {
                            "id": call.id,
                            "type": "function",
                            "function": {
                                "name": call.name,
                                "arguments": encode_arguments(call.arguments),
                            },
                        }
                        for call in message.tool_calls
                    ],
                }
            )
        else:
            payload.append({"role": message.role, "content": message.content})
    return payload


def request_tools(tools: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    return [spec.openai_definition() for spec in tools]


def reply_from_response(payload: dict[str, Any]) -> LlmReply:
    """Return the reply in a (non-streamed) chat-completions response body."""
    choices = payload.get("choices") or []
    if not choices:
        raise ValueError("the response has no choices")
    choice = choices[0]
    message = choice.get("message") or {}
    calls = [
        _call(
            index,
            item.get("id"),
            (item.get("function") or {}).get("name"),
            (item.get("function") or {}).get("arguments"),
        )
        for index, item in enumerate(message.get("tool_calls") or [])
    ]
    return LlmReply(
        content=message.get("content") or "",
        tool_calls=calls,
        usage=_usage(payload.get("usage")),
        model=payload.get("model") or "",
        finish_reason=choice.get("finish_reason") or "",
    )


def reply_from_chunks(chunks: Iterable[dict[str, Any]]) -> LlmReply:
    """Return the reply that streamed chunks (`data:` events) add up to."""
    text: list[str] = []
    pieces: dict[int, dict[str, Any]] = {}
    usage, model, finish_reason = None, "", ""
    for chunk in chunks:
        model = chunk.get("model") or model
        usage = chunk.get("usage") or usage
        for choice in chunk.get("choices") or []:
            if choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            text.append(delta.get("content") or "")
            for item in delta.get("tool_calls") or []:
                piece = pieces.setdefault(item.get("index", 0), {"arguments": []})
                function = item.get("function") or {}
                piece["id"] = piece.get("id") or item.get("id")
                piece["name"] = (piece.get("name") or "") + (function.get("name") or "")
                piece["arguments"].append(function.get("arguments") or "")
            finish_reason = choice.get("finish_reason") or finish_reason
    calls = [
        _call(index, piece.get("id"), piece.get("name"), "".join(piece["arguments"]))
        for index, piece in sorted(pieces.items())
    ]
    return LlmReply("".join(text), calls, _usage(usage), model, finish_reason)


def _call(index: int, call_id: str | None, name: str | None, arguments: Any) -> ToolCall:
    return ToolCall(
        name=name or "", arguments=decode_arguments(arguments), id=call_id or f"call_{index + 1}"
    )


def _usage(usage: dict[str, Any] | None) -> Usage:
    if not usage:
        return Usage(estimated=True)
    return Usage(int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0))
