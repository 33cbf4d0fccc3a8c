"""The dialect mappers, called on plain attribute dicts: no database, no Django settings."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from traces_app.ingest.otlp_decoding import ABSENT
from traces_app.ingest.otlp_dialects import (
    GENAI,
    GENERIC,
    OPENINFERENCE,
    OPENLLMETRY,
    error_kind_slug,
    read_dialect,
)

ROOT = Path(__file__).resolve().parents[2]
AGENTS_SDK = "openinference.instrumentation.openai_agents"


def test_the_mappers_and_the_decoder_import_without_django() -> None:
    env = {key: value for key, value in os.environ.items() if key != "DJANGO_SETTINGS_MODULE"}
    script = (
        "import sys\n"
        "import traces_app.ingest.otlp_decoding, traces_app.ingest.otlp_dialects\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'django'"
        " or m.startswith(('traces_app.models', 'traces_app.http.bodies'))))\n"
    )

    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=120, check=True,
    )  # fmt: skip

    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("attributes", "dialect", "kind"),
    [
        pytest.param(
            {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "t",
             "openinference.span.kind": "TOOL"},
            GENAI, "tool", id="GenAI first",
        ),
        pytest.param(
            {"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o",
             "traceloop.association.properties.session_id": "s"},
            OPENLLMETRY, "llm", id="OpenLLMetry's LLM span in GenAI's words",
        ),
        pytest.param(
            {"openinference.span.kind": "TOOL", "tool.name": "t", "gen_ai.system": "openai"},
            OPENINFERENCE, "tool", id="OpenInference before stray gen_ai attributes",
        ),
        pytest.param(
            {"gen_ai.system": "openai", "llm.request.type": "chat",
             "gen_ai.request.model": "gpt-4o"},
            OPENLLMETRY, "llm", id="OpenLLMetry LLM call",
        ),
        pytest.param({"gen_ai.operation.name": "invoke_agent"}, GENAI, "agent", id="agent"),
        pytest.param({"http.request.method": "GET"}, GENERIC, "other", id="no dialect"),
    ],
)  # fmt: skip
def test_it_reads_the_first_dialect_a_span_speaks(attributes, dialect, kind) -> None:
    spoken, said = read_dialect(attributes, "a span")

    assert (spoken, said.kind) == (dialect, kind)


def test_it_reads_a_genai_tool_call() -> None:
    arguments = {"query": "otlp", "filters": {"year": 2026}, "tags": ["a", "b"]}

    _, said = read_dialect(
        {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search",
         "gen_ai.tool.call.id": "call_1", "gen_ai.tool.call.arguments": arguments,
         "gen_ai.tool.type": "datastore", "gen_ai.tool.description": "Looks it up"},
        "execute_tool search",
    )  # fmt: skip

    assert (said.tool_name, said.tool_call_id, said.arguments) == ("search", "call_1", arguments)
    assert (said.tool_type, said.tool_description, said.fallback_name) == (
        "datastore", "Looks it up", "search",
    )  # fmt: skip


def test_it_marks_attributes_a_tool_span_does_not_carry_as_absent() -> None:
    _, said = read_dialect({"gen_ai.operation.name": "execute_tool"}, "execute_tool fetch")

    assert said.tool_name is ABSENT and said.arguments is ABSENT
    assert said.fallback_name == "fetch"


def test_it_unwraps_a_langchain_tool_message_with_its_call_id_and_status() -> None:
    data = {"content": "Error: no such city", "type": "tool", "name": "t",
            "tool_call_id": "call_7", "status": "error"}  # fmt: skip

    _, said = read_dialect(
        {"openinference.span.kind": "TOOL", "tool.name": "t", "input.value": "{}",
         "output.value": json.dumps({"type": "tool", "data": data})},
        "t",
    )  # fmt: skip

    assert (said.result, said.tool_call_id, said.failed) == ("Error: no such city", "call_7", True)


def test_it_reads_the_request_text_from_each_dialects_input_messages() -> None:
    _, genai = read_dialect(
        {"gen_ai.operation.name": "chat", "gen_ai.input.messages": json.dumps(
            [{"role": "system", "parts": [{"type": "text", "content": "Be brief."}]},
             {"role": "user", "parts": [{"type": "text", "content": "Weather in Paris?"}]}])},
        "chat",
    )  # fmt: skip
    _, openinference = read_dialect(
        {"openinference.span.kind": "LLM",
         "llm.input_messages.0.message.role": "system",
         "llm.input_messages.0.message.content": "Be brief.",
         "llm.input_messages.1.message.role": "user",
         "llm.input_messages.1.message.content": "Weather in Paris?"},
        "ChatOpenAI",
    )  # fmt: skip
    _, older_genai = read_dialect(
        {"llm.request.type": "chat", "gen_ai.system": "openai",
         "gen_ai.request.model": "gpt-4o-mini",
         "gen_ai.prompt.0.role": "system", "gen_ai.prompt.0.content": "You are a calculator.",
         "gen_ai.prompt.1.role": "user", "gen_ai.prompt.1.content": "What is 12*7?"},
        "openai.chat",
    )  # fmt: skip

    assert genai.request_text == openinference.request_text == "Weather in Paris?"
    assert older_genai.request_text == "What is 12*7?"


def test_it_rebuilds_an_openinference_exchange_from_its_flattened_messages() -> None:
    _, said = read_dialect(
        {"openinference.span.kind": "LLM", "llm.model_name": "gpt-4o",
         "llm.input_messages.0.message.role": "user",
         "llm.input_messages.0.message.content": "Weather in Paris?",
         "llm.tools.0.tool.json_schema": '{"type": "function", "name": "get_weather"}',
         "llm.output_messages.0.message.role": "assistant",
         "llm.output_messages.0.message.tool_calls.0.tool_call.id": "call_1",
         "llm.output_messages.0.message.tool_calls.0.tool_call.function.name": "get_weather",
         "llm.output_messages.0.message.tool_calls.0.tool_call.function.arguments":
             '{"city": "Paris"}',
         "llm.finish_reason": "tool_calls"},
        "ChatOpenAI",
    )  # fmt: skip

    assert said.llm_input == {
        "messages": [{"role": "user", "content": "Weather in Paris?"}],
        "tools": [{"type": "function", "name": "get_weather"}],
    }
    assert said.llm_output == {
        "tool_calls": [{"id": "call_1", "function": {"name": "get_weather",
                                                     "arguments": '{"city": "Paris"}'}}],
        "finish_reason": "tool_calls",
    }  # fmt: skip
    assert said.model == "gpt-4o"


def test_it_reads_an_openllmetry_tool_calls_keyword_arguments() -> None:
    _, said = read_dialect(
        {"traceloop.span.kind": "tool", "traceloop.entity.name": "get_weather",
         "traceloop.entity.input": json.dumps({"args": [], "kwargs": {"city": "Paris"}}),
         "traceloop.entity.output": '"sunny"'},
        "get_weather.tool",
    )  # fmt: skip

    assert (said.kind, said.tool_name, said.arguments) == ("tool", "get_weather", {"city": "Paris"})
    assert (said.result, said.fallback_name) == ('"sunny"', "get_weather")


@pytest.mark.parametrize(
    ("attributes", "scope", "names_agent"),
    [
        pytest.param({"traceloop.span.kind": "workflow", "traceloop.entity.name": "planner"},
                     "", "planner", id="OpenLLMetry workflow"),
        pytest.param({"openinference.span.kind": "AGENT", "agent.name": "Weather agent"},
                     AGENTS_SDK, "Weather agent", id="Agents SDK agent"),
        pytest.param({"openinference.span.kind": "AGENT"}, AGENTS_SDK, "",
                     id="Agents SDK trace, a workflow"),
        pytest.param({"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "helper"},
                     "", "helper", id="GenAI agent"),
    ],
)  # fmt: skip
def test_it_names_the_agent_an_agent_span_stands_for(attributes, scope, names_agent) -> None:
    _, said = read_dialect(attributes, "Agent workflow", scope)

    assert said.names_agent == names_agent


@pytest.mark.parametrize(
    ("error_type", "kind"),
    [("TimeoutError", "timeout_error"), ("java.net.SocketTimeoutException",
      "socket_timeout_exception"), ("500", "error_500"), ("", "")],
)  # fmt: skip
def test_it_turns_an_error_type_into_an_error_kind(error_type, kind) -> None:
    assert error_kind_slug(error_type) == kind
