"""MCP servers as tools: one long-lived session per server, its tools as ToolSpecs. No Django here.

Run everything on one event loop (the engine's). A client belongs to the loop
that last used it: on another loop (a forked worker's) it forgets the old
session, which that loop cannot touch, and opens a new one.

A successful call returns `{"text", "content", "structured"}`:

- `text`: the text blocks joined with newlines (what a model reads);
- `content`: every content block as the JSON the server sent (images, resources...);
- `structured`: the tool's `structuredContent`, or None. When a tool declares an
  output schema this is the data callers want, already checked against that schema.

`ToolSpec.returns` describes this shape, with the tool's output schema under `structured`.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

import anyio
from mcp import Client, StdioServerParameters
from mcp.client.sse import sse_client
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.types import (
    CONNECTION_CLOSED,
    INVALID_PARAMS,
    REQUEST_TIMEOUT,
    CallToolResult,
    Implementation,
    TextContent,
    Tool,
)
from pydantic import ValidationError

from tools_app.specs import ErrorKind, SideEffect, ToolFailure, ToolSpec

logger = logging.getLogger(__name__)

SERVER_NAME_PATTERN = re.compile(r"^[a-zA-Z0-9_-]{1,40}$")
TransportName = Literal["stdio", "http", "sse"]
TRANSPORTS: tuple[str, ...] = ("stdio", "http", "sse")
CLIENT_INFO = Implementation(name="ares-console", version="0.1.0")
# A server that pages its tool list forever must not hang discovery.
MAX_TOOL_PAGES = 100
# Closing a stdio server may take the SDK's grace periods (stdin close, SIGTERM, SIGKILL).
CLOSE_TIMEOUT_S = 10.0

T = TypeVar("T")


@dataclass(frozen=True)
class McpServerConfig:
    """How to reach one MCP server: a command to run (stdio) or a URL (http, sse)."""

    name: str
    transport: TransportName = "stdio"
    command: str = ""
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    url: str = ""
    timeout_s: float = 30.0
    enabled: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not SERVER_NAME_PATTERN.match(self.name):
            raise ValueError(
                f"MCP server name must be 1 to 40 letters, digits, '_' or '-', got {self.name!r}"
            )
        if self.transport not in TRANSPORTS:
            raise ValueError(
                f"{self.name}: transport must be one of {', '.join(TRANSPORTS)}, "
                f"got {self.transport!r}"
            )
        if self.transport == "stdio" and not self.command:
            raise ValueError(f"{self.name}: a stdio server needs a command to run")
        if self.transport != "stdio" and not self.url.startswith(("http://", "https://")):
            raise ValueError(f"{self.name}: an {self.transport} server needs an http(s) URL")
        if not isinstance(self.args, list) or not all(isinstance(a, str) for a in self.args):
            raise ValueError(f"{self.name}: args must be a list of strings")
        if not isinstance(self.env, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in self.env.items()
        ):
            raise ValueError(f"{self.name}: env must map strings to strings")
        if isinstance(self.timeout_s, bool) or not self.timeout_s > 0:
            raise ValueError(f"{self.name}: timeout_s must be a positive number of seconds")


class _WatchedReadStream:
    """Pass the server's messages through and note when the server's side ends.

    A stdio server that exits leaves the SDK client open with a dead stream;
    noticing the end lets the next call reconnect instead of failing.
    """

    def __init__(self, stream: Any, on_end: Callable[[], None]) -> None:
        self._stream = stream
        self._on_end = on_end

    @property
    def last_context(self) -> Any:
        return getattr(self._stream, "last_context", None)

    async def receive(self) -> Any:
        try:
            return await self._stream.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            self._on_end()
            raise

    def __aiter__(self) -> _WatchedReadStream:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        await self._stream.aclose()

    async def __aenter__(self) -> _WatchedReadStream:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


def _open_transport(config: McpServerConfig) -> Any:
    """Return the SDK transport (an async context manager of streams) for a server."""
    if config.transport == "stdio":
        params = StdioServerParameters(
            command=config.command, args=list(config.args), env=dict(config.env) or None
        )
        return stdio_client(params)
    if config.transport == "http":
        return streamable_http_client(config.url)
    return sse_client(config.url, timeout=config.timeout_s)


@asynccontextmanager
async def _watched_transport(
    config: McpServerConfig, on_end: Callable[[], None]
) -> AsyncIterator[tuple[Any, Any]]:
    """Open the server's transport, watching its read stream for the end of the connection."""
    async with _open_transport(config) as (read_stream, write_stream):
        yield _WatchedReadStream(read_stream, on_end), write_stream


class _Connection:
    """One SDK Client held open by a worker task until closed.

    The SDK's context managers must be entered and exited in the same task, so
    the worker owns them; callers use the entered Client from their own tasks,
    which the SDK supports (requests are matched to responses by id).
    """

    def __init__(self, config: McpServerConfig) -> None:
        self.config = config
        self.stream_ended = False
        self._client: Client | None = None
        self._failure: Exception | None = None
        self.lost_because: Exception | None = None
        self._opened = asyncio.Event()  # set once the handshake succeeded or failed
        self._closing = asyncio.Event()
        self._worker = asyncio.create_task(self._hold(), name=f"mcp-{config.name}")

    @property
    def alive(self) -> bool:
        """Return whether the session is open and the server's side has not ended."""
        return (
            self._client is not None
            and not self._worker.done()
            and not self.stream_ended
            and not self._closing.is_set()
        )

    @property
    def opening(self) -> bool:
        return not self._opened.is_set() and not self._closing.is_set()

    async def client(self) -> Client:
        """Wait for the session to open; a failure or a timeout is UNAVAILABLE."""
        name, timeout = self.config.name, self.config.timeout_s
        try:
            await asyncio.wait_for(self._opened.wait(), timeout)
        except TimeoutError:
            await self.close()
            raise ToolFailure(
                f"MCP server {name!r} did not complete the handshake within {timeout:g}s",
                ErrorKind.UNAVAILABLE,
            ) from None
        if self._client is None:
            reason = _describe(self._failure) if self._failure else "closed during the handshake"
            raise ToolFailure(
                f"could not connect to MCP server {name!r}: {reason}", ErrorKind.UNAVAILABLE
            ) from self._failure
        return self._client

    async def close(self) -> None:
        """Exit the session and stop the server process if we started one."""
        self._closing.set()
        if not self._opened.is_set():
            # Still in the handshake, where the worker does not watch `_closing`.
            self._worker.cancel()
        done, _ = await asyncio.wait({self._worker}, timeout=CLOSE_TIMEOUT_S)
        if not done:
            self._worker.cancel()
            await asyncio.wait({self._worker}, timeout=CLOSE_TIMEOUT_S)

    def _mark_stream_ended(self) -> None:
        self.stream_ended = True

    async def _hold(self) -> None:
        """Enter the SDK client, publish it, and keep it open until closing."""
        config = self.config
        client = Client(
            _watched_transport(config, self._mark_stream_ended),
            read_timeout_seconds=config.timeout_s,
            client_info=CLIENT_INFO,
            # Discovery must see the server's current tools, never a cached list.
            cache=None,
        )
        try:
            async with client:
                self._client = client
                self._opened.set()
                await self._closing.wait()
        except Exception as exc:
            if not self._opened.is_set():
                self._failure = exc
            else:
                self.lost_because = exc
                if not self._closing.is_set():
                    logger.warning(
                        "MCP server %r: connection lost: %s", config.name, _describe(exc)
                    )
        finally:
            self._opened.set()


class McpClient:
    """A client of one MCP server that keeps one session open and reopens it after a break."""

    def __init__(self, config: McpServerConfig) -> None:
        self.config = config
        self._loop: asyncio.AbstractEventLoop | None = None
        self._connection: _Connection | None = None
        self._connect_lock = asyncio.Lock()

    @property
    def connected(self) -> bool:
        """Return whether a session is open and the server has not gone away."""
        return self._connection is not None and self._connection.alive

    async def list_tools(self) -> list[Tool]:
        """Return every tool the server offers, following pagination."""
        return await self._request("tools/list", _list_all_tools)

    async def call_tool(self, name: str, arguments: dict[str, Any] | None = None) -> dict[str, Any]:
        """Call a tool and return its result data; an error result raises ToolFailure."""

        async def call(client: Client) -> CallToolResult:
            return await client.call_tool(name, arguments or {})

        return call_result_data(name, await self._request(f"tools/call {name}", call))

    async def close(self) -> None:
        """Close the session; the next call opens a new one."""
        self._adopt_running_loop()
        async with self._connect_lock:
            connection, self._connection = self._connection, None
        if connection is not None:
            await connection.close()

    async def _session(self) -> tuple[_Connection, Client]:
        """Return the open session, opening a new one if there is none or it broke."""
        self._adopt_running_loop()
        async with self._connect_lock:
            connection = self._connection
            if connection is None or not (connection.alive or connection.opening):
                if connection is not None:
                    logger.info("MCP server %r: reconnecting", self.config.name)
                    await connection.close()
                connection = self._connection = _Connection(self.config)
        return connection, await connection.client()

    async def _request(self, what: str, operation: Callable[[Client], Awaitable[T]]) -> T:
        """Run one request on the session, turning every failure into a ToolFailure."""
        connection, client = await self._session()
        try:
            return await operation(client)
        except MCPError as exc:
            if exc.code != CONNECTION_CLOSED:
                raise _protocol_failure(self.config, what, exc) from exc
            await self._discard(connection)
            reason = _describe(connection.lost_because or exc)
            raise ToolFailure(
                f"MCP server {self.config.name!r} connection lost during {what}: {reason}",
                ErrorKind.UNAVAILABLE,
            ) from exc
        except (ValidationError, RuntimeError) as exc:
            if not connection.alive:
                # The SDK's RuntimeError for a session closed under the call (a re-sync).
                raise ToolFailure(
                    f"MCP server {self.config.name!r} session closed during {what}",
                    ErrorKind.UNAVAILABLE,
                ) from exc
            # The SDK's words for a response that breaks the protocol or the tool's output schema.
            raise ToolFailure(
                f"MCP server {self.config.name!r} sent an invalid {what} response: {exc}",
                ErrorKind.TOOL_ERROR,
            ) from exc
        except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError, TimeoutError) as exc:
            await self._discard(connection)
            raise ToolFailure(
                f"MCP server {self.config.name!r} is unreachable: {_describe(exc)}",
                ErrorKind.UNAVAILABLE,
            ) from exc

    def _adopt_running_loop(self) -> None:
        """Start afresh on a loop other than the last one; the old session is not ours to close."""
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            self._loop, self._connection, self._connect_lock = loop, None, asyncio.Lock()

    async def _discard(self, connection: _Connection) -> None:
        """Drop a broken connection so the next call opens a new one."""
        async with self._connect_lock:
            if self._connection is connection:
                self._connection = None
        await connection.close()


async def _list_all_tools(client: Client) -> list[Tool]:
    """Return all pages of the server's tool list."""
    tools: list[Tool] = []
    cursor: str | None = None
    for _ in range(MAX_TOOL_PAGES):
        page = await client.list_tools(cursor=cursor)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if not cursor:
            return tools
    logger.warning("MCP tool list still paging after %d pages; using what came", MAX_TOOL_PAGES)
    return tools


def _protocol_failure(config: McpServerConfig, what: str, exc: MCPError) -> ToolFailure:
    """Return the ToolFailure for an MCP error response or the SDK's request timeout."""
    name = config.name
    if exc.code == REQUEST_TIMEOUT:
        message = f"MCP server {name!r} did not answer {what} within {config.timeout_s:g}s"
        return ToolFailure(message, ErrorKind.TIMEOUT)
    if exc.code == INVALID_PARAMS:
        return ToolFailure(
            f"MCP server {name!r} rejected {what}: {exc.message}", ErrorKind.INVALID_ARGUMENTS
        )
    return ToolFailure(f"MCP server {name!r} failed {what}: error {exc.code}: {exc.message}")


def call_result_data(tool: str, result: CallToolResult) -> dict[str, Any]:
    """Return a tool result's data, or raise ToolFailure(TOOL_ERROR) for an isError result."""
    text = "\n".join(block.text for block in result.content if isinstance(block, TextContent))
    if result.is_error:
        raise ToolFailure(
            text or f"MCP tool {tool!r} failed without a message", ErrorKind.TOOL_ERROR
        )
    return {
        "text": text,
        "content": [
            block.model_dump(mode="json", by_alias=True, exclude_none=True)
            for block in result.content
        ],
        "structured": result.structured_content,
    }


def _describe(exc: BaseException) -> str:
    """Return a one-line account of an error, looking inside task-group exception groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def tool_parameters(server: str, tool: Tool) -> dict[str, Any]:
    """Return a tool's input schema as an object schema; a broken one becomes {"type": "object"}."""
    schema = tool.input_schema
    if isinstance(schema, dict) and schema.get("type", "object") == "object":
        return {**schema, "type": "object"}
    logger.warning(
        "MCP tool %r on %r has an invalid input schema %r; accepting any object",
        tool.name,
        server,
        schema,
    )
    return {"type": "object"}


def result_schema(output_schema: dict[str, Any] | None) -> dict[str, Any]:
    """Return the JSON Schema of call_tool's data, with the tool's output schema as `structured`.

    The output schema's `$defs` move to the root so its `#/$defs/...` references still resolve.
    """
    structured = dict(output_schema or {})
    definitions = {
        key: structured.pop(key) for key in ("$defs", "definitions") if key in structured
    }
    return {
        "type": "object",
        "properties": {
            "text": {"type": "string"},
            "content": {"type": "array", "items": {"type": "object"}},
            "structured": structured,
        },
        "required": ["text", "content", "structured"],
        **definitions,
    }


def tool_spec(client: McpClient, config: McpServerConfig, tool: Tool) -> ToolSpec:
    """Return the ToolSpec of one MCP tool, run through the client."""
    hints = tool.annotations
    read_only = bool(hints and hints.read_only_hint)
    if read_only:
        side_effect = SideEffect.READ_ONLY
    elif hints and hints.destructive_hint is False:
        side_effect = SideEffect.WRITE
    else:  # the MCP spec: destructiveHint defaults to true for a tool that is not read-only
        side_effect = SideEffect.DESTRUCTIVE
    idempotent_hint = hints.idempotent_hint if hints else None
    return ToolSpec(
        # ToolSpec caps names at 200 characters; a longer MCP name is cut, not refused.
        name=f"mcp.{config.name}.{tool.name}"[:200],
        description=tool.description or tool.title or f"MCP tool {tool.name} on {config.name}",
        parameters=tool_parameters(config.name, tool),
        function=_tool_caller(client, tool.name),
        returns=result_schema(tool.output_schema),
        side_effect=side_effect,
        idempotent=read_only if idempotent_hint is None else bool(idempotent_hint),
        # A remote tool may read a clock, a database or the web; never assume a pure function.
        deterministic=False,
        timeout_s=config.timeout_s,
        capabilities=(),
        ran_on=f"mcp:{config.name}",
        # text and content repeat structured: show a model one of them, not all three.
        llm_view=("structured", "text"),
    )


def _tool_caller(client: McpClient, tool_name: str) -> Callable[..., Awaitable[dict[str, Any]]]:
    """Return the async function the engine awaits to run an MCP tool."""

    async def call_mcp_tool(**arguments: Any) -> dict[str, Any]:
        return await client.call_tool(tool_name, arguments)

    call_mcp_tool.__qualname__ = f"mcp:{client.config.name}:{tool_name}"
    return call_mcp_tool


async def discover_tools(client: McpClient, config: McpServerConfig) -> list[ToolSpec]:
    """Return one ToolSpec per tool the server offers now."""
    return [tool_spec(client, config, tool) for tool in await client.list_tools()]


class McpHub:
    """The process's MCP clients, one per server name."""

    def __init__(self) -> None:
        self._clients: dict[str, McpClient] = {}

    def names(self) -> list[str]:
        """Return the names of the servers this hub holds a client for."""
        return list(self._clients)

    def client(self, name: str) -> McpClient:
        """Return the client of a synced server; KeyError if there is none."""
        return self._clients[name]

    async def sync(self, config: McpServerConfig) -> list[ToolSpec]:
        """Connect to a server (or reuse its session) and return its tools as ToolSpecs.

        A changed config replaces the old client; a disabled server is closed and has no tools.
        """
        client = self._clients.get(config.name)
        if client is not None and (client.config != config or not config.enabled):
            del self._clients[config.name]
            await client.close()
            client = None
        if not config.enabled:
            return []
        if client is None:
            client = self._clients[config.name] = McpClient(config)
        return await discover_tools(client, config)

    async def close(self, name: str) -> None:
        """Close and forget one server's client."""
        client = self._clients.pop(name, None)
        if client is not None:
            await client.close()

    async def close_all(self) -> None:
        """Close every client, for shutdown."""
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            await client.close()


hub = McpHub()
