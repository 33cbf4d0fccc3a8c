"""Splitting a request into its steps, and routing it step by step."""

from __future__ import annotations

import pytest

from planner_app.discovery import RouteMode, RouterSettings, ToolRouter
from planner_app.discovery.steps import split_sentences, split_steps
from tests.planner_app.test_discovery_router import CATALOGUE


@pytest.mark.parametrize(
    ("request_text", "steps"),
    [
        ("what is the weather in Paris", ["what is the weather in Paris"]),
        ("salt and pepper", ["salt and pepper"]),  # too short to be two steps
        (
            "find the forecast of Oslo, then book a flight; also convert the price to euros",
            ["find the forecast of Oslo", "book a flight", "convert the price to euros"],
        ),
        (
            "Find a word for my password. Additionally, fetch the income data for a ZIP code.",
            ["Find a word for my password.", "fetch the income data for a ZIP code."],
        ),
        (
            "1. list my repositories 2. open an issue 3) send an email to Bob",
            ["list my repositories", "open an issue", "send an email to Bob"],
        ),
        (
            "Get the stock price of Apple and convert 100 dollars into euros",
            ["Get the stock price of Apple", "convert 100 dollars into euros"],
        ),
        (
            "先查询北京的天气预报，然后把结果翻译成英文，最后发邮件给我",
            ["先查询北京的天气预报", "把结果翻译成英文", "发邮件给我"],
        ),
        ("查询天气预报", ["查询天气预报"]),
    ],
)
def test_it_splits_a_request_into_its_steps(request_text: str, steps: list[str]) -> None:
    assert split_steps(request_text) == steps


def test_it_keeps_at_most_four_steps_the_last_holding_the_rest() -> None:
    steps = split_steps("read a. then write b. then list c. then delete d. then open e.")
    assert len(steps) == 4
    assert steps[-1] == "delete d. open e."


REQUEST = (
    "get the weather forecast of the city and the current temperature and wind in the city. "
    "Then delete an event"
)


def test_routing_per_step_gives_every_step_its_best_tool() -> None:
    whole = ToolRouter(CATALOGUE, RouterSettings(top_tools=2)).route(REQUEST)
    stepped = ToolRouter(CATALOGUE, RouterSettings(top_tools=2, per_step=True)).route(REQUEST)
    assert whole.tool_names == ["get_current_conditions", "get_forecast"]  # one step crowds
    assert stepped.tool_names == ["get_current_conditions", "deleteEvent"]
    assert stepped.steps[-1] == "delete an event"
    assert stepped.explain()["steps"] == list(stepped.steps)


def test_route_searches_flat_by_default_and_two_stage_when_asked() -> None:
    assert ToolRouter(CATALOGUE).route("delete an event").mode == RouteMode.FLAT
    two_stage = ToolRouter(CATALOGUE, RouterSettings(search="two_stage"))
    routing = two_stage.route("delete an event", "calendar")
    assert routing.mode == RouteMode.TWO_STAGE and routing.servers[0][0] == "calendar"


def test_a_request_of_one_step_is_routed_whole() -> None:
    router = ToolRouter(CATALOGUE, RouterSettings(per_step=True))
    assert router.route("delete an event").steps == ()
    assert router.route("delete an event") == router.search_flat("delete an event")


@pytest.mark.parametrize(
    ("request_text", "sentences"),
    [
        ("what is the weather in Paris", ["what is the weather in Paris"]),
        (
            "I run a shop. Find the price of Apple stock? Then email me.",
            ["I run a shop.", "Find the price of Apple stock?", "Then email me."],
        ),
        ("查询北京的天气。把结果翻译成英文！", ["查询北京的天气", "把结果翻译成英文"]),
        ("version 2.0 is out", ["version 2.0 is out"]),  # no space after the dot
    ],
)
def test_it_splits_a_request_into_its_sentences(request_text: str, sentences: list[str]) -> None:
    assert split_sentences(request_text) == sentences


def test_it_joins_the_sentences_past_the_limit_into_the_last() -> None:
    request = "One a. Two b. Three c. Four d."
    assert split_sentences(request, limit=3) == ["One a.", "Two b.", "Three c. Four d."]
