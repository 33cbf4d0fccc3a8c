"""The demo's competing tools: the project's own MCP server, registered, its tools mapped.

Built-in tools each serve their own capabilities, so without MCP servers the evidence
pages have one candidate per capability and nothing to compare. `manage.py ares_demo`
registers tools_app/mcp_demo_server.py (a stdio server this Python runs, so it works on
any machine the site runs on) as MCP server "demo", and maps its `add` tool to Summation
and Arithmetic, where it competes with the calculator, and its `sha256` tool to Hashing,
where it competes with hash_tool; the demo traces (traces_app.demo_spans) give the calculator
and add the records that make the planner's preference flip, while hash_tool holds the
lead. A site without the demo has neither the server nor the mappings: this is a command
option, not a migration. An operator removes both in the admin like any other rows.
"""

from __future__ import annotations

import asyncio
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from django.conf import settings
from django.db import transaction

from planner_app.models import Capability, CapabilityMapping
from planner_app.pipeline.extraction import DEMO_ADD_TOOL, DEMO_SHA256_TOOL
from tools_app.models import McpServer

DEMO_SERVER = "demo"
DEMO_MODULE = ["-m", "tools_app.mcp_demo_server"]
# Tool -> the capabilities it competes for. add takes two integers: the planner's
# extractor (extraction.extract_two_integer_sum) gives it only requests that are a + b;
# sha256 only requests for SHA-256 (extract_sha256_text).
DEMO_MAPPINGS = {DEMO_ADD_TOOL: ("Summation", "Arithmetic"), DEMO_SHA256_TOOL: ("Hashing",)}


@dataclass
class DemoTools:
    """What register_demo_tools found and did."""

    server: McpServer
    created: bool
    updated: bool = False  # ours from an earlier run, now run as this one runs it
    foreign: bool = False  # another server of that name, the operator's: left as it was
    mapped: list[str] = field(default_factory=list)  # "Summation -> mcp.demo.add", new ones
    missing: list[str] = field(default_factory=list)  # capabilities an operator deleted


def demo_server_fields() -> dict[str, object]:
    """Return the McpServer fields that run the demo server over stdio with this Python."""
    prefix = f"mcp.{DEMO_SERVER}."
    served = ",".join(sorted(tool.removeprefix(prefix) for tool in DEMO_MAPPINGS))
    return {
        "transport": McpServer.Transport.STDIO,
        "command": sys.executable,
        # Only the tools that compete: the server's others (fail, sleep, pid...) are for tests.
        "args": [*DEMO_MODULE, "--transport", "stdio", "--tools", served],
        # The child imports tools_app from this checkout, whatever its working directory.
        "env": {"PYTHONPATH": str(settings.BASE_DIR)},
        "timeout_s": 20,
    }


def register_demo_tools() -> DemoTools:
    """Register the demo MCP server and its capability mappings, unless already there.

    A server row of ours from an earlier run is brought up to date (another Python, more
    tools); a server of that name that runs something else is the operator's, left alone.
    One transaction, so the planner records one rule-set version for the new mappings.
    """
    fields = demo_server_fields()
    with transaction.atomic():
        server, created = McpServer.objects.get_or_create(name=DEMO_SERVER, defaults=fields)
        found = DemoTools(server, created)
        if not created and server.args[:2] != DEMO_MODULE:
            found.foreign = True
        elif not created and any(getattr(server, key) != value for key, value in fields.items()):
            for key, value in fields.items():
                setattr(server, key, value)
            server.save()
            found.updated = True
        for tool, capabilities in DEMO_MAPPINGS.items():
            for name in capabilities:
                capability = Capability.objects.filter(name=name).first()
                if capability is None:
                    found.missing.append(name)
                    continue
                mapping, new = CapabilityMapping.objects.get_or_create(
                    capability=capability, tool=tool
                )
                if new:
                    found.mapped.append(str(mapping))
    return found


def list_server_tools(server: McpServer) -> list[str]:
    """Start the server, list its tools and stop it; ToolFailure or ValueError if it can't."""
    from tools_app.mcp import McpClient  # the MCP SDK is big: load it when used

    async def listed() -> list[str]:
        client = McpClient(server.config())
        try:
            return [tool.name for tool in await client.list_tools()]
        finally:
            await client.close()

    # A thread of its own: the caller may be running an event loop already (a test's browser).
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, listed()).result()
