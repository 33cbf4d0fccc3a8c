"""Planner fixtures: the shipped rules, no rule set cached from another test, a fake LLM."""

from __future__ import annotations

import importlib
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from django.apps import apps

from planner_app import ruleset_versions
from planner_app.demo_tools import register_demo_tools
from planner_app.models import IntentRule, RuleSetVersion
from tests.planner_app.fake_llm import FakeLlm
from tests.planner_app.receivers import HttpReceiver
from tools_app import site_engine
from tools_app.models import McpServer
from tools_app.specs import ToolSpec


@pytest.fixture(autouse=True)
def fresh_ruleset_cache() -> Iterator[None]:
    """Forget the cached rule set: each test's database has its own versions."""
    ruleset_versions._cache.update(ruleset=None, stamp=None, checked_at=0.0)
    yield
    ruleset_versions._cache.update(ruleset=None, stamp=None, checked_at=0.0)


@pytest.fixture
def default_rules(db: None) -> None:
    """Make sure the shipped rules exist (a transactional test before may have flushed them)."""
    if not IntentRule.objects.exists():
        migration = importlib.import_module("planner_app.migrations.0002_default_rules")
        ruleset_versions._pending.suppressed = True
        try:
            migration.add_defaults(apps, None)
        finally:
            ruleset_versions._pending.suppressed = False
        # A flush re-ran post_migrate on empty tables; make the shipped rules version 1.
        RuleSetVersion.objects.all().delete()
        ruleset_versions.record_version("initial rule set")


@pytest.fixture
def fake_llm() -> Iterator[FakeLlm]:
    """A scripted OpenAI-compatible server on 127.0.0.1 (see fake_llm.py)."""
    llm = FakeLlm().start()
    yield llm
    llm.stop()


@pytest.fixture
def llm_settings(settings: Any, fake_llm: FakeLlm) -> None:
    """Point the site's default LLM endpoint at the fake server, without streaming."""
    settings.ARES_LLM_BASE_URL = fake_llm.base_url
    settings.ARES_LLM_MODEL = "fake-model"
    settings.ARES_LLM_STREAM = False


OBJECT = {"type": "object", "properties": {"key": {"type": "string"}}}


class Gate:
    """Something a test waits on: `entered` when it starts, and it holds until `release`."""

    def __init__(self) -> None:
        self.entered, self.release, self.finished = (threading.Event() for _ in range(3))
        self.calls = 0

    def hold(self) -> None:
        self.calls += 1
        self.entered.set()
        self.release.wait(5)
        self.finished.set()


@pytest.fixture
def gate() -> Iterator[Gate]:
    gate = Gate()
    yield gate
    gate.release.set()  # nothing is left waiting after the test


@pytest.fixture
def site_tools(gate: Gate) -> Iterator[None]:
    """A slow tool (5 s, timeout 30 s) and a counting one, in the site's registry."""

    def slow(key: str = "") -> str:
        gate.hold()
        return "slept"

    def count(key: str = "") -> dict[str, str]:
        return {"counted": key}

    specs = [
        ToolSpec("slow", "Take a while.", OBJECT, slow, timeout_s=30),
        ToolSpec("count", "Count a key.", OBJECT, count),
    ]
    yield from in_site_registry(specs)


def in_site_registry(specs: list[ToolSpec]) -> Iterator[None]:
    """Put tools in the site's registry for one test (a fixture's body: yield from it)."""
    # The engine first: after a site_engine.shutdown() there is none, and a refresh without
    # one does nothing, so the first refresh later would resync and drop these tools.
    registry = site_engine.get_engine().registry
    site_engine.refresh_tool_settings(force=True)
    for spec in specs:
        registry.register(spec)
    yield
    for spec in specs:
        registry.unregister(spec.name)


@pytest.fixture
def demo_server(settings: Any, default_rules: None) -> Iterator[None]:
    """The demo MCP server (tools_app/mcp_demo_server.py, a real stdio child) and its
    mappings: mcp.demo.add beside the calculator, mcp.demo.sha256 beside hash_tool."""
    settings.ARES_TOOL_SETTINGS_CHECK_S = 0
    settings.ARES_PLANNER_EVIDENCE_TTL_S = 0
    register_demo_tools()
    ruleset_versions._cache.update(ruleset=None, stamp=None, checked_at=0.0)
    yield
    site_engine.shutdown()  # stop the server's session: the next test's database has no row


@pytest.fixture
def time_server(settings: Any) -> Iterator[None]:
    """The real mcp-server-time, a stdio child of the site's engine, mapped to nothing."""
    settings.ARES_TOOL_SETTINGS_CHECK_S = 0
    McpServer.objects.create(
        name="time", command=sys.executable,
        args=["-m", "mcp_server_time", "--local-timezone", "UTC"],
    )  # fmt: skip
    yield
    site_engine.shutdown()


@pytest.fixture
def receiver() -> Iterator[HttpReceiver]:
    """A webhook receiver on loopback (tests/planner_app/receivers.py), stopped after."""
    server = HttpReceiver().start()
    yield server
    server.stop()
