"""The active-discovery router on a small catalogue: two stages, flat search, settings."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from planner_app.discovery import (
    Combination,
    RouteMode,
    RouterSettings,
    RoutingCache,
    Server,
    Tool,
    ToolRouter,
)
from planner_app.discovery.backends import (
    BackendUnavailable,
    Bm25Backend,
    EmbeddingBackend,
    TfidfBackend,
    make_backend,
)
from planner_app.discovery.router import (
    DEFAULT_MIN_SCORE,
    PARAMETER_WORDS,
    Fusion,
    parameter_words,
    reciprocal_rank_fusion,
    zscore_fusion,
)
from planner_app.discovery.text import analyze, analyze_with_pairs, stem

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
            Tool("deleteEvent", "Delete an event by its id."),
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
            Tool("write_file", "Write text to a file, replacing it."),
            Tool("search_files", "Find files whose names match a pattern."),
        ),
    ),
    Server(
        "天气服务",
        "中国城市的天气预报和空气质量。",
        (
            Tool("查询天气预报", "查询城市未来三天的天气预报。"),
            Tool("查询空气质量", "查询城市当前的空气质量指数。"),
        ),
    ),
)


@pytest.fixture(scope="module")
def router() -> ToolRouter:
    return ToolRouter(CATALOGUE)


@pytest.mark.parametrize(
    ("request_text", "server", "tool"),
    [
        ("what is the weather forecast for Paris tomorrow", "weather", "get_forecast"),
        ("create a meeting event on Friday", "calendar", "createEvent"),
        ("show me the open issues of my repository", "github", "list_issues"),
        ("read the text of a file", "files", "read_file"),
        ("查询北京的天气预报", "天气服务", "查询天气预报"),
    ],
)
def test_it_ranks_the_right_tool_first(
    router: ToolRouter, request_text: str, server: str, tool: str
) -> None:
    for routing in (router.search(request_text), router.search_flat(request_text)):
        best = routing.matches[0]
        assert (best.server, best.tool) == (server, tool)


def test_it_ranks_servers_first_then_tools_inside_the_kept_servers(router: ToolRouter) -> None:
    routing = router.search("delete an event", server="a calendar with events")
    assert routing.mode == RouteMode.TWO_STAGE
    assert routing.servers[0][0] == "calendar"
    assert len(routing.servers) <= 3
    kept = {name for name, _ in routing.servers}
    assert {match.server for match in routing.matches} <= kept
    assert routing.matches[0].tool == "deleteEvent"


def test_it_combines_server_and_tool_scores_with_the_weights(router: ToolRouter) -> None:
    for match in router.search("list the events of next week").matches:
        assert match.score == pytest.approx(0.3 * match.server_score + 0.7 * match.tool_score)


def test_it_orders_matches_best_first(router: ToolRouter) -> None:
    scores = [match.score for match in router.search("write text to a file").matches]
    assert scores == sorted(scores, reverse=True)


@pytest.mark.parametrize(
    ("request_text", "tool"),
    [
        ("forecasts for several cities", "get_forecast"),  # plural request, singular tool
        ("find a file by name", "search_files"),  # singular request, plural tool name
        ("list all issue", "list_issues"),
    ],
)
def test_it_matches_plurals_and_singulars(router: ToolRouter, request_text: str, tool: str) -> None:
    assert router.search(request_text).matches[0].tool == tool


@pytest.mark.parametrize(
    ("word", "folded"),
    [
        ("cities", "city"),
        ("boxes", "box"),
        ("matches", "match"),
        ("events", "event"),
        ("issues", "issue"),
        ("children", "child"),
        ("status", "status"),
        ("address", "address"),
        ("news", "news"),
        ("analysis", "analysis"),
    ],
)
def test_it_folds_plurals_but_not_words_ending_in_s(word: str, folded: str) -> None:
    assert stem(word) == folded


def test_it_splits_identifiers_and_cjk_text_into_terms() -> None:
    assert analyze("getUserByName HTTPRequest list_issues") == [
        "get",
        "user",
        "name",
        "http",
        "request",
        "list",
        "issue",
    ]
    chinese = ["天", "气", "预", "报", "天气", "气预", "预报"]
    assert analyze("天气预报") == [*chinese, "weather", "forecast"]  # + the glossary's words


@pytest.mark.parametrize(
    ("text", "terms"),
    [
        ("GUIDs", ["guid"]),
        ("getUserIDs", ["get", "user", "id"]),
        ("URLs and APIs", ["url", "api"]),
        ("IDsList", ["id", "list"]),
    ],
)
def test_it_keeps_an_acronym_plural_whole_and_folds_it(text: str, terms: list[str]) -> None:
    assert analyze(text) == terms


def test_it_adds_pairs_of_adjacent_words_but_not_of_cjk_terms() -> None:
    assert analyze_with_pairs("weather forecasts of cities") == [
        "weather",
        "forecast",
        "city",
        "weather forecast",
        "forecast city",
    ]
    assert analyze_with_pairs("天气 forecast") == ["天", "气", "天气", "weather", "forecast"]


def test_it_prefers_the_tool_with_the_requests_words_in_order() -> None:
    servers = (
        Server(
            "movies",
            tools=(
                Tool("details_and_movie", "Return the details and the movie."),
                Tool("movie_details", "Return the movie details."),
            ),
        ),
    )
    assert ToolRouter(servers).search_flat("movie details").matches[0].tool == "movie_details"


def test_it_counts_each_request_term_once() -> None:
    encoder = TfidfBackend().fit(["read a file", "write a file", "list the events"])
    repeated = encoder.encode_queries(["file file file read"]).toarray()
    once = encoder.encode_queries(["file read"]).toarray()
    assert repeated == pytest.approx(once)


@pytest.mark.parametrize(
    ("word", "folded"),
    [
        ("fetching", "fetch"),
        ("rounded", "round"),
        ("creating", "create"),
        ("created", "create"),
        ("running", "run"),
        ("named", "name"),
        ("calling", "call"),
        ("string", "string"),
        ("need", "need"),
        ("speed", "speed"),
    ],
)
def test_it_folds_ing_and_ed_endings_to_the_base_word(word: str, folded: str) -> None:
    assert stem(word) == folded


def test_it_finds_english_tools_for_a_chinese_request() -> None:
    servers = (
        Server("github", "Code hosting.", (Tool("search_repositories", "Search repositories"),)),
        Server("weather", "Forecasts.", (Tool("get_forecast", "Get weather forecast."),)),
    )
    routing = ToolRouter(servers).search("按主题搜索仓库", server="代码托管")
    assert routing.tool_names[0] == "search_repositories"
    assert ToolRouter(servers).search_flat("明天的天气预报").tool_names[0] == "get_forecast"


def test_it_finds_chinese_tools_for_an_english_request(router: ToolRouter) -> None:
    assert router.search("air quality of a city").tool_names[0] == "查询空气质量"


def test_it_matches_chinese_text_without_spaces(router: ToolRouter) -> None:
    routing = router.search("空气质量怎么样", server="天气")
    assert routing.matches[0].tool == "查询空气质量"


def test_it_finds_a_tool_by_what_its_parameters_describe() -> None:
    servers = (
        Server(
            "files",
            "",
            (
                Tool("read", "Read a file.", parameters=(("path", "Where the file lies"),)),
                Tool(
                    "convert",
                    "Convert a file.",
                    parameters=(("format", "The target format: PDF, DOCX or ODT"),),
                ),
            ),
        ),
    )
    router = ToolRouter(servers, RouterSettings(top_tools=1))
    assert [m.tool for m in router.search("turn my file into a PDF").matches] == ["convert"]
    assert [m.tool for m in router.search("the file at this path").matches] == ["read"]


def test_a_tools_parameter_words_are_its_names_then_the_first_distinct_description_words() -> None:
    tool = Tool(
        "t",
        parameters=(
            ("owner", "The owner of the repository"),
            ("repo", "The name of the Repository, e.g. 'ares' (default: 10)"),
        ),
    )
    assert parameter_words(tool).split() == [
        "owner", "repo", "the", "owner", "of", "repository", "name", "ares", "default",
    ]  # fmt: skip
    many = " ".join(f"w{chr(97 + i // 26)}{chr(97 + i % 26)}" for i in range(99))
    assert len(parameter_words(Tool("t", parameters=(("q", many),))).split()) == 1 + PARAMETER_WORDS


def test_it_falls_back_to_flat_search_when_no_server_matches() -> None:
    strict = ToolRouter(CATALOGUE, RouterSettings(server_threshold=0.99))
    routing = strict.search("weather forecast")
    assert routing.mode == RouteMode.FLAT_FALLBACK
    assert routing.servers == ()
    assert routing.matches[0].tool == "get_forecast"


def test_it_falls_back_to_flat_search_when_stage_1_misses_the_server() -> None:
    servers = (
        Server("github", tools=(Tool("github_search_repos", "Search repositories by keyword."),)),
        Server("files", "Local files.", (Tool("search_files", "Find files by name."),)),
    )
    # "GitHub" is split into "git hub", which names no server: stage 1 finds nothing.
    routing = ToolRouter(servers).search("search for repositories", server="GitHub")
    assert routing.mode == RouteMode.FLAT_FALLBACK
    assert routing.tool_names[0] == "github_search_repos"


def test_it_searches_all_tools_in_flat_mode(router: ToolRouter) -> None:
    routing = router.search_flat("file", limit=10)
    assert routing.mode == RouteMode.FLAT
    assert {match.tool for match in routing.matches} == {"read_file", "write_file", "search_files"}


def test_it_returns_nothing_for_a_request_that_matches_no_word(router: ToolRouter) -> None:
    assert router.search("zzz qqq").matches == ()
    assert router.search_flat("zzz qqq").matches == ()


def test_it_keeps_only_the_configured_numbers_of_servers_and_tools() -> None:
    narrow = ToolRouter(CATALOGUE, RouterSettings(top_servers=1, top_tools=2))
    routing = narrow.search("create an event or a pull request")
    assert len(routing.servers) == 1
    assert len(routing.matches) <= 2
    assert {match.server for match in routing.matches} == {routing.servers[0][0]}


def test_it_uses_the_tool_weight_alone_when_the_server_weight_is_zero() -> None:
    tools_only = ToolRouter(CATALOGUE, RouterSettings(server_weight=0.0, tool_weight=1.0))
    for match in tools_only.search("delete an event").matches:
        assert match.score == pytest.approx(match.tool_score)


def test_it_returns_the_top_k_even_when_some_score_under_the_gate() -> None:
    gated = ToolRouter(CATALOGUE, RouterSettings(min_score=0.3))
    routing = gated.search_flat("a file with the events")
    assert len(routing.matches) == 5  # a cut at 0.3 per tool would keep 3
    assert routing.matches[0].fit_score >= 0.3 > routing.matches[-1].fit_score


def test_it_returns_nothing_when_no_tool_reaches_the_gate(router: ToolRouter) -> None:
    every = router.search("list events").matches
    best_lexical = max(match.fit_score for match in every)
    assert (
        ToolRouter(CATALOGUE, RouterSettings(min_score=best_lexical)).search("list events").matches
        == every
    )
    assert (
        ToolRouter(CATALOGUE, RouterSettings(min_score=best_lexical + 0.01))
        .search("list events")
        .matches
        == ()
    )


def test_the_gate_defaults_to_its_calibrated_value() -> None:
    assert RouterSettings().min_score == DEFAULT_MIN_SCORE == 0.12
    assert RouterSettings(combination="product").min_score == DEFAULT_MIN_SCORE


def test_it_keeps_servers_until_they_hold_min_tools() -> None:
    servers = [
        Server(f"s{i}", "", (Tool(f"convert_unit_{i}", "Convert a unit."),)) for i in range(8)
    ]
    three = ToolRouter(servers, RouterSettings(top_servers=3)).search("convert a unit")
    six = ToolRouter(servers, RouterSettings(top_servers=3, min_tools=6)).search("convert a unit")
    assert (len(three.servers), len(three.matches)) == (3, 3)
    assert (len(six.servers), len(six.matches)) == (6, 5)


def test_reciprocal_rank_fusion_sums_the_inverse_ranks_and_skips_zero_scores() -> None:
    lexical = np.array([0.9, 0.0, 0.5])
    semantic = np.array([0.1, 0.8, 0.3])
    fused = reciprocal_rank_fusion(60, lexical, semantic)
    assert fused == pytest.approx([1 / 61 + 1 / 63, 1 / 61, 1 / 62 + 1 / 62])


def test_zscore_fusion_sums_the_weighted_standard_scores_through_the_logistic() -> None:
    lexical = np.array([0.9, 0.0, 0.3, 0.0])
    semantic = np.array([0.1, 0.7, 0.4, 0.0])
    fused = zscore_fusion(lexical, semantic, weights=[1.0, 2.0])
    standard = [(x - x.mean()) / x.std() for x in (lexical, semantic)]
    total = standard[0] + 2.0 * standard[1]
    assert fused[:3] == pytest.approx(1 / (1 + np.exp(-total[:3])))
    assert fused[3] == 0.0  # no signal finds anything in it: no match


def test_zscore_fusion_ignores_a_signal_that_scores_everything_alike() -> None:
    lexical = np.array([0.2, 0.6, 0.4])
    fused = zscore_fusion(lexical, np.full(3, 0.5))
    assert fused == pytest.approx(zscore_fusion(lexical, np.zeros(3)))
    assert list(np.argsort(-fused)) == [1, 2, 0]


def test_bm25_favours_the_shorter_document_and_the_rarer_term() -> None:
    documents = [
        "weather forecast",
        "weather forecast of a city with wind rain snow sun and clouds",
        "weather report",
    ]
    encoder = Bm25Backend().fit(documents)
    scores = (encoder.encode(documents) @ encoder.encode_queries(["forecast"]).T).toarray()
    assert scores[0, 0] > scores[1, 0] > 0 == scores[2, 0]
    both = (encoder.encode(documents) @ encoder.encode_queries(["weather weather"]).T).toarray()
    assert both[0, 0] < scores[0, 0]  # "weather" is in every document, and counted once


def test_flat_search_without_bm25_scores_by_tfidf_alone() -> None:
    plain = ToolRouter(CATALOGUE, RouterSettings(bm25_weight=0.0, min_score=0.0))
    for match in plain.search_flat("list the events of a calendar").matches:
        assert match.score == pytest.approx(match.tool_score)


def test_flat_search_fuses_tfidf_and_bm25_by_default(router: ToolRouter) -> None:
    matches = router.search_flat("list the events of a calendar").matches
    assert matches[0].tool == "listEvents"
    assert all(0 < match.score < 1 for match in matches)
    assert [m.score for m in matches] == sorted((m.score for m in matches), reverse=True)


def test_it_fuses_by_reciprocal_rank_when_asked() -> None:
    rrf = ToolRouter(CATALOGUE, RouterSettings(fusion="rrf", min_score=0.0))
    matches = rrf.search_flat("list the events of a calendar").matches
    assert matches[0].tool == "listEvents"
    assert matches[0].score <= 1 / 61 + 0.5 / 61  # the best rank in both signals at most


def test_it_ranks_by_the_product_of_scores_when_asked() -> None:
    product = ToolRouter(CATALOGUE, RouterSettings(combination="product"))
    matches = product.search("delete an event", server="calendar").matches
    assert product.settings.combination == Combination.PRODUCT
    assert matches[0].tool == "deleteEvent"
    for match in matches:
        s, t = match.server_score, match.tool_score
        assert match.score == pytest.approx(s * t * max(s, t))


def test_the_product_gives_nothing_to_a_tool_that_does_not_match_itself() -> None:
    weighted = ToolRouter(CATALOGUE, RouterSettings(min_score=0.0)).search("calendar meeting")
    product = ToolRouter(CATALOGUE, RouterSettings(combination="product", min_score=0.0))
    assert any(match.tool_score == 0 for match in weighted.matches)  # in by its server alone
    assert all(match.tool_score > 0 for match in product.search("calendar meeting").matches)


def test_it_scores_a_server_by_its_description_or_its_tools_summary_when_asked() -> None:
    servers = (
        Server("agenda", "Calendar service.", (Tool("add", "Add an entry."), Tool("drop", "Drop"))),
        Server("weather", "Forecasts.", (Tool("forecast", "Weather forecast of a city."),)),
    )
    joint = ToolRouter(servers).search("calendar")
    best_of_two = ToolRouter(servers, RouterSettings(server_scoring="max")).search("calendar")
    assert best_of_two.servers[0][0] == joint.servers[0][0] == "agenda"
    # Matched on its own name and description alone, not diluted by its tools' words.
    assert best_of_two.servers[0][1] > joint.servers[0][1]
    assert best_of_two.tool_names[0] in ("add", "drop")


def test_it_answers_a_repeated_request_from_its_cache(router: ToolRouter) -> None:
    fresh = ToolRouter(CATALOGUE)
    first = fresh.search("list the events", server="calendar")
    again = fresh.search("  list the events ", server="calendar")
    assert (first.cached, again.cached) == (False, True)
    assert again.matches == first.matches
    assert (fresh.cache.hits, fresh.cache.misses, len(fresh.cache)) == (1, 1, 1)
    assert fresh.search_flat("list the events", server="calendar").mode == RouteMode.FLAT
    assert fresh.search("list the events", server="calendar", limit=2).cached is False


def test_the_cache_forgets_the_least_recently_used_request() -> None:
    cache = RoutingCache(2)
    routings = {key: ToolRouter(CATALOGUE).search(key) for key in ("file", "event", "issue")}
    cache.put(("file",), routings["file"])
    cache.put(("event",), routings["event"])
    assert cache.get(("file",)) is not None  # now the most recently used
    cache.put(("issue",), routings["issue"])
    assert cache.get(("event",)) is None
    assert cache.get(("file",)) is not None and cache.get(("issue",)) is not None
    assert len(cache) == 2


def test_a_cache_of_size_zero_remembers_nothing() -> None:
    uncached = ToolRouter(CATALOGUE, RouterSettings(cache_size=0))
    uncached.search("read a file")
    assert uncached.search("read a file").cached is False
    assert len(uncached.cache) == 0


def test_it_explains_its_routing_as_json_ready_data(router: ToolRouter) -> None:
    routing = router.search("delete an event", server="a calendar with events")
    explained = json.loads(json.dumps(routing.explain()))
    assert explained["mode"] == "two_stage"
    assert explained["servers"][0]["server"] == "calendar"
    assert [s["server"] for s in explained["servers"]] == [name for name, _ in routing.servers]
    best = explained["tools"][0]
    assert (best["server"], best["tool"]) == ("calendar", "deleteEvent")
    assert set(best) == {
        "server",
        "tool",
        "score",
        "server_score",
        "tool_score",
        "placed_by",
        "why",
    }
    assert best["placed_by"] == "description"
    assert best["why"] == "its description matches the request (no past requests like this one)"
    assert best["score"] == pytest.approx(routing.matches[0].score, abs=1e-4)
    assert router.search_flat("read a file").explain()["servers"] == []


def test_it_matches_tool_keywords() -> None:
    servers = (
        Server("math", tools=(Tool("calculator", "Evaluate an expression.", ("NumberTheory",)),)),
        Server("text", tools=(Tool("string_utils", "Change the case of a text."),)),
    )
    assert ToolRouter(servers).search("number theory").matches[0].tool == "calculator"


def test_it_handles_an_empty_catalogue() -> None:
    empty = ToolRouter([Server("empty")])
    assert empty.tool_count == 0
    assert empty.search("anything").matches == ()
    assert empty.search_flat("anything").matches == ()


def test_settings_default_to_the_issue_values() -> None:
    settings = RouterSettings()
    assert (settings.server_weight, settings.tool_weight) == (0.3, 0.7)
    assert (settings.top_servers, settings.top_tools) == (3, 5)
    assert settings.fusion == Fusion.ZSCORE
    assert (settings.bm25_weight, settings.semantic_weight) == (0.5, 1.4)
    assert settings.semantic_sentences
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.top_tools = 10  # type: ignore[misc]


@pytest.mark.parametrize(
    "bad",
    [
        {"server_weight": -0.1},
        {"server_weight": 0.0, "tool_weight": 0.0},
        {"top_servers": 0},
        {"top_tools": 0},
        {"server_threshold": 1.5},
        {"min_score": -0.1},
        {"combination": "sum"},
        {"fusion": "mean"},
        {"bm25_weight": -1.0},
        {"server_scoring": "min"},
        {"cache_size": -1},
    ],
)
def test_settings_refuse_values_that_make_no_sense(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        RouterSettings(**bad)


def test_it_explains_that_the_embedding_backend_needs_its_extra_or_a_local_model() -> None:
    with pytest.raises(BackendUnavailable, match="embeddings|local"):
        ToolRouter(CATALOGUE, backend=EmbeddingBackend("/nonexistent/model"))
    with pytest.raises(BackendUnavailable, match="model path"):
        make_backend("embeddings")
    with pytest.raises(ValueError, match="unknown discovery backend"):
        make_backend("bm42")


TRAVEL = (
    Server(
        "旅行助手",
        "预订酒店和机票。",
        (
            Tool("预订酒店", "按城市和日期预订酒店房间。"),
            Tool("查询航班", "查询两个机场之间的航班和机票价格。"),
            Tool("查询快递", "按单号查询快递物流状态。"),
        ),
    ),
    Server(
        "shop",
        "An online shop.",
        (
            Tool("track_order", "Return the shipping status of an order."),
            Tool("book_restaurant", "Book a table at a restaurant."),
            Tool("send_sms", "Send an SMS message to a phone number."),
        ),
    ),
)


@pytest.mark.parametrize(
    ("request_text", "tool"),
    [
        ("book a hotel room in Shanghai", "预订酒店"),  # English request, Chinese tools
        ("find flights between two airports", "查询航班"),
        ("给这个电话号码发短信", "send_sms"),  # Chinese request, English tools
        ("找一家好吃的餐厅", "book_restaurant"),
        ("这个订单到哪里了", "track_order"),
    ],
)
def test_it_routes_across_languages_with_the_glossary(request_text: str, tool: str) -> None:
    assert ToolRouter(TRAVEL).route(request_text).tool_names[0] == tool
