"""A tiny MCP server of our own, served on loopback for tests and demos.

`python -m tools_app.mcp_demo_server --port 8765` serves streamable HTTP at
`http://127.0.0.1:8765/mcp`; `--transport sse` serves `http://127.0.0.1:8765/sse`;
`--transport stdio` talks over stdin/stdout. `--tools add,sha256` serves only the tools
named: `manage.py ares_demo` registers it so, since `fail`, `sleep`, `pid` and `echo` are
there for tests and have no place among a site's tools.
"""

from __future__ import annotations

import argparse
import hashlib
import os
from collections.abc import Callable, Collection
from typing import Any, Literal

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import BaseModel

LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"]
TRANSPORTS = ("streamable-http", "sse", "stdio")
READ_ONLY = ToolAnnotations(readOnlyHint=True, idempotentHint=True)


class Sum(BaseModel):
    a: int
    b: int
    sum: int


def build_server(log_level: LogLevel = "WARNING", only: Collection[str] | None = None) -> MCPServer:
    """Return the demo server with its tools registered (only those named, if given)."""
    server = MCPServer("ares-demo", version="1.0", log_level=log_level)

    def tool(**options: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        def register(function: Callable[..., Any]) -> Callable[..., Any]:
            if only is None or function.__name__ in only:
                server.tool(**options)(function)
            return function

        return register

    @tool(annotations=READ_ONLY)
    def echo(text: str) -> str:
        """Return the text unchanged."""
        return text

    @tool(annotations=READ_ONLY)
    def add(a: int, b: int) -> Sum:
        """Add two integers; the result is structured as {a, b, sum}."""
        return Sum(a=a, b=b, sum=a + b)

    @tool(annotations=READ_ONLY)
    def sha256(text: str) -> str:
        """Return the SHA-256 digest of the text (UTF-8), in hex."""
        return hashlib.sha256(text.encode()).hexdigest()

    @tool()
    def fail(message: str) -> str:
        """Fail with the given message, as an isError result."""
        raise ToolError(message)

    @tool(annotations=READ_ONLY)
    async def sleep(seconds: float) -> str:
        """Sleep for the given seconds, then say so; for timeout tests."""
        await anyio.sleep(seconds)
        return f"slept {seconds}s"

    @tool(annotations=READ_ONLY)
    def pid() -> int:
        """Return this server's process id, so tests can tell a restarted server apart."""
        return os.getpid()

    return server


def main() -> None:
    """Serve the demo server over the chosen transport, on 127.0.0.1 for HTTP ones."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--transport", default="streamable-http", choices=TRANSPORTS)
    parser.add_argument("--log-level", default="WARNING", choices=LogLevel.__args__)
    parser.add_argument("--tools", help="Serve only these tools (comma-separated); default all")
    options = parser.parse_args()
    only = [name.strip() for name in options.tools.split(",")] if options.tools else None
    server = build_server(options.log_level, only)
    if options.transport == "stdio":
        server.run("stdio")
    else:
        server.run(options.transport, host="127.0.0.1", port=options.port)


if __name__ == "__main__":
    main()
