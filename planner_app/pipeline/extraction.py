"""Parameter extraction: read a chosen tool's arguments from the user's request. No Django here.

The planner has picked a tool; this step reads its arguments from the request, in English or
Chinese, or says it cannot (`needs_llm`, with empty arguments and the reason). It never
returns a call with an empty or guessed argument, and `reason` always says what it read.

Each tool has a table of small named patterns tried in order. English words match on ASCII
word boundaries (so "summary" is not "sum", and a word touching Chinese text still counts);
Chinese words match as substrings. Quoted text ('...', "...", “...”, 「...」) wins over every
heuristic for a text argument. Requests longer than MAX_REQUEST_LENGTH are not read.

Each tool's extractor is a module of extractors/, <tool>_arguments.py, named in EXTRACTORS
below (the calculator's in three stages: calculator_patterns.py, calculator_rewrites.py,
calculator_arguments.py); extractors/request_text.py and request_numbers.py hold the
reading they share (quotes, English words, numbers, Chinese numerals).

Speed: every regex is compiled at import, and a rewrite runs only when the text holds one
of its keywords. Over tests/data/planner_requests.jsonl a call takes about 50 µs (median)
and 100 µs (p95) on one core; a 2,000-character request at worst a few milliseconds.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from planner_app.pipeline.analysis import singulars
from planner_app.pipeline.extractors.calculator_arguments import extract_calculation
from planner_app.pipeline.extractors.datetime_arguments import extract_datetime
from planner_app.pipeline.extractors.demo_add_arguments import extract_two_integer_sum
from planner_app.pipeline.extractors.demo_sha256_arguments import extract_sha256_text
from planner_app.pipeline.extractors.hash_arguments import extract_hash
from planner_app.pipeline.extractors.json_arguments import extract_json
from planner_app.pipeline.extractors.request_text import Extraction, needs_llm
from planner_app.pipeline.extractors.string_arguments import extract_string
from planner_app.pipeline.extractors.web_search_arguments import extract_web_search

MAX_REQUEST_LENGTH = 2_000
_LATIN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9 _'-]*$")


def extract_arguments(tool: str, request: str) -> Extraction:
    """Return the arguments of `tool` read from the request, or why the LLM must read them."""
    extractor = EXTRACTORS.get(tool)
    if extractor is None:
        return needs_llm(f"no extractor for tool {tool}")
    if len(request) > MAX_REQUEST_LENGTH:
        return needs_llm(
            f"the request is {len(request)} characters long; the planner reads at most "
            f"{MAX_REQUEST_LENGTH}"
        )
    if not request.strip():
        return needs_llm("the request is empty")
    return extractor(request)


# The project's own MCP server (tools_app/mcp_demo_server.py), as `manage.py ares_demo`
# registers it (server "demo"): its add tool competes with the calculator for sums, its
# sha256 tool with hash_tool.
DEMO_ADD_TOOL = "mcp.demo.add"
DEMO_SHA256_TOOL = "mcp.demo.sha256"

EXTRACTORS: dict[str, Callable[[str], Extraction]] = {
    "calculator": extract_calculation,
    "hash_tool": extract_hash,
    "string_utils": extract_string,
    "datetime": extract_datetime,
    "json_tools": extract_json,
    "web_search": extract_web_search,
    DEMO_ADD_TOOL: extract_two_integer_sum,
    DEMO_SHA256_TOOL: extract_sha256_text,
}


@dataclass(frozen=True)
class RuleWord:
    """A word a rule matched in the request, and the other keywords of that rule."""

    found: str  # as the request says it: "Tally", "累计"
    rule: str
    keywords: tuple[str, ...]


def _replaced(request: str, found: str, keyword: str) -> str:
    """Return the request with the word `found` replaced by `keyword` where it stands."""
    if _LATIN.match(found):
        return re.sub(rf"(?<![A-Za-z0-9]){re.escape(found)}(?![A-Za-z0-9])", keyword, request)
    return request.replace(found, keyword)


def extract_with_rule_words(tool: str, request: str, words: Sequence[RuleWord]) -> Extraction:
    """Return the arguments of `tool`, reading a rule's word as the rule's other keywords.

    An operator may give a rule a word the tool's extractor does not know ("tally" for
    Summation): the word means what the rule means. So where the request as it stands
    gives no arguments, a matched word the extractor does not read (its reason does not
    name it, and the request gives no arguments without it either) is tried as each other
    keyword of its rule ("tally 3 and 4" as "sum 3 and 4", "total 3 and 4", ...). The
    keywords vote: the arguments most readings give are used if no other arguments get as
    many votes (a rule of several operations, such as md5 and sha1, gives no answer), and
    the reason says which reading it was.
    """
    extraction = extract_arguments(tool, request)
    if not extraction.needs_llm:
        return extraction
    for word in words:
        if _reads(tool, request, word.found, extraction):
            continue  # the extractor reads this word already: it means what it says there
        reading = _voted_reading(tool, request, word)
        if reading is not None:
            return reading
    return extraction


def _reads(tool: str, request: str, found: str, extraction: Extraction) -> bool:
    """Return whether the extractor reads the word: its reason names it, or the request
    without it gives arguments (the word is what stops them: "uppercase and reverse")."""
    if found.lower() in extraction.reason.lower():
        return True
    return not extract_arguments(tool, _replaced(request, found, " ")).needs_llm


def _voted_reading(tool: str, request: str, word: RuleWord) -> Extraction | None:
    """Return what most of the rule's other keywords read in the word's place, if one wins."""
    same = {word.found.lower(), *singulars(word.found.lower())}
    votes: dict[str, list[tuple[str, Extraction]]] = {}
    keywords = [k.strip() for k in word.keywords if k.strip().lower() not in same]
    for position, keyword in enumerate(keywords):
        reworded = _replaced(request, word.found, keyword)
        reading = extract_arguments(tool, reworded) if reworded != request else None
        if reading is not None and not reading.needs_llm:
            key = json.dumps(reading.arguments, sort_keys=True, ensure_ascii=False)
            votes.setdefault(key, []).append((keyword, reading))
            counts = sorted(map(len, votes.values()), reverse=True) + [0]
            if counts[0] > counts[1] + len(keywords) - position - 1:
                break  # the keywords left can't catch up
    ranked = sorted(votes.values(), key=len, reverse=True)
    if not ranked or (len(ranked) > 1 and len(ranked[1]) == len(ranked[0])):
        return None
    keyword, reading = ranked[0][0]
    why = f"read {word.found!r} as {keyword!r} (rule {word.rule}); {reading.reason}"
    return Extraction(reading.arguments, why, needs_llm=False)
