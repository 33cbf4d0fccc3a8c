"""The tool registry: unique names, aliases, operator settings, LLM listings, thread safety."""

from __future__ import annotations

import re
import threading
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tools_app.registry import DuplicateToolError, ToolRegistry, UnknownToolError
from tools_app.specs import ToolSpec

LLM_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")  # the issue's ^[a-zA-Z0-9_-]{1,64}$, matched whole

CALCULATOR_PARAMETERS = {
    "type": "object",
    "properties": {"expression": {"type": "string", "description": "The expression."}},
    "required": ["expression"],
}
NO_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}}


def echo(**arguments: Any) -> dict[str, Any]:
    return arguments


def make_spec(name: str, **overrides: Any) -> ToolSpec:
    fields: dict[str, Any] = {
        "name": name,
        "description": f"The {name} tool.",
        "parameters": NO_PARAMETERS,
        "function": echo,
    }
    return ToolSpec(**(fields | overrides))


def test_it_registers_and_gets_a_tool() -> None:
    registry = ToolRegistry()
    spec = make_spec("calculator")
    registry.register(spec)
    assert registry.get("calculator") is spec
    assert "calculator" in registry


def test_it_lists_tools_sorted_by_name() -> None:
    registry = ToolRegistry([make_spec("web_search"), make_spec("calculator"), make_spec("hash")])
    assert [spec.name for spec in registry.list()] == ["calculator", "hash", "web_search"]


def test_it_unregisters_a_tool() -> None:
    registry = ToolRegistry([make_spec("calculator"), make_spec("hash")])
    registry.unregister("calculator")
    assert "calculator" not in registry
    assert [spec.name for spec in registry.list()] == ["hash"]
    with pytest.raises(UnknownToolError):
        registry.get("calculator")


def test_it_refuses_a_duplicate_name_and_keeps_the_first() -> None:
    first = make_spec("calculator")
    registry = ToolRegistry([first])
    with pytest.raises(DuplicateToolError, match="'calculator' is already registered"):
        registry.register(make_spec("calculator", description="Another one."))
    assert registry.get("calculator") is first


@pytest.mark.parametrize(
    ("first", "second"),
    [
        pytest.param("mcp.time.now", "mcp__time__now", id="dots and underscores"),
        pytest.param("my tool", "my_tool", id="space"),
        pytest.param("my.tool", "my__tool", id="dot"),
        pytest.param("café", "caf_", id="unicode"),
        pytest.param("x" * 70, "x" * 64 + "y", id="cut to 64"),
    ],
)
def test_it_refuses_two_names_with_the_same_llm_alias(first: str, second: str) -> None:
    registry = ToolRegistry([make_spec(first)])
    with pytest.raises(DuplicateToolError, match="would both be shown to LLMs as"):
        registry.register(make_spec(second))
    assert [spec.name for spec in registry.list()] == [first]


def test_it_finds_a_tool_by_its_llm_alias() -> None:
    spec = make_spec("mcp.time.get_current_time")
    registry = ToolRegistry([spec])
    assert registry.get("mcp__time__get_current_time") is spec


def test_it_finds_an_mcp_tool_by_its_bare_name_when_unambiguous() -> None:
    spec = make_spec("mcp.time.get_current_time")
    registry = ToolRegistry([spec, make_spec("mcp.time.convert_time")])
    assert registry.get("get_current_time") is spec


def test_it_does_not_guess_between_two_servers_with_the_same_tool() -> None:
    first, second = make_spec("mcp.time.get_current_time"), make_spec("mcp.clock.get_current_time")
    registry = ToolRegistry([first, second])
    with pytest.raises(UnknownToolError) as caught:
        registry.get("get_current_time")
    assert "mcp.clock.get_current_time" in str(caught.value)
    assert "mcp.time.get_current_time" in str(caught.value)
    assert "get_current_time" not in registry
    assert registry.get("mcp.time.get_current_time") is first
    assert registry.get("mcp__clock__get_current_time") is second


def test_a_builtin_name_wins_over_an_mcp_bare_name() -> None:
    builtin, remote = make_spec("datetime"), make_spec("mcp.time.datetime")
    registry = ToolRegistry([builtin, remote])
    assert registry.get("datetime") is builtin


def test_unknown_tool_error_lists_the_available_tools() -> None:
    registry = ToolRegistry([make_spec("calculator"), make_spec("hash_tool")])
    with pytest.raises(UnknownToolError) as caught:
        registry.get("calculater")
    assert str(caught.value) == "no tool named 'calculater'; available: calculator, hash_tool"
    assert caught.value.name == "calculater"


def test_unknown_tool_error_shortens_a_long_list() -> None:
    registry = ToolRegistry([make_spec(f"tool_{number:02}") for number in range(25)])
    with pytest.raises(UnknownToolError) as caught:
        registry.get("missing")
    assert str(caught.value).endswith("tool_19 and 5 more")


def test_unknown_tool_error_says_when_there_are_none() -> None:
    with pytest.raises(UnknownToolError, match="available: none"):
        ToolRegistry().get("calculator")


@pytest.mark.parametrize(
    ("settings_", "field", "expected"),
    [
        pytest.param({"enabled": False}, "enabled", False, id="disable"),
        pytest.param({"timeout_s": 5.0}, "timeout_s", 5.0, id="timeout"),
        pytest.param(
            {"description": "Evaluate maths."}, "description", "Evaluate maths.", id="desc"
        ),
    ],
)
def test_configure_changes_the_spec_and_tells_listeners(
    settings_: dict[str, Any], field: str, expected: Any
) -> None:
    registry = ToolRegistry([make_spec("calculator", timeout_s=30.0)])
    seen: list[tuple[str, ToolSpec | None]] = []
    registry.on_change(lambda name, spec: seen.append((name, spec)))
    returned = registry.configure("calculator", **settings_)
    assert getattr(registry.get("calculator"), field) == expected
    assert returned is registry.get("calculator")
    assert seen == [("calculator", returned)]


def test_configure_leaves_unset_settings_alone() -> None:
    registry = ToolRegistry([make_spec("calculator", timeout_s=30.0)])
    spec = registry.configure("calculator", enabled=False)
    assert (spec.timeout_s, spec.description) == (30.0, "The calculator tool.")


def test_configure_through_an_alias_changes_the_tool_itself() -> None:
    registry = ToolRegistry([make_spec("mcp.time.get_current_time")])
    seen: list[str] = []
    registry.on_change(lambda name, spec: seen.append(name))
    registry.configure("get_current_time", enabled=False)
    tools = registry.list(enabled_only=False)
    assert [(spec.name, spec.enabled) for spec in tools] == [("mcp.time.get_current_time", False)]
    assert seen == ["mcp.time.get_current_time"]


def test_configure_refuses_a_non_positive_timeout() -> None:
    registry = ToolRegistry([make_spec("calculator", timeout_s=30.0)])
    with pytest.raises(ValueError, match="timeout_s must be positive"):
        registry.configure("calculator", timeout_s=-1)
    assert registry.get("calculator").timeout_s == 30.0


def test_configure_refuses_an_unknown_tool() -> None:
    with pytest.raises(UnknownToolError):
        ToolRegistry().configure("calculator", enabled=False)


def test_listeners_hear_registrations_and_removals() -> None:
    registry = ToolRegistry()
    seen: list[tuple[str, str | None]] = []
    registry.on_change(lambda name, spec: seen.append((name, spec and spec.name)))
    registry.register(make_spec("calculator"))
    registry.unregister("calculator")
    assert seen == [("calculator", "calculator"), ("calculator", None)]


def test_list_hides_disabled_tools_unless_asked() -> None:
    registry = ToolRegistry([make_spec("calculator"), make_spec("http_request", enabled=False)])
    assert [spec.name for spec in registry.list()] == ["calculator"]
    all_names = [spec.name for spec in registry.list(enabled_only=False)]
    assert all_names == ["calculator", "http_request"]


def test_list_keeps_only_the_named_tools_by_name_or_alias() -> None:
    registry = ToolRegistry(
        [make_spec("calculator"), make_spec("hash_tool"), make_spec("mcp.time.get_current_time")]
    )
    listed = registry.list(names=["calculator", "get_current_time", "no_such_tool"])
    assert [spec.name for spec in listed] == ["calculator", "mcp.time.get_current_time"]


def test_openai_tools_have_the_exact_function_format() -> None:
    registry = ToolRegistry(
        [
            make_spec("calculator", parameters=CALCULATOR_PARAMETERS),
            make_spec("mcp.time.get_current_time"),
            make_spec("http_request", enabled=False),
        ]
    )
    assert registry.openai_tools() == [
        {
            "type": "function",
            "function": {
                "name": "calculator",
                "description": "The calculator tool.",
                "parameters": CALCULATOR_PARAMETERS,
            },
        },
        {
            "type": "function",
            "function": {
                "name": "mcp__time__get_current_time",
                "description": "The mcp.time.get_current_time tool.",
                "parameters": NO_PARAMETERS,
            },
        },
    ]


def test_anthropic_tools_have_the_exact_tool_format() -> None:
    registry = ToolRegistry(
        [
            make_spec("calculator", parameters=CALCULATOR_PARAMETERS),
            make_spec("http_request", enabled=False),
        ]
    )
    assert registry.anthropic_tools() == [
        {
            "name": "calculator",
            "description": "The calculator tool.",
            "input_schema": CALCULATOR_PARAMETERS,
        }
    ]


def test_llm_listings_show_an_operators_description() -> None:
    registry = ToolRegistry([make_spec("calculator")])
    registry.configure("calculator", description="Evaluate arithmetic exactly.")
    assert registry.openai_tools()[0]["function"]["description"] == "Evaluate arithmetic exactly."
    assert registry.anthropic_tools()[0]["description"] == "Evaluate arithmetic exactly."


def test_llm_listings_keep_only_the_named_tools() -> None:
    registry = ToolRegistry([make_spec("calculator"), make_spec("hash_tool")])
    assert [tool["name"] for tool in registry.anthropic_tools(names=["hash_tool"])] == ["hash_tool"]
    openai = registry.openai_tools(names=["calculator"])
    assert [tool["function"]["name"] for tool in openai] == ["calculator"]


HOSTILE_NAMES = [
    pytest.param("mcp.time.get_current_time", id="dots"),
    pytest.param("get current time", id="spaces"),
    pytest.param("zeit.jetzt_läuft", id="unicode"),
    pytest.param("計算機", id="cjk"),
    pytest.param("🔧 tool", id="emoji"),
    pytest.param("x" * 200, id="200 chars"),
    pytest.param("mcp." + "server" * 20 + ".tool", id="long server"),
    pytest.param("../../etc/passwd", id="path"),
    pytest.param("tool\n", id="newline"),
    pytest.param("<script>", id="markup"),
    pytest.param(".", id="dot only"),
]


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_it_hands_llms_only_safe_names(name: str) -> None:
    registry = ToolRegistry([make_spec(name)])
    openai_name = registry.openai_tools()[0]["function"]["name"]
    anthropic_name = registry.anthropic_tools()[0]["name"]
    assert LLM_NAME.fullmatch(openai_name)
    assert anthropic_name == openai_name
    assert registry.get(openai_name).name == name


@settings(deadline=None, max_examples=200)
@given(names=st.lists(st.text(min_size=1, max_size=200), min_size=1, max_size=5, unique=True))
def test_every_name_handed_to_an_llm_is_safe(names: list[str]) -> None:
    registry = ToolRegistry()
    for name in names:
        try:
            registry.register(make_spec(name))
        except DuplicateToolError:
            continue  # two hostile names may share an alias; the second is refused
    for tool in registry.openai_tools():
        assert LLM_NAME.fullmatch(tool["function"]["name"])
        assert registry.get(tool["function"]["name"]).llm_name == tool["function"]["name"]
    for tool in registry.anthropic_tools():
        assert LLM_NAME.fullmatch(tool["name"])


def run_in_threads(count: int, work: Any) -> list[BaseException]:
    """Run work(index) in `count` threads started together; return what they raised."""
    start, errors = threading.Barrier(count), []

    def run(index: int) -> None:
        start.wait()
        try:
            work(index)
        except BaseException as exc:  # collected and asserted on by the caller
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(index,)) for index in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return errors


def test_it_registers_from_many_threads_at_once() -> None:
    registry = ToolRegistry()

    def register_hundred(worker: int) -> None:
        for number in range(100):
            registry.register(make_spec(f"tool_{worker}_{number}"))
            registry.get(f"tool_{worker}_{number}")
            if number % 25 == 0:
                registry.openai_tools()

    errors = run_in_threads(8, register_hundred)
    assert errors == []
    assert len(registry.list()) == 800
    assert len({spec.name for spec in registry.list()}) == 800


def test_only_one_thread_wins_each_contested_name() -> None:
    registry = ToolRegistry()

    def register_same_hundred(_worker: int) -> None:
        for number in range(100):
            try:
                registry.register(make_spec(f"tool_{number}"))
            except DuplicateToolError:
                duplicates.append(number)

    duplicates: list[int] = []
    errors = run_in_threads(8, register_same_hundred)
    assert errors == []
    assert len(registry.list()) == 100
    assert len(duplicates) == 700
