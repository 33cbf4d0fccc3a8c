"""Read web_search's query: the text after a search command. No Django."""

from __future__ import annotations

import re

from planner_app.pipeline.extractors.json_arguments import json_document
from planner_app.pipeline.extractors.request_text import (
    Extraction,
    clean_text,
    found_arguments,
    ignoring_case,
    needs_llm,
    unquote,
)

# Only a request that starts with a search command is read ("search the web for X",
# "look up X", "google X", "find information about X", "搜索X", "查找X", "查一下X"): "find"
# alone is everyday English ("find the gcd of 12 and 18") and must not become a web search.
_EN_POLITE = (
    r"(?:(?:please|pls|can\s+you|could\s+you|would\s+you|will\s+you|help\s+me|i\s+want\s+to"
)
_EN_POLITE += r"|i'?d\s+like\s+to|let'?s|go\s+and|quickly)[\s,]+)*"
_EN_WHERE = r"(?:\s+(?:on\s+|in\s+)?(?:the\s+)?(?:web|internet|net|online|google|bing|duckduckgo))?"
_EN_SEARCH = ignoring_case(
    rf"^\s*{_EN_POLITE}(?:"
    rf"(?:do\s+an?\s+)?(?:web|internet|online|google)\s+search{_EN_WHERE}"
    rf"|search(?:\s+up)?{_EN_WHERE}|look\s+up|lookup|google|bing"
    rf"|find(?:\s+(?:me|us))?(?:\s+(?:some|any|the\s+latest))?\s+(?:information|info|news|articles"
    rf"|pages|results|details|facts)"
    rf")(?:\s+(?:for|about|on|regarding|of))?[\s:：]+(?P<text>.+)$"
)
_EN_TRAILING_WHERE = ignoring_case(
    r"\s+(?:on|in|from|using|with)\s+(?:the\s+)?(?:web|internet|net|google|bing|duckduckgo)$"
    r"|\s+online$"
)
_ZH_SEARCH = re.compile(
    r"^\s*(?:请|麻烦|帮我|帮忙|给我|替我|你|能不能|可以)*"
    r"(?:(?:在|到|去|用)?(?:网上|网络上|互联网上|谷歌上?|百度上?|google上?)|上网)?"
    r"(?:搜索一下|搜索|搜一搜|搜一下|搜|查找一下|查找|查一查|查一下|查查|百度一下|谷歌一下)"
    r"(?:一下)?(?:关于)?(?P<text>.+)$"
)
_ZH_TRAILING_NOISE = re.compile(
    r"(?:的相关信息|的相关资料|的信息|的资料|相关信息|相关资料|吧|呢)+$"
)


def extract_web_search(request: str) -> Extraction:
    """Return web_search's query: the request without its search command words."""
    for pattern, trailing in ((_EN_SEARCH, _EN_TRAILING_WHERE), (_ZH_SEARCH, _ZH_TRAILING_NOISE)):
        match = pattern.search(request)
        if match is None:
            continue
        query = unquote(clean_text(trailing.sub("", clean_text(match["text"]))))
        if not query.strip():
            return needs_llm("a search command but nothing to search for")
        if json_document(query) is not None:
            return needs_llm("a JSON document, not words to search for")
        return found_arguments({"query": query.strip()}, "the text after the search command")
    return needs_llm("no search command (search, look up, 搜索...) followed by what to search for")
