"""The LLM layer: OpenAI and Anthropic formats normalized to one shape; the real SDK client."""

from __future__ import annotations

import pytest

from planner_app.agents.llm import anthropic_format, openai_format
from planner_app.agents.llm.client import OpenAICompatibleModel
from planner_app.agents.llm.messages import LlmError, Message, ToolsNotSupported, Usage
from tests.planner_app.fake_llm import FakeLlm, call, calls, fail, say
from tools_app.builtins import calculator
from tools_app.specs import ToolCall

# OpenAI -----------------------------------------------------------------------------


def test_openai_arguments_are_decoded_from_their_json_text() -> None:
    reply = openai_format.reply_from_response({
        "model": "gpt-x",
        "choices": [{"finish_reason": "tool_calls", "message": {"content": None, "tool_calls": [
            {"id": "call_a", "type": "function",
             "function": {"name": "calculator", "arguments": '{"expression": "6*7"}'}},
        ]}}],
        "usage": {"prompt_tokens": 50, "completion_tokens": 9},
    })  # fmt: skip
    assert reply.tool_calls == [ToolCall("calculator", {"expression": "6*7"}, "call_a")]
    assert (reply.content, reply.finish_reason, reply.model) == ("", "tool_calls", "gpt-x")
    assert reply.usage == Usage(50, 9)


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ('{"expression": "1+', '{"expression": "1+'),  # broken JSON: kept for the engine
        ("[1, 2]", "[1, 2]"),  # not an object: kept too
        ("", {}),
        (None, {}),
    ],
)
def test_openai_arguments_that_are_no_object_stay_as_sent(
    arguments: object, expected: object
) -> None:
    message = {"tool_calls": [{"id": "c", "function": {"name": "t", "arguments": arguments}}]}
    reply = openai_format.reply_from_response({"choices": [{"message": message}]})
    assert reply.tool_calls[0].arguments == expected


def test_openai_calls_without_ids_get_one_each() -> None:
    message = {"tool_calls": [{"function": {"name": "a", "arguments": "{}"}},
                              {"function": {"name": "b", "arguments": "{}"}}]}  # fmt: skip
    reply = openai_format.reply_from_response({"choices": [{"message": message}]})
    assert [c.id for c in reply.tool_calls] == ["call_1", "call_2"]
    assert reply.usage.estimated


def test_openai_stream_chunks_add_up_to_the_same_reply() -> None:
    chunks = [
        {"model": "m", "choices": [{"index": 0, "delta": {"role": "assistant", "content": "Let"}}]},
        {"choices": [{"index": 0, "delta": {"content": " me"}}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": 0, "id": "c1", "function": {"name": "calculator", "arguments": ""}}]}}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": 1, "id": "c2", "function": {"name": "hash_tool", "arguments": '{"te'}}]}}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": 0, "function": {"arguments": '{"expression":'}}]}}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": 0, "function": {"arguments": ' "2"}'}},
            {"index": 1, "function": {"arguments": 'xt": "a"}'}}]}}]},
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
        {"choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": 4}},
    ]  # fmt: skip
    reply = openai_format.reply_from_chunks(chunks)
    assert reply.content == "Let me"
    assert reply.tool_calls == [
        ToolCall("calculator", {"expression": "2"}, "c1"),
        ToolCall("hash_tool", {"text": "a"}, "c2"),
    ]
    assert (reply.finish_reason, reply.usage, reply.model) == ("tool_calls", Usage(10, 4), "m")


def test_openai_request_carries_tool_calls_as_json_text_and_results_by_id() -> None:
    messages = [
        Message("system", "Be exact."),
        Message("user", "6*7?"),
        Message("assistant", "", (ToolCall("calculator", {"expression": "6*7"}, "c1"),
                                  ToolCall("calculator", '{"bad', "c2"))),
        Message("tool", "calculator returned: 42", tool_call_id="c1", name="calculator"),
    ]  # fmt: skip
    payload = openai_format.request_messages(messages)
    assert payload[2] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function",
             "function": {"name": "calculator", "arguments": '{"expression": "6*7"}'}},
            {"id": "c2", "type": "function",
             "function": {"name": "calculator", "arguments": '{"bad'}},
        ],
    }  # fmt: skip
    assert payload[3] == {
        "role": "tool",
        "tool_call_id": "c1",
        "content": "calculator returned: 42",
    }


# Anthropic --------------------------------------------------------------------------


def test_anthropic_tool_use_blocks_become_the_same_calls() -> None:
    reply = anthropic_format.reply_from_response({
        "model": "claude-x",
        "stop_reason": "tool_use",
        "content": [
            {"type": "text", "text": "Checking."},
            {"type": "tool_use", "id": "toolu_1", "name": "calculator",
             "input": {"expression": "6*7"}},
        ],
        "usage": {"input_tokens": 30, "output_tokens": 12},
    })  # fmt: skip
    assert reply.content == "Checking."
    assert reply.tool_calls == [ToolCall("calculator", {"expression": "6*7"}, "toolu_1")]
    assert (reply.finish_reason, reply.usage) == ("tool_calls", Usage(30, 12))


def test_anthropic_end_turn_is_a_final_answer() -> None:
    reply = anthropic_format.reply_from_response(
        {"content": [{"type": "text", "text": "42"}], "stop_reason": "end_turn"}
    )
    assert (reply.content, reply.tool_calls, reply.finish_reason) == ("42", [], "stop")


def test_anthropic_request_puts_system_apart_and_results_in_one_user_turn() -> None:
    messages = [
        Message("system", "Be exact."),
        Message("user", "6*7 and 2*3?"),
        Message("assistant", "On it.", (ToolCall("calculator", '{"expression": "6*7"}', "t1"),
                                        ToolCall("calculator", {"expression": "2*3"}, "t2"))),
        Message("tool", "42", tool_call_id="t1"),
        Message("tool", "calculator failed (timeout)", tool_call_id="t2", is_error=True),
    ]  # fmt: skip
    body = anthropic_format.request_body(messages, [calculator.SPEC])
    assert body["system"] == "Be exact."
    assert body["messages"][1]["content"][1] == {
        "type": "tool_use", "id": "t1", "name": "calculator", "input": {"expression": "6*7"},
    }  # fmt: skip
    assert body["messages"][2] == {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "t1", "content": "42", "is_error": False},
        {"type": "tool_result", "tool_use_id": "t2", "content": "calculator failed (timeout)",
         "is_error": True},
    ]}  # fmt: skip
    assert body["tools"][0]["input_schema"] == calculator.SPEC.parameters


def test_anthropic_history_reads_back_into_the_same_messages() -> None:
    messages = [
        Message("system", "Be exact."),
        Message("user", "6*7?"),
        Message("assistant", "", (ToolCall("calculator", {"expression": "6*7"}, "t1"),)),
        Message("tool", "42", tool_call_id="t1"),
        Message("assistant", "It is 42."),
    ]
    body = anthropic_format.request_body(messages)
    assert anthropic_format.messages_from_request(body) == messages


# The SDK client against a real HTTP server -------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
def test_the_client_reads_calls_and_usage_streamed_or_not(fake_llm: FakeLlm, stream: bool) -> None:
    fake_llm.script(
        calls(("calculator", {"expression": "6*7"}, "c1"), ("hash_tool", '{"x', "c2"),
              usage={"prompt_tokens": 120, "completion_tokens": 20, "total_tokens": 140}),
    )  # fmt: skip
    model = OpenAICompatibleModel(fake_llm.base_url, "fake-model", stream=stream)
    reply = model.complete([Message("user", "go")], [calculator.SPEC])
    assert reply.tool_calls == [
        ToolCall("calculator", {"expression": "6*7"}, "c1"),
        ToolCall("hash_tool", '{"x', "c2"),
    ]
    assert reply.usage == Usage(120, 20)
    sent = fake_llm.requests[0]
    assert sent["tools"][0]["function"]["name"] == "calculator"
    assert sent.get("stream", False) is stream


@pytest.mark.parametrize(
    "message",
    [
        "registry.ollama.ai/library/gemma:2b does not support tools",
        '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set',
        "tools param requires --jinja flag",
    ],
)
def test_the_client_tells_a_model_without_tools(fake_llm: FakeLlm, message: str) -> None:
    fake_llm.script(fail(400, message))
    model = OpenAICompatibleModel(fake_llm.base_url, "m", max_retries=0)
    with pytest.raises(ToolsNotSupported, match="tool"):
        model.complete([Message("user", "hi")], [calculator.SPEC])


def test_the_client_reports_other_errors_with_the_endpoint(fake_llm: FakeLlm) -> None:
    fake_llm.script(fail(404, "model 'nope' not found"), say("unused"))
    model = OpenAICompatibleModel(fake_llm.base_url, "nope", max_retries=0)
    with pytest.raises(LlmError, match="answered 404: model 'nope' not found"):
        model.complete([Message("user", "hi")])


def test_the_client_reports_an_endpoint_that_is_down() -> None:
    model = OpenAICompatibleModel("http://127.0.0.1:9/v1", "m", max_retries=0, timeout_s=5)
    with pytest.raises(LlmError, match="cannot reach http://127.0.0.1:9/v1"):
        model.complete([Message("user", "hi")])


def test_a_script_reply_helper_sends_one_call(fake_llm: FakeLlm) -> None:
    fake_llm.script(call("calculator", {"expression": "1"}))
    reply = OpenAICompatibleModel(fake_llm.base_url, "m").complete([Message("user", "x")])
    assert reply.tool_calls[0].id == "call_1" and reply.finish_reason == "tool_calls"
