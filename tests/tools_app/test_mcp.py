"""The MCP client against real servers: mcp-server-time (stdio) and our demo server."""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import logging
import os
import signal
import sys
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any

import pytest
from jsonschema import Draft202012Validator
from mcp.types import Tool

from tests.tools_app.conftest import (
    STDIO_DEMO_CONFIG,
    TIME_CONFIG,
    DemoServer,
    child_pids,
    free_port,
    misbehaving_config,
)
from tools_app.engine import ToolEngine
from tools_app.mcp import McpClient, McpHub, McpServerConfig, discover_tools, tool_spec
from tools_app.registry import ToolRegistry
from tools_app.specs import (
    LLM_NAME_PATTERN,
    ErrorKind,
    SideEffect,
    ToolCall,
    ToolFailure,
    ToolSpec,
)

pytestmark = pytest.mark.anyio

WAIT_LIMIT_S = 20.0


async def wait_until(condition: Callable[[], bool]) -> None:
    """Wait until condition() holds, failing the test if it never does."""
    for _ in range(int(WAIT_LIMIT_S / 0.05)):
        if condition():
            return
        await asyncio.sleep(0.05)
    raise AssertionError("condition never held")


async def specs_by_name(client: McpClient) -> dict[str, ToolSpec]:
    return {spec.name: spec for spec in await discover_tools(client, client.config)}


# Configuration ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "complaint"),
    [
        ({"name": ""}, "name must be 1 to 40"),
        ({"name": "has space"}, "name must be 1 to 40"),
        ({"name": "dotted.name"}, "name must be 1 to 40"),
        ({"name": "x" * 41}, "name must be 1 to 40"),
        ({"transport": "websocket"}, "transport must be one of stdio, http, sse"),
        ({"command": ""}, "needs a command"),
        ({"transport": "http", "url": ""}, "needs an http(s) URL"),
        ({"transport": "sse", "url": "ftp://127.0.0.1/sse"}, "needs an http(s) URL"),
        ({"args": "-m mcp_server_time"}, "args must be a list of strings"),
        ({"args": ["--port", 8080]}, "args must be a list of strings"),
        ({"env": {"PORT": 8080}}, "env must map strings to strings"),
        ({"timeout_s": 0}, "timeout_s must be a positive"),
        ({"timeout_s": -1.5}, "timeout_s must be a positive"),
    ],
)
def test_it_rejects_a_malformed_config(fields: dict[str, Any], complaint: str) -> None:
    valid = {"name": "time", "command": "mcp-server-time"}
    with pytest.raises(ValueError, match=complaint.replace("(", r"\(").replace(")", r"\)")):
        McpServerConfig(**(valid | fields))


# Discovery and naming ---------------------------------------------------------------------


async def test_it_names_time_tools_mcp_dot_server_dot_tool(time_client: McpClient) -> None:
    specs = await specs_by_name(time_client)

    assert set(specs) == {"mcp.time.get_current_time", "mcp.time.convert_time"}
    spec = specs["mcp.time.get_current_time"]
    assert spec.llm_name == "mcp__time__get_current_time"
    assert spec.ran_on == "mcp:time"
    assert spec.capabilities == ()
    assert inspect.iscoroutinefunction(spec.function)


async def test_it_finds_a_discovered_tool_by_its_llm_alias(time_client: McpClient) -> None:
    registry = ToolRegistry(await discover_tools(time_client, TIME_CONFIG))

    assert registry.get("mcp__time__get_current_time").name == "mcp.time.get_current_time"
    assert registry.get("convert_time").name == "mcp.time.convert_time"


async def test_it_takes_contracts_from_the_tool_listing(time_client: McpClient) -> None:
    spec = (await specs_by_name(time_client))["mcp.time.get_current_time"]

    assert spec.parameters["type"] == "object"
    assert spec.parameters["required"] == ["timezone"]
    assert "IANA timezone" in spec.parameters["properties"]["timezone"]["description"]
    assert spec.description
    # The time server marks its tools read-only and idempotent.
    assert spec.side_effect == SideEffect.READ_ONLY
    assert spec.idempotent is True
    assert spec.returns["properties"]["structured"]["required"] == [
        "timezone",
        "datetime",
        "day_of_week",
        "is_dst",
    ]


async def test_it_maps_unannotated_tools_to_destructive(http_demo_client: McpClient) -> None:
    specs = await specs_by_name(http_demo_client)

    # The MCP spec: destructiveHint defaults to true for a tool that is not read-only.
    assert specs["mcp.demo.fail"].side_effect == SideEffect.DESTRUCTIVE
    assert specs["mcp.demo.fail"].idempotent is False
    assert specs["mcp.demo.echo"].side_effect == SideEffect.READ_ONLY


def tool(**wire: Any) -> Tool:
    """Return an MCP Tool parsed from its wire JSON."""
    return Tool.model_validate({"name": "t", "inputSchema": {"type": "object"}} | wire)


@pytest.mark.parametrize(
    ("annotations", "side_effect", "idempotent"),
    [
        (None, SideEffect.DESTRUCTIVE, False),
        ({}, SideEffect.DESTRUCTIVE, False),
        ({"readOnlyHint": True}, SideEffect.READ_ONLY, True),
        ({"readOnlyHint": True, "idempotentHint": False}, SideEffect.READ_ONLY, False),
        ({"destructiveHint": True}, SideEffect.DESTRUCTIVE, False),
        ({"destructiveHint": True, "idempotentHint": True}, SideEffect.DESTRUCTIVE, True),
        ({"destructiveHint": False, "idempotentHint": True}, SideEffect.WRITE, True),
        ({"readOnlyHint": True, "destructiveHint": True}, SideEffect.READ_ONLY, True),
    ],
)
def test_it_derives_side_effects_from_annotations(
    annotations: dict[str, Any] | None, side_effect: SideEffect, idempotent: bool
) -> None:
    spec = tool_spec(McpClient(TIME_CONFIG), TIME_CONFIG, tool(annotations=annotations))

    assert (spec.side_effect, spec.idempotent) == (side_effect, idempotent)


@pytest.mark.parametrize(
    ("schema", "parameters"),
    [
        ({"type": "string"}, {"type": "object"}),
        ({"type": ["object", "null"]}, {"type": "object"}),
        (
            {"properties": {"x": {"type": "integer"}}},
            {"type": "object", "properties": {"x": {"type": "integer"}}},
        ),
        ({}, {"type": "object"}),
    ],
)
def test_it_turns_an_odd_input_schema_into_an_object_schema(
    schema: dict[str, Any], parameters: dict[str, Any]
) -> None:
    spec = tool_spec(McpClient(TIME_CONFIG), TIME_CONFIG, tool(inputSchema=schema))

    assert spec.parameters == parameters


def test_it_logs_a_warning_for_an_invalid_input_schema(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="tools_app.mcp"):
        tool_spec(
            McpClient(TIME_CONFIG), TIME_CONFIG, tool(name="odd", inputSchema={"type": "string"})
        )

    assert "'odd'" in caplog.text and "invalid input schema" in caplog.text


@pytest.mark.parametrize("name", ["get weather/v2 ü", "a.b.c", "x" * 300, "with space"])
def test_it_makes_a_valid_spec_from_an_unsafe_tool_name(name: str) -> None:
    spec = tool_spec(McpClient(TIME_CONFIG), TIME_CONFIG, tool(name=name))

    assert spec.name.startswith("mcp.time.")
    assert LLM_NAME_PATTERN.match(spec.llm_name)


async def test_it_lists_an_unsafe_name_served_over_the_wire() -> None:
    client = McpClient(misbehaving_config("bad-result"))
    try:
        (spec,) = await discover_tools(client, client.config)
    finally:
        await client.close()

    assert spec.name == "mcp.bad.weird tool/ü"
    assert spec.llm_name == "mcp__bad__weird_tool__"


# Calls ------------------------------------------------------------------------------------


async def test_it_gets_the_current_time(time_client: McpClient) -> None:
    spec = (await specs_by_name(time_client))["mcp.time.get_current_time"]

    data = await spec.function(timezone="Asia/Tokyo")

    now = datetime.fromisoformat(data["structured"]["datetime"])
    assert now.utcoffset() is not None and now.utcoffset().total_seconds() == 9 * 3600
    assert data["structured"]["day_of_week"] == now.strftime("%A")
    assert data["structured"]["timezone"] == "Asia/Tokyo"
    assert "Asia/Tokyo" in data["text"]
    assert data["content"] == [{"type": "text", "text": data["text"]}]
    Draft202012Validator(spec.returns).validate(data)


async def test_it_converts_a_time_between_timezones(time_client: McpClient) -> None:
    spec = (await specs_by_name(time_client))["mcp.time.convert_time"]

    data = await spec.function(source_timezone="UTC", time="12:30", target_timezone="Asia/Kolkata")

    converted = data["structured"]
    assert datetime.fromisoformat(converted["target"]["datetime"]).strftime("%H:%M") == "18:00"
    assert converted["time_difference"] == "+5.5h"
    # The output schema's $defs moved to the root of `returns`, so its $refs still resolve.
    Draft202012Validator(spec.returns).validate(data)


async def test_it_returns_structured_output_with_the_text(demo_client: McpClient) -> None:
    data = await demo_client.call_tool("add", {"a": 2, "b": 40})

    assert data["structured"] == {"a": 2, "b": 40, "sum": 42}
    assert '"sum": 42' in data["text"]


async def test_it_raises_tool_error_for_an_is_error_result(demo_client: McpClient) -> None:
    with pytest.raises(ToolFailure, match="the disk is full") as failure:
        await demo_client.call_tool("fail", {"message": "the disk is full"})

    assert failure.value.kind == ErrorKind.TOOL_ERROR


async def test_it_raises_tool_error_when_the_time_server_refuses(time_client: McpClient) -> None:
    with pytest.raises(ToolFailure, match="Nowhere/Atlantis") as failure:
        await time_client.call_tool("get_current_time", {"timezone": "Nowhere/Atlantis"})

    assert failure.value.kind == ErrorKind.TOOL_ERROR


async def test_it_reports_an_unknown_tool_as_invalid_arguments(time_client: McpClient) -> None:
    with pytest.raises(ToolFailure, match="Unknown tool: no_such_tool") as failure:
        await time_client.call_tool("no_such_tool", {})

    assert failure.value.kind == ErrorKind.INVALID_ARGUMENTS


async def test_it_calls_a_tool_over_sse(sse_demo_server: DemoServer) -> None:
    client = McpClient(McpServerConfig(name="demo", transport="sse", url=sse_demo_server.url))
    try:
        data = await client.call_tool("echo", {"text": "over SSE"})
    finally:
        await client.close()

    assert data["text"] == "over SSE"


# Sessions ---------------------------------------------------------------------------------


async def test_it_reuses_one_server_process_across_calls(time_client: McpClient) -> None:
    await time_client.call_tool("get_current_time", {"timezone": "UTC"})
    first = child_pids("mcp_server_time")
    await time_client.list_tools()
    await time_client.call_tool("get_current_time", {"timezone": "Europe/Paris"})

    assert len(first) == 1
    assert child_pids("mcp_server_time") == first


async def test_it_reconnects_after_the_stdio_server_is_killed(time_client: McpClient) -> None:
    await time_client.call_tool("get_current_time", {"timezone": "UTC"})
    (first,) = child_pids("mcp_server_time")
    os.kill(first, signal.SIGKILL)
    await wait_until(lambda: not time_client.connected)

    data = await time_client.call_tool("get_current_time", {"timezone": "UTC"})

    assert data["structured"]["timezone"] == "UTC"
    (second,) = child_pids("mcp_server_time")
    assert second != first


async def test_it_reconnects_after_the_http_server_restarts(
    demo_server: DemoServer, http_demo_client: McpClient
) -> None:
    before = (await http_demo_client.call_tool("pid"))["structured"]["result"]
    demo_server.restart()

    after = (await http_demo_client.call_tool("pid"))["structured"]["result"]

    assert after != before
    assert after == demo_server.process.pid


async def test_it_fails_unavailable_while_the_http_server_is_down(
    demo_server: DemoServer, http_demo_client: McpClient
) -> None:
    await http_demo_client.call_tool("echo", {"text": "up"})
    demo_server.stop()
    try:
        for _ in range(2):  # the call that finds the server gone, then a reconnect attempt
            with pytest.raises(ToolFailure) as failure:
                await http_demo_client.call_tool("echo", {"text": "down"})
            assert failure.value.kind == ErrorKind.UNAVAILABLE
    finally:
        demo_server.start()

    assert (await http_demo_client.call_tool("echo", {"text": "up again"}))["text"] == "up again"


async def test_it_stays_usable_after_a_call_is_cancelled(demo_client: McpClient) -> None:
    before = (await demo_client.call_tool("pid"))["structured"]["result"]
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(demo_client.call_tool("sleep", {"seconds": 60}), 0.5)

    assert (await demo_client.call_tool("echo", {"text": "still here"}))["text"] == "still here"
    # Same server process: the session survived the cancellation rather than being reopened.
    assert (await demo_client.call_tool("pid"))["structured"]["result"] == before


async def test_it_times_out_a_hung_call_and_stays_usable(http_demo_config: McpServerConfig) -> None:
    client = McpClient(dataclasses.replace(http_demo_config, timeout_s=2))
    try:
        with pytest.raises(
            ToolFailure, match="did not answer tools/call sleep within 2s"
        ) as failure:
            await client.call_tool("sleep", {"seconds": 60})
        after = await client.call_tool("echo", {"text": "after the timeout"})
    finally:
        await client.close()

    assert failure.value.kind == ErrorKind.TIMEOUT
    assert after["text"] == "after the timeout"


async def test_it_closes_the_stdio_server_on_close() -> None:
    client = McpClient(STDIO_DEMO_CONFIG)
    pid = (await client.call_tool("pid"))["structured"]["result"]

    await client.close()

    assert pid not in child_pids("mcp_demo_server")
    assert not client.connected


def test_it_opens_a_new_session_on_a_new_event_loop() -> None:
    client = McpClient(STDIO_DEMO_CONFIG)
    first = asyncio.run(client.call_tool("pid"))["structured"]["result"]

    # As in a forked worker: the first loop is gone, and its session with it.
    second = asyncio.run(client.call_tool("pid"))["structured"]["result"]
    asyncio.run(client.close())

    assert second != first


# Unreachable and misbehaving servers ------------------------------------------------------


async def test_it_reports_an_unreachable_url_as_unavailable() -> None:
    url = f"http://127.0.0.1:{free_port()}/mcp"
    client = McpClient(McpServerConfig(name="nobody", transport="http", url=url, timeout_s=5))

    with pytest.raises(ToolFailure, match="could not connect to MCP server 'nobody'") as failure:
        await client.call_tool("echo", {"text": "anyone?"})

    assert failure.value.kind == ErrorKind.UNAVAILABLE
    assert not client.connected


async def test_it_reports_a_missing_command_as_unavailable() -> None:
    config = McpServerConfig(name="ghost", command="/nonexistent/mcp-server", timeout_s=5)
    client = McpClient(config)

    with pytest.raises(ToolFailure, match="No such file or directory") as failure:
        await client.list_tools()

    assert failure.value.kind == ErrorKind.UNAVAILABLE


async def test_it_gives_up_on_a_server_that_never_answers_the_handshake() -> None:
    silent = [sys.executable, "-c", "import time; time.sleep(600)"]
    config = McpServerConfig(name="silent", command=silent[0], args=silent[1:], timeout_s=1)
    client = McpClient(config)

    with pytest.raises(ToolFailure, match="did not complete the handshake within 1s") as failure:
        await client.list_tools()

    assert failure.value.kind == ErrorKind.UNAVAILABLE
    assert not child_pids("time.sleep(600)")


async def test_it_reports_a_malformed_call_result_clearly() -> None:
    client = McpClient(misbehaving_config("bad-result"))
    try:
        with pytest.raises(ToolFailure, match="sent an invalid tools/call x response") as failure:
            await client.call_tool("x", {})
    finally:
        await client.close()

    assert failure.value.kind == ErrorKind.TOOL_ERROR


async def test_it_reports_a_tool_list_with_a_schemaless_tool_clearly() -> None:
    # The SDK refuses the whole listing when one tool has no inputSchema.
    client = McpClient(misbehaving_config("bad-list"))
    try:
        with pytest.raises(ToolFailure, match="sent an invalid tools/list response") as failure:
            await client.list_tools()
    finally:
        await client.close()

    assert failure.value.kind == ErrorKind.TOOL_ERROR
    assert "inputSchema" in str(failure.value)


async def test_it_treats_a_server_speaking_garbage_as_unavailable() -> None:
    client = McpClient(misbehaving_config("garbage", timeout_s=2))

    with pytest.raises(ToolFailure, match="did not complete the handshake") as failure:
        await client.list_tools()

    assert failure.value.kind == ErrorKind.UNAVAILABLE


# The hub ----------------------------------------------------------------------------------


async def test_it_syncs_a_server_through_the_hub(http_demo_config: McpServerConfig) -> None:
    hub = McpHub()
    try:
        specs = {spec.name: spec for spec in await hub.sync(http_demo_config)}
        data = await specs["mcp.demo.add"].function(a=1, b=2)
    finally:
        await hub.close_all()

    assert set(specs) >= {"mcp.demo.echo", "mcp.demo.add", "mcp.demo.fail", "mcp.demo.sleep"}
    assert data["structured"]["sum"] == 3


async def test_it_keeps_the_client_when_resyncing_the_same_config() -> None:
    hub = McpHub()
    try:
        await hub.sync(STDIO_DEMO_CONFIG)
        client = hub.client("demo")
        pid = (await client.call_tool("pid"))["structured"]["result"]
        await hub.sync(STDIO_DEMO_CONFIG)

        assert hub.client("demo") is client
        assert (await client.call_tool("pid"))["structured"]["result"] == pid
    finally:
        await hub.close_all()


async def test_it_replaces_the_client_when_the_config_changes() -> None:
    hub = McpHub()
    try:
        await hub.sync(STDIO_DEMO_CONFIG)
        old = hub.client("demo")
        await hub.sync(dataclasses.replace(STDIO_DEMO_CONFIG, timeout_s=5))

        assert hub.client("demo") is not old
        assert not old.connected
    finally:
        await hub.close_all()


async def test_it_drops_a_disabled_server_from_the_hub() -> None:
    hub = McpHub()
    try:
        await hub.sync(STDIO_DEMO_CONFIG)
        client = hub.client("demo")

        assert await hub.sync(dataclasses.replace(STDIO_DEMO_CONFIG, enabled=False)) == []
        assert not client.connected
        with pytest.raises(KeyError):
            hub.client("demo")
    finally:
        await hub.close_all()


# Through the engine ---------------------------------------------------------------------


@pytest.fixture
def engine_with_demo(http_demo_config: McpServerConfig) -> Iterator[ToolEngine]:
    """An engine whose registry holds the demo server's tools, synced on the engine's loop."""
    engine = ToolEngine(ToolRegistry(), backoff_base_s=0.01)
    hub = McpHub()
    for spec in engine.run_coroutine(hub.sync(http_demo_config)):
        engine.registry.register(spec)
    yield engine
    engine.run_coroutine(hub.close_all())
    engine.close()


def test_it_runs_mcp_tools_through_the_engine(engine_with_demo: ToolEngine) -> None:
    ok = engine_with_demo.execute(ToolCall(name="mcp__demo__add", arguments={"a": 20, "b": 22}))
    failed = engine_with_demo.execute(ToolCall(name="mcp.demo.fail", arguments={"message": "no"}))

    assert ok.success and ok.data["structured"]["sum"] == 42
    assert ok.metadata["ran_on"] == "mcp:demo"
    assert not failed.success and failed.error.kind == ErrorKind.TOOL_ERROR


def test_it_survives_the_engine_timing_a_call_out(engine_with_demo: ToolEngine) -> None:
    engine_with_demo.registry.configure("mcp.demo.sleep", timeout_s=0.5)

    slow = engine_with_demo.execute(ToolCall(name="mcp.demo.sleep", arguments={"seconds": 60}))
    after = engine_with_demo.execute(ToolCall(name="mcp.demo.echo", arguments={"text": "ok"}))

    assert slow.error is not None and slow.error.kind == ErrorKind.TIMEOUT
    assert after.success and after.data["text"] == "ok"
