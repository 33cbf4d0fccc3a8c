"""Map the OpenTelemetry GenAI, OpenInference and OpenLLMetry dialects' span attributes."""

# Three dialects of tool and LLM spans are read, in this order: OpenTelemetry GenAI
# (`gen_ai.operation.name`), OpenInference (`openinference.span.kind`) and OpenLLMetry
# (`traceloop.span.kind`). Other spans are generic spans of their trace (kind "other").
# Plain data in, plain data out: attribute dicts, as otlp_decoding reads them.

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from traces_app.ingest.otlp_decoding import ABSENT, as_name, as_text, json_decoded

GENAI, OPENINFERENCE, OPENLLMETRY, GENERIC = "genai", "openinference", "openllmetry", "otel"
# The OpenAI Agents SDK's OpenInference spans: its trace (a workflow) is an AGENT span too.
_AGENTS_SDK_SCOPE = "openinference.instrumentation.openai_agents"

_GENAI_LLM_OPERATIONS = {"chat", "text_completion", "generate_content", "embeddings"}
_GENAI_AGENT_OPERATIONS = {"invoke_agent", "create_agent"}
_OPENINFERENCE_KINDS = {"TOOL": "tool", "LLM": "llm", "AGENT": "agent"}
_OPENLLMETRY_KINDS = {"tool": "tool", "agent": "agent"}
# OpenLLMetry kinds whose traceloop.entity.name names the agent of the spans below them.
_OPENLLMETRY_AGENT_KINDS = {"agent", "workflow"}


@dataclass
class DialectFields:
    """What a dialect's attributes say about a span; ABSENT where they say nothing."""

    kind: str = "other"
    tool_name: Any = ABSENT
    tool_call_id: Any = ABSENT
    arguments: Any = ABSENT
    result: Any = None
    model: Any = None
    input_tokens: Any = None
    output_tokens: Any = None
    error_type: Any = None
    failed: bool = False  # the dialect's own payload says the call failed
    tool_type: Any = None
    tool_description: Any = None
    request_text: str = ""  # the user's request: the first user message the model was sent
    # An LLM span's exchange, stored as its arguments and result for the trace view:
    # {"messages": [...], "tools": [...]} sent, and the output messages or {"content", ...}.
    llm_input: Any = None
    llm_output: Any = None
    session: Any = None
    agent: Any = None
    names_agent: str = ""  # the agent this span stands for, inherited by the spans below it
    fallback_name: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


def read_dialect(
    attributes: dict[str, Any], name: str, scope: str = ""
) -> tuple[str, DialectFields]:
    """Return which dialect a span speaks and what it says, trying the dialects in order."""
    if "gen_ai.operation.name" in attributes:
        # OpenLLMetry's LLM spans speak GenAI, beside traceloop.* attributes.
        traceloop = any(key.startswith("traceloop.") for key in attributes)
        return (OPENLLMETRY if traceloop else GENAI), _read_genai(attributes, name)
    if "openinference.span.kind" in attributes:
        return OPENINFERENCE, _read_openinference(attributes, name, scope)
    if "traceloop.span.kind" in attributes:
        return OPENLLMETRY, _read_openllmetry(attributes, name)
    if any(key.startswith("gen_ai.") for key in attributes):
        # LLM spans without an operation name: older GenAI producers, and OpenLLMetry,
        # whose LLM spans carry gen_ai.* attributes beside its own llm.* ones.
        traceloop = any(key.startswith(("traceloop.", "llm.")) for key in attributes)
        return (OPENLLMETRY if traceloop else GENAI), _read_genai(attributes, name)
    return GENERIC, DialectFields(fallback_name=name)


def _read_genai(attributes: dict[str, Any], name: str) -> DialectFields:
    operation = as_text(attributes.get("gen_ai.operation.name"))
    model = attributes.get("gen_ai.request.model") or attributes.get("gen_ai.response.model")
    input_tokens = _first(attributes, "gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens")
    output_tokens = _first(
        attributes, "gen_ai.usage.output_tokens", "gen_ai.usage.completion_tokens"
    )
    if operation == "execute_tool":
        kind = "tool"
    elif operation in _GENAI_LLM_OPERATIONS or (
        not operation and (model or input_tokens is not None or output_tokens is not None)
    ):
        kind = "llm"
    elif operation in _GENAI_AGENT_OPERATIONS:
        kind = "agent"
    else:
        kind = "other"
    return DialectFields(
        kind=kind,
        tool_name=attributes.get("gen_ai.tool.name", ABSENT),
        tool_call_id=attributes.get("gen_ai.tool.call.id", ABSENT),
        arguments=attributes.get("gen_ai.tool.call.arguments", ABSENT),
        result=attributes.get("gen_ai.tool.call.result"),
        model=model,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        error_type=attributes.get("error.type"),
        tool_type=attributes.get("gen_ai.tool.type"),
        tool_description=attributes.get("gen_ai.tool.description"),
        request_text=_genai_request_text(attributes) if kind == "llm" else "",
        llm_input=_genai_llm_input(attributes) if kind == "llm" else None,
        llm_output=json_decoded(attributes.get("gen_ai.output.messages"))
        if kind == "llm"
        else None,
        agent=attributes.get("gen_ai.agent.name"),
        names_agent=as_name(attributes.get("gen_ai.agent.name")) if kind == "agent" else "",
        # GenAI names tool spans "execute_tool {gen_ai.tool.name}".
        fallback_name=name.removeprefix("execute_tool").strip() if kind == "tool" else name,
    )


def _read_openinference(attributes: dict[str, Any], name: str, scope: str = "") -> DialectFields:
    kind = _OPENINFERENCE_KINDS.get(as_text(attributes["openinference.span.kind"]).upper(), "other")
    if kind == "agent" and scope == _AGENTS_SDK_SCOPE and "agent.name" not in attributes:
        # The Agents SDK's trace ("Agent workflow" unless named): a workflow above the
        # agents, which name themselves in agent.name.
        kind = "other"
    arguments = attributes.get("input.value", ABSENT)
    parameters = attributes.get("tool.parameters", ABSENT)
    # tool.parameters is the tool's parameter schema, but some producers put the call's
    # arguments there: use it when input.value is absent and it is not a JSON Schema.
    if arguments is ABSENT and parameters is not ABSENT and not _is_json_schema(parameters):
        arguments = parameters
    # Decoded once here; _invocation_fields leaves a decoded value as it is.
    result = json_decoded(attributes.get("output.value")) if kind == "tool" else None
    tool_call_id = attributes.get("tool.id", attributes.get("tool_call.id", ABSENT))
    failed = False
    message = _langchain_tool_message(result)
    if message is not None:  # LangChain's ToolMessage, around what the tool returned
        result = message.get("content")
        failed = message.get("status") == "error"
        if tool_call_id is ABSENT and message.get("tool_call_id"):
            tool_call_id = message["tool_call_id"]
    return DialectFields(
        kind=kind,
        tool_name=attributes.get("tool.name", ABSENT),
        tool_call_id=tool_call_id,
        arguments=arguments if kind == "tool" else ABSENT,
        result=result,
        failed=failed,
        tool_description=attributes.get("tool.description") if kind == "tool" else None,
        request_text=_openinference_request_text(attributes) if kind == "llm" else "",
        llm_input=_openinference_llm_input(attributes) if kind == "llm" else None,
        llm_output=_openinference_llm_output(attributes) if kind == "llm" else None,
        model=attributes.get("llm.model_name"),
        input_tokens=attributes.get("llm.token_count.prompt"),
        output_tokens=attributes.get("llm.token_count.completion"),
        error_type=attributes.get("exception.type"),
        agent=attributes.get("agent.name"),
        names_agent=as_name(attributes.get("agent.name") or name) if kind == "agent" else "",
        fallback_name=name,
    )


def _read_openllmetry(attributes: dict[str, Any], name: str) -> DialectFields:
    span_kind = as_text(attributes["traceloop.span.kind"]).lower()
    kind = _OPENLLMETRY_KINDS.get(span_kind, "other")
    arguments = attributes.get("traceloop.entity.input", ABSENT)
    if arguments is not ABSENT:
        arguments = _unwrap_call(json_decoded(arguments))
    names_agent = ""
    if span_kind in _OPENLLMETRY_AGENT_KINDS:
        names_agent = as_name(attributes.get("traceloop.entity.name"))
    # OpenLLMetry JSON-encodes every output, text too: json_decoded(scalars=True) decodes it.
    return DialectFields(
        kind=kind,
        tool_name=attributes.get("traceloop.entity.name", ABSENT),
        arguments=arguments,
        result=attributes.get("traceloop.entity.output"),
        names_agent=names_agent,
        # OpenLLMetry names tool spans "{name}.tool".
        fallback_name=name.removesuffix(".tool") if kind == "tool" else name,
    )


def _langchain_tool_message(message: Any) -> dict[str, Any] | None:
    """Return the data of a (decoded) serialised LangChain ToolMessage, or None if not one."""
    if (
        isinstance(message, dict)
        and message.get("type") == "tool"
        and isinstance(message.get("data"), dict)
        and message["data"].get("type") == "tool"
        and "content" in message["data"]
    ):
        return message["data"]
    return None


def _genai_request_text(attributes: dict[str, Any]) -> str:
    """Return the first user message of a GenAI LLM span's input.

    gen_ai.input.messages (JSON: role and parts) in current conventions; the indexed
    gen_ai.prompt.N.role/content attributes in older ones.
    """
    messages = json_decoded(attributes.get("gen_ai.input.messages"))
    for message in messages if isinstance(messages, list) else []:
        if isinstance(message, dict) and message.get("role") == "user":
            parts = message.get("parts")
            texts = [
                as_text(part.get("content"))
                for part in (parts if isinstance(parts, list) else [])
                if isinstance(part, dict) and part.get("type") == "text"
            ]
            if "content" in message and not texts:
                texts = [as_text(message["content"])]
            return "\n".join(texts)
    return _indexed_user_message(attributes, "gen_ai.prompt.{}.role", "gen_ai.prompt.{}.content")


def _genai_llm_input(attributes: dict[str, Any]) -> dict[str, Any] | None:
    """Return a GenAI LLM span's input messages and offered tools, when it recorded them."""
    sent = {}
    messages = json_decoded(attributes.get("gen_ai.input.messages"))
    if isinstance(messages, list):
        sent["messages"] = messages
    tools = json_decoded(attributes.get("gen_ai.tool.definitions"))
    if isinstance(tools, list):
        sent["tools"] = tools
    return sent or None


def _openinference_llm_input(attributes: dict[str, Any]) -> dict[str, Any] | None:
    """Return an OpenInference LLM span's input messages and offered tools, rebuilt."""
    sent = {}
    messages = _indexed_messages(attributes, "llm.input_messages")
    if messages:
        sent["messages"] = messages
    tools = []
    index = 0
    while f"llm.tools.{index}.tool.json_schema" in attributes:
        tools.append(json_decoded(attributes[f"llm.tools.{index}.tool.json_schema"]))
        index += 1
    if tools:
        sent["tools"] = tools
    return sent or None


def _openinference_llm_output(attributes: dict[str, Any]) -> dict[str, Any] | None:
    """Return an OpenInference LLM span's answer: its first output message, and why it ended."""
    messages = _indexed_messages(attributes, "llm.output_messages")
    if not messages:
        return None
    answer = {key: value for key, value in messages[0].items() if key != "role"}
    if "llm.finish_reason" in attributes:
        answer["finish_reason"] = as_text(attributes["llm.finish_reason"])
    return answer


def _indexed_messages(attributes: dict[str, Any], prefix: str) -> list[dict[str, Any]]:
    """Return OpenInference's flattened messages (prefix.N.message.*) as chat messages."""
    start = f"{prefix}."
    numbers = {key[len(start) :].split(".", 1)[0] for key in attributes if key.startswith(start)}
    messages = []
    for index in sorted(int(number) for number in numbers if number.isdigit())[:1000]:
        at = f"{prefix}.{index}.message."
        message: dict[str, Any] = {"role": as_text(attributes.get(at + "role"))}
        if at + "content" in attributes:
            message["content"] = as_text(attributes[at + "content"])
        if at + "tool_call_id" in attributes:
            message["tool_call_id"] = as_text(attributes[at + "tool_call_id"])
        calls = []
        while f"{at}tool_calls.{len(calls)}.tool_call.function.name" in attributes:
            call = f"{at}tool_calls.{len(calls)}.tool_call."
            calls.append({
                "id": as_text(attributes.get(call + "id")),
                "function": {"name": as_text(attributes[call + "function.name"]),
                             "arguments": as_text(attributes.get(call + "function.arguments"))},
            })  # fmt: skip
        if calls:
            message["tool_calls"] = calls
        messages.append(message)
    return messages


def _openinference_request_text(attributes: dict[str, Any]) -> str:
    """Return the first user message of an OpenInference LLM span's input messages."""
    return _indexed_user_message(
        attributes, "llm.input_messages.{}.message.role", "llm.input_messages.{}.message.content"
    )


def _indexed_user_message(attributes: dict[str, Any], role: str, content: str) -> str:
    index = 0
    while role.format(index) in attributes:
        if as_text(attributes[role.format(index)]).lower() in ("user", "human"):
            return as_text(attributes.get(content.format(index)))
        index += 1
    return ""


def _unwrap_call(value: Any) -> Any:
    """Return the keyword arguments of an OpenLLMetry {"args": [], "kwargs": {...}} input."""
    if isinstance(value, dict) and set(value) <= {"args", "kwargs"} and not value.get("args"):
        return value.get("kwargs", {})
    return value


def _is_json_schema(value: Any) -> bool:
    schema = json_decoded(value)
    return isinstance(schema, dict) and (
        "$schema" in schema or (schema.get("type") == "object" and "properties" in schema)
    )


def error_kind_slug(error_type: str) -> str:
    """Return an error type ("TimeoutError", "java.net.SocketTimeout", "500") as an error kind.

    Error kinds are slugs (`timeout_error`); a dotted name keeps its last part.
    """
    last = error_type.rsplit(".", 1)[-1]
    snake = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", last).lower()
    slug = re.sub(r"[^a-z0-9]+", "_", snake).strip("_")
    if slug and not slug[0].isalpha():
        slug = f"error_{slug}"
    return slug[:40].rstrip("_")


def _first(attributes: dict[str, Any], *keys: str) -> Any:
    return next((attributes[key] for key in keys if key in attributes), None)
