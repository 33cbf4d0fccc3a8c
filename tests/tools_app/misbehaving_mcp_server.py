"""A stdio MCP server that breaks the protocol on purpose, to test how the client copes.

Modes (first argument):
- `bad-result`: a valid 2025-06-18 handshake and tool list, then a tools/call
  result whose `content` is not a list;
- `bad-list`: a tool list in which one tool has no input schema;
- `garbage`: answers every line with text that is not JSON-RPC.

It speaks only the handshake-era protocol: `server/discover` gets "method not
found", which makes the client fall back to `initialize`.
"""

from __future__ import annotations

import json
import sys
from typing import Any

GOOD_TOOLS = [
    {"name": "weird tool/ü", "description": "An unsafe name.", "inputSchema": {"type": "object"}},
]
BAD_TOOLS = [*GOOD_TOOLS, {"name": "no_schema", "description": "No inputSchema at all."}]


def answer(message: dict[str, Any], mode: str) -> dict[str, Any]:
    """Return the JSON-RPC reply to one request."""
    method = message.get("method")
    reply: dict[str, Any] = {"jsonrpc": "2.0", "id": message["id"]}
    if method == "initialize":
        reply["result"] = {
            "protocolVersion": "2025-06-18",
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "misbehaving", "version": "0"},
        }
    elif method == "tools/list":
        reply["result"] = {"tools": BAD_TOOLS if mode == "bad-list" else GOOD_TOOLS}
    elif method == "tools/call":
        reply["result"] = {"content": "not a list of blocks"}
    else:
        reply["error"] = {"code": -32601, "message": f"Method not found: {method}"}
    return reply


def main() -> None:
    """Read JSON-RPC lines from stdin and answer requests according to the mode."""
    mode = sys.argv[1]
    for line in sys.stdin:
        if mode == "garbage":
            print("this is not JSON-RPC", flush=True)
            continue
        message = json.loads(line)
        if "id" in message and "method" in message:
            print(json.dumps(answer(message, mode)), flush=True)


if __name__ == "__main__":
    main()
