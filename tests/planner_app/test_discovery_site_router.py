"""The router over the tool registry: built-ins by category, MCP servers, rebuilt on change."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured

from planner_app.discovery import RouterSettings
from planner_app.discovery.router import DEFAULT_MIN_SCORE
from planner_app.discovery.site_router import RegistryRouter, catalogue_from_specs, get_router
from tools_app import site_engine
from tools_app.models import ToolSetting
from tools_app.registry import ToolRegistry
from tools_app.specs import ToolSpec

OBJECT = {"type": "object", "properties": {"city": {"type": "string"}}}


def mcp_spec(server: str, tool: str, description: str) -> ToolSpec:
    return ToolSpec(
        name=f"mcp.{server}.{tool}",
        description=description,
        parameters=OBJECT,
        function=lambda **_: None,
        ran_on=f"mcp:{server}",
    )


@pytest.fixture
def registry() -> ToolRegistry:
    return ToolRegistry(site_engine.builtin_specs())


def test_it_groups_enabled_built_ins_by_category_and_mcp_tools_by_server() -> None:
    specs = [*site_engine.builtin_specs(), mcp_spec("weather", "get_forecast", "Forecast a city.")]
    specs.append(dataclasses.replace(mcp_spec("weather", "get_alerts", "Alerts."), enabled=False))
    catalogue = catalogue_from_specs(specs)
    servers = {server.name: [tool.name for tool in server.tools] for server in catalogue}
    assert servers["builtin:math"] == ["calculator"]
    assert sorted(servers["builtin:text"]) == ["hash_tool", "json_tools", "string_utils"]
    assert servers["mcp:weather"] == ["mcp.weather.get_forecast"]
    enabled = sorted(spec.name for spec in specs if spec.enabled)
    assert sorted(name for tools in servers.values() for name in tools) == enabled


def test_it_matches_a_tools_capabilities_and_parameters() -> None:
    [math] = [
        s for s in catalogue_from_specs(site_engine.builtin_specs()) if s.name == "builtin:math"
    ]
    [calculator] = math.tools
    assert "NumberTheory" in calculator.keywords
    parameters = dict(calculator.parameters)
    assert list(parameters) == ["expression"]
    [spec] = [spec for spec in site_engine.builtin_specs() if spec.name == "calculator"]
    assert parameters["expression"] == spec.parameters["properties"]["expression"]["description"]


def test_it_finds_built_in_tools(registry: ToolRegistry) -> None:
    routing = RegistryRouter(registry).search("evaluate a math expression", server="calculation")
    assert (routing.matches[0].server, routing.matches[0].tool) == ("builtin:math", "calculator")


def test_it_does_not_rebuild_while_nothing_changes(registry: ToolRegistry) -> None:
    router = RegistryRouter(registry)
    assert router.router() is router.router()
    assert router.builds == 1


def test_it_rebuilds_when_a_tool_is_added(registry: ToolRegistry) -> None:
    router = RegistryRouter(registry)
    assert "mcp.weather.get_forecast" not in router.search("weather forecast of a city").tool_names
    registry.register(mcp_spec("weather", "get_forecast", "Return the weather forecast of a city."))
    routing = router.search("weather forecast of a city")
    assert (routing.matches[0].server, routing.matches[0].tool) == (
        "mcp:weather",
        "mcp.weather.get_forecast",
    )
    assert router.builds == 2


def test_it_rebuilds_when_a_tool_is_removed_or_disabled(registry: ToolRegistry) -> None:
    registry.register(mcp_spec("weather", "get_forecast", "Return the weather forecast of a city."))
    router = RegistryRouter(registry)
    assert router.search("weather forecast").tool_names[0] == "mcp.weather.get_forecast"
    registry.unregister("mcp.weather.get_forecast")
    assert "mcp.weather.get_forecast" not in router.search("weather forecast").tool_names
    assert router.search("hash a text with sha256").tool_names[0] == "hash_tool"
    registry.configure("hash_tool", enabled=False)
    assert "hash_tool" not in router.search("hash a text with sha256", limit=10).tool_names


def test_it_rebuilds_when_a_description_changes(registry: ToolRegistry) -> None:
    router = RegistryRouter(registry)
    assert router.search("translate a poem into latin").tool_names[:1] != ["string_utils"]
    registry.configure("string_utils", description="Translate a poem into Latin.")
    assert router.search("translate a poem into latin").tool_names[0] == "string_utils"


@pytest.mark.django_db
def test_the_sites_router_follows_the_operators_tool_settings(settings: Any) -> None:
    settings.ARES_TOOL_SETTINGS_CHECK_S = 0  # look at the settings on every call
    site_engine.refresh_tool_settings(force=True)
    router = get_router()
    assert router is get_router()
    assert router.registry is site_engine.get_engine().registry
    assert router.search("hash a text with sha256").tool_names[0] == "hash_tool"
    setting = ToolSetting.objects.create(name="hash_tool", enabled=False)
    try:
        assert "hash_tool" not in get_router().search("hash a text with sha256").tool_names
    finally:
        setting.delete()
    assert get_router().search("hash a text with sha256").tool_names[0] == "hash_tool"


def test_a_rebuild_starts_with_an_empty_cache(registry: ToolRegistry) -> None:
    router = RegistryRouter(registry)
    router.search("weather forecast of a city")
    assert router.search("weather forecast of a city").cached
    registry.register(mcp_spec("weather", "get_forecast", "Return the weather forecast of a city."))
    routing = router.search("weather forecast of a city")
    assert not routing.cached
    assert routing.tool_names[0] == "mcp.weather.get_forecast"
    assert len(router.router().cache) == 1


def test_it_uses_other_settings_after_reconfiguring(registry: ToolRegistry) -> None:
    router = RegistryRouter(registry)
    assert len(router.search("text", limit=None).matches) > 2
    router.reconfigure(RouterSettings(top_tools=2, min_score=0.0))
    routing = router.search("text")
    assert not routing.cached and len(routing.matches) == 2
    assert router.builds == 2


@pytest.mark.django_db
def test_the_sites_router_takes_its_settings_from_django(settings: Any) -> None:
    settings.ARES_ROUTER_TOP_TOOLS = 1
    settings.ARES_ROUTER_COMBINATION = "product"
    settings.ARES_ROUTER_MIN_SCORE = None
    router = get_router()
    routing = router.search("hash a text with sha256")
    assert (router.settings.top_tools, router.settings.combination) == (1, "product")
    assert router.settings.min_score == DEFAULT_MIN_SCORE  # one gate for either combination
    assert routing.tool_names == ["hash_tool"]
    settings.ARES_ROUTER_TOP_TOOLS = 3
    settings.ARES_ROUTER_COMBINATION = "weighted"
    assert get_router() is router  # the same router, configured anew
    assert router.settings.top_tools == 3


@pytest.mark.django_db
def test_the_sites_router_searches_flat_unless_told_otherwise(settings: Any) -> None:
    assert get_router().search("hash a text with sha256").mode == "flat"
    settings.ARES_ROUTER_SEARCH = "two_stage"
    settings.ARES_ROUTER_PER_STEP = "true"
    router = get_router()
    assert router.search("hash a text with sha256").mode == "two_stage"
    assert router.settings.per_step is True
    settings.ARES_ROUTER_SEARCH = "sideways"
    with pytest.raises(ImproperlyConfigured, match="ARES_ROUTER_SEARCH='sideways'"):
        get_router()


@pytest.mark.django_db
def test_the_sites_router_fuses_by_z_scores_unless_told_otherwise(settings: Any) -> None:
    assert get_router().settings.fusion == "zscore"
    settings.ARES_ROUTER_FUSION = "rrf"
    router = get_router()
    assert router.settings.fusion == "rrf"
    assert router.search("hash a text with sha256").tool_names[0] == "hash_tool"
    settings.ARES_ROUTER_FUSION = "median"
    with pytest.raises(ImproperlyConfigured, match="ARES_ROUTER_FUSION='median'"):
        get_router()
