"""The router's semantic signal (wordllama's static embeddings fused with TF-IDF), and the
site without the package."""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

import numpy as np
import pytest
from django.core.exceptions import ImproperlyConfigured

from planner_app.discovery import RouterSettings, ToolRouter, backends
from planner_app.discovery.backends import (
    BackendUnavailable,
    WordLlamaBackend,
    semantic_available,
)
from planner_app.discovery.router import flat_document
from planner_app.discovery.site_router import get_router, semantic_setting
from tests.planner_app.test_discovery_router import CATALOGUE

needs_wordllama = pytest.mark.skipif(not semantic_available(), reason="wordllama not installed")


@pytest.fixture
def without_wordllama(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make `import wordllama` fail and forget a model already loaded, as on a bare site."""
    monkeypatch.setitem(sys.modules, "wordllama", None)
    monkeypatch.setattr(backends, "_wordllama_model", None)


@needs_wordllama
@pytest.mark.parametrize(
    ("request_text", "tool"),
    [
        ("will it rain in Oslo tomorrow", "get_forecast"),  # not one word in common
        ("is it going to be sunny this weekend", "get_forecast"),
        ("remove the appointment", "deleteEvent"),
        ("show me the bugs people reported", "list_issues"),
    ],
)
def test_it_finds_a_paraphrase_that_shares_no_word_with_the_tool(
    request_text: str, tool: str
) -> None:
    ungated = RouterSettings(min_score=0.0)
    lexical = ToolRouter(CATALOGUE, ungated).search_flat(request_text)
    fused = ToolRouter(CATALOGUE, ungated, semantic=WordLlamaBackend()).search_flat(request_text)
    assert lexical.matches == ()  # TF-IDF finds nothing at all
    assert fused.tool_names[0] == tool
    assert fused.matches[0].semantic_score is not None


@needs_wordllama
def test_its_vectors_are_wordllamas_own() -> None:
    from tokenizers import Tokenizer
    from wordllama.inference import WordLlamaInference

    model = backends.load_wordllama()
    tokenizer = Tokenizer.from_str(model.tokenizer.to_str())  # it sets padding on its own
    reference = WordLlamaInference(model.table.astype(np.float16), tokenizer)
    texts = ["Return the weather forecast of a city.", "查询城市未来三天的天气预报。"]
    ours = WordLlamaBackend().fit(texts).encode(texts)
    assert ours == pytest.approx(reference.embed(texts, norm=True), abs=1e-3)


@needs_wordllama
@pytest.mark.parametrize(
    ("request_text", "fits"),
    [("will it rain in Oslo tomorrow", True), ("zzz qqq", False), ("bake a chocolate cake", False)],
)
def test_the_semantic_gate_lets_a_paraphrase_through_and_not_nonsense(
    request_text: str, fits: bool
) -> None:
    # Neither request shares a word with any tool: only the semantic gate can let it in.
    gated = RouterSettings(min_score=0.05, min_semantic_score=0.25)
    fused = ToolRouter(CATALOGUE, gated, semantic=WordLlamaBackend())
    assert ToolRouter(CATALOGUE, gated).search_flat(request_text).matches == ()
    assert bool(fused.search_flat(request_text).matches) is fits


@pytest.mark.usefixtures("without_wordllama")
def test_the_backend_says_how_to_install_it_when_the_package_is_missing() -> None:
    assert not semantic_available()
    with pytest.raises(BackendUnavailable, match="pip install wordllama"):
        ToolRouter(CATALOGUE, semantic=WordLlamaBackend())


@pytest.mark.django_db
@pytest.mark.usefixtures("without_wordllama")
def test_the_site_routes_with_tfidf_alone_without_the_package(settings: Any) -> None:
    settings.ARES_ROUTER_SEMANTIC = "auto"
    router = get_router()
    assert router.semantic is None
    routing = router.search("hash a text with sha256")
    assert routing.tool_names[0] == "hash_tool"
    assert routing.matches[0].semantic_score is None


@pytest.mark.django_db
@pytest.mark.usefixtures("without_wordllama")
def test_the_site_refuses_to_route_when_wordllama_is_asked_for_but_missing(settings: Any) -> None:
    settings.ARES_ROUTER_SEMANTIC = "wordllama"
    with pytest.raises(BackendUnavailable):
        get_router().search("hash a text with sha256")


@needs_wordllama
@pytest.mark.django_db
@pytest.mark.parametrize(("value", "fused"), [("auto", True), ("wordllama", True), ("off", False)])
def test_the_sites_semantic_setting_turns_the_signal_on_and_off(
    settings: Any, value: str, fused: bool
) -> None:
    settings.ARES_ROUTER_SEMANTIC = value
    routing = get_router().search("hash a text with sha256")
    assert routing.tool_names[0] == "hash_tool"
    assert (routing.matches[0].semantic_score is not None) == fused


def test_the_semantic_setting_comes_from_the_environment_and_refuses_others(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ARES_ROUTER_SEMANTIC", " OFF ")
    assert semantic_setting(None) == "off"
    monkeypatch.delenv("ARES_ROUTER_SEMANTIC")
    assert semantic_setting(None) == "auto"
    with pytest.raises(ImproperlyConfigured, match="ARES_ROUTER_SEMANTIC='bert'"):
        semantic_setting("bert")


@needs_wordllama
def test_the_semantic_score_is_the_mean_of_the_whole_request_and_its_closest_sentence() -> None:
    request = "I am planning a trip to Norway next week. Will it rain in Oslo tomorrow?"
    router = ToolRouter(CATALOGUE, RouterSettings(min_score=0.0), semantic=WordLlamaBackend())
    best = router.search_flat(request).matches[0]
    assert best.tool == "get_forecast"
    encoder = WordLlamaBackend().fit([])
    tool = next(s for s in CATALOGUE if s.name == "weather").tools[0]
    rows = encoder.encode([flat_document(CATALOGUE[0], tool)])
    whole, first, second = (
        encoder.encode_queries(
            [request, "I am planning a trip to Norway next week.", "Will it rain in Oslo tomorrow?"]
        )
        @ rows[0]
    )
    assert best.semantic_score == pytest.approx(0.5 * whole + 0.5 * max(first, second), abs=1e-5)


@needs_wordllama
def test_the_semantic_score_of_a_one_sentence_request_is_its_similarity() -> None:
    ungated = RouterSettings(min_score=0.0)
    sentences = ToolRouter(CATALOGUE, ungated, semantic=WordLlamaBackend())
    whole = ToolRouter(
        CATALOGUE,
        dataclasses.replace(ungated, semantic_sentences=False),
        semantic=WordLlamaBackend(),
    )
    request = "will it rain in Oslo tomorrow"
    assert sentences.search_flat(request).matches == whole.search_flat(request).matches
