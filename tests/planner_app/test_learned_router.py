"""The learned router's core: outcomes kept per tool, matched to new requests, fused, explained."""

from __future__ import annotations

import math
import re
import sys
import threading
import time
from collections.abc import Callable

import pytest

from planner_app.discovery import RouterSettings, Server, Tool, ToolRouter
from planner_app.discovery.backends import WordLlamaBackend
from planner_app.discovery.learned import LearnedIndex
from planner_app.discovery.outcomes import (
    MAX_REQUEST_CHARS,
    Outcome,
    OutcomeFileError,
    OutcomeHistory,
    outcomes_from_dict,
)
from planner_app.discovery.routing import Routing, ToolMatch
from planner_app.discovery.site_router import SYNC_BUILD_OUTCOMES, RegistryRouter
from tools_app.registry import ToolRegistry
from tools_app.specs import ToolSpec

CATALOGUE = (
    Server(
        "weather",
        "Weather forecasts and current conditions for any city.",
        (
            Tool("get_forecast", "Return the weather forecast of a city for the next days."),
            Tool("get_current_conditions", "Return the temperature and wind in a city now."),
        ),
    ),
    Server(
        "calendar",
        "A calendar service: events and meetings.",
        (
            Tool("createEvent", "Create an event on a date, with a title and attendees."),
            Tool("listEvents", "List the events between two dates."),
        ),
    ),
    Server(
        "github",
        "Code hosting: repositories, issues and pull requests.",
        (
            Tool("list_issues", "List the open issues of a repository."),
            Tool("create_pull_request", "Open a pull request from a branch."),
        ),
    ),
    Server(
        "files",
        "Read and write files on the local disk.",
        (
            Tool("read_file", "Return the text of a file."),
            Tool("search_files", "Find files whose names match a pattern."),
        ),
    ),
    Server("markets", "Market data.", (Tool("quote", "Return the last price of a ticker."),)),
)
EVERY_TOOL = 9
NOW = 1_800_000_000.0
HALF_LIFE_S = 30 * 86_400.0

# Wordings of one need, asking for create_pull_request ("Open a pull request from a
# branch") without its words; NEW_WORDING is a new one, which its description misses.
REVIEW_REQUESTS = (
    "ship my fix for review",
    "send my changes upstream for review",
    "get my patch reviewed by the team",
    "ask the team to review my work",
    "propose my edits to the maintainers",
)
NEW_WORDING = "get my work reviewed upstream"
REVIEW_X = "create_pull_request"
LIKE_THE_NEW_WORDING = (
    "get my code reviewed upstream",
    "have my work reviewed upstream",
    "get my work looked at upstream",
)
UNLIKE_THE_NEW_WORDING = (
    "what will the weather be in Rome",
    "list the files in my home folder",
    "book a meeting with Ana on Monday",
)
CITIES = ("Oslo", "Rome", "Paris", "Lima", "Kyiv", "Riga", "Bonn", "Nice", "Pune", "Cork")
WEATHER_REQUESTS = tuple(
    [f"will it rain in {city} tomorrow" for city in CITIES]
    + [f"how windy is it in {city}" for city in CITIES]
)


def make_router(**settings: object) -> ToolRouter:
    """Return a router over CATALOGUE with wordllama, ungated and offering 3, unless told."""
    chosen = {"min_score": 0.0, "top_tools": 3, **settings}
    return ToolRouter(CATALOGUE, RouterSettings(**chosen), semantic=WordLlamaBackend())


def served(
    tool: str, requests: tuple[str, ...], *, failed: float = 0.0, at: float = NOW, tag: str = "t"
) -> list[Outcome]:
    """Return one outcome of `tool` per request, each from a source of its own."""
    return [
        Outcome(request, tool, failed=failed, at=at, source=f"{tag}/{tool}/{n}")
        for n, request in enumerate(requests)
    ]


def index(router: ToolRouter, outcomes: list[Outcome], version: int = 1) -> LearnedIndex:
    return router.learned_index(outcomes, NOW, version)


def match_of(routing: Routing, tool: str) -> ToolMatch:
    [match] = [match for match in routing.matches if match.tool == tool]
    return match


def ranking(routing: Routing) -> list[tuple[str, str, float, float, float | None]]:
    return [(m.server, m.tool, m.score, m.tool_score, m.semantic_score) for m in routing.matches]


# Outcome


@pytest.mark.parametrize("failed", [-0.01, 1.01, math.nan, math.inf])
def test_an_outcome_refuses_a_failed_share_outside_0_to_1(failed: float) -> None:
    with pytest.raises(ValueError, match="between 0 and 1"):
        Outcome("weather in Oslo", "get_forecast", failed=failed)


@pytest.mark.parametrize("failed", [0.0, 0.5, 1.0])
def test_an_outcome_takes_a_failed_share_from_0_to_1(failed: float) -> None:
    assert Outcome("weather in Oslo", "get_forecast", failed=failed).failed == failed


def test_an_outcome_collapses_whitespace_and_keeps_the_start_of_a_long_request() -> None:
    assert Outcome("  weather\n in\tOslo  ", "get_forecast").request == "weather in Oslo"
    long = Outcome("forecast " + "x" * (2 * MAX_REQUEST_CHARS), "get_forecast").request
    assert len(long) == MAX_REQUEST_CHARS and long.startswith("forecast xxx")


# OutcomeHistory


def test_history_keeps_at_most_per_tool_outcomes_per_tool() -> None:
    history = OutcomeHistory(per_tool=3)
    kept = history.add(
        served("get_forecast", tuple(f"rain in {city}" for city in CITIES[:5]))
        + served("quote", ("price of ACME", "price of Initech"))
    )
    assert kept == 7
    assert history.counts() == {"get_forecast": 3, "quote": 2}
    assert len(history) == 5


def test_a_full_tool_drops_the_older_of_two_duplicates_before_a_distinct_older_one() -> None:
    history = OutcomeHistory(per_tool=3)
    history.add([Outcome("rain in Oslo", "get_forecast", at=1, source="a")])
    history.add([Outcome("Rain in  Rome", "get_forecast", at=2, source="b")])
    history.add([Outcome("rain in rome", "get_forecast", at=3, source="c")])
    history.add([Outcome("rain in Riga", "get_forecast", at=4, source="d")])
    assert [outcome.source for outcome in history.outcomes()] == ["a", "c", "d"]


def test_a_full_tool_drops_its_oldest_when_no_two_outcomes_are_duplicates() -> None:
    history = OutcomeHistory(per_tool=3)
    history.add([Outcome("rain in Oslo", "get_forecast", at=1, source="a")])
    # The same request with another result is not a duplicate: it teaches something.
    history.add([Outcome("rain in Rome", "get_forecast", failed=1.0, at=2, source="b")])
    history.add([Outcome("rain in Rome", "get_forecast", at=3, source="c")])
    history.add([Outcome("rain in Riga", "get_forecast", at=4, source="d")])
    assert [outcome.source for outcome in history.outcomes()] == ["b", "c", "d"]


def test_the_same_source_again_replaces_its_outcome() -> None:
    history = OutcomeHistory()
    history.add([Outcome("rain in Oslo", "get_forecast", source="trace/1")])
    history.add([Outcome("rain in Oslo", "get_forecast", failed=1.0, source="trace/1")])
    assert len(history) == 1
    assert history.outcomes()[0].failed == 1.0
    history.add([Outcome("rain in Oslo", "get_current_conditions", source="trace/1")])
    assert history.counts() == {"get_current_conditions": 1}


def test_remove_forgets_the_outcomes_of_those_sources() -> None:
    history = OutcomeHistory()
    history.add(served("get_forecast", ("rain in Oslo", "rain in Rome", "rain in Riga")))
    removed = history.remove(["t/get_forecast/0", "t/get_forecast/2", "t/unknown/9"])
    assert removed == 2
    assert [outcome.request for outcome in history.outcomes()] == ["rain in Rome"]


def test_replace_keeps_only_the_new_outcomes() -> None:
    history = OutcomeHistory()
    history.add(served("get_forecast", ("rain in Oslo", "rain in Rome")))
    history.replace(served("quote", ("price of ACME",)))
    assert history.outcomes() == served("quote", ("price of ACME",))
    assert history.remove(["t/get_forecast/0"]) == 0  # its sources went too


def test_the_version_grows_on_every_change_and_not_on_a_no_op() -> None:
    history = OutcomeHistory()
    versions = [history.version]

    def step(change: Callable[[], object]) -> bool:
        change()
        versions.append(history.version)
        return versions[-1] > versions[-2]

    assert step(lambda: history.add(served("get_forecast", ("rain in Oslo",))))
    assert not step(lambda: history.add([]))
    assert not step(lambda: history.add([Outcome("", "get_forecast")]))
    assert step(lambda: history.add(served("get_forecast", ("rain in Oslo",), failed=1.0)))
    assert not step(lambda: history.remove(["t/unknown/0"]))
    assert step(lambda: history.remove(["t/get_forecast/0"]))
    assert step(lambda: history.replace(served("quote", ("price of ACME",))))


def test_outcomes_without_a_request_or_a_tool_are_not_kept() -> None:
    history = OutcomeHistory()
    kept = history.add(
        [Outcome("", "get_forecast"), Outcome(" \n\t ", "get_forecast"), Outcome("rain", "")]
    )
    assert (kept, len(history), history.version) == (0, 0, 0)


def test_threads_adding_at_once_keep_the_right_count() -> None:
    tools = ("get_forecast", "quote", "read_file", "listEvents")
    switch_interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads take turns between almost every bytecode
    try:
        for _ in range(5):  # a race shows in some runs, not in every one
            history = OutcomeHistory(per_tool=50)

            def add(thread: int, history: OutcomeHistory = history) -> None:
                for n in range(100):
                    request, source = f"request {thread} {n}", f"{thread}/{n}"
                    history.add([Outcome(request, tools[n % 4], at=n, source=source)])

            threads = [threading.Thread(target=add, args=(thread,)) for thread in range(8)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            assert history.counts() == dict.fromkeys(tools, 50)
            assert len(history) == 200 and history.version == 800
    finally:
        sys.setswitchinterval(switch_interval)


# outcomes_from_dict: the bench's history format


def test_outcomes_from_dict_reads_the_documented_format() -> None:
    data = {
        "outcomes": [
            {"request": "rain  in Oslo", "tool": "get_forecast", "outcome": "ok"},
            {
                "request": "price of ACME",
                "tool": "quote",
                "server": "markets",
                "outcome": "error",
                "at": 1764547200,
            },
            {"request": "read notes.txt", "tool": "read_file", "outcome": "ok", "score": 0.75},
            {"request": "read a.txt", "tool": "read_file", "outcome": "error", "score": 0.9},
        ]
    }
    assert outcomes_from_dict(data) == [
        Outcome("rain in Oslo", "get_forecast", 0.0, 0.0),
        Outcome("price of ACME", "quote", 1.0, 1764547200.0, server="markets"),
        Outcome("read notes.txt", "read_file", 0.25, 0.0),
        Outcome("read a.txt", "read_file", 1.0, 0.0),
    ]


GOOD = {"request": "rain in Oslo", "tool": "get_forecast", "outcome": "ok"}


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ("rain in Oslo", "an outcome is an object"),
        ({**GOOD, "request": "   "}, "'request' must be a non-empty string"),
        ({"tool": "get_forecast", "outcome": "ok"}, "'request' must be a non-empty string"),
        ({**GOOD, "tool": 7}, "'tool' must be a non-empty string"),
        ({**GOOD, "outcome": "maybe"}, "'outcome' must be 'ok' or 'error'"),
        ({**GOOD, "outcome": None}, "'outcome' must be 'ok' or 'error'"),
        ({**GOOD, "score": 1.5}, "'score' must be a number from 0 to 1"),
        ({**GOOD, "score": -0.1}, "'score' must be a number from 0 to 1"),
        ({**GOOD, "score": math.nan}, "'score' must be a number from 0 to 1"),
        ({**GOOD, "score": math.inf}, "'score' must be a number from 0 to 1"),
        ({**GOOD, "score": True}, "'score' must be a number from 0 to 1"),
        ({**GOOD, "score": "0.5"}, "'score' must be a number from 0 to 1"),
        ({**GOOD, "at": "2026-12-01"}, "'at' must be a number of Unix seconds"),
        ({**GOOD, "at": math.inf}, "'at' must be a number of Unix seconds"),
        ({**GOOD, "server": 3}, "'server' must be a string"),
    ],
)
def test_outcomes_from_dict_names_the_place_of_a_bad_outcome(bad: object, message: str) -> None:
    data = {"outcomes": [GOOD, GOOD, GOOD, bad, GOOD]}
    with pytest.raises(OutcomeFileError, match=re.escape(f"outcomes[3]: {message}")):
        outcomes_from_dict(data)


@pytest.mark.parametrize("data", [[GOOD], {}, {"outcomes": GOOD}, "outcomes"])
def test_outcomes_from_dict_refuses_a_history_without_an_outcomes_list(data: object) -> None:
    with pytest.raises(OutcomeFileError, match="an object with an 'outcomes' list"):
        outcomes_from_dict(data)


# Cold start: no outcomes, today's ranking


COLD_REQUESTS = (
    "what is the weather forecast for Oslo",
    "open a pull request from my feature branch",
    NEW_WORDING,
    "blah zork quux",  # the gate: nothing fits
)


def empty_index(router: ToolRouter) -> LearnedIndex:
    return index(router, [])


def index_of_other_tools(router: ToolRouter) -> LearnedIndex:
    """Return an index of outcomes only for tools the catalogue does not have."""
    outcomes = served("send_email", REVIEW_REQUESTS) + [
        Outcome(NEW_WORDING, REVIEW_X, server="gitlab", source="other/server")
    ]
    return index(router, outcomes)


@pytest.mark.parametrize("learned", [empty_index, index_of_other_tools])
@pytest.mark.parametrize("request_text", COLD_REQUESTS)
def test_without_outcomes_of_its_tools_the_ranking_is_todays(
    learned: Callable[[ToolRouter], LearnedIndex], request_text: str
) -> None:
    today = ToolRouter(CATALOGUE, semantic=WordLlamaBackend()).route(request_text)
    router = ToolRouter(CATALOGUE, semantic=WordLlamaBackend())
    routing = router.route(request_text, learned=learned(router))
    assert ranking(routing) == ranking(today)
    assert "history" not in routing.explain()


def test_the_cold_start_requests_cover_an_answer_and_a_silence() -> None:
    router = ToolRouter(CATALOGUE, semantic=WordLlamaBackend())
    assert router.route(COLD_REQUESTS[0]).tool_names[0] == "get_forecast"
    assert router.route(COLD_REQUESTS[-1]).matches == ()


def test_without_history_the_explanation_has_none() -> None:
    explained = make_router().route("will it rain in Oslo tomorrow", learned=None).explain()
    assert "history" not in explained
    for tool in explained["tools"]:
        assert tool["placed_by"] == "description"
        assert "history_score" not in tool and "closest" not in tool
        assert tool["why"] == "its description matches the request (no past requests like this one)"


# Learning: a new wording of requests a tool served


def test_the_description_alone_misses_the_tool_for_the_new_wording() -> None:
    routing = make_router().route(NEW_WORDING)
    assert REVIEW_X not in routing.tool_names and len(routing.matches) == 3


def test_a_new_wording_of_requests_a_tool_served_offers_it() -> None:
    router = make_router()
    routing = router.route(NEW_WORDING, learned=index(router, served(REVIEW_X, REVIEW_REQUESTS)))
    match = match_of(routing, REVIEW_X)
    assert match.placed_by == "history"
    evidence = match.evidence
    assert evidence is not None and evidence.succeeded_like >= 1 and evidence.failed_like == 0
    assert evidence.closest in REVIEW_REQUESTS
    count = evidence.succeeded_like
    assert match.why == (
        f"{count} past request{'s' * (count != 1)} like this one succeeded with it; "
        f"closest: {evidence.closest!r} {evidence.closest_similarity:.2f}"
    )


def test_the_explanation_shows_the_history_and_its_evidence() -> None:
    router = make_router()
    learned = index(router, served(REVIEW_X, REVIEW_REQUESTS))
    explained = router.route(NEW_WORDING, learned=learned).explain()
    assert explained["history"] == {"outcomes": 5, "tools": 1}
    [tool] = [tool for tool in explained["tools"] if tool["tool"] == REVIEW_X]
    assert tool["placed_by"] == "history" and tool["history_score"] > 0
    assert tool["succeeded_like"] >= 1 and tool["failed_like"] == 0
    assert tool["closest"] in REVIEW_REQUESTS and tool["closest_similarity"] >= 0.5
    assert f"closest: {tool['closest']!r}" in tool["why"]
    others = [tool for tool in explained["tools"] if tool["tool"] != REVIEW_X]
    assert others and all("history_score" not in tool for tool in others)


# Failures count against a tool for requests like the one that failed


def route_everything(outcomes: list[Outcome]) -> Routing:
    router = make_router()
    return router.route(NEW_WORDING, limit=EVERY_TOOL, learned=index(router, outcomes))


def test_a_tool_that_keeps_failing_for_such_requests_drops() -> None:
    successes = served(REVIEW_X, REVIEW_REQUESTS)
    failures = served(REVIEW_X, LIKE_THE_NEW_WORDING, failed=1.0, tag="failed")
    alone = route_everything(successes)
    failing = route_everything(successes + failures)
    assert alone.tool_names.index(REVIEW_X) < failing.tool_names.index(REVIEW_X)
    assert match_of(failing, REVIEW_X).score < match_of(alone, REVIEW_X).score
    short = make_router().route(NEW_WORDING, learned=index(make_router(), successes + failures))
    assert REVIEW_X not in short.tool_names
    evidence = match_of(failing, REVIEW_X).evidence
    assert evidence is not None and evidence.failed_like >= 1
    assert f", {evidence.failed_like} failed; closest:" in match_of(failing, REVIEW_X).why


def test_failures_for_unlike_requests_move_a_tool_less_than_for_like_ones() -> None:
    successes = served(REVIEW_X, REVIEW_REQUESTS)
    alone = match_of(route_everything(successes), REVIEW_X).score
    like = served(REVIEW_X, LIKE_THE_NEW_WORDING, failed=1.0, tag="failed")
    unlike = served(REVIEW_X, UNLIKE_THE_NEW_WORDING, failed=1.0, tag="failed")
    after_like = match_of(route_everything(successes + like), REVIEW_X).score
    after_unlike = match_of(route_everything(successes + unlike), REVIEW_X).score
    assert alone - after_unlike < alone - after_like


def test_a_partial_failure_sits_between_success_and_failure() -> None:
    successes = served(REVIEW_X, REVIEW_REQUESTS)

    def score_with(failed: float) -> float:
        failures = served(REVIEW_X, LIKE_THE_NEW_WORDING, failed=failed, tag="failed")
        return match_of(route_everything(successes + failures), REVIEW_X).score

    # failed=0.5: an ok call whose score, 0.5, the rules count half failed.
    assert score_with(1.0) < score_with(0.5) < match_of(route_everything(successes), REVIEW_X).score


# Recent outcomes weigh more


def test_recent_outcomes_weigh_more_than_old_ones() -> None:
    router = make_router(history_half_life_s=HALF_LIFE_S)
    # The description ranks list_issues first for the new wording, create_pull_request lower.
    description = router.route(NEW_WORDING, limit=EVERY_TOOL).tool_names
    assert description.index("list_issues") < description.index(REVIEW_X)
    long_ago = NOW - 10 * HALF_LIFE_S
    outcomes = served(REVIEW_X, REVIEW_REQUESTS) + served(
        "list_issues", REVIEW_REQUESTS, at=long_ago
    )
    learned = router.route(NEW_WORDING, limit=EVERY_TOOL, learned=index(router, outcomes))
    assert learned.tool_names.index(REVIEW_X) < learned.tool_names.index("list_issues")


def test_learned_index_uses_the_settings_half_life() -> None:
    ten_days_ago = served(REVIEW_X, REVIEW_REQUESTS, at=NOW - 10 * 86_400)

    def history_score(half_life_s: float) -> float | None:
        router = make_router(history_half_life_s=half_life_s)
        routing = router.route(NEW_WORDING, limit=EVERY_TOOL, learned=index(router, ten_days_ago))
        return match_of(routing, REVIEW_X).history_score

    assert history_score(86_400) < history_score(1_000 * 86_400)


# No rich-get-richer; the new tool slot


RICH = (
    served("get_forecast", WEATHER_REQUESTS, tag="rich")
    + served("get_current_conditions", WEATHER_REQUESTS, tag="rich")
    + served("read_file", tuple(f"show me what is in notes{n}.txt" for n in range(20)), tag="rich")
)


@pytest.mark.parametrize(
    ("request_text", "cold_tool"),
    [
        ("which issues are still open in my repo", "list_issues"),
        ("open a pull request from my feature branch", "create_pull_request"),
        ("find the files named like report", "search_files"),
    ],
)
def test_tools_with_much_history_do_not_outrank_a_cold_tool_its_description_matches(
    request_text: str, cold_tool: str
) -> None:
    router = make_router()
    assert router.route(request_text).tool_names[0] == cold_tool
    routing = router.route(request_text, limit=EVERY_TOOL, learned=index(router, RICH))
    assert routing.tool_names[0] == cold_tool
    assert match_of(routing, cold_tool).placed_by == "description"


def test_many_outcomes_for_unlike_requests_do_not_place_a_tool() -> None:
    """A record is no advantage (learned.py): 20 weather requests, none like this one, do
    not put get_forecast among the 5 offered for a pull request, as 3 of them do not."""
    request_text = "open a pull request from my feature branch"
    router = make_router()
    assert "get_forecast" not in router.route(request_text, limit=5).tool_names
    few = served("get_forecast", WEATHER_REQUESTS[:3])
    with_few = router.route(request_text, limit=5, learned=index(router, few))
    assert "get_forecast" not in with_few.tool_names
    many = served("get_forecast", WEATHER_REQUESTS)
    with_many = router.route(request_text, limit=5, learned=index(router, many, version=2))
    unlike = index(router, many, version=3).scores(request_text)
    assert unlike is not None
    evidence = unlike.evidence(0)  # get_forecast is the catalogue's first tool
    assert evidence is not None and evidence.succeeded_like == 0
    assert "get_forecast" not in with_many.tool_names


# Each of four tools served three or more review requests; get_current_conditions, the
# best description match after list_issues and get_forecast, has two outcomes: little.
CROWDED = (
    served(REVIEW_X, REVIEW_REQUESTS)
    + served("list_issues", REVIEW_REQUESTS[:3])
    + served("listEvents", REVIEW_REQUESTS[1:4])
    + served("get_forecast", REVIEW_REQUESTS[2:])
    + served("get_current_conditions", UNLIKE_THE_NEW_WORDING[:2])
)


def test_the_new_tool_slot_takes_the_last_place_when_history_fills_the_top_k() -> None:
    router = make_router()
    description = router.route(NEW_WORDING, limit=EVERY_TOOL).tool_names
    counts = OutcomeHistory(per_tool=100)
    counts.add(CROWDED)
    little = [tool for tool in description if counts.counts().get(tool, 0) < 3]
    assert little[0] == "get_current_conditions"
    learned = index(router, CROWDED)
    without_slot = make_router(new_tool_slot=False)
    crowded = without_slot.route(NEW_WORDING, learned=index(without_slot, CROWDED))
    assert all(counts.counts().get(tool, 0) >= 3 for tool in crowded.tool_names)
    routing = router.route(NEW_WORDING, learned=learned)
    assert len(routing.matches) == 3
    assert routing.tool_names[:2] == crowded.tool_names[:2]
    slot = routing.matches[-1]
    assert (slot.tool, slot.placed_by) == ("get_current_conditions", "new tool slot")
    assert "the new tool slot" in slot.why
    assert routing.explain()["tools"][-1]["placed_by"] == "new tool slot"


def test_without_the_new_tool_slot_history_keeps_the_last_place() -> None:
    router = make_router(new_tool_slot=False)
    routing = router.route(NEW_WORDING, learned=index(router, CROWDED))
    assert "get_current_conditions" not in routing.tool_names
    assert all(match.placed_by != "new tool slot" for match in routing.matches)


# The "nothing fits" gate

# No word in common with any tool (NEW_WORDING shares "get" with get_forecast's name), and
# like "ask the team to review my work", one of REVIEW_REQUESTS.
SILENT_WORDING = "ask the maintainers to review my work"


def test_a_request_with_nothing_in_common_gets_nothing_without_history() -> None:
    gated = ToolRouter(CATALOGUE, semantic=WordLlamaBackend())
    assert gated.route(SILENT_WORDING).matches == ()
    ungated = make_router().route(SILENT_WORDING, limit=EVERY_TOOL)
    assert max(match.tool_score for match in ungated.matches) < gated.settings.min_score
    semantic = max(match.semantic_score or 0.0 for match in ungated.matches)
    assert semantic < gated.settings.min_semantic_score


def test_the_gate_lets_a_tool_through_when_a_request_like_it_succeeded() -> None:
    gated = ToolRouter(CATALOGUE, semantic=WordLlamaBackend())
    learned = index(gated, served(REVIEW_X, REVIEW_REQUESTS))
    routing = gated.route(SILENT_WORDING, learned=learned)
    assert routing.tool_names[0] == REVIEW_X


def test_a_tool_the_gate_let_through_for_its_history_is_placed_by_history() -> None:
    """Without history the gate silences every tool: what put this one there is its past."""
    gated = ToolRouter(CATALOGUE, semantic=WordLlamaBackend())
    learned = index(gated, served(REVIEW_X, REVIEW_REQUESTS))
    match = match_of(gated.route(SILENT_WORDING, learned=learned), REVIEW_X)
    assert match.placed_by == "history"
    assert not match.why.startswith("its description matches the request")


def test_the_gate_stays_shut_when_requests_like_it_only_failed() -> None:
    gated = ToolRouter(CATALOGUE, semantic=WordLlamaBackend())
    failures = served(REVIEW_X, REVIEW_REQUESTS, failed=1.0)
    assert gated.route(SILENT_WORDING, learned=index(gated, failures)).matches == ()


# The routing cache


def test_new_outcomes_are_not_answered_from_the_cache() -> None:
    router = make_router()
    cold = router.route(NEW_WORDING)
    first = index(router, served(REVIEW_X, REVIEW_REQUESTS), version=1)
    learned = router.route(NEW_WORDING, learned=first)
    assert not learned.cached and REVIEW_X in learned.tool_names and REVIEW_X not in cold.tool_names
    failures = served(REVIEW_X, LIKE_THE_NEW_WORDING, failed=1.0, tag="failed")
    second = index(router, served(REVIEW_X, REVIEW_REQUESTS) + failures, version=2)
    relearned = router.route(NEW_WORDING, learned=second)
    assert not relearned.cached and REVIEW_X not in relearned.tool_names
    assert router.route(NEW_WORDING).tool_names == cold.tool_names


def test_the_same_index_answers_from_the_cache() -> None:
    router = make_router()
    learned = index(router, served(REVIEW_X, REVIEW_REQUESTS))
    first = router.route(NEW_WORDING, learned=learned)
    again = router.route(NEW_WORDING, learned=learned)
    assert (first.cached, again.cached) == (False, True)
    assert again.matches == first.matches and again.history == first.history


# The registry's router with a history


def registry_of(servers: tuple[Server, ...]) -> ToolRegistry:
    """Return a registry of the catalogue's tools, each on an MCP server named as its own."""
    return ToolRegistry(
        ToolSpec(
            name=tool.name,
            description=tool.description,
            parameters={"type": "object", "properties": {}},
            function=lambda **_: None,
            ran_on=f"mcp:{server.name}",
        )
        for server in servers
        for tool in server.tools
    )


class CountingRefresh:
    """A history's refresh: counts its calls and adds the outcomes waiting, as the site's does."""

    def __init__(self, history: OutcomeHistory) -> None:
        self.history = history
        self.calls = 0
        self.waiting: list[Outcome] = []

    def __call__(self) -> None:
        self.calls += 1
        self.history.add(self.waiting)
        self.waiting = []


def registry_router(history: OutcomeHistory) -> tuple[RegistryRouter, CountingRefresh]:
    refresh = CountingRefresh(history)
    settings = RouterSettings(min_score=0.0, top_tools=3)
    router = RegistryRouter(
        registry_of(CATALOGUE), settings, semantic=WordLlamaBackend(), history=history
    )
    router.refresh = refresh
    return router, refresh


def test_the_registry_router_refreshes_the_history_before_each_search() -> None:
    router, refresh = registry_router(OutcomeHistory())
    assert REVIEW_X not in router.search(NEW_WORDING).tool_names
    refresh.waiting = served(REVIEW_X, REVIEW_REQUESTS)
    routing = router.search(NEW_WORDING)
    assert REVIEW_X in routing.tool_names and routing.history == (5, 1)
    router.search(NEW_WORDING)
    assert refresh.calls == 3


def test_the_registry_router_uses_a_small_historys_new_outcomes_at_the_next_search() -> None:
    history = OutcomeHistory()
    router, _ = registry_router(history)
    assert router.search(NEW_WORDING).history is None
    history.add(served(REVIEW_X, REVIEW_REQUESTS))
    routing = router.search(NEW_WORDING)
    assert REVIEW_X in routing.tool_names and routing.history == (5, 1)
    history.add(served(REVIEW_X, LIKE_THE_NEW_WORDING, failed=1.0, tag="failed"))
    routing = router.search(NEW_WORDING)
    assert REVIEW_X not in routing.tool_names and routing.history == (8, 1)


def test_a_big_historys_change_is_rebuilt_in_a_thread_the_last_index_serving_meanwhile() -> None:
    history = OutcomeHistory(per_tool=SYNC_BUILD_OUTCOMES)
    tools = [tool.name for server in CATALOGUE for tool in server.tools if tool.name != REVIEW_X]
    per_tool = SYNC_BUILD_OUTCOMES // len(tools) + 1
    history.add(
        outcome
        for tool in tools
        for outcome in served(tool, tuple(f"{tool} job {n}" for n in range(per_tool)))
    )
    big = len(history)
    assert big > SYNC_BUILD_OUTCOMES
    router, _ = registry_router(history)
    first = router.search(NEW_WORDING)
    assert first.history is None  # the first index of a big history is built in a thread
    deadline = time.monotonic() + 60
    while (before := router.search(NEW_WORDING)).history is None:
        assert time.monotonic() < deadline, "the first learned index was not built in a minute"
        time.sleep(0.05)
    assert before.history == (big, len(tools))
    history.add(served(REVIEW_X, REVIEW_REQUESTS))
    meanwhile = router.search(NEW_WORDING)
    assert meanwhile.history == (big, len(tools)) and meanwhile.matches == before.matches
    deadline = time.monotonic() + 60
    while (routing := router.search(NEW_WORDING)).history == (big, len(tools)):
        assert time.monotonic() < deadline, "the learned index was not rebuilt in a minute"
        time.sleep(0.05)
    assert routing.history == (big + 5, len(tools) + 1)
    assert match_of(routing, REVIEW_X).placed_by == "history"
