"""Real MCP servers for the MCP client tests: time, our demo server, a misbehaving one."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tools_app.mcp import McpClient, McpServerConfig

REPO_ROOT = Path(__file__).resolve().parents[2]
MISBEHAVING_SERVER = Path(__file__).with_name("misbehaving_mcp_server.py")
STARTUP_LIMIT_S = 30.0

TIME_CONFIG = McpServerConfig(
    name="time",
    command=sys.executable,
    args=["-m", "mcp_server_time", "--local-timezone", "UTC"],
    timeout_s=20,
)
STDIO_DEMO_CONFIG = McpServerConfig(
    name="demo",
    command=sys.executable,
    args=["-m", "tools_app.mcp_demo_server", "--transport", "stdio"],
    # The child imports tools_app from the repository, wherever pytest was started.
    env={"PYTHONPATH": str(REPO_ROOT)},
    timeout_s=20,
)


def free_port() -> int:
    """Return a loopback TCP port nobody listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class DemoServer:
    """Our demo MCP server as a child process on a fixed loopback port."""

    port: int
    transport: str = "streamable-http"
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        path = "sse" if self.transport == "sse" else "mcp"
        return f"http://127.0.0.1:{self.port}/{path}"

    def start(self) -> None:
        """Start the server and wait until its port accepts connections."""
        command = [sys.executable, "-m", "tools_app.mcp_demo_server", "--port", str(self.port)]
        self.process = subprocess.Popen([*command, "--transport", self.transport], cwd=REPO_ROOT)
        deadline = time.monotonic() + STARTUP_LIMIT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"demo MCP server exited with {self.process.returncode}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"demo MCP server did not listen on port {self.port}")

    def stop(self) -> None:
        """Kill the server and reap it."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def restart(self) -> None:
        self.stop()
        self.start()


@pytest.fixture
def anyio_backend() -> str:
    # The engine runs tools on a plain asyncio loop; test on the same.
    return "asyncio"


@pytest.fixture(scope="module")
def demo_server() -> Iterator[DemoServer]:
    server = DemoServer(free_port())
    server.start()
    yield server
    server.stop()


@pytest.fixture
def sse_demo_server() -> Iterator[DemoServer]:
    server = DemoServer(free_port(), transport="sse")
    server.start()
    yield server
    server.stop()


@pytest.fixture
def http_demo_config(demo_server: DemoServer) -> McpServerConfig:
    return McpServerConfig(name="demo", transport="http", url=demo_server.url, timeout_s=20)


@pytest.fixture
async def time_client() -> AsyncIterator[McpClient]:
    client = McpClient(TIME_CONFIG)
    yield client
    await client.close()


@pytest.fixture
async def http_demo_client(http_demo_config: McpServerConfig) -> AsyncIterator[McpClient]:
    client = McpClient(http_demo_config)
    yield client
    await client.close()


@pytest.fixture(params=["http", "stdio"])
async def demo_client(
    request: pytest.FixtureRequest, http_demo_config: McpServerConfig
) -> AsyncIterator[McpClient]:
    """A client of the demo server over streamable HTTP, then over stdio."""
    client = McpClient(http_demo_config if request.param == "http" else STDIO_DEMO_CONFIG)
    yield client
    await client.close()


def misbehaving_config(mode: str, timeout_s: float = 20) -> McpServerConfig:
    """Return the config of the misbehaving stdio server in one of its modes."""
    args = [str(MISBEHAVING_SERVER), mode]
    return McpServerConfig(name="bad", command=sys.executable, args=args, timeout_s=timeout_s)


def child_pids(marker: str) -> set[int]:
    """Return the pids of this process's live children whose command line contains marker."""
    pids = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        # The command name in field 2 may hold spaces and parentheses; ppid follows the last ')'.
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        if parent == os.getpid() and marker in cmdline:
            pids.add(int(entry.name))
    return pids
